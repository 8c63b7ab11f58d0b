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
    /// A cache layer's policy text, verbatim (link flag 8; Docs/PackFormat.md).
    public var cachePolicy: String?

    /// Makes a link record.
    public init(
        url: String, variant: String, blobHash: ContentHash, blobLength: UInt64, blobID: UInt64,
        sequence: UInt64, createdAt: Int64, expiresAt: Int64? = nil,
        etag: String? = nil, lastModified: String? = nil, cachePolicy: String? = nil
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
        self.cachePolicy = cachePolicy
    }

    /// The key this link is for.
    public var key: CacheKey { CacheKey(url: url, variant: variant) }

    /// Whether the two records say the same thing: every field equal, and every text the same
    /// UTF-8 bytes (`String`'s `==` would call canonically equivalent spellings of a URL or an
    /// ETag equal, where the pack and the index hold different bytes). The hash stays the
    /// fields' own: byte-equal texts are equal strings, so their hashes agree.
    public static func == (a: LinkRecord, b: LinkRecord) -> Bool {
        a.sequence == b.sequence && a.blobID == b.blobID && a.blobHash == b.blobHash && a.blobLength == b.blobLength
            && a.createdAt == b.createdAt && a.expiresAt == b.expiresAt && a.url.hasSameUTF8(as: b.url)
            && a.variant.hasSameUTF8(as: b.variant) && a.etag.hasSameUTF8(as: b.etag)
            && a.lastModified.hasSameUTF8(as: b.lastModified) && a.cachePolicy.hasSameUTF8(as: b.cachePolicy)
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

    /// The key this tombstone removes.
    public var key: CacheKey { CacheKey(url: url, variant: variant) }

    /// Whether the two tombstones are the same: texts by their UTF-8 bytes (as
    /// ``LinkRecord/==(_:_:)``).
    public static func == (a: TombstoneRecord, b: TombstoneRecord) -> Bool {
        a.sequence == b.sequence && a.removedAt == b.removedAt && a.url.hasSameUTF8(as: b.url)
            && a.variant.hasSameUTF8(as: b.variant)
    }
}

/// Who a record is about, as a version-2 record header states it (covered by the header's own
/// checksum): enough to attribute a record whose body is damaged to its key or blob.
public struct RecordIdentity: Hashable, Sendable {
    /// The record's type.
    public var type: RecordType
    /// A link's or tombstone's sequence number; a blob's id.
    public var sequence: UInt64
    /// A link's or tombstone's key digest (``CacheKey/digest``); a blob's content hash.
    public var digest: ContentHash

    /// Makes an identity.
    public init(type: RecordType, sequence: UInt64, digest: ContentHash) {
        self.type = type
        self.sequence = sequence
        self.digest = digest
    }
}

/// Why a header or body was refused.
public enum RecordDefect: String, Sendable, Error {
    case badMagic = "bad magic"
    case unknownType = "unknown record type"
    case unsupportedVersion = "unsupported format version"
    case badFlags = "non-zero reserved flags"
    case oversizedBody = "body length over the format's limit"
    case headerChecksumMismatch = "header checksum mismatch (not a record written at this place by this store)"
    case checksumMismatch = "checksum mismatch"
    case malformedBody = "malformed body"
    case identityMismatch = "body disagrees with its header"
}

/// A record header read from disk and checked on its own (for version 2: its magic, fields and
/// header checksum; the body is checked separately).
public struct RecordHeader: Sendable, Equatable {
    /// The record's type.
    public var type: RecordType
    /// The length of the body that follows the header.
    public var bodyLength: UInt64
    /// Version 2: the record's identity (version 1 headers carry none).
    public var identity: RecordIdentity?
    /// The stored checksum that the body must match (version 1: covers header and body).
    public var bodyChecksum: UInt64
    /// The header's size.
    public var size: Int

    /// The whole record's length.
    public var recordLength: UInt64 { UInt64(size) + bodyLength }
}

