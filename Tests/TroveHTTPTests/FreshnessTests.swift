import Foundation
import Testing
import TroveHTTP

/// The clock and helpers of the freshness suites.
enum FreshnessFixture {
    /// 2023-11-14T22:13:20Z.
    static let t0 = Date(timeIntervalSince1970: 1_700_000_000)

    /// The IMF-fixdate of `t0 + offset` seconds.
    static func httpDate(_ offset: TimeInterval) -> String { HTTPDate(t0 + offset).description }

    /// Judges a response received at `t0 + received` for a request sent at `t0 + sent`.
    static func judge(
        _ headers: [(name: String, value: String)], status: Int = 200, sent: TimeInterval = 0, received: TimeInterval = 0,
        settings: FreshnessSettings = FreshnessSettings()
    ) -> ResponseFreshness {
        ResponseFreshness(
            status: status, headers: headers, requestTime: t0 + sent, responseTime: t0 + received, settings: settings)
    }

    /// `freshUntil` as seconds after `t0`.
    static func freshFor(_ freshness: ResponseFreshness) -> TimeInterval {
        freshness.policy.freshUntil.timeIntervalSince(t0)
    }
}

/// Storability (RFC 9111 §3), freshness lifetime (§4.2.1, §4.2.2) and age (§4.2.3).
@Suite struct FreshnessTests {
    typealias F = FreshnessFixture

    // MARK: Storing (§3)

    @Test(
        "RFC 9111 §3, §4.1, §5.2.2.5: what a private cache refuses to store",
        arguments: [
            ([("Cache-Control", "no-store")], 200, ResponseFreshness.Refusal?.some(.noStore)),
            ([("cache-control", "max-age=60, NO-STORE")], 200, .noStore),
            ([("Cache-Control", "no-store, no-cache")], 200, .noStore),  // §4.2.1: the most restrictive wins
            ([("Vary", "*")], 200, .varyAny),
            ([("Vary", "Accept, *")], 200, .varyAny),
            ([("Vary", "Accept"), ("vary", " * ")], 200, .varyAny),
            ([("Cache-Control", "max-age=60")], 206, .status(206)),
            ([("Cache-Control", "max-age=60")], 304, .status(304)),
            ([("Cache-Control", "max-age=60")], 404, .status(404)),
            ([("Cache-Control", "max-age=60")], 301, .status(301)),
            ([("Cache-Control", "max-age=60")], 200, nil),
            ([("Cache-Control", "max-age=60")], 203, nil),
            ([("Cache-Control", "private")], 200, nil),  // §5.2.2.7: a private cache may store it
            ([("Cache-Control", "no-cache")], 200, nil),  // §5.2.2.4: stored, validated on use
            ([("Vary", "Accept, Accept-Encoding")], 200, nil),
            ([("Vary", "Accept-*")], 200, nil),
            ([], 200, nil),
        ] as [([(name: String, value: String)], Int, ResponseFreshness.Refusal?)])
    func storability(headers: [(name: String, value: String)], status: Int, refusal: ResponseFreshness.Refusal?) {
        let freshness = F.judge(headers, status: status)
        #expect(freshness.refusal == refusal)
        #expect(freshness.isStorable == (refusal == nil))
    }

    // MARK: Freshness lifetime (§4.2.1)

