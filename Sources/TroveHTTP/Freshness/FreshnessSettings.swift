// FreshnessSettings: the choices RFC 9111 leaves to a cache. See Docs/Freshness.md.

/// What a cache decides where RFC 9111 and RFC 5861 leave the choice to it.
///
/// Every duration is taken as 0 when negative and as 2^31 seconds (about 68 years) when
/// larger, the bound RFC 9111 §1.2.2 sets on delta-seconds arithmetic.
///
/// ```swift
/// var settings = FreshnessSettings()
/// settings.heuristicLimit = .seconds(3_600)          // heuristic freshness: at most an hour
/// settings.staleIfErrorAllowance = .seconds(86_400)  // the app accepts day-old images offline
/// ```
public struct FreshnessSettings: Hashable, Sendable {
    /// The fraction of the time since `Last-Modified` (at the response's `Date`) that a response
    /// without explicit freshness stays fresh: RFC 9111 §4.2.2's heuristic, whose "typical
    /// setting" is 10 %. Default 0.1; taken as 0 below 0 (or NaN) and as 1 above 1; 0 turns the
    /// heuristic off.
    public var heuristicFraction: Double
    /// The longest heuristic freshness lifetime (RFC 9111 §4.2.2). Default 24 hours, the point
    /// beyond which RFC 7234 asked caches to warn that they were guessing.
    public var heuristicLimit: Duration
    /// The heuristic lifetime of a response that has neither explicit freshness nor a
    /// `Last-Modified` to take a fraction of (RFC 9111 §4.2.2 leaves the heuristic to the cache),
    /// also capped by ``heuristicLimit``. Default zero: such a response is stored but
    /// revalidated on every use (with its `ETag` if it has one; as a full fetch otherwise, which
    /// the store then deduplicates). The origin said nothing; Trove does not invent freshness.
    public var defaultLifetime: Duration
    /// How long after it goes stale the application accepts an entry when the origin cannot be
    /// reached, beyond what the origin's `stale-if-error` grants: the application acting as the
    /// client that permits stale responses (RFC 9111 §4.2.4; RFC 5861 §4 allows the client its
    /// own `stale-if-error`). Default zero: only the origin's window counts. `no-cache` and
    /// `must-revalidate` still forbid it (§4.2.4: a cache must not serve stale when a directive
    /// prohibits it).
    public var staleIfErrorAllowance: Duration
    /// How long the store keeps an entry after it goes stale, for revalidation and for serving
    /// on error; at least the larger of the entry's RFC 5861 windows and
    /// ``staleIfErrorAllowance`` (see ``CachePolicy/hardExpiry(settings:)``). Default 7 days;
    /// nil keeps stale entries until eviction or removal.
    public var staleRetention: Duration?

    /// Makes settings; every argument has the default described on its property.
    public init(
        heuristicFraction: Double = 0.1, heuristicLimit: Duration = .seconds(86_400), defaultLifetime: Duration = .zero,
        staleIfErrorAllowance: Duration = .zero, staleRetention: Duration? = .seconds(7 * 86_400)
    ) {
        self.heuristicFraction = heuristicFraction
        self.heuristicLimit = heuristicLimit
        self.defaultLifetime = defaultLifetime
        self.staleIfErrorAllowance = staleIfErrorAllowance
        self.staleRetention = staleRetention
    }

    /// ``heuristicFraction`` within 0...1.
    var clampedHeuristicFraction: Double {
        heuristicFraction.isNaN ? 0 : min(max(heuristicFraction, 0), 1)
    }
}
