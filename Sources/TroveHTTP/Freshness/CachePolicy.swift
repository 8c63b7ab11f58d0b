// CachePolicy: the freshness a private cache keeps with a stored response, and the decisions it
// makes from it (RFC 9111 §4.2, §4.2.4; RFC 5861). See Docs/Freshness.md.

public import Foundation

/// The freshness of a stored response, kept with it, and the rules for using it later.
///
/// A policy comes from ``ResponseFreshness`` (a response just received), from
/// ``freshened(byNotModified:storedValidators:requestTime:responseTime:settings:)`` (a 304 that
/// revalidated it) or from ``init(encoded:)`` (the string the store keeps). Every instant and
/// duration in it is a whole number of milliseconds, so that it round-trips through
/// ``encoded`` exactly.
///
/// Two expiries are kept apart:
/// - **HTTP freshness** (``freshUntil``): when the response goes stale and must be revalidated
///   before use. Past it, the entry is still useful: for a conditional request, for
///   `stale-while-revalidate` and for `stale-if-error`.
/// - **The store's hard expiry** (``hardExpiry(settings:)``): when the entry is gone. Set it as
///   the store entry's expiry, so a stale entry stays until then (or until evicted or removed).
public struct CachePolicy: Hashable, Sendable {
    /// `response_time` (RFC 9111 §4.2.3), in milliseconds since 1970.
    let responseTimeMilliseconds: Int64
    /// `freshness_lifetime` (§4.2.1), 0 through 2^31 s, in milliseconds.
    let lifetimeMilliseconds: Int64
    /// `corrected_initial_age` (§4.2.3), 0 through 2^31 s, in milliseconds.
    let initialAgeMilliseconds: Int64
    /// The stored `Cache-Control`, reduced to what a private cache acts on (`max-age`, `no-cache`,
    /// `must-revalidate`, `immutable` and the RFC 5861 windows, zero windows dropped): the
    /// decisions read it, and a 304 without the field leaves it in place (§4.3.4).
    let directives: CacheControl
    /// The stored `Expires`, for a 304 that brings a new `Date` but no `Expires`.
    let expires: ExpiresField
    /// The stored `Last-Modified` in milliseconds, for a heuristic after a 304 without one.
    let lastModifiedMilliseconds: Int64?

    /// Makes a policy from computed values, normalizing each into its persisted range.
    init(
        responseTime: Int64, lifetime: Int64, initialAge: Int64, directives: CacheControl, expires: ExpiresField,
        lastModified: Int64?
    ) {
        responseTimeMilliseconds = Milliseconds.clampInstant(responseTime)
        lifetimeMilliseconds = Milliseconds.clampDelta(lifetime)
        initialAgeMilliseconds = Milliseconds.clampDelta(initialAge)
        var kept = CacheControl()
        kept.maxAge = directives.maxAge.map { $0.seconds.map(CacheControl.DeltaSeconds.seconds) ?? .invalid }
        if let seconds = directives.staleWhileRevalidate?.seconds, seconds > 0 { kept.staleWhileRevalidate = .seconds(seconds) }
        if let seconds = directives.staleIfError?.seconds, seconds > 0 { kept.staleIfError = .seconds(seconds) }
        kept.noCache = directives.noCache
        kept.mustRevalidate = directives.mustRevalidate
        kept.isImmutable = directives.isImmutable
        self.directives = kept
        switch expires {
        case .at(let instant):
            self.expires = .at(Self.clampHTTPDate(instant))
        case .absent, .invalid:
            self.expires = expires
        }
        lastModifiedMilliseconds = lastModified.map(Self.clampHTTPDate)
    }

    /// An HTTP date's milliseconds: whole seconds within ``HTTPDate/secondsRange``.
    private static func clampHTTPDate(_ milliseconds: Int64) -> Int64 {
        let seconds = milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000
        return HTTPDate(secondsSince1970: seconds).secondsSince1970 * 1000
    }

    // MARK: Freshness

    /// When the response was received (RFC 9111 §4.2.3's `response_time`).
    public var responseTime: Date { Milliseconds.date(responseTimeMilliseconds) }

    /// How long the response is fresh after it was generated (§4.2.1's `freshness_lifetime`):
    /// from `max-age`, else `Expires` − `Date`, else the heuristic (§4.2.2).
    public var freshnessLifetime: Duration { Milliseconds.duration(lifetimeMilliseconds) }

    /// The response's age when it arrived (§4.2.3's `corrected_initial_age`): the larger of the
    /// apparent age (receipt time − `Date`) and the `Age` field plus the request's round trip.
    public var initialAge: Duration { Milliseconds.duration(initialAgeMilliseconds) }

    /// The first instant at which the response is stale: `response_time` + `freshness_lifetime`
    /// − `corrected_initial_age`. It is fresh before this instant (§4.2: fresh while
    /// `freshness_lifetime` > `current_age`) and stale from it on; it may lie before
    /// ``responseTime`` when the response arrived already stale.
    public var freshUntil: Date { Milliseconds.date(freshUntilMilliseconds) }