    @Test(
        "RFC 9111 §4.2.1, §5.3: max-age beats Expires; Expires counts from Date",
        arguments: [
            // max-age wins over Expires, whichever is longer (§5.3: Expires is ignored).
            ([("Cache-Control", "max-age=60"), ("Expires", F.httpDate(3_600))], 60.0, ResponseFreshness.LifetimeSource.maxAge),
            ([("Expires", F.httpDate(3_600)), ("Cache-Control", "max-age=7200")], 7_200, .maxAge),
            ([("Cache-Control", "max-age=60"), ("Expires", "0")], 60, .maxAge),
            // An invalid max-age makes the response stale; Expires is still ignored (§4.2.1, §5.3).
            ([("Cache-Control", "max-age=soon"), ("Expires", F.httpDate(3_600))], 0, .invalid),
            ([("Cache-Control", "max-age=60, max-age=30"), ("Expires", F.httpDate(3_600))], 0, .invalid),
            // s-maxage is for shared caches (§5.2.2.10).
            ([("Cache-Control", "s-maxage=600"), ("Expires", F.httpDate(60))], 60, .expires),
            // Expires − Date.
            ([("Date", F.httpDate(0)), ("Expires", F.httpDate(3_600))], 3_600, .expires),
            ([("Date", F.httpDate(-100)), ("Expires", F.httpDate(3_500))], 3_600, .expires),
            ([("Date", F.httpDate(0)), ("Expires", F.httpDate(-10))], 0, .expires),
            ([("Date", F.httpDate(0)), ("Expires", F.httpDate(0))], 0, .expires),
            // §5.3: an invalid Expires, "0" above all, means already expired.
            ([("Expires", "0")], 0, .invalid),
            ([("Expires", "-1")], 0, .invalid),
            ([("Expires", "tomorrow")], 0, .invalid),
            ([("Expires", "")], 0, .invalid),
            // §4.2.1: two Expires lines that disagree: stale; the same twice is one value.
            ([("Expires", F.httpDate(3_600)), ("Expires", F.httpDate(7_200))], 0, .invalid),
            ([("Expires", F.httpDate(3_600)), ("Expires", F.httpDate(3_600))], 3_600, .expires),
            ([("Expires", "Sunday, 06-Nov-94 08:49:37 GMT")], 0, .expires),
        ] as [([(name: String, value: String)], TimeInterval, ResponseFreshness.LifetimeSource)])
    func explicitLifetime(
        headers: [(name: String, value: String)], lifetime: TimeInterval, source: ResponseFreshness.LifetimeSource
    ) {
        let freshness = F.judge(headers)
        #expect(freshness.policy.freshnessLifetime == .seconds(lifetime))
        #expect(freshness.lifetimeSource == source)
    }

    @Test("RFC 9111 §4.2.1: without Date, Expires counts from the response time (RFC 9110 §6.6.1)")
    func expiresWithoutDate() {
        let freshness = F.judge([("Expires", F.httpDate(3_600))], sent: 9, received: 10)
        #expect(freshness.policy.freshnessLifetime == .seconds(3_590))
        // Round trip of 1 s: the response is that old when it arrives (§4.2.3's response_delay).
        #expect(freshness.policy.initialAge == .seconds(1))
        #expect(F.freshFor(freshness) == 3_599)
        // An invalid Date is no Date at all.
        let invalidDate = F.judge([("Date", "yesterday"), ("Expires", F.httpDate(3_600))], received: 10)
        #expect(invalidDate.policy.freshnessLifetime == .seconds(3_590))
    }

    @Test("RFC 9111 §4.2.3: a Date behind the cache's clock ages the response (Expires then ends at its own time)")
    func clockSkew() {
        // The origin's clock is an hour behind: Expires is an hour after its Date.
        let behind = F.judge([("Date", F.httpDate(-3_600)), ("Expires", F.httpDate(0))])
        #expect(behind.policy.freshnessLifetime == .seconds(3_600))
        #expect(behind.policy.initialAge == .seconds(3_600))
        #expect(F.freshFor(behind) == 0)
        #expect(behind.policy.decision(at: F.t0) != .fresh)
        // A Date ahead of the clock gives no negative age (apparent_age ≥ 0).
        let ahead = F.judge([("Date", F.httpDate(600)), ("Cache-Control", "max-age=60")])
        #expect(ahead.policy.initialAge == .zero)
        #expect(F.freshFor(ahead) == 60)
    }

    // MARK: Age (§4.2.3)