/// Encoding and decoding of records in both versions (Docs/PackFormat.md).
public enum RecordCodec {
    // MARK: Bodies

    /// The body of a link record in `version`.
    public static func linkBody(_ link: LinkRecord, version: UInt8 = PackFormat.currentVersion) -> [UInt8] {
        var w = ByteWriter(capacity: linkBodyLength(link, version: version))
        appendLinkBody(link, version: version, to: &w)
        return w.bytes
    }

    /// Appends ``linkBody(_:version:)`` to `w`.
    static func appendLinkBody(_ link: LinkRecord, version: UInt8, to w: inout ByteWriter) {
        var flags: UInt32 = 0
        if link.expiresAt != nil { flags |= 1 }
        if link.etag != nil { flags |= 2 }
        if link.lastModified != nil { flags |= 4 }
        // Flag 8 and its trailing string are written only when there is a policy, so a link
        // without one is byte for byte what builds before the field wrote.
        if link.cachePolicy != nil && version >= 2 { flags |= 8 }
        if version == 1 {
            w.append(link.blobHash)
            w.append(link.blobLength)
            w.append(flags)
            w.append(UInt32(0))
            w.append(link.blobID)
            w.append(link.sequence)
        } else {
            w.append(link.blobID)
            w.append(link.blobHash)
            w.append(link.blobLength)
            w.append(flags)
            w.append(link.sequence)
        }
        w.append(link.createdAt)
        w.append(link.expiresAt ?? 0)
        w.appendString(link.url)
        w.appendString(link.variant)
        w.appendString(link.etag ?? "")
        w.appendString(link.lastModified ?? "")
        if flags & 8 != 0 { w.appendString(link.cachePolicy ?? "") }
    }

    /// The length of ``linkBody(_:version:)`` for `link`, computed without encoding it (a put
    /// needs the length before the sequence numbers that go into the body are known).
    public static func linkBodyLength(_ link: LinkRecord, version: UInt8 = PackFormat.currentVersion) -> Int {
        let fixed = version == 1 ? PackFormat.Version1.linkFixedSize : PackFormat.Version2.linkFixedSize
        // Four length-prefixed strings (ETag and Last-Modified empty when absent), and the
        // cache policy's only when there is one (version 2 on).
        var length = fixed + 4 * 4 + link.url.utf8.count + link.variant.utf8.count
        length += (link.etag?.utf8.count ?? 0) + (link.lastModified?.utf8.count ?? 0)
        if let policy = link.cachePolicy, version >= 2 { length += 4 + policy.utf8.count }
        return length
    }

    /// The body of a tombstone record (the same in both versions).
    public static func tombstoneBody(_ tombstone: TombstoneRecord) -> [UInt8] {
        var w = ByteWriter(capacity: PackFormat.Version2.tombstoneFixedSize + 8 + tombstone.url.utf8.count)
        w.append(tombstone.sequence)
        w.append(tombstone.removedAt)
        w.appendString(tombstone.url)
        w.appendString(tombstone.variant)
        return w.bytes
    }

