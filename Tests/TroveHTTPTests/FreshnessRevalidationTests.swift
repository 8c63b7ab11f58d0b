import Foundation
import Testing
import TroveHTTP

/// Freshening a stored response with a 304: RFC 9111 §4.3.4 (which response, what changes) and
/// §3.2 (stored fields replaced by the 304's).
@Suite struct FreshnessRevalidationTests {
    typealias F = FreshnessFixture

    /// A stored response received at t0, and a 304 received `later` seconds afterwards for a
    /// request sent a second before.
    static func freshen(
        stored: [(name: String, value: String)], notModified: [(name: String, value: String)], later: TimeInterval = 1_000,
        settings: FreshnessSettings = FreshnessSettings()
    ) -> ResponseFreshness? {
        let original = F.judge(stored, settings: settings)
        return original.policy.freshened(
            byNotModified: notModified, storedValidators: original.validators, requestTime: F.t0 + later - 1,
            responseTime: F.t0 + later, settings: settings)
    }

    @Test("RFC 9111 §4.3.4: a 304 restarts freshness from its own Date and Age, with the stored max-age")
    func restartsFreshness() throws {
        let stored: [(name: String, value: String)] = [
            ("Date", F.httpDate(-30)), ("Age", "100"), ("Cache-Control", "max-age=600"), ("ETag", "\"a\""),
        ]
        #expect(F.freshFor(F.judge(stored)) == 500)
        let refreshed = try #require(
            Self.freshen(stored: stored, notModified: [("Date", F.httpDate(1_000)), ("ETag", "\"a\"")]))
        // Age: the 304's round trip (1 s); the stored Date and Age are not carried over (§5.1).
        #expect(refreshed.policy.initialAge == .seconds(1))
        #expect(refreshed.policy.freshnessLifetime == .seconds(600))
        #expect(F.freshFor(refreshed) == 1_599)
        #expect(refreshed.lifetimeSource == .maxAge)
        #expect(refreshed.isStorable)
        #expect(refreshed.validators == Validators(entityTag: "\"a\""))
        // Without a Date the receipt time stands in (RFC 9110 §6.6.1); an Age of its own counts.
        let noDate = try #require(Self.freshen(stored: stored, notModified: [("Age", "50")]))
        #expect(noDate.policy.initialAge == .seconds(51))
        #expect(F.freshFor(noDate) == 1_549)
    }

    @Test("RFC 9111 §3.2: the 304's Cache-Control replaces the stored one as a whole; without one the stored stays")
    func cacheControlReplaced() throws {
        let stored: [(name: String, value: String)] = [
            ("Cache-Control", "max-age=60, stale-while-revalidate=30, must-revalidate"), ("ETag", "\"a\""),
        ]
        let replaced = try #require(Self.freshen(stored: stored, notModified: [("Cache-Control", "max-age=3600")]))
        #expect(replaced.policy.freshnessLifetime == .seconds(3_600))
        #expect(replaced.policy.staleWhileRevalidate == .zero)
        #expect(!replaced.policy.forbidsStaleUse)
        let kept = try #require(Self.freshen(stored: stored, notModified: [("ETag", "\"a\"")]))
        #expect(kept.policy.freshnessLifetime == .seconds(60))
        #expect(kept.policy.staleWhileRevalidate == .seconds(30))
        #expect(kept.policy.forbidsStaleUse)
        #expect(kept.cacheControl.maxAge == .seconds(60))
        let noCache = try #require(Self.freshen(stored: stored, notModified: [("Cache-Control", "no-cache")]))
        #expect(noCache.policy.revalidatesOnEveryUse)
        #expect(noCache.policy.freshnessLifetime == .zero)
    }

    @Test("RFC 9111 §4.3.4, §5.3: a stored Expires is measured against the 304's Date; the 304's own replaces it")
    func expires() throws {
        let stored: [(name: String, value: String)] = [("Date", F.httpDate(0)), ("Expires", F.httpDate(5_000))]
        #expect(F.judge(stored).policy.freshnessLifetime == .seconds(5_000))
        let kept = try #require(Self.freshen(stored: stored, notModified: [("Date", F.httpDate(1_000))]))
        #expect(kept.lifetimeSource == .expires)
        #expect(kept.policy.freshnessLifetime == .seconds(4_000))
        #expect(F.freshFor(kept) == 4_999)
        let replaced = try #require(
            Self.freshen(stored: stored, notModified: [("Date", F.httpDate(1_000)), ("Expires", F.httpDate(9_000))]))
        #expect(replaced.policy.freshnessLifetime == .seconds(8_000))
        let invalid = try #require(Self.freshen(stored: stored, notModified: [("Expires", "0")]))
        #expect(invalid.policy.freshnessLifetime == .zero)
        #expect(invalid.lifetimeSource == .invalid)
        // A stored invalid Expires stays invalid until replaced.
        let storedInvalid = try #require(Self.freshen(stored: [("Expires", "0")], notModified: []))
        #expect(storedInvalid.lifetimeSource == .invalid)
    }

    @Test("RFC 9111 §4.3.4: validators are updated; the heuristic follows the new Last-Modified")
    func validatorsUpdated() throws {
        let stored: [(name: String, value: String)] = [
            ("Date", F.httpDate(0)), ("ETag", "\"v1\""), ("Last-Modified", F.httpDate(-10_000)),
        ]
        #expect(F.judge(stored).policy.freshnessLifetime == .seconds(1_000))
        // The strong ETag identifies the response; the new Last-Modified replaces the old one.
        let refreshed = try #require(
            Self.freshen(
                stored: stored,
                notModified: [("Date", F.httpDate(1_000)), ("ETag", "\"v1\""), ("Last-Modified", F.httpDate(-99_000))]))
        #expect(refreshed.validators == Validators(entityTag: "\"v1\"", lastModified: F.httpDate(-99_000)))
        #expect(refreshed.policy.freshnessLifetime == .seconds(10_000))
        // Without a new Last-Modified, the stored one counts from the 304's Date.
        let storedDate = try #require(Self.freshen(stored: stored, notModified: [("Date", F.httpDate(10_000))]))
        #expect(storedDate.policy.freshnessLifetime == .seconds(2_000))
        #expect(storedDate.validators == Validators(entityTag: "\"v1\"", lastModified: F.httpDate(-10_000)))
    }

    @Test(
        "RFC 9111 §4.3.4: which 304s identify the stored response",
        arguments: [
            // (stored validators, 304's validators, identified)
            ([("ETag", "\"a\"")], [("ETag", "\"a\"")], true),
            ([("ETag", "\"a\"")], [("ETag", "\"b\"")], false),  // another strong validator
            ([("ETag", "W/\"a\"")], [("ETag", "\"a\"")], false),  // strong comparison fails on a weak tag
            ([("ETag", "\"a\"")], [("ETag", "W/\"a\"")], true),  // weak comparison
            ([("ETag", "W/\"a\"")], [("ETag", "W/\"a\"")], true),
            ([("ETag", "W/\"a\"")], [("ETag", "W/\"b\"")], false),
            ([("Last-Modified", F.httpDate(-5))], [("ETag", "\"a\"")], false),  // a strong tag the stored lacks
            ([("Last-Modified", F.httpDate(-5))], [("Last-Modified", F.httpDate(-5))], true),
            ([("Last-Modified", F.httpDate(-5))], [("Last-Modified", F.httpDate(-6))], false),
            // The same instant in an obsolete form is the same validator.
            (
                [("Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT")],
                [("Last-Modified", "Sunday, 06-Nov-94 08:49:37 GMT")], true
            ),
            ([("Last-Modified", "whenever")], [("Last-Modified", "whenever")], true),
            ([("ETag", "\"a\"")], [("Last-Modified", F.httpDate(-5))], false),
            (
                [("ETag", "\"a\""), ("Last-Modified", F.httpDate(-5))], [("ETag", "\"a\""), ("Last-Modified", F.httpDate(-9))],
                true
            ),
            (
                [("ETag", "\"a\""), ("Last-Modified", F.httpDate(-5))], [("ETag", "W/\"a\""), ("Last-Modified", F.httpDate(-9))],
                false
            ),
            ([], [], true),
            ([("ETag", "\"a\"")], [], true),  // Trove's documented leniency: one stored response
        ] as [([(name: String, value: String)], [(name: String, value: String)], Bool)])
    func identification(stored: [(name: String, value: String)], notModified: [(name: String, value: String)], identified: Bool) {
        let result = Self.freshen(stored: stored + [("Cache-Control", "max-age=60")], notModified: notModified)
        #expect((result != nil) == identified)
    }

    @Test("RFC 9111 §3, §4.1: a 304 that brings no-store or Vary: * makes the entry unstorable")
    func unstorableAfter304() throws {
        let stored: [(name: String, value: String)] = [("Cache-Control", "max-age=60"), ("ETag", "\"a\"")]
        let noStore = try #require(Self.freshen(stored: stored, notModified: [("Cache-Control", "no-store")]))
        #expect(noStore.refusal == .noStore)
        let vary = try #require(Self.freshen(stored: stored, notModified: [("Vary", "*")]))
        #expect(vary.refusal == .varyAny)
    }

    @Test("Freshening round-trips through the persisted form like any policy")
    func persistedAfterFreshening() throws {
        let stored: [(name: String, value: String)] = [
            ("Cache-Control", "max-age=60, stale-if-error=600"), ("ETag", "\"a\""), ("Last-Modified", F.httpDate(-100)),
        ]
        let policy = try #require(CachePolicy(encoded: F.judge(stored).policy.encoded))
        let refreshed = try #require(
            policy.freshened(
                byNotModified: [("Date", F.httpDate(500))], storedValidators: Validators(entityTag: "\"a\""),
                requestTime: F.t0 + 500, responseTime: F.t0 + 500))
        #expect(F.freshFor(refreshed) == 560)
        #expect(refreshed.policy.staleIfError == .seconds(600))
        #expect(CachePolicy(encoded: refreshed.policy.encoded) == refreshed.policy)
    }
}
