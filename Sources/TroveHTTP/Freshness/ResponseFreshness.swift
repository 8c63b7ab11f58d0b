// ResponseFreshness: what RFC 9111 makes of one response for a private cache: whether it may be
// stored (§3), its freshness lifetime (§4.2.1, §4.2.2) and age (§4.2.3), and the policy to keep
// with it. See Docs/Freshness.md.

public import Foundation

/// What a private cache makes of a response it received: whether it may store it, how long it
/// stays fresh, and the ``CachePolicy`` to keep with it.
///
/// It reads only header fields, given as any sequence of name/value pairs (`OriginHeaders`,
/// NIO's `HTTPHeaders` or an array; names are case-insensitive), and the two clock readings of
/// RFC 9111 §4.2.3: when the request was sent and when the response arrived. It does no I/O
/// and never reads the clock.
///
/// ```swift
/// let freshness = ResponseFreshness(
///     status: 200,
///     headers: response.headers,
///     requestTime: sent, responseTime: received)
/// if freshness.isStorable {
///     metadata.cachePolicy = freshness.policy.encoded
///     metadata.expiresAt = freshness.policy.hardExpiry(settings: settings)
/// }
/// ```
public struct ResponseFreshness: Hashable, Sendable {
    /// Why a response may not be stored.
    public enum Refusal: Hashable, Sendable {
        /// `Cache-Control: no-store` (RFC 9111 §5.2.2.5): neither the response nor anything made
        /// from it (a downsampled variant included) may be stored.
        case noStore
        /// `Vary: *` (RFC 9111 §4.1): a stored copy could never match a request, so it is not
        /// stored.
        case varyAny
        /// A status code other than 200 and 203. RFC 9111 §3 lets a cache store other final
        /// responses it understands; Trove stores complete representations of images only, so
        /// 206 (a part), redirects and errors are left to the pipeline and never stored here.
        case status(Int)
    }

    /// Where the freshness lifetime came from (RFC 9111 §4.2.1, in this order of precedence).
    public enum LifetimeSource: Hashable, Sendable {
        /// `Cache-Control: max-age` (§5.2.2.1).
        case maxAge
        /// `Expires` minus `Date` (§5.3; the receipt time when `Date` is missing).
        case expires
        /// A fraction of `Date` minus `Last-Modified`, capped (§4.2.2).
        case heuristic
        /// ``FreshnessSettings/defaultLifetime``: no explicit freshness and no `Last-Modified`.
        case defaultLifetime
        /// No explicit freshness, and a status code that allows no heuristic (RFC 9110 §15.1):
        /// the lifetime is zero.
        case none
        /// Freshness information that is invalid or repeated with different values: an invalid
        /// `max-age`, an invalid `Expires` (RFC 9111 §5.3: "already expired"). The lifetime is
        /// zero (§4.2.1 encourages treating such responses as stale).
        case invalid
    }

    /// Why the response may not be stored; nil when it may.
    public let refusal: Refusal?
    /// The freshness of the response and what the cache keeps to decide later uses. Computed
    /// for every response, so that one that may not be stored can still be judged for the
    /// request it answers.
    public let policy: CachePolicy
    /// The response's `ETag` and `Last-Modified`, verbatim (after a 304: the merged ones).
    public let validators: Validators
    /// The `Cache-Control` directives in effect (after a 304: the 304's when it has the field,
    /// else the stored ones).
    public let cacheControl: CacheControl
    /// Which rule gave the freshness lifetime.
    public let lifetimeSource: LifetimeSource

    /// Whether a private cache may store the response (RFC 9111 §3).
    ///
    /// A private cache may store a response marked `private` (§5.2.2.7), and `no-cache` is no
    /// reason to refuse (§5.2.2.4: it may be stored, and is validated before every use).
    public var isStorable: Bool { refusal == nil }

