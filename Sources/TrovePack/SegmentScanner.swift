public import TroveCore

/// A record found by ``SegmentScanner``, verified.
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
}

/// What a scan found: where the valid records end and, if it stopped early, why.
public struct ScanOutcome: Sendable {
    /// The offset just past the last valid record.
    public var validEnd: UInt64
    /// The file's size when the scan started.
    public var fileSize: UInt64
    /// The first offset that does not hold a valid record, with the reason; nil when every
    /// byte up to `fileSize` belongs to a valid record.
    public var defect: (offset: UInt64, reason: String)?
    /// The number of valid records visited.
    public var recordCount: Int
}

/// Walks the records of a segment in order, verifying each.
public enum SegmentScanner {
    /// Visits every valid record of `file`, skipping damage: after a byte that does not start a
    /// valid record, it searches forward for the next offset that does (magic, header, checksum
    /// and body all valid) and goes on from there. For fsck and rebuilds, which must find every
    /// intact record, not only those before the first damage.
    ///
    /// - Returns: the damaged ranges found, as (start, end, reason).
    public static func scanAll(
        _ file: SegmentFile, visit: (ScannedRecord) throws -> Void
    ) throws -> [(start: UInt64, end: UInt64, reason: String)] {
        var damage: [(start: UInt64, end: UInt64, reason: String)] = []
        var position = UInt64(PackFormat.segmentHeaderSize)
        let size = try file.size()
        while position < size {
            let outcome = try scan(file, from: position, visit: visit)
            guard let defect = outcome.defect else { break }
            // Search forward byte by byte for the next valid record; records are checksummed,
            // so a false start is rejected.
            var next = defect.offset + 1
            var found: UInt64?
            while next + UInt64(PackFormat.recordHeaderSize) <= size {
                if try startsValidRecord(file, at: next, limit: size) {
                    found = next
                    break
                }
                next += 1
            }
            damage.append((defect.offset, found ?? size, defect.reason))
            guard let found else { break }
            position = found
        }
        return damage
    }

    private static func startsValidRecord(_ file: SegmentFile, at offset: UInt64, limit: UInt64) throws -> Bool {
        var magic = [UInt8](repeating: 0, count: 4)
        _ = try magic.withUnsafeMutableBytes { try file.read(into: $0, at: offset) }
        guard magic == [0x54, 0x52, 0x56, 0x52] else { return false }
        do {
            _ = try file.readRecord(at: offset, limit: limit)
            return true
        } catch let error as PackError where error.code == .corruptRecord || error.code == .truncatedRecord {
            return false
        }
    }

    /// Visits every valid record of `file` from `offset` and stops at the first byte that does
    /// not start a valid record (a torn tail, corruption, or the end of the file).
    ///
    /// - Parameter offset: where to start; at least ``PackFormat/segmentHeaderSize``.
    /// - Returns: the end of the valid records and the first defect, if any.
    public static func scan(
        _ file: SegmentFile, from offset: UInt64 = UInt64(PackFormat.segmentHeaderSize),
        visit: (ScannedRecord) throws -> Void
    ) throws -> ScanOutcome {
        let size = try file.size()
        var position = max(offset, UInt64(PackFormat.segmentHeaderSize))
        var count = 0
        while position < size {
            let header: RecordDecoder.Header
            let body: [UInt8]
            do {
                (header, body) = try file.readRecord(at: position, limit: size)
            } catch let error as PackError where error.code == .corruptRecord || error.code == .truncatedRecord {
                return ScanOutcome(validEnd: position, fileSize: size, defect: (position, error.message), recordCount: count)
            }
            let content: ScannedRecord.Content?
            switch header.type {
            case .blob:
                content = body.withUnsafeBytes { b in
                    RecordDecoder.blobIdentity(b).map {
                        .blob(hash: $0.hash, id: $0.id, payloadLength: UInt64(b.count - PackFormat.blobPrefixSize))
                    }
                }
            case .link: content = body.withUnsafeBytes { RecordDecoder.link($0) }.map { .link($0) }
            case .tombstone: content = body.withUnsafeBytes { RecordDecoder.tombstone($0) }.map { .tombstone($0) }
            }
            guard let content else {
                return ScanOutcome(
                    validEnd: position, fileSize: size,
                    defect: (position, "\(header.type) record at \(file.path):\(position) has a malformed body"),
                    recordCount: count)
            }
            let length = UInt64(PackFormat.recordHeaderSize) + header.bodyLength
            try visit(ScannedRecord(offset: position, length: length, content: content))
            count += 1
            position += length
        }
        return ScanOutcome(validEnd: position, fileSize: size, defect: nil, recordCount: count)
    }
}