    @Test(
        "RFC 9111 §4.2.3: corrected_initial_age = max(apparent_age, Age + response_delay)",
        arguments: [
            // (headers, request sent, response received, initial age)
            ([("Date", F.httpDate(0))], 0.0, 0.0, 0.0),
            ([("Date", F.httpDate(-10))], 0, 0, 10),  // apparent age
            ([("Date", F.httpDate(0)), ("Age", "30")], 0, 0, 30),
            ([("Date", F.httpDate(0)), ("Age", "30")], -2, 0, 32),  // Age + response_delay
            ([("Date", F.httpDate(-20)), ("Age", "5")], 0, 0, 20),  // the larger one
            ([("Date", F.httpDate(-20)), ("Age", "5")], -30, 0, 35),
            ([("Date", F.httpDate(100))], 0, 0, 0),  // a Date in the future
            ([("Age", "7")], 5, 0, 7),  // a request time after the response time: no delay
            ([("Age", " 7 ")], 0, 0, 7),
            ([("Age", "0")], -1.5, 0, 1.5),
            ([("Age", "5"), ("Age", "5")], 0, 0, 5),
            // §1.2.2: overflow is 2^31 s; §4.2.1: invalid freshness information means stale.
            ([("Age", "99999999999999")], 0, 0, 2_147_483_648),
            ([("Age", "soon")], 0, 0, 2_147_483_648),
            ([("Age", "-5")], 0, 0, 2_147_483_648),
            ([("Age", "")], 0, 0, 2_147_483_648),
            ([("Age", "5"), ("Age", "6")], 0, 0, 2_147_483_648),
        ] as [([(name: String, value: String)], TimeInterval, TimeInterval, TimeInterval)])
    func initialAge(headers: [(name: String, value: String)], sent: TimeInterval, received: TimeInterval, age: TimeInterval) {
        let freshness = F.judge(headers + [("Cache-Control", "max-age=100")], sent: sent, received: received)
        #expect(freshness.policy.initialAge == .milliseconds(Int64(age * 1000)))
        // freshUntil = response_time + freshness_lifetime − corrected_initial_age
        #expect(F.freshFor(freshness) == received + 100 - age)
    }

    @Test("RFC 9111 §4.2.3: current_age = corrected_initial_age + resident_time")
    func currentAge() {
        let freshness = F.judge([("Date", F.httpDate(-10)), ("Cache-Control", "max-age=60")], sent: -1)
        let policy = freshness.policy
        #expect(policy.initialAge == .seconds(10))
        #expect(policy.currentAge(at: F.t0) == .seconds(10))
        #expect(policy.currentAge(at: F.t0 + 25.5) == .milliseconds(35_500))
        #expect(policy.currentAge(at: F.t0 - 100) == .seconds(10))  // a clock stepped back
        #expect(policy.currentAge(at: .distantFuture) == .seconds(2_147_483_648))
        #expect(policy.responseTime == F.t0)
    }

    // MARK: Heuristic freshness (§4.2.2)

    @Test(
        "RFC 9111 §4.2.2: 10 % of Date − Last-Modified, capped at 24 h by default",
        arguments: [
            (-5 * 86_400.0, 43_200.0),  // 10 % of 5 days: 12 h
            (-10 * 86_400, 86_400),  // exactly the cap
            (-100 * 86_400, 86_400),  // capped
            (-1_000, 100),
            (-15, 1.5),
            (0, 0),  // modified at Date: no freshness
            (3_600, 0),  // Last-Modified after Date (RFC 9110 §8.8.2.1 forbids it): no freshness
        ] as [(TimeInterval, TimeInterval)])
    func heuristic(lastModified: TimeInterval, lifetime: TimeInterval) {
        let freshness = F.judge([("Date", F.httpDate(0)), ("Last-Modified", F.httpDate(lastModified))])
        #expect(freshness.lifetimeSource == .heuristic)
        #expect(freshness.policy.freshnessLifetime == .milliseconds(Int64(lifetime * 1000)))
    }

