// FreshnessDecision: what a private cache may do with a stored response at a given time
// (RFC 9111 §4.2, §4.2.4; RFC 5861). See Docs/Freshness.md.

/// What a cache may do with a stored response when it is asked for it, as
/// ``CachePolicy/decision(at:settings:)`` tells.
///
/// ```swift
/// switch policy.decision(at: now) {
/// case .fresh:
///     serve(entry)
/// case .stale(let use) where use.servableWhileRevalidating:
///     serve(entry)
///     revalidateInBackground()          // one at a time per key
/// case .stale(let use):
///     if let response = await revalidate() {
///         serve(response)
///     } else if policy.decision(at: failureTime).staleUse?.servableOnError == true {
///         serve(entry)
///     }
/// }
/// ```
public enum FreshnessDecision: Hashable, Sendable {
    /// The response is fresh (RFC 9111 §4.2: its freshness lifetime exceeds its current age)
    /// and carries no `no-cache`: serve it without contacting the origin.
    case fresh
    /// The response must not be served as fresh: it is stale, or `no-cache` requires validating
    /// it on every use (§5.2.2.4). What may still be done with it is in the associated value.
    case stale(StaleUse)

    /// What a cache may do with a response that is stale or must be validated.
    public struct StaleUse: Hashable, Sendable {
        /// Whether the response may be served at once while one background revalidation runs:
        /// within the origin's `stale-while-revalidate` window (RFC 5861 §3), and neither
        /// `no-cache` nor `must-revalidate` forbids it (RFC 9111 §4.2.4). When false, the
        /// response must be revalidated before it is used.
        public var servableWhileRevalidating: Bool
        /// Whether the response may be served when revalidation fails: the origin cannot be
        /// reached or answers 500, 502, 503 or 504 (RFC 5861 §4). True within the origin's
        /// `stale-if-error` window or the application's
        /// ``FreshnessSettings/staleIfErrorAllowance``, unless `no-cache` or `must-revalidate`
        /// forbids serving without successful validation (RFC 9111 §4.2.4, §5.2.2.2, §5.2.2.4).
        /// It answers for the time the decision was asked for: ask again when the failure comes.
        public var servableOnError: Bool

        /// Makes a stale use.
        public init(servableWhileRevalidating: Bool, servableOnError: Bool) {
            self.servableWhileRevalidating = servableWhileRevalidating
            self.servableOnError = servableOnError
        }

        /// Revalidate before use, and serve nothing stale if that fails.
        public static let mustRevalidate = StaleUse(servableWhileRevalidating: false, servableOnError: false)
    }

    /// Whether the response may be served without contacting the origin.
    public var isFresh: Bool { self == .fresh }

    /// What may be done with the response when it is not fresh; nil when it is.
    public var staleUse: StaleUse? {
        if case .stale(let use) = self { return use }
        return nil
    }
}
