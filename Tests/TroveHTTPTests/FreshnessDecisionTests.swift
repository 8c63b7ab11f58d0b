import Foundation
import Testing
import TroveHTTP

/// Decisions at a later time: RFC 9111 §4.2 (fresh), §4.2.4 (serving stale), §5.2.2.2
/// (must-revalidate), §5.2.2.4 (no-cache); RFC 5861 §3 (stale-while-revalidate), §4
/// (stale-if-error).
@Suite struct FreshnessDecisionTests {
    typealias F = FreshnessFixture
    typealias Use = FreshnessDecision.StaleUse

    static func use(_ whileRevalidating: Bool, _ onError: Bool) -> FreshnessDecision {
        .stale(Use(servableWhileRevalidating: whileRevalidating, servableOnError: onError))
    }

    @Test(
        "RFC 9111 §4.2: fresh strictly before freshUntil, stale from it on",
        arguments: [(-60.0, true), (-0.001, true), (0, false), (0.001, false), (3_600, false)] as [(TimeInterval, Bool)])
    func freshnessEdge(offset: TimeInterval, fresh: Bool) {
        let freshness = F.judge([("Cache-Control", "max-age=60")])
        #expect(F.freshFor(freshness) == 60)
        let decision = freshness.policy.decision(at: F.t0 + 60 + offset)
        #expect(decision.isFresh == fresh)
        #expect((decision.staleUse == nil) == fresh)
    }

    @Test(
        "RFC 5861 §3: stale-while-revalidate serves at once within [freshUntil, freshUntil + N)",
        arguments: [
            (-0.001, FreshnessDecision.fresh), (0, FreshnessDecisionTests.use(true, false)),
            (29.999, FreshnessDecisionTests.use(true, false)), (30, FreshnessDecisionTests.use(false, false)),
            (31, FreshnessDecisionTests.use(false, false)),
        ] as [(TimeInterval, FreshnessDecision)])
    func staleWhileRevalidateEdges(offset: TimeInterval, expected: FreshnessDecision) {
        let policy = F.judge([("Cache-Control", "max-age=60, stale-while-revalidate=30")]).policy
        #expect(policy.staleWhileRevalidate == .seconds(30))
        #expect(policy.decision(at: F.t0 + 60 + offset) == expected)
    }

    @Test(
        "RFC 5861 §4: stale-if-error serves on failure within [freshUntil, freshUntil + N)",
        arguments: [
            (-0.001, FreshnessDecision.fresh), (0, FreshnessDecisionTests.use(false, true)),
            (599.999, FreshnessDecisionTests.use(false, true)), (600, FreshnessDecisionTests.use(false, false)),
        ] as [(TimeInterval, FreshnessDecision)])
    func staleIfErrorEdges(offset: TimeInterval, expected: FreshnessDecision) {
        let policy = F.judge([("Cache-Control", "max-age=60, stale-if-error=600")]).policy
        #expect(policy.staleIfError == .seconds(600))
        #expect(policy.decision(at: F.t0 + 60 + offset) == expected)
    }

    @Test("RFC 5861: both windows at once, each measured from freshUntil")
    func bothWindows() {
        let policy = F.judge([("Cache-Control", "max-age=10, stale-while-revalidate=20, stale-if-error=100")]).policy
        #expect(policy.decision(at: F.t0 + 5) == .fresh)
        #expect(policy.decision(at: F.t0 + 15) == Self.use(true, true))
        #expect(policy.decision(at: F.t0 + 30) == Self.use(false, true))
        #expect(policy.decision(at: F.t0 + 110) == Self.use(false, false))
        // An Age shifts freshUntil and both windows with it.
        let aged = F.judge([("Cache-Control", "max-age=10, stale-while-revalidate=20"), ("Age", "25")]).policy
        #expect(aged.decision(at: F.t0) == Self.use(true, false))
        #expect(aged.decision(at: F.t0 + 5) == Self.use(false, false))
    }