    var freshUntilMilliseconds: Int64 { responseTimeMilliseconds + lifetimeMilliseconds - initialAgeMilliseconds }

    /// `no-cache` (§5.2.2.4): the response is stored but validated before every use, fresh or
    /// not.
    public var revalidatesOnEveryUse: Bool { directives.noCache }

    /// `must-revalidate` (§5.2.2.2): once stale, the response is never served without successful
    /// validation: not while revalidating, not on error.
    public var forbidsStaleUse: Bool { directives.mustRevalidate }

    /// `immutable` (RFC 8246). Informative: Trove never revalidates a fresh response anyway.
    public var isImmutable: Bool { directives.isImmutable }

    /// The `stale-while-revalidate` window (RFC 5861 §3); zero when the origin gave none.
    public var staleWhileRevalidate: Duration { .seconds(directives.staleWhileRevalidate?.seconds ?? 0) }

    /// The `stale-if-error` window (RFC 5861 §4); zero when the origin gave none.
    public var staleIfError: Duration { .seconds(directives.staleIfError?.seconds ?? 0) }

    /// The response's age at `now` (§4.2.3's `current_age`): ``initialAge`` plus the time since
    /// it was received (none when the clock reads earlier than that), at most 2^31 s.
    public func currentAge(at now: Date) -> Duration {
        let resident = max(0, Milliseconds.instant(now) - responseTimeMilliseconds)
        return Milliseconds.duration(Milliseconds.clampDelta(initialAgeMilliseconds + resident))
    }

    // MARK: Decisions

    /// What the cache may do with the response at `now`.
    ///
    /// - `.fresh` before ``freshUntil``, unless `no-cache` requires validating every use.
    /// - Otherwise `.stale`, with the windows measured from ``freshUntil`` as half-open
    ///   intervals: a response stale by *s* may be served while revalidating when
    ///   *s* < `stale-while-revalidate` (RFC 5861 §3), and on error when *s* < the larger of
    ///   `stale-if-error` (RFC 5861 §4) and ``FreshnessSettings/staleIfErrorAllowance``. So at
    ///   exactly ``freshUntil`` + window the window has closed, and a window of zero grants
    ///   nothing, as freshness itself ends at exactly ``freshUntil``.
    /// - `no-cache` and `must-revalidate` forbid both (RFC 9111 §4.2.4: a cache must not serve
    ///   stale when a directive prohibits it; §5.2.2.2 requires an error rather than a stale
    ///   response when the origin cannot be reached).
    ///
    /// - Parameters:
    ///   - now: The current time, from the caller's clock.
    ///   - settings: Supplies ``FreshnessSettings/staleIfErrorAllowance``.
    /// - Complexity: O(1).
    public func decision(at now: Date, settings: FreshnessSettings = FreshnessSettings()) -> FreshnessDecision {
        let nowMilliseconds = Milliseconds.instant(now)
        let freshUntil = freshUntilMilliseconds
        if nowMilliseconds < freshUntil && !directives.noCache { return .fresh }
        if directives.noCache || directives.mustRevalidate { return .stale(.mustRevalidate) }
        let staleness = nowMilliseconds - freshUntil
        let whileRevalidating = Int64(directives.staleWhileRevalidate?.seconds ?? 0) * 1000
        let onError = max(
            Int64(directives.staleIfError?.seconds ?? 0) * 1000, Milliseconds.delta(settings.staleIfErrorAllowance))
        return .stale(
            FreshnessDecision.StaleUse(
                servableWhileRevalidating: staleness < whileRevalidating, servableOnError: staleness < onError))
    }

    /// The instant the store may drop the entry: its hard expiry, apart from HTTP freshness.
    ///
    /// ``freshUntil`` plus the longest of ``FreshnessSettings/staleRetention``, the
    /// `stale-while-revalidate` and `stale-if-error` windows, and
    /// ``FreshnessSettings/staleIfErrorAllowance``, so that a stale entry stays available for
    /// revalidation and for every window that may still serve it. nil when `staleRetention` is
    /// nil: the entry stays until evicted or removed.
    ///
    /// - Parameter settings: Supplies the retention and the application's stale-if-error
    ///   allowance.
    public func hardExpiry(settings: FreshnessSettings) -> Date? {
        guard let retention = settings.staleRetention else { return nil }
        let kept = max(
            Milliseconds.delta(retention), Int64(directives.staleWhileRevalidate?.seconds ?? 0) * 1000,
            Int64(directives.staleIfError?.seconds ?? 0) * 1000, Milliseconds.delta(settings.staleIfErrorAllowance))
        return Milliseconds.date(Milliseconds.clampInstant(freshUntilMilliseconds + kept))
    }
}
