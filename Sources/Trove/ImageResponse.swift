public import Foundation
public import TroveCore
public import TroveHTTP

/// What ``ImagePipeline/image(for:variant:)`` returns: the bytes, what the store knows of them,
/// and where they came from.
public struct ImageResponse: Sendable {
    /// Where a response's bytes came from.
    public enum Source: Hashable, Sendable, CustomStringConvertible {
        /// The memory tier, fresh.
        case memory
        /// The store, fresh.
        case disk
        /// The store, after the origin answered a conditional request with 304 Not Modified.
        case revalidated
        /// The origin (a 200): a first fetch, or a stored copy that had changed.
        case network
        /// A stored copy that is no longer fresh, served anyway, for `reason`.
        case stale(StaleReason)

        /// `memory`, `disk`, `revalidated`, `network`, `stale-while-revalidate` or
        /// `stale-if-error`.
        public var description: String {
            switch self {
            case .memory: "memory"
            case .disk: "disk"
            case .revalidated: "revalidated"
            case .network: "network"
            case .stale(.revalidating): "stale-while-revalidate"
            case .stale(.originFailed): "stale-if-error"
            }
        }
    }

    /// Why a stale copy was served.
    public enum StaleReason: Hashable, Sendable {
        /// Within the origin's `stale-while-revalidate` window: one revalidation runs in the
        /// background (RFC 5861 §3).
        case revalidating
        /// The revalidation failed with an error of this code, and the origin's
        /// `stale-if-error` window (or the application's allowance) lets the stale copy stand
        /// in (RFC 5861 §4).
        case originFailed(OriginError.Code)
    }

    /// The encoded bytes: the original's, or the variant's WebP.
    public var data: Data
    /// The stored entry's description; nil when the response was not stored (`no-store`,
    /// `Vary: *`).
    public var info: EntryInfo?
    /// Where the bytes came from. For a variant made in this call, where its original came from.
    public var source: Source
    /// The HTTP status of the origin's answer when this call contacted the origin (200 or 304).
    public var status: Int?
    /// Whether this call made the variant (decoded the original and encoded the WebP).
    public var madeVariant: Bool
    /// The encoded format, from the bytes.
    public var format: ImageFormat? { ImageFormat.sniff(data) }

    /// Makes a response.
    public init(data: Data, info: EntryInfo?, source: Source, status: Int? = nil, madeVariant: Bool = false) {
        self.data = data
        self.info = info
        self.source = source
        self.status = status
        self.madeVariant = madeVariant
    }
}