    /// Decodes a verified link body of `version`.
    public static func link(_ body: UnsafeRawBufferPointer, version: UInt8 = PackFormat.currentVersion) -> LinkRecord? {
        var r = ByteReader(body)
        let hash: ContentHash
        let blobID: UInt64
        let length: UInt64
        let flags: UInt32
        let sequence: UInt64
        if version == 1 {
            guard let h = r.readHash(), let l = r.readUInt64(),
                let f = r.readUInt32(), r.readUInt32() == 0, let id = r.readUInt64(), let s = r.readUInt64()
            else { return nil }
            (hash, length, flags, blobID, sequence) = (h, l, f, id, s)
        } else {
            guard let id = r.readUInt64(), let h = r.readHash(),
                let l = r.readUInt64(), let f = r.readUInt32(), let s = r.readUInt64()
            else { return nil }
            (hash, length, flags, blobID, sequence) = (h, l, f, id, s)
        }
        let known: UInt32 = version == 1 ? 7 : 15
        guard flags & ~known == 0, let created = r.readInt64(), let expires = r.readInt64(),
            let url = r.readString(), let variant = r.readString(),
            let etag = r.readString(), let lastModified = r.readString()
        else { return nil }
        var cachePolicy: String?
        if flags & 8 != 0 {
            guard let policy = r.readString() else { return nil }
            cachePolicy = policy
        }
        guard r.remaining == 0 else { return nil }
        return LinkRecord(
            url: url, variant: variant, blobHash: hash, blobLength: length, blobID: blobID, sequence: sequence,
            createdAt: created, expiresAt: flags & 1 != 0 ? expires : nil,
            etag: flags & 2 != 0 ? etag : nil, lastModified: flags & 4 != 0 ? lastModified : nil, cachePolicy: cachePolicy)
    }

    /// Decodes a verified tombstone body.
    public static func tombstone(_ body: UnsafeRawBufferPointer) -> TombstoneRecord? {
        var r = ByteReader(body)
        guard let sequence = r.readUInt64(), let removed = r.readInt64(), let url = r.readString(), let variant = r.readString(),
            r.remaining == 0
        else { return nil }
        return TombstoneRecord(url: url, variant: variant, sequence: sequence, removedAt: removed)
    }

    /// Reads the content hash and blob id at the start of a version-1 blob body.
    static func blobPrefixV1(_ body: UnsafeRawBufferPointer) -> (hash: ContentHash, id: UInt64)? {
        guard body.count >= PackFormat.Version1.blobPrefixSize,
            let hash = ContentHash(bytes: UnsafeRawBufferPointer(rebasing: body[0..<16]))
        else { return nil }
        return (hash, body.loadLE(UInt64.self, at: 16))
    }

    // MARK: Version 2 headers