    @Test("RFC 9111 §4.2.2: the fraction and the cap are settings; the heuristic counts from Date, else the response time")
    func heuristicSettings() {
        let headers: [(name: String, value: String)] = [("Date", F.httpDate(0)), ("Last-Modified", F.httpDate(-86_400))]
        let capped = F.judge(headers, settings: FreshnessSettings(heuristicLimit: .seconds(3_600)))
        #expect(capped.policy.freshnessLifetime == .seconds(3_600))
        let fifth = F.judge(headers, settings: FreshnessSettings(heuristicFraction: 0.2))
        #expect(fifth.policy.freshnessLifetime == .seconds(17_280))
        let off = F.judge(headers, settings: FreshnessSettings(heuristicFraction: 0))
        #expect(off.policy.freshnessLifetime == .zero)
        let negative = F.judge(headers, settings: FreshnessSettings(heuristicFraction: -1))
        #expect(negative.policy.freshnessLifetime == .zero)
        let notANumber = F.judge(headers, settings: FreshnessSettings(heuristicFraction: .nan))
        #expect(notANumber.policy.freshnessLifetime == .zero)
        let whole = F.judge(headers, settings: FreshnessSettings(heuristicFraction: 7, heuristicLimit: .seconds(1_000_000)))
        #expect(whole.policy.freshnessLifetime == .seconds(86_400))
        // No Date: the response time stands in for it.
        let noDate = F.judge([("Last-Modified", F.httpDate(-1_000))], received: 1_000)
        #expect(noDate.policy.freshnessLifetime == .seconds(200))
    }

    @Test(
        "RFC 9111 §4.2.2: no heuristic when explicit freshness is present, valid or not, or the status forbids it",
        arguments: [
            ([("Cache-Control", "max-age=5")], 200, 5.0, ResponseFreshness.LifetimeSource.maxAge),
            ([("Cache-Control", "max-age=x")], 200, 0, .invalid),
            ([("Expires", F.httpDate(5))], 200, 5, .expires),
            ([("Expires", "0")], 200, 0, .invalid),
            ([], 302, 0, .none),  // RFC 9110 §15.1: 302 is not heuristically cacheable
            ([], 500, 0, .none),
            ([("Cache-Control", "public")], 302, 8_640, .heuristic),  // unless marked public
            ([], 404, 8_640, .heuristic),
            ([("Cache-Control", "no-cache")], 200, 8_640, .heuristic),  // computed, but never fresh
        ] as [([(name: String, value: String)], Int, TimeInterval, ResponseFreshness.LifetimeSource)])
    func heuristicNotAllowed(
        headers: [(name: String, value: String)], status: Int, lifetime: TimeInterval, source: ResponseFreshness.LifetimeSource
    ) {
        let base: [(name: String, value: String)] = [("Date", F.httpDate(0)), ("Last-Modified", F.httpDate(-86_400))]
        let freshness = F.judge(base + headers, status: status)
        #expect(freshness.lifetimeSource == source)
        #expect(freshness.policy.freshnessLifetime == .seconds(lifetime))
    }

