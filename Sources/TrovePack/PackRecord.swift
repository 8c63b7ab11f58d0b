public import TroveCore

/// The metadata half of a link record: a key, the blob it names and the entry's metadata.
public struct LinkRecord: Hashable, Sendable {
    /// The entry's URL.
    public var url: String
    /// The entry's variant text (empty for an original).
    public var variant: String
    /// The content hash of the linked blob.
    public var blobHash: ContentHash
    /// The payload length of the linked blob.
    public var blobLength: UInt64
    /// The id of the linked blob: store-unique, kept when the compactor moves the blob, so a
    /// link stays valid wherever its blob is.
    public var blobID: UInt64
    /// The store-wide sequence number of this write: of two records for one key, the higher
    /// sequence is the newer, wherever compaction has moved them.
    public var sequence: UInt64
    /// When the entry was created, milliseconds since 1970.
    public var createdAt: Int64
    /// When the entry expires, milliseconds since 1970; nil for never.
    public var expiresAt: Int64?
    /// The origin's ETag, verbatim.
    public var etag: String?
    /// The origin's Last-Modified, verbatim.
    public var lastModified: String?

    /// Makes a link record.
    public init(
        url: String, variant: String, blobHash: ContentHash, blobLength: UInt64, blobID: UInt64,
        sequence: UInt64, createdAt: Int64, expiresAt: Int64? = nil,
        etag: String? = nil, lastModified: String? = nil
    ) {
        self.url = url
        self.variant = variant
        self.blobHash = blobHash
        self.blobLength = blobLength
        self.blobID = blobID
        self.sequence = sequence
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.etag = etag
        self.lastModified = lastModified
    }
}

/// A key removed, as recorded in a pack.
public struct TombstoneRecord: Hashable, Sendable {
    /// The removed entry's URL.
    public var url: String
    /// The removed entry's variant text.
    public var variant: String
    /// The store-wide sequence number of the removal (see ``LinkRecord/sequence``).
    public var sequence: UInt64
    /// When it was removed, milliseconds since 1970.
    public var removedAt: Int64

    /// Makes a tombstone.
    public init(url: String, variant: String, sequence: UInt64, removedAt: Int64) {
        self.url = url
        self.variant = variant
        self.sequence = sequence
        self.removedAt = removedAt
    }
}

/// Encoding of records into their on-disk bytes (Docs/PackFormat.md).
public enum RecordEncoder {
    /// The 24-byte header of a record of `type` whose body is `bodyParts` in order.
    ///
    /// The checksum is XXH3-64 of the body, seeded with XXH3-64 of the header's first 16 bytes,
    /// so it covers header and body without copying the body next to the header.
    public static func header(type: RecordType, bodyParts: [UnsafeRawBufferPointer]) -> [UInt8] {
        let bodyLength = bodyParts.reduce(0) { $0 + $1.count }
        var w = ByteWriter(capacity: PackFormat.recordHeaderSize)
        w.append(PackFormat.recordMagic)
        w.append(type.rawValue)
        w.append(PackFormat.version)
        w.append(UInt16(0))
        w.append(UInt64(bodyLength))
        let seed = w.bytes.withUnsafeBytes { XXH3.hash64($0) }
        let checksum = XXH3.hash64(parts: bodyParts, seed: seed)
        w.append(checksum)
        return w.bytes
    }

    /// The body of a link record.
    public static func body(of link: LinkRecord) -> [UInt8] {
        var w = ByteWriter(capacity: PackFormat.linkFixedSize + 16 + link.url.utf8.count)
        w.append(contentsOf: link.blobHash.bytes)
        w.append(link.blobLength)
        var flags: UInt32 = 0
        if link.expiresAt != nil { flags |= 1 }
        if link.etag != nil { flags |= 2 }
        if link.lastModified != nil { flags |= 4 }
        w.append(flags)
        w.append(UInt32(0))
        w.append(link.blobID)
        w.append(link.sequence)
        w.append(link.createdAt)
        w.append(link.expiresAt ?? 0)
        w.appendString(link.url)
        w.appendString(link.variant)
        w.appendString(link.etag ?? "")
        w.appendString(link.lastModified ?? "")
        return w.bytes
    }

    /// The body of a tombstone record.
    public static func body(of tombstone: TombstoneRecord) -> [UInt8] {
        var w = ByteWriter(capacity: PackFormat.tombstoneFixedSize + 8 + tombstone.url.utf8.count)
        w.append(tombstone.sequence)
        w.append(tombstone.removedAt)
        w.appendString(tombstone.url)
        w.appendString(tombstone.variant)
        return w.bytes
    }

