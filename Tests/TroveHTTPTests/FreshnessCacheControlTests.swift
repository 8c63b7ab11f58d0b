import Testing
import TroveHTTP

/// Cache-Control parsing: RFC 9111 §5.2 (grammar), §1.2.2 (delta-seconds), §4.2.1 (duplicates).
@Suite struct FreshnessCacheControlTests {
    typealias Seconds = CacheControl.DeltaSeconds

    @Test(
        "RFC 9111 §5.2, §1.2.2: max-age arguments",
        arguments: [
            ("max-age=60", Seconds.seconds(60)),
            ("MAX-AGE=60", .seconds(60)),  // §5.2: directive names are case-insensitive
            ("Max-Age=0", .seconds(0)),
            ("max-age=\"60\"", .seconds(60)),  // §5.2: the quoted form is accepted too
            ("max-age=\"6\\0\"", .seconds(60)),  // quoted-pair (RFC 9110 §5.6.4)
            ("max-age = 60", .seconds(60)),  // a documented liberty
            ("  max-age=60  ", .seconds(60)),
            ("max-age=0060", .seconds(60)),
            ("max-age=2147483647", .seconds(2_147_483_647)),
            ("max-age=2147483648", .seconds(2_147_483_648)),
            ("max-age=2147483649", .seconds(2_147_483_648)),  // §1.2.2: larger values are 2^31
            ("max-age=99999999999999999999999999999999", .seconds(2_147_483_648)),
            ("max-age=-1", .invalid),  // §1.2.2: delta-seconds is 1*DIGIT
            ("max-age=+60", .invalid),
            ("max-age=1.5", .invalid),
            ("max-age=60s", .invalid),
            ("max-age=0x10", .invalid),
            ("max-age=", .invalid),
            ("max-age", .invalid),
            ("max-age=\"\"", .invalid),
            ("max-age=\"60", .invalid),  // unterminated quoted string
            ("max-age=\"6 0\"", .invalid),
            ("max-age=٦٠", .invalid),  // non-ASCII digits
            ("max-age=60 garbage", .invalid),
            ("max-age=60\"x\"", .invalid),
            ("max-age=60, max-age=60", .seconds(60)),  // the same value twice is no conflict
            ("max-age=60, MAX-AGE=\"60\"", .seconds(60)),
            ("max-age=60, max-age=120", .invalid),  // §4.2.1: conflicting duplicates: stale
            ("max-age=60, max-age=abc", .invalid),
            ("max-age=abc, max-age=60", .invalid),
        ])
    func maxAge(field: String, expected: Seconds) {
        #expect(CacheControl(field).maxAge == expected)
    }

    @Test("RFC 9110 §5.3: several field lines are one list; a conflict across lines counts too")
    func severalLines() {
        let directives = CacheControl(fieldValues: ["max-age=60, stale-while-revalidate=30", "Must-Revalidate"])
        #expect(directives.maxAge == .seconds(60))
        #expect(directives.staleWhileRevalidate == .seconds(30))
        #expect(directives.mustRevalidate)
        #expect(CacheControl(fieldValues: ["max-age=60", "max-age=120"]).maxAge == .invalid)
        #expect(CacheControl(fieldValues: ["max-age=60", "max-age=60"]).maxAge == .seconds(60))
        #expect(CacheControl(fieldValues: [String]()) == CacheControl())
    }

    @Test("RFC 9111 §5.2.2: every directive a private cache reads")
    func directives() {
        let all = CacheControl(
            "no-cache, no-store, must-revalidate, proxy-revalidate, private, public, immutable, s-maxage=5, "
                + "stale-while-revalidate=30, stale-if-error=600")
        #expect(all.noCache && all.noStore && all.mustRevalidate && all.proxyRevalidate)
        #expect(all.isPrivate && all.isPublic && all.isImmutable)
        #expect(all.sharedMaxAge == .seconds(5))
        #expect(all.staleWhileRevalidate == .seconds(30))
        #expect(all.staleIfError == .seconds(600))
        #expect(all.maxAge == nil)
        #expect(CacheControl("") == CacheControl())
        #expect(CacheControl(" , ,, ") == CacheControl())
    }

    @Test(
        "RFC 9111 §5.2.2.4, §5.2.2.7: qualified no-cache and private count as unqualified; their field names are not directives",
        arguments: ["no-cache=\"Set-Cookie, no-store, max-age=5\"", "no-cache=Set-Cookie", "NO-CACHE=\"x\""])
    func qualifiedNoCache(field: String) {
        let directives = CacheControl(field)
        #expect(directives.noCache)
        #expect(!directives.noStore)
        #expect(directives.maxAge == nil)
        #expect(CacheControl("private=\"Authorization, no-store\"").isPrivate)
        #expect(!CacheControl("private=\"Authorization, no-store\"").noStore)
    }

    @Test(
        "Malformed members: restrictive directives still hold, delta-seconds become invalid, the rest is skipped",
        arguments: [
            ("no-store garbage, max-age=60", true, Seconds?.some(.seconds(60))),
            ("no-store=1", true, nil),
            ("\"junk, no-store\", max-age=60", false, .seconds(60)),  // a quoted string is not a directive
            ("=60, max-age=60", false, .seconds(60)),
            ("no-store\"x, y\", max-age=5", true, .seconds(5)),
            ("max-age=5;no-store", false, .invalid),  // `;` is no separator
            ("foo=bar, max-age=5, baz", false, .seconds(5)),  // §5.2.3: unknown directives are ignored
        ])
    func malformed(field: String, noStore: Bool, maxAge: Seconds?) {
        let directives = CacheControl(field)
        #expect(directives.noStore == noStore)
        #expect(directives.maxAge == maxAge)
    }

    @Test(
        "RFC 5861: stale windows follow delta-seconds rules; an invalid one grants nothing",
        arguments: [
            ("stale-while-revalidate=30", Seconds?.some(.seconds(30)), Int?.some(30)),
            ("stale-while-revalidate=\"30\"", .seconds(30), 30),
            ("stale-while-revalidate", .invalid, nil),
            ("stale-while-revalidate=-5", .invalid, nil),
            ("stale-while-revalidate=30, stale-while-revalidate=40", .invalid, nil),
            ("stale-while-revalidate=1e9", .invalid, nil),
            ("stale-while-revalidate=99999999999", .seconds(2_147_483_648), 2_147_483_648),
            ("max-age=5", nil, nil),
        ])
    func staleWindows(field: String, expected: Seconds?, seconds: Int?) {
        let directives = CacheControl(field)
        #expect(directives.staleWhileRevalidate == expected)
        #expect(directives.staleWhileRevalidate?.seconds == seconds)
    }

    @Test("DeltaSeconds.seconds clamps values set by hand to 0...2^31")
    func clampsByHand() {
        #expect(Seconds.seconds(-5).seconds == 0)
        #expect(Seconds.seconds(.max).seconds == 2_147_483_648)
        #expect(Seconds.invalid.seconds == nil)
    }
}