    @Test("RFC 9111 §4.2.2: no Last-Modified (or an invalid one): the default lifetime, zero unless set, capped")
    func defaultLifetime() {
        let none = F.judge([("Date", F.httpDate(0)), ("ETag", "\"a\"")])
        #expect(none.lifetimeSource == .defaultLifetime)
        #expect(none.policy.freshnessLifetime == .zero)
        #expect(
            none.policy.decision(at: F.t0)
                == .stale(FreshnessDecision.StaleUse(servableWhileRevalidating: false, servableOnError: false)))
        let invalid = F.judge([("Last-Modified", "last week")])
        #expect(invalid.lifetimeSource == .defaultLifetime)
        let conflicting = F.judge([("Last-Modified", F.httpDate(-100)), ("Last-Modified", F.httpDate(-200))])
        #expect(conflicting.lifetimeSource == .defaultLifetime)
        let hour = F.judge([], settings: FreshnessSettings(defaultLifetime: .seconds(3_600)))
        #expect(hour.policy.freshnessLifetime == .seconds(3_600))
        let twoDays = F.judge([], settings: FreshnessSettings(defaultLifetime: .seconds(172_800)))
        #expect(twoDays.policy.freshnessLifetime == .seconds(86_400))
    }

    @Test("RFC 9111 §1.2.2: huge lifetimes stop at 2^31 s")
    func hugeLifetimes() {
        let maxAge = F.judge([("Cache-Control", "max-age=999999999999999")])
        #expect(maxAge.policy.freshnessLifetime == .seconds(2_147_483_648))
        let expires = F.judge([("Date", "Sat, 01 Jan 0000 00:00:00 GMT"), ("Expires", "Fri, 31 Dec 9999 23:59:59 GMT")])
        #expect(expires.policy.freshnessLifetime == .seconds(2_147_483_648))
        let settings = FreshnessSettings(heuristicLimit: .seconds(Int64.max), defaultLifetime: .seconds(Int64.max))
        #expect(F.judge([], settings: settings).policy.freshnessLifetime == .seconds(2_147_483_648))
    }

    @Test("Validators are kept verbatim; repeated ones that disagree are dropped")
    func validators() {
        let freshness = F.judge([("ETag", " W/\"a\" "), ("Last-Modified", F.httpDate(-10))])
        #expect(freshness.validators == Validators(entityTag: "W/\"a\"", lastModified: F.httpDate(-10)))
        #expect(F.judge([("ETag", "\"a\""), ("etag", "\"b\"")]).validators.entityTag == nil)
        // Fields are octets: canonically equivalent spellings (equal Swift strings) disagree.
        #expect(F.judge([("ETag", "\"caf\u{E9}\""), ("ETag", "\"cafe\u{301}\"")]).validators.entityTag == nil)
        #expect(F.judge([("ETag", "\"caf\u{E9}\""), ("ETag", " \"caf\u{E9}\"")]).validators.entityTag == "\"caf\u{E9}\"")
        #expect(Validators(entityTag: "\"caf\u{E9}\"") != Validators(entityTag: "\"cafe\u{301}\""))
        #expect(Validators(lastModified: "caf\u{E9}") != Validators(lastModified: "cafe\u{301}"))
    }

    @Test("A validator decoded with U+FFFD (bytes that were not UTF-8) identifies nothing and is not sent")
    func unreadableValidators() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        let lossy = "\"\u{FFFD}\""
        #expect(!Validators.isReadable(lossy))
        #expect(Validators.isReadable("W/\"caf\u{E9}\""))
        #expect(!Validators(entityTag: lossy).areIdentified(byNotModified: Validators(entityTag: lossy), now: now))
        #expect(
            !Validators(entityTag: "W/" + lossy).areIdentified(byNotModified: Validators(entityTag: "W/" + lossy), now: now))
        #expect(
            !Validators(lastModified: "x\u{FFFD}").areIdentified(
                byNotModified: Validators(lastModified: "x\u{FFFD}"), now: now))
        #expect(Validators(entityTag: "\"a\"").areIdentified(byNotModified: Validators(entityTag: "\"a\""), now: now))
        #expect(Validators(entityTag: lossy, lastModified: "m").sendable == Validators(lastModified: "m"))
        #expect(Validators(entityTag: "\"a\"", lastModified: "\u{FFFD}").sendable == Validators(entityTag: "\"a\""))
        // The weak indicator is two bytes, whatever follows them.
        #expect(
            Validators(entityTag: "\u{301}\"a\"").areIdentified(
                byNotModified: Validators(entityTag: "W/\u{301}\"a\""), now: now))
        #expect(F.judge([]).validators.isEmpty)
    }
}