    /// A whole record (header and body) of `type` with `body`.
    public static func record(type: RecordType, body: [UInt8]) -> [UInt8] {
        body.withUnsafeBytes { header(type: type, bodyParts: [$0]) } + body
    }
}

/// Decoding and verification of records.
public enum RecordDecoder {
    /// A record header read from disk, not yet verified against its body.
    public struct Header: Sendable, Equatable {
        /// The record's type.
        public var type: RecordType
        /// The length of the body that follows the header.
        public var bodyLength: UInt64
        /// The stored checksum.
        public var checksum: UInt64
    }

    /// Why a header or body was refused.
    public enum Defect: String, Sendable {
        case badMagic = "bad magic"
        case unknownType = "unknown record type"
        case unsupportedVersion = "unsupported format version"
        case badFlags = "non-zero reserved flags"
        case oversizedBody = "body length over the format's limit"
        case checksumMismatch = "checksum mismatch"
        case malformedBody = "malformed body"
    }

    /// Parses and checks the fixed fields of a 24-byte header.
    public static func header(_ raw: UnsafeRawBufferPointer) -> Result<Header, DefectError> {
        precondition(raw.count >= PackFormat.recordHeaderSize)
        guard raw.loadLE(UInt32.self, at: 0) == PackFormat.recordMagic else { return .failure(.init(.badMagic)) }
        guard let type = RecordType(rawValue: raw[4]) else { return .failure(.init(.unknownType)) }
        guard raw[5] == PackFormat.version else { return .failure(.init(.unsupportedVersion)) }
        guard raw[6] == 0 && raw[7] == 0 else { return .failure(.init(.badFlags)) }
        let length = raw.loadLE(UInt64.self, at: 8)
        guard length <= PackFormat.maximumBodyLength else { return .failure(.init(.oversizedBody)) }
        return .success(Header(type: type, bodyLength: length, checksum: raw.loadLE(UInt64.self, at: 16)))
    }

    /// Whether `body` matches the checksum in `rawHeader`.
    public static func verify(rawHeader: UnsafeRawBufferPointer, body: UnsafeRawBufferPointer) -> Bool {
        let prefix = UnsafeRawBufferPointer(rebasing: rawHeader[0..<PackFormat.checksummedHeaderPrefix])
        return XXH3.hash64(body, seed: XXH3.hash64(prefix)) == rawHeader.loadLE(UInt64.self, at: 16)
    }

    /// Decodes a verified link body.
    public static func link(_ body: UnsafeRawBufferPointer) -> LinkRecord? {
        var r = ByteReader(body)
        guard let hashBytes = r.readBytes(16), let hash = ContentHash(bytes: hashBytes),
            let length = r.readUInt64(), let flags = r.readUInt32(), flags & ~7 == 0, r.readUInt32() == 0,
            let blobID = r.readUInt64(), let sequence = r.readUInt64(),
            let created = r.readInt64(), let expires = r.readInt64(),
            let url = r.readString(), let variant = r.readString(),
            let etag = r.readString(), let lastModified = r.readString(), r.remaining == 0
        else { return nil }
        return LinkRecord(
            url: url, variant: variant, blobHash: hash, blobLength: length, blobID: blobID, sequence: sequence, createdAt: created, expiresAt: flags & 1 != 0 ? expires : nil,
            etag: flags & 2 != 0 ? etag : nil, lastModified: flags & 4 != 0 ? lastModified : nil)
    }

    /// Decodes a verified tombstone body.
    public static func tombstone(_ body: UnsafeRawBufferPointer) -> TombstoneRecord? {
        var r = ByteReader(body)
        guard let sequence = r.readUInt64(), let removed = r.readInt64(), let url = r.readString(), let variant = r.readString(),
            r.remaining == 0
        else { return nil }
        return TombstoneRecord(url: url, variant: variant, sequence: sequence, removedAt: removed)
    }

    /// Reads the content hash and blob id at the start of a blob body.
    public static func blobIdentity(_ body: UnsafeRawBufferPointer) -> (hash: ContentHash, id: UInt64)? {
        guard body.count >= PackFormat.blobPrefixSize,
            let hash = ContentHash(bytes: UnsafeRawBufferPointer(rebasing: body[0..<16]))
        else { return nil }
        return (hash, body.loadLE(UInt64.self, at: 16))
    }
}

/// A ``RecordDecoder/Defect`` as an error value.
public struct DefectError: Error, Sendable, Equatable {
    /// The defect.
    public var defect: RecordDecoder.Defect
    init(_ defect: RecordDecoder.Defect) { self.defect = defect }
}
