import Foundation
import Testing
import TroveHTTP
import TroveTestSupport

/// The persisted form (`EntryMetadata.cachePolicy`, Docs/Freshness.md) and the store's hard
/// expiry.
@Suite struct FreshnessPersistenceTests {
    typealias F = FreshnessFixture

    /// Responses whose policies must round-trip, hostile ones included.
    static let responses: [[(name: String, value: String)]] = [
        [],
        [("Cache-Control", "max-age=600, stale-while-revalidate=30")],
        [("Cache-Control", "no-cache, must-revalidate, immutable, stale-if-error=86400"), ("Age", "12")],
        [("Cache-Control", "max-age=bogus"), ("Expires", "0"), ("Last-Modified", "Sat, 01 Jan 0000 00:00:00 GMT")],
        [("Date", F.httpDate(-5)), ("Expires", F.httpDate(3_600)), ("Last-Modified", F.httpDate(-86_400))],
        [
            ("Cache-Control", "max-age=99999999999999999999999, stale-while-revalidate=99999999999999999999"),
            ("Cache-Control", "stale-if-error=99999999999999999999, no-cache, must-revalidate, immutable"),
            ("Age", "99999999999999999999999"), ("Date", "Sat, 01 Jan 0000 00:00:00 GMT"),
            ("Expires", "Fri, 31 Dec 9999 23:59:59 GMT"), ("Last-Modified", "Sat, 01 Jan 0000 00:00:00 GMT"),
        ],
        [("Cache-Control", "stale-while-revalidate=0, stale-if-error=0, max-age=0")],
        [("Cache-Control", String(repeating: "max-age=1, ", count: 10_000))],
        [("Expires", "Fri, 31 Dec 9999 23:59:59 GMT"), ("Date", F.httpDate(0))],
    ]