    /// The 52-byte header of a version-2 record written at `offset` of segment `segment`.
    public static func header(
        identity: RecordIdentity, bodyLength: Int, bodyChecksum: UInt64, format: SegmentFormat, segment: UInt32,
        offset: UInt64
    ) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: PackFormat.Version2.recordHeaderSize) { buffer, count in
            writeHeader(
                into: UnsafeMutableRawBufferPointer(buffer), identity: identity, bodyLength: bodyLength,
                bodyChecksum: bodyChecksum, format: format, segment: segment, offset: offset)
            count = PackFormat.Version2.recordHeaderSize
        }
    }

    /// Writes ``header(identity:bodyLength:bodyChecksum:format:segment:offset:)`` into the first
    /// 52 bytes of `raw`, in place (a writer's own buffer: no array a record).
    static func writeHeader(
        into raw: UnsafeMutableRawBufferPointer, identity: RecordIdentity, bodyLength: Int, bodyChecksum: UInt64,
        format: SegmentFormat, segment: UInt32, offset: UInt64
    ) {
        precondition(raw.count >= PackFormat.Version2.recordHeaderSize, "room for a header")
        raw.storeBytes(of: PackFormat.recordMagic.littleEndian, toByteOffset: 0, as: UInt32.self)
        raw[4] = identity.type.rawValue
        raw[5] = 2
        raw.storeBytes(of: UInt16(0), toByteOffset: 6, as: UInt16.self)
        raw.storeBytes(of: UInt32(bodyLength).littleEndian, toByteOffset: 8, as: UInt32.self)
        raw.storeBytes(of: identity.sequence.littleEndian, toByteOffset: 12, as: UInt64.self)
        // The digest big-endian, as ``ContentHash/bytes`` orders it.
        raw.storeBytes(of: identity.digest.high.bigEndian, toByteOffset: 20, as: UInt64.self)
        raw.storeBytes(of: identity.digest.low.bigEndian, toByteOffset: 28, as: UInt64.self)
        raw.storeBytes(of: bodyChecksum.littleEndian, toByteOffset: 36, as: UInt64.self)
        let prefix = UnsafeRawBufferPointer(rebasing: raw[0..<PackFormat.Version2.checksummedHeaderPrefix])
        let checksum = XXH3.hash64(prefix, seed: format.positionSeed(segment: segment, offset: offset))
        raw.storeBytes(of: checksum.littleEndian, toByteOffset: 44, as: UInt64.self)
    }

    /// Parses and checks a version-2 header found at `offset` of segment `segment`: magic,
    /// fields, and the header checksum (which only a record written at that very place by this
    /// store can match).
    public static func headerV2(
        _ raw: UnsafeRawBufferPointer, format: SegmentFormat, segment: UInt32, offset: UInt64
    ) -> Result<RecordHeader, RecordDefect> {
        guard raw.count >= PackFormat.Version2.recordHeaderSize else { return .failure(.malformedBody) }
        guard raw.loadLE(UInt32.self, at: 0) == PackFormat.recordMagic else { return .failure(.badMagic) }
        let prefix = UnsafeRawBufferPointer(rebasing: raw[0..<PackFormat.Version2.checksummedHeaderPrefix])
        guard XXH3.hash64(prefix, seed: format.positionSeed(segment: segment, offset: offset)) == raw.loadLE(UInt64.self, at: 44)
        else { return .failure(.headerChecksumMismatch) }
        guard let type = RecordType(rawValue: raw[4]) else { return .failure(.unknownType) }
        guard raw[5] == 2 else { return .failure(.unsupportedVersion) }
        guard raw[6] == 0 && raw[7] == 0 else { return .failure(.badFlags) }
        let length = UInt64(raw.loadLE(UInt32.self, at: 8))
        guard length <= PackFormat.maximumBodyLength else { return .failure(.oversizedBody) }
        guard let digest = ContentHash(bytes: UnsafeRawBufferPointer(rebasing: raw[20..<36])) else {
            return .failure(.malformedBody)
        }
        let identity = RecordIdentity(type: type, sequence: raw.loadLE(UInt64.self, at: 12), digest: digest)
        return .success(
            RecordHeader(
                type: type, bodyLength: length, identity: identity, bodyChecksum: raw.loadLE(UInt64.self, at: 36),
                size: PackFormat.Version2.recordHeaderSize))
    }

    /// The body checksum a version-2 header stores, read without trusting the rest of the header
    /// (to salvage the body of a record whose header is damaged).
    static func storedBodyChecksumV2(_ raw: UnsafeRawBufferPointer) -> UInt64 {
        raw.loadLE(UInt64.self, at: PackFormat.Version2.bodyChecksumOffset)
    }

    /// Decodes a verified version-2 body of `header`'s type and checks it against the identity
    /// the header states; nil when they disagree or the body is malformed.
    static func contentV2(header: RecordHeader, body: UnsafeRawBufferPointer) -> ScannedRecord.Content? {
        guard let identity = header.identity else { return nil }
        switch header.type {
        case .blob:
            return .blob(hash: identity.digest, id: identity.sequence, payloadLength: UInt64(body.count))
        case .link:
            guard let link = link(body, version: 2), link.sequence == identity.sequence,
                link.key.digest == identity.digest
            else { return nil }
            return .link(link)
        case .tombstone:
            guard let tombstone = tombstone(body), tombstone.sequence == identity.sequence,
                tombstone.key.digest == identity.digest
            else { return nil }
            return .tombstone(tombstone)
        }
    }

    // MARK: Version 1 headers

    /// The 24-byte header of a version-1 record of `type` whose body is `bodyParts` in order.
    ///
    /// The checksum is XXH3-64 of the body, seeded with XXH3-64 of the header's first 16 bytes.
    public static func headerV1(type: RecordType, bodyParts: [UnsafeRawBufferPointer]) -> [UInt8] {
        let bodyLength = bodyParts.reduce(0) { $0 + $1.count }
        var w = ByteWriter(capacity: PackFormat.Version1.recordHeaderSize)
        w.append(PackFormat.recordMagic)
        w.append(type.rawValue)
        w.append(UInt8(1))
        w.append(UInt16(0))
        w.append(UInt64(bodyLength))
        let seed = w.bytes.withUnsafeBytes { XXH3.hash64($0) }
        w.append(XXH3.hash64(parts: bodyParts, seed: seed))
        return w.bytes
    }

    /// Parses the fixed fields of a version-1 header (its checksum covers the body too, so it
    /// is checked with the body: ``verifyV1(rawHeader:body:)``).
    public static func headerV1(_ raw: UnsafeRawBufferPointer) -> Result<RecordHeader, RecordDefect> {
        guard raw.count >= PackFormat.Version1.recordHeaderSize else { return .failure(.malformedBody) }
        guard raw.loadLE(UInt32.self, at: 0) == PackFormat.recordMagic else { return .failure(.badMagic) }
        guard let type = RecordType(rawValue: raw[4]) else { return .failure(.unknownType) }
        guard raw[5] == 1 else { return .failure(.unsupportedVersion) }
        guard raw[6] == 0 && raw[7] == 0 else { return .failure(.badFlags) }
        let length = raw.loadLE(UInt64.self, at: 8)
        guard length <= PackFormat.maximumBodyLength else { return .failure(.oversizedBody) }
        return .success(
            RecordHeader(
                type: type, bodyLength: length, identity: nil, bodyChecksum: raw.loadLE(UInt64.self, at: 16),
                size: PackFormat.Version1.recordHeaderSize))
    }

    /// The seed a version-1 body is hashed with: XXH3-64 of the header's first 16 bytes.
    static func bodySeedV1(_ rawHeader: UnsafeRawBufferPointer) -> UInt64 {
        XXH3.hash64(UnsafeRawBufferPointer(rebasing: rawHeader[0..<PackFormat.Version1.checksummedHeaderPrefix]))
    }

    /// Decodes a verified version-1 body of `type`.
    static func contentV1(type: RecordType, body: UnsafeRawBufferPointer) -> ScannedRecord.Content? {
        switch type {
        case .blob:
            return blobPrefixV1(body).map {
                .blob(hash: $0.hash, id: $0.id, payloadLength: UInt64(body.count - PackFormat.Version1.blobPrefixSize))
            }
        case .link: return link(body, version: 1).map { .link($0) }
        case .tombstone: return tombstone(body).map { .tombstone($0) }
        }
    }
}

