public import TroveCore

/// One row of the entries table: a key, the blob it links to and the entry's metadata.
///
/// Times are milliseconds since 1970.
public struct EntryRow: Hashable, Sendable {
    /// ``CacheKey/digest`` of the key, unique among entries (kept by the writer, found through ``EntryDigestTable``).
    public var keyDigest: ContentHash
    /// The key's URL.
    public var url: String
    /// The key's variant text.
    public var variant: String
    /// The id of the blob the entry links to.
    public var blobID: Int64
    /// Where the entry's link record is.
    public var linkSegment: UInt32
    /// The offset of the link record in `linkSegment`.
    public var linkOffset: UInt64
    /// The link record's total length.
    public var linkLength: UInt64
    /// The link record's sequence number.
    public var sequence: UInt64
    /// The origin's ETag.
    public var etag: String?
    /// The origin's Last-Modified.
    public var lastModified: String?
    /// A cache layer's policy text.
    public var cachePolicy: String?
    /// When the entry expires; nil for never.
    public var expiresAt: Int64?
    /// When the entry was created.
    public var createdAt: Int64
    /// When the entry was last read (as last flushed).
    public var accessedAt: Int64
    /// The entry's byte cost: its payload length.
    public var cost: Int64

    /// Makes a row.
    public init(
        keyDigest: ContentHash, url: String, variant: String, blobID: Int64, linkSegment: UInt32,
        linkOffset: UInt64, linkLength: UInt64, sequence: UInt64, etag: String?, lastModified: String?,
        expiresAt: Int64?, createdAt: Int64, accessedAt: Int64, cost: Int64, cachePolicy: String? = nil
    ) {
        self.keyDigest = keyDigest
        self.url = url
        self.variant = variant
        self.blobID = blobID
        self.linkSegment = linkSegment
        self.linkOffset = linkOffset
        self.linkLength = linkLength
        self.sequence = sequence
        self.etag = etag
        self.lastModified = lastModified
        self.cachePolicy = cachePolicy
        self.expiresAt = expiresAt
        self.createdAt = createdAt
        self.accessedAt = accessedAt
        self.cost = cost
    }

    /// The entry's key.
    public var key: CacheKey { CacheKey(url: url, variant: variant) }

    /// Whether the two rows are the same: every field equal, texts by their UTF-8 bytes
    /// (`String`'s `==` would call canonically equivalent spellings equal). The hash stays the
    /// fields' own: byte-equal texts are equal strings, so their hashes agree.
    public static func == (a: EntryRow, b: EntryRow) -> Bool {
        a.keyDigest == b.keyDigest && a.blobID == b.blobID && a.linkSegment == b.linkSegment
            && a.linkOffset == b.linkOffset && a.linkLength == b.linkLength && a.sequence == b.sequence
            && a.expiresAt == b.expiresAt && a.createdAt == b.createdAt && a.accessedAt == b.accessedAt
            && a.cost == b.cost && a.url.hasSameUTF8(as: b.url) && a.variant.hasSameUTF8(as: b.variant)
            && a.etag.hasSameUTF8(as: b.etag) && a.lastModified.hasSameUTF8(as: b.lastModified)
            && a.cachePolicy.hasSameUTF8(as: b.cachePolicy)
    }
}

/// One row of the blobs table: content stored once, and how many entries link to it.
public struct BlobRow: Hashable, Sendable {
    /// The blob id (from the blob record; the row id).
    public var id: Int64
    /// The content hash.
    public var hash: ContentHash
    /// The payload length.
    public var length: UInt64
    /// The segment holding the blob record.
    public var segment: UInt32
    /// The offset of the blob record.
    public var offset: UInt64
    /// The blob record's total length on disk.
    public var recordBytes: UInt64
    /// How many entries link to the blob. A blob with none keeps its row until the compactor
    /// reclaims its bytes, so a put of the same bytes can still link to it.
    public var references: Int64

    /// Makes a row.
    public init(
        id: Int64, hash: ContentHash, length: UInt64, segment: UInt32, offset: UInt64, recordBytes: UInt64,
        references: Int64
    ) {
        self.id = id
        self.hash = hash
        self.length = length
        self.segment = segment
        self.offset = offset
        self.recordBytes = recordBytes
        self.references = references
    }
}

/// An entry joined with its blob: everything a read needs.
public struct IndexedEntry: Hashable, Sendable {
    /// The entry row.
    public var entry: EntryRow
    /// The blob it links to.
    public var blob: BlobRow

    /// Makes a joined row.
    public init(entry: EntryRow, blob: BlobRow) {
        self.entry = entry
        self.blob = blob
    }
}

/// One row of the segments table.
public struct SegmentRow: Hashable, Sendable {
    /// The segment id.
    public var id: UInt32
    /// The offset up to which the index reflects the segment's records.
    public var indexedBytes: UInt64
    /// Bytes of records that are still referenced (live blobs and current link records).
    public var liveBytes: Int64
    /// Whether the segment is sealed (immutable).
    public var isSealed: Bool
}

/// Totals over the index.
public struct IndexTotals: Hashable, Sendable {
    /// Number of entries.
    public var entries: Int64
    /// Number of blobs that entries link to.
    public var blobs: Int64
    /// Sum of the entries' payload lengths (what a non-deduplicating store would hold).
    public var entryPayloadBytes: Int64
    /// Sum of the linked blobs' payload lengths (what is stored for entries).
    public var blobPayloadBytes: Int64
    /// Sum of the segments' live bytes.
    public var liveBytes: Int64
}

/// Damage recorded in the index: found by a read, a compaction pass, recovery or a rebuild,
/// and reported by every command until `trove fsck --repair` deals with it.
public struct DamageRow: Hashable, Sendable {
    /// The segment (0 when the damage is a file that is not a segment).
    public var segment: UInt32
    /// Where the damage starts in the segment.
    public var start: UInt64
    /// Where it ends.
    public var end: UInt64
    /// What kind of damage: a finding kind of fsck.
    public var kind: String
    /// What was found, and what to do.
    public var message: String
    /// When it was found, milliseconds since 1970.
    public var foundAt: Int64

    /// Makes a row.
    public init(segment: UInt32, start: UInt64, end: UInt64, kind: String, message: String, foundAt: Int64) {
        self.segment = segment
        self.start = start
        self.end = end
        self.kind = kind
        self.message = message
        self.foundAt = foundAt
    }
}