    static let receipts: [Date] = [
        F.t0, F.t0 + 0.123, Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: -1e12), .distantPast, .distantFuture,
        Date(timeIntervalSince1970: 1e15), Date(timeIntervalSince1970: .nan),
    ]

    @Test("The persisted form round-trips exactly, stays ASCII without NUL, and within 512 bytes for hostile inputs")
    func roundTrip() throws {
        var longest = 0
        for headers in Self.responses {
            for receipt in Self.receipts {
                let policy = ResponseFreshness(status: 200, headers: headers, requestTime: receipt - 1, responseTime: receipt)
                    .policy
                let encoded = policy.encoded
                longest = max(longest, encoded.utf8.count)
                #expect(encoded.utf8.count <= CachePolicy.maximumEncodedLength)
                #expect(encoded.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F })
                #expect(encoded.hasPrefix("v1;"))
                let decoded = try #require(CachePolicy(encoded: encoded), "\(encoded)")
                #expect(decoded == policy, "\(encoded)")
                #expect(decoded.encoded == encoded)
                #expect(decoded.freshUntil == policy.freshUntil)
                #expect(decoded.decision(at: receipt + 30) == policy.decision(at: receipt + 30))
            }
        }
        #expect(longest < 200)
    }

    @Test("The persisted form of a known policy (a format change must change this test and the version)")
    func knownForm() {
        let policy = F.judge(
            [("Date", F.httpDate(0)), ("Cache-Control", "max-age=600, stale-while-revalidate=30"), ("Age", "5")],
            sent: -1
        ).policy
        #expect(policy.encoded == "v1;r=1700000000000;t=600000;g=6000;a=600;w=30")
        let full = F.judge(
            [
                ("Cache-Control", "max-age=x, stale-if-error=9, no-cache, must-revalidate, immutable"),
                ("Expires", "0"), ("Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ], received: 0.25
        ).policy
        #expect(full.encoded == "v1;r=1700000000250;t=0;g=250;a=!;e=9;n;m;i;x=!;l=784111777000")
        let fixed = CachePolicy(encoded: "v1;r=-5;t=1;g=2;x=-62167219200000")
        #expect(fixed?.freshUntil == Date(timeIntervalSince1970: -0.006))
    }

    @Test(
        "A persisted form that encoded could not have written decodes to nil",
        arguments: [
            "", "v1", "v1;", "v2;r=0;t=0;g=0", "V1;r=0;t=0;g=0", "v1 ;r=0;t=0;g=0", "v10;r=0;t=0;g=0",
            "v1;r=0;t=0",  // g missing
            "v1;t=0;g=0",  // r missing
            "v1;r=0;g=0;t=0",  // out of order
            "v1;r=0;t=0;g=0;a=5;a=5",  // repeated
            "v1;r=0;t=0;g=0;w=5;a=5",
            "v1;r=0;t=0;g=0;z=1",  // unknown
            "v1;r=0;t=0;g=0;",  // trailing separator
            "v1;;r=0;t=0;g=0",
            "v1;r=00;t=0;g=0",  // leading zero
            "v1;r=01;t=0;g=0",
            "v1;r=-0;t=0;g=0",
            "v1;r=+1;t=0;g=0",
            "v1;r= 1;t=0;g=0",
            "v1;r=1 ;t=0;g=0",
            "v1;r=1.5;t=0;g=0",
            "v1;r=;t=0;g=0",
            "v1;r;t=0;g=0",
            "v1;r=0;t=-1;g=0",  // negative duration
            "v1;r=0;t=2147483648001;g=0",  // beyond 2^31 s
            "v1;r=0;t=0;g=2147483648001",
            "v1;r=281474976710657;t=0;g=0",  // beyond the instant limit
            "v1;r=99999999999999999999;t=0;g=0",
            "v1;r=0;t=0;g=0;a=2147483649",
            "v1;r=0;t=0;g=0;a=-1",
            "v1;r=0;t=0;g=0;a=?",
            "v1;r=0;t=0;g=0;a",
            "v1;r=0;t=0;g=0;w=0",  // a zero window is written as no window
            "v1;r=0;t=0;g=0;e=0",
            "v1;r=0;t=0;g=0;n=1",
            "v1;r=0;t=0;g=0;nm",
            "v1;r=0;t=0;g=0;x=1500",  // HTTP dates are whole seconds
            "v1;r=0;t=0;g=0;x=253402300800000",  // beyond 9999
            "v1;r=0;t=0;g=0;l=!",
            "v1;r=0;t=0;g=0;l=-62167219201000",
            "v1;r=0;t=0;g=0\u{0}",
            "v1;r=0;t=0;g=٠",
            "v1;r=0;t=0;g=0;a=5" + String(repeating: ";", count: 600),
            "garbage", "{\"r\":0}", "\u{0}\u{0}\u{0}",
        ])
    func garbage(text: String) {
        #expect(CachePolicy(encoded: text) == nil)
    }

    @Test("Every one-byte change to a valid form decodes to nil or to a policy that writes exactly that form")
    func strictness() throws {
        let policy = F.judge(
            [
                ("Cache-Control", "max-age=600, stale-while-revalidate=30, stale-if-error=60, no-cache, immutable"),
                ("Expires", F.httpDate(100)), ("Last-Modified", F.httpDate(-100)), ("Age", "3"),
            ], sent: -0.5
        ).policy
        let original = Array(policy.encoded.utf8)
        let alphabet = Array("0123456789-!;=vrtgawenmixlz ".utf8) + [0, 0xFF]
        var decoded = 0
        for index in original.indices {
            for byte in alphabet where byte != original[index] {
                var mutated = original
                mutated[index] = byte
                let text = String(decoding: mutated, as: UTF8.self)
                if let changed = CachePolicy(encoded: text) {
                    decoded += 1
                    #expect(changed.encoded == text)
                    #expect(changed != policy)
                }
            }
            var shortened = original
            shortened.remove(at: index)
            let text = String(decoding: shortened, as: UTF8.self)
            if let changed = CachePolicy(encoded: text) { #expect(changed.encoded == text) }
        }
        #expect(decoded > 0)
    }

    @Test("Random policies round-trip")
    func sampled() throws {
        var generator = SeededGenerator(seed: 5861)
        let directives = [
            "max-age=", "stale-while-revalidate=", "stale-if-error=", "no-cache", "must-revalidate", "immutable", "private",
        ]
        for _ in 0..<500 {
            var headers: [(name: String, value: String)] = []
            let fields = directives.filter { _ in Bool.random(using: &generator) }.map {
                $0.hasSuffix("=") ? $0 + String(UInt64.random(in: 0...5_000_000_000, using: &generator)) : $0
            }
            headers.append(("Cache-Control", fields.joined(separator: ", ")))
            let offset = Double(Int64.random(in: -10_000_000...10_000_000, using: &generator))
            if Bool.random(using: &generator) { headers.append(("Date", F.httpDate(offset))) }
            if Bool.random(using: &generator) { headers.append(("Expires", F.httpDate(offset * 2))) }
            if Bool.random(using: &generator) { headers.append(("Last-Modified", F.httpDate(-abs(offset)))) }
            if Bool.random(using: &generator) {
                headers.append(("Age", String(UInt32.random(in: 0...UInt32.max, using: &generator))))
            }
            let received = F.t0 + Double(Int64.random(in: -1_000_000_000...1_000_000_000, using: &generator)) / 1000
            let policy = ResponseFreshness(status: 200, headers: headers, requestTime: received - 0.2, responseTime: received)
                .policy
            let decoded = try #require(CachePolicy(encoded: policy.encoded))
            #expect(decoded == policy)
        }
    }

    // MARK: Hard expiry

    @Test(
        "The store's hard expiry: freshUntil plus the retention or the longest stale window, whichever is longer",
        arguments: [
            // (Cache-Control, retention, allowance, seconds after freshUntil; nil: none)
            ("max-age=60", Duration?.some(.seconds(604_800)), Duration.zero, TimeInterval?.some(604_800)),
            ("max-age=60", nil, .zero, nil),  // kept until evicted
            ("max-age=60", .zero, .zero, 0),
            ("max-age=60, stale-if-error=2592000", .seconds(604_800), .zero, 2_592_000),
            ("max-age=60, stale-while-revalidate=1209600", .seconds(604_800), .zero, 1_209_600),
            ("max-age=60, stale-while-revalidate=10, stale-if-error=20", .zero, .zero, 20),
            ("max-age=60, stale-if-error=20", .zero, .seconds(100), 100),  // the app's allowance
            ("max-age=60, stale-if-error=20", nil, .seconds(100), nil),
            ("no-cache, max-age=60", .seconds(10), .zero, 10),
        ] as [(String, Duration?, Duration, TimeInterval?)])
    func hardExpiry(field: String, retention: Duration?, allowance: Duration, after: TimeInterval?) {
        let settings = FreshnessSettings(staleIfErrorAllowance: allowance, staleRetention: retention)
        let policy = F.judge([("Cache-Control", field)]).policy
        let expiry = policy.hardExpiry(settings: settings)
        #expect(expiry.map { $0.timeIntervalSince(policy.freshUntil) } == after)
    }

    @Test("The default retention is 7 days, and a stale entry stays usable until its hard expiry")
    func defaultRetention() throws {
        let policy = F.judge([("Cache-Control", "max-age=60, stale-if-error=3600")]).policy
        let expiry = try #require(policy.hardExpiry(settings: FreshnessSettings()))
        #expect(expiry == F.t0 + 60 + 7 * 86_400)
        #expect(policy.decision(at: F.t0 + 3_000).staleUse?.servableOnError == true)
        // Huge values cannot overflow.
        let huge = F.judge([("Cache-Control", "max-age=99999999999, stale-if-error=99999999999")], received: 1e13).policy
        let far = try #require(huge.hardExpiry(settings: FreshnessSettings(staleRetention: .seconds(Int64.max))))
        #expect(far > F.t0)
    }
}
