public import TroveCore

/// Appends records to the active segment.
///
/// Not thread-safe: one owner (the store's appender) serializes every call. The end offset only
/// advances after a write succeeded, so a failed write is overwritten by the next one.
public final class PackWriter {
    /// The segment records are appended to.
    public private(set) var segment: SegmentFile
    /// The offset where the next record goes (the end of the last whole record).
    public private(set) var end: UInt64
    /// The size past which ``needsRotation(forAppending:)`` asks for a new segment.
    public let segmentSizeLimit: UInt64

    /// Makes a writer that appends to `segment` at `end`.
    public init(segment: SegmentFile, end: UInt64, segmentSizeLimit: UInt64) {
        self.segment = segment
        self.end = end
        self.segmentSizeLimit = segmentSizeLimit
    }

    /// Whether appending `bytes` more would pass the size limit of a segment that already holds
    /// records (a record larger than the limit still goes into a segment of its own).
    public func needsRotation(forAppending bytes: UInt64) -> Bool {
        end > UInt64(PackFormat.segmentHeaderSize) && end + bytes > segmentSizeLimit
    }

    /// Continues in `segment`, a new, empty segment.
    public func rotate(to segment: SegmentFile) {
        self.segment = segment
        self.end = UInt64(PackFormat.segmentHeaderSize)
    }

    /// The total length of a blob record holding `payloadLength` bytes.
    public static func blobRecordLength(payloadLength: Int) -> UInt64 {
        UInt64(PackFormat.recordHeaderSize + PackFormat.blobPrefixSize + payloadLength)
    }

    /// Appends a blob record for blob `id` and returns its offset.
    ///
    /// - Throws: ``PackError/Code/recordTooLarge`` for payloads over the format's limit.
    public func appendBlob(hash: ContentHash, id: UInt64, payload: UnsafeRawBufferPointer) throws -> UInt64 {
        guard UInt64(payload.count + PackFormat.blobPrefixSize) <= PackFormat.maximumBodyLength else {
            throw PackError(
                code: .recordTooLarge,
                message: "a blob of \(payload.count) bytes is over the pack format's limit of "
                    + "\(PackFormat.maximumBodyLength - UInt64(PackFormat.blobPrefixSize)) bytes",
                path: segment.path)
        }
        var prefix = hash.bytes
        withUnsafeBytes(of: id.littleEndian) { prefix.append(contentsOf: $0) }
        return try prefix.withUnsafeBytes { p in
            let header = RecordEncoder.header(type: .blob, bodyParts: [p, payload])
            return try header.withUnsafeBytes { h in try append([h, p, payload]) }
        }
    }

    /// Appends `record`, a whole record read from another segment, unchanged (the compactor
    /// copies live records forward); returns its offset.
    public func appendCopy(_ record: [UInt8]) throws -> UInt64 {
        try appendRecord(record)
    }

    /// Appends a link record and returns its offset.
    public func appendLink(_ link: LinkRecord) throws -> UInt64 {
        try appendRecord(RecordEncoder.record(type: .link, body: RecordEncoder.body(of: link)))
    }

    /// Appends a tombstone and returns its offset.
    public func appendTombstone(_ tombstone: TombstoneRecord) throws -> UInt64 {
        try appendRecord(RecordEncoder.record(type: .tombstone, body: RecordEncoder.body(of: tombstone)))
    }

    /// The length of the link record for `link`, for rotation decisions.
    public static func linkRecordLength(_ link: LinkRecord) -> UInt64 {
        UInt64(PackFormat.recordHeaderSize + RecordEncoder.body(of: link).count)
    }

    private func appendRecord(_ record: [UInt8]) throws -> UInt64 {
        try record.withUnsafeBytes { r in try append([r]) }
    }

    private func append(_ parts: [UnsafeRawBufferPointer]) throws -> UInt64 {
        let offset = end
        try segment.write(parts, at: offset)
        end = offset + UInt64(parts.reduce(0) { $0 + $1.count })
        return offset
    }
}