    /// Judges a response that arrived in answer to a GET.
    ///
    /// - Parameters:
    ///   - status: The status code. Only 200 and 203 may be stored (see ``Refusal/status(_:)``).
    ///   - headers: The response's header fields, in order; several lines of one field are read
    ///     as RFC 9110 §5.3 says.
    ///   - requestTime: When the request was sent (RFC 9111 §4.2.3's `request_time`).
    ///   - responseTime: When the response was received (`response_time`); it stands in for a
    ///     missing or invalid `Date` (RFC 9110 §6.6.1).
    ///   - settings: The cache's heuristic and stale settings.
    public init(
        status: Int, headers: some Sequence<(name: String, value: String)>, requestTime: Date, responseTime: Date,
        settings: FreshnessSettings = FreshnessSettings()
    ) {
        let fields = HeaderFields(headers)
        self.init(
            status: status, cacheControl: fields.parsedCacheControl ?? CacheControl(),
            expires: fields.parsedExpires(now: responseTime), dateMilliseconds: fields.parsedDate(now: responseTime),
            ageMilliseconds: fields.parsedAge, lastModifiedMilliseconds: fields.parsedLastModified(now: responseTime),
            varyListsAny: fields.varyListsAny, validators: fields.validators, requestTime: requestTime,
            responseTime: responseTime, settings: settings)
    }

    /// The rules themselves, on fields already read (a fresh response's, or a 304's merged with
    /// a stored policy's).
    init(
        status: Int, cacheControl: CacheControl, expires: ExpiresField, dateMilliseconds: Int64?,
        ageMilliseconds: Int64, lastModifiedMilliseconds: Int64?, varyListsAny: Bool, validators: Validators,
        requestTime: Date, responseTime: Date, settings: FreshnessSettings
    ) {
        // §3: what may be stored.
        if status != 200 && status != 203 {
            refusal = .status(status)
        } else if cacheControl.noStore {
            refusal = .noStore
        } else if varyListsAny {
            refusal = .varyAny
        } else {
            refusal = nil
        }

        // §4.2.3: the age the response had when it arrived. A request time after the response
        // time (a clock step) counts as no delay.
        let responseMilliseconds = Milliseconds.instant(responseTime)
        let requestMilliseconds = min(Milliseconds.instant(requestTime), responseMilliseconds)
        let dateValue = dateMilliseconds ?? responseMilliseconds
        let apparentAge = max(0, responseMilliseconds - dateValue)
        let responseDelay = responseMilliseconds - requestMilliseconds
        let correctedAgeValue = ageMilliseconds + responseDelay
        let correctedInitialAge = Milliseconds.clampDelta(max(apparentAge, correctedAgeValue))

        // §4.2.1: max-age, else Expires − Date, else a heuristic (§4.2.2) where allowed.
        let lifetime: Int64
        switch cacheControl.maxAge {
        case .seconds?:
            lifetime = Int64(cacheControl.maxAge?.seconds ?? 0) * 1000
            lifetimeSource = .maxAge
        case .invalid?:
            lifetime = 0
            lifetimeSource = .invalid
        case nil:
            switch expires {
            case .at(let instant):
                lifetime = Milliseconds.clampDelta(instant - dateValue)
                lifetimeSource = .expires
            case .invalid:
                lifetime = 0
                lifetimeSource = .invalid
            case .absent:
                let limit = Milliseconds.delta(settings.heuristicLimit)
                if !Self.allowsHeuristicFreshness(status: status, cacheControl: cacheControl) {
                    lifetime = 0
                    lifetimeSource = .none
                } else if let lastModified = lastModifiedMilliseconds {
                    // A Last-Modified after Date contradicts RFC 9110 §8.8.2.1: no freshness.
                    let interval = Double(max(0, dateValue - lastModified))
                    let fraction = (interval * settings.clampedHeuristicFraction).rounded(.down)
                    lifetime = min(Int64(fraction), limit)
                    lifetimeSource = .heuristic
                } else {
                    lifetime = min(Milliseconds.delta(settings.defaultLifetime), limit)
                    lifetimeSource = .defaultLifetime
                }
            }
        }

        self.cacheControl = cacheControl
        self.validators = validators
        self.policy = CachePolicy(
            responseTime: responseMilliseconds, lifetime: lifetime, initialAge: correctedInitialAge,
            directives: cacheControl, expires: expires, lastModified: lastModifiedMilliseconds)
    }

    /// RFC 9110 §15.1: the status codes a cache may give heuristic freshness to, unless
    /// `public` marks the response explicitly cacheable (RFC 9111 §4.2.2).
    private static func allowsHeuristicFreshness(status: Int, cacheControl: CacheControl) -> Bool {
        switch status {
        case 200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501: true
        default: cacheControl.isPublic
        }
    }
}