    @Test(
        "RFC 9111 §5.2.2.4, §4.2.4: no-cache is stored but never fresh, and never served stale",
        arguments: [
            "no-cache", "no-cache, max-age=3600", "no-cache=\"Set-Cookie\", max-age=3600",
            "no-cache, max-age=3600, stale-while-revalidate=60, stale-if-error=86400",
        ])
    func noCache(field: String) {
        let freshness = F.judge([("Cache-Control", field)])
        #expect(freshness.isStorable)
        #expect(freshness.policy.revalidatesOnEveryUse)
        let allowance = FreshnessSettings(staleIfErrorAllowance: .seconds(86_400))
        for offset in [0.0, 1, 3_599, 3_600, 3_630, 80_000] {
            #expect(freshness.policy.decision(at: F.t0 + offset, settings: allowance) == .stale(Use.mustRevalidate))
        }
    }

    @Test(
        "RFC 9111 §5.2.2.2, §4.2.4: must-revalidate blocks stale-while-revalidate, stale-if-error and the app's allowance",
        arguments: [
            "must-revalidate, max-age=60, stale-if-error=600",
            "max-age=60, stale-while-revalidate=60, MUST-REVALIDATE",
            "max-age=60, must-revalidate",
        ])
    func mustRevalidate(field: String) {
        let policy = F.judge([("Cache-Control", field)]).policy
        #expect(policy.forbidsStaleUse)
        let allowance = FreshnessSettings(staleIfErrorAllowance: .seconds(86_400))
        #expect(policy.decision(at: F.t0 + 59, settings: allowance) == .fresh)
        #expect(policy.decision(at: F.t0 + 60, settings: allowance) == .stale(Use.mustRevalidate))
        #expect(policy.decision(at: F.t0 + 61, settings: allowance) == .stale(Use.mustRevalidate))
    }

    @Test("RFC 9111 §4.2.4: the application may accept stale responses on error beyond the origin's window; default off")
    func staleIfErrorAllowance() {
        let policy = F.judge([("Cache-Control", "max-age=60, stale-if-error=10")]).policy
        #expect(policy.decision(at: F.t0 + 100) == Self.use(false, false))
        let day = FreshnessSettings(staleIfErrorAllowance: .seconds(86_400))
        #expect(policy.decision(at: F.t0 + 65, settings: day) == Self.use(false, true))
        #expect(policy.decision(at: F.t0 + 60 + 86_399, settings: day) == Self.use(false, true))
        #expect(policy.decision(at: F.t0 + 60 + 86_400, settings: day) == Self.use(false, false))
        // The origin's longer window still counts when the allowance is shorter.
        let long = F.judge([("Cache-Control", "max-age=60, stale-if-error=600")]).policy
        #expect(
            long.decision(at: F.t0 + 400, settings: FreshnessSettings(staleIfErrorAllowance: .seconds(5)))
                == Self.use(false, true))
        // A response with no freshness at all: only the allowance.
        let bare = F.judge([]).policy
        #expect(bare.decision(at: F.t0) == Self.use(false, false))
        #expect(bare.decision(at: F.t0 + 10, settings: day) == Self.use(false, true))
    }

    @Test("RFC 9111 §4.2.1: invalid freshness information is stale at once, with the windows still counting")
    func invalidIsStale() {
        let policy = F.judge([("Cache-Control", "max-age=1O, stale-while-revalidate=30")]).policy
        #expect(policy.freshnessLifetime == .zero)
        #expect(policy.decision(at: F.t0) == Self.use(true, false))
        #expect(policy.decision(at: F.t0 + 30) == Self.use(false, false))
    }

    @Test("RFC 8246: immutable is kept, and freshness still ends at freshUntil")
    func immutable() {
        let policy = F.judge([("Cache-Control", "max-age=60, immutable")]).policy
        #expect(policy.isImmutable)
        #expect(policy.decision(at: F.t0 + 59) == .fresh)
        #expect(policy.decision(at: F.t0 + 60) == Self.use(false, false))
    }
}
