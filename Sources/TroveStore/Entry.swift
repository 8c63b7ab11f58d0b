public import Foundation
public import TroveCore

/// What the origin said about an entry's bytes, stored with them.
public struct EntryMetadata: Hashable, Sendable {
    /// The origin's `ETag`, verbatim (quotes and `W/` included), for `If-None-Match`.
    public var etag: String?
    /// The origin's `Last-Modified`, verbatim, for `If-Modified-Since`.
    public var lastModified: String?
    /// The store's hard expiry: from this instant the entry is a miss, and the compactor
    /// removes it. nil for none (it stays until evicted or removed).
    ///
    /// It is not HTTP freshness: an entry that must be revalidated is still stored, and a
    /// cache layer keeps its freshness rules in ``cachePolicy``.
    public var expiresAt: Date?
    /// A cache layer's policy, kept verbatim with the entry and never interpreted by the store
    /// (Trove's pipeline keeps its HTTP freshness and directives here). At most
    /// ``maximumCachePolicyLength`` bytes of UTF-8, no NUL.
    public var cachePolicy: String?

    /// The longest ``cachePolicy``, in UTF-8 bytes.
    public static let maximumCachePolicyLength = 512

    /// Makes metadata.
    public init(etag: String? = nil, lastModified: String? = nil, expiresAt: Date? = nil, cachePolicy: String? = nil) {
        self.etag = etag
        self.lastModified = lastModified
        self.expiresAt = expiresAt
        self.cachePolicy = cachePolicy
    }

    /// Whether both say the same: the dates equal and the texts the same UTF-8 bytes, as stored
    /// (`String`'s `==` would call canonically equivalent spellings of an ETag equal). The hash
    /// stays the fields' own: byte-equal texts are equal strings.
    public static func == (a: EntryMetadata, b: EntryMetadata) -> Bool {
        a.expiresAt == b.expiresAt && a.etag.hasSameUTF8(as: b.etag) && a.lastModified.hasSameUTF8(as: b.lastModified)
            && a.cachePolicy.hasSameUTF8(as: b.cachePolicy)
    }
}

/// Everything a store knows about an entry except its bytes.
public struct EntryInfo: Hashable, Sendable {
    /// The entry's key.
    public var key: CacheKey
    /// The stored metadata.
    public var metadata: EntryMetadata
    /// When the entry was stored (its last put).
    public var createdAt: Date
    /// When the entry was last read, as far as the store knows (read times are flushed in
    /// batches; see ``Store/Configuration/accessTimeFlushInterval``).
    public var accessedAt: Date
    /// The entry's byte cost: the length of its payload.
    public var cost: Int
    /// The content hash of its bytes (shared with every key that stores the same bytes).
    public var contentHash: ContentHash

    /// The origin's ETag.
    public var etag: String? { metadata.etag }
    /// The origin's Last-Modified.
    public var lastModified: String? { metadata.lastModified }
    /// The store's hard expiry (see ``EntryMetadata/expiresAt``).
    public var expiresAt: Date? { metadata.expiresAt }
    /// The cache layer's policy text.
    public var cachePolicy: String? { metadata.cachePolicy }

    /// Makes the description of an entry (stores make them; a cache in front of one may too).
    public init(key: CacheKey, metadata: EntryMetadata, createdAt: Date, accessedAt: Date, cost: Int, contentHash: ContentHash) {
        self.key = key
        self.metadata = metadata
        self.createdAt = createdAt
        self.accessedAt = accessedAt
        self.cost = cost
        self.contentHash = contentHash
    }
}

/// An entry read from a store: its bytes and what the store knows about them.
public struct Entry: Sendable {
    /// The bytes, verified against their checksum.
    public var data: Data
    /// The entry's key, metadata, times and cost.
    public var info: EntryInfo

    /// The entry's key.
    public var key: CacheKey { info.key }
    /// The origin's ETag.
    public var etag: String? { info.metadata.etag }
    /// The origin's Last-Modified.
    public var lastModified: String? { info.metadata.lastModified }
    /// The store's hard expiry (see ``EntryMetadata/expiresAt``).
    public var expiresAt: Date? { info.metadata.expiresAt }
    /// The cache layer's policy text.
    public var cachePolicy: String? { info.metadata.cachePolicy }
    /// When the entry was stored.
    public var createdAt: Date { info.createdAt }
    /// When the entry was last read before.
    public var accessedAt: Date { info.accessedAt }
    /// The entry's byte cost.
    public var cost: Int { info.cost }

    /// Makes an entry of `data` described by `info`.
    public init(data: Data, info: EntryInfo) {
        self.data = data
        self.info = info
    }
}

/// Milliseconds since 1970 of `date`, as the index and pack records store times.
///
/// - Throws: ``StoreError/Code/invalidArgument`` for a date a signed 64-bit count of
///   milliseconds cannot hold (about ±292 million years), or one that is not finite.
func milliseconds(_ date: Date) throws(StoreError) -> Int64 {
    guard let value = Int64(exactly: (date.timeIntervalSince1970 * 1000).rounded()) else {
        throw StoreError(
            code: .invalidArgument,
            message: "the date \(date.timeIntervalSince1970) s after 1970 is out of the range a store records "
                + "(±9.2e15 s); use nil for no expiry")
    }
    return value
}

/// The date of `milliseconds` since 1970.
func date(milliseconds: Int64) -> Date {
    Date(timeIntervalSince1970: Double(milliseconds) / 1000)
}

/// Milliseconds in `duration`, saturating at the limits of Int64 (a duration that long is
/// "forever" for any store).
func milliseconds(_ duration: Duration) -> Int64 {
    let (seconds, overflow) = duration.components.seconds.multipliedReportingOverflow(by: 1000)
    if overflow { return duration.components.seconds < 0 ? .min : .max }
    let (total, overflow2) = seconds.addingReportingOverflow(duration.components.attoseconds / 1_000_000_000_000_000)
    return overflow2 ? (seconds < 0 ? .min : .max) : total
}

/// `a + b`, saturating at the limits of Int64.
func saturatingSum(_ a: Int64, _ b: Int64) -> Int64 {
    let (sum, overflow) = a.addingReportingOverflow(b)
    return overflow ? (b < 0 ? .min : .max) : sum
}

/// `a - b`, saturating at the limits of Int64.
func saturatingDifference(_ a: Int64, _ b: Int64) -> Int64 {
    let (difference, overflow) = a.subtractingReportingOverflow(b)
    return overflow ? (b > 0 ? .min : .max) : difference
}