/// A record found by ``SegmentScanner`` or read by ``SegmentFile``, verified.
public struct ScannedRecord: Sendable {
    /// What the record holds.
    public enum Content: Sendable {
        /// A blob: its hash, id and payload length (the payload is not kept).
        case blob(hash: ContentHash, id: UInt64, payloadLength: UInt64)
        /// A link record.
        case link(LinkRecord)
        /// A tombstone.
        case tombstone(TombstoneRecord)
    }

    /// The record's offset in its segment.
    public var offset: UInt64
    /// The record's total length, header included.
    public var length: UInt64
    /// The decoded content.
    public var content: Content

    /// Makes a record description (the writer describes what it appended the same way).
    public init(offset: UInt64, length: UInt64, content: Content) {
        self.offset = offset
        self.length = length
        self.content = content
    }

    /// The record's identity: its type, sequence (a blob's id) and key digest (a blob's hash).
    public var identity: RecordIdentity {
        switch content {
        case .blob(let hash, let id, _): RecordIdentity(type: .blob, sequence: id, digest: hash)
        case .link(let link): RecordIdentity(type: .link, sequence: link.sequence, digest: link.key.digest)
        case .tombstone(let t): RecordIdentity(type: .tombstone, sequence: t.sequence, digest: t.key.digest)
        }
    }
}
