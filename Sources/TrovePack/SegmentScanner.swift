import TroveCore

#if canImport(Glibc)
    import Glibc
#endif

/// A range of a segment that holds no intact record.
public struct DamagedRange: Sendable, Hashable {
    /// Where the damage starts.
    public var start: UInt64
    /// Where it ends: the next intact record, or the end of the file.
    public var end: UInt64
    /// Why the bytes at `start` are not an intact record.
    public var reason: String
    /// Who the damaged record was about, when its header verified (version 2) though its body
    /// did not, or when its body was salvaged.
    public var identity: RecordIdentity?
    /// Whether the record's header was damaged but its body intact: the record was salvaged
    /// and handed to the visitor like any intact record.
    public var salvaged = false
    /// Whether the damage is a record (or header) cut short by the end of the file.
    public var cutShort = false
}

/// What a scan of a segment found.
public struct ScanReport: Sendable {
    /// The file's size when the scan started.
    public var fileSize: UInt64
    /// The offset just past the last intact record before the first damage (`fileSize` when
    /// there is none).
    public var validEnd: UInt64
    /// The damaged ranges, in order.
    public var damage: [DamagedRange] = []
    /// The number of intact records visited (salvaged ones included).
    public var recordCount = 0
    /// Whether the scan stopped at the first damage instead of going past it (version-1
    /// segments, whose records are not bound to their place, and scans asked not to go on).
    public var stoppedAtDamage = false

    /// The damage at the end of the file that no intact record follows — garbage, or a record
    /// cut short by the end of the file (a write that never completed) — but not a whole record
    /// whose header verified and whose body is damaged (evidence of a write): what may be cut
    /// from an active segment as a torn tail. Nil for a scan that stopped at damage (then
    /// nothing says that no intact record follows).
    public var tornTail: DamagedRange? {
        guard !stoppedAtDamage, let last = damage.last, last.end == fileSize, !last.salvaged,
            last.identity == nil || last.cutShort
        else { return nil }
        return last
    }
}

/// Walks the records of a segment in order, verifying each, reading it sequentially through a
/// buffer: linear in the segment's size whatever it holds.
///
/// Version-2 segments are scanned past damage: after bytes that do not start an intact record,
/// the scanner looks for the next record magic (a buffered byte search) and accepts an offset
/// only if a header there verifies — which takes the store secret and that very offset, so no
/// bytes inside a payload can pass for a record. A record whose header verifies but whose body
/// does not is skipped whole, its identity reported. A record whose header is damaged but whose
/// body matches the checksum the header stored (and decodes as a link or tombstone) is salvaged.
///
/// Version-1 segments are scanned up to their first damage only: their records carry nothing
/// that ties them to their place, so a search past damage could take payload bytes for records.
public enum SegmentScanner {
    /// Bodies up to this size are checked inside the read buffer; larger ones are streamed.
    static let bufferSize = 1 << 20

    /// Visits every intact record of `file` from `offset`.
    ///
    /// - Parameters:
    ///   - offset: where to start (a record boundary); at least the segment header's size.
    ///   - end: scan only up to here (the end of the last record an active segment's writer
    ///     completed); the file's size when nil.
    ///   - pastDamage: go on past damage (version 2 only); otherwise stop at the first damage,
    ///     which then runs to the end of the file in the report.
    ///   - visit: called with each intact record, in file order.
    public static func scan(
        _ file: SegmentFile, from offset: UInt64? = nil, upTo end: UInt64? = nil, pastDamage: Bool = true,
        visit: (ScannedRecord) throws -> Void
    ) throws -> ScanReport {
        var reader = try BufferedReader(file: file, limit: end)
        defer { reader.deallocate() }
        let size = reader.size
        var position = max(offset ?? file.headerSize, file.headerSize)
        var report = ScanReport(fileSize: size, validEnd: size)
        let goesOn = pastDamage && file.format.version == 2
        func damaged(_ range: DamagedRange) {
            if report.damage.isEmpty { report.validEnd = range.start }
            report.damage.append(range)
        }
        while position < size {
            switch try readRecord(&reader, file: file, at: position) {
            case .intact(let record):
                try visit(record)
                report.recordCount += 1
                position += record.length
            case .damagedBody(let length, let identity, let reason, let cutShort):
                guard goesOn else {
                    damaged(DamagedRange(start: position, end: size, reason: reason, identity: identity, cutShort: cutShort))
                    report.stoppedAtDamage = true
                    return report
                }
                damaged(
                    DamagedRange(
                        start: position, end: position + length, reason: reason, identity: identity, cutShort: cutShort))
                position += length
            case .noRecord(let reason, let cutShort):
                guard goesOn else {
                    damaged(DamagedRange(start: position, end: size, reason: reason, cutShort: cutShort))
                    report.stoppedAtDamage = true
                    return report
                }
                let next = try nextVerifiedHeader(&reader, file: file, after: position) ?? size
                var range = DamagedRange(start: position, end: next, reason: reason, cutShort: cutShort && next == size)
                if let salvaged = try salvage(&reader, file: file, from: position, to: next) {
                    range.identity = salvaged.identity
                    range.salvaged = true
                    range.reason += "; its body is intact and was salvaged"
                    damaged(range)
                    try visit(salvaged)
                    report.recordCount += 1
                } else {
                    damaged(range)
                }
                position = next
            }
        }
        return report
    }

    /// Whether a record starts at `offset` of `file`: for version 2, a header that verifies
    /// there (whatever its body); for version 1, a whole record that verifies. The end of the
    /// file counts as a start (of nothing).
    /// With `end`, the file is read as if it ended there.
    public static func startsRecord(_ file: SegmentFile, at offset: UInt64, upTo end: UInt64? = nil) throws -> Bool {
        var reader = try BufferedReader(file: file, limit: end)
        defer { reader.deallocate() }
        if offset >= reader.size { return offset == reader.size }
        switch try readRecord(&reader, file: file, at: offset) {
        case .intact: return true
        case .damagedBody(_, let identity, _, _): return identity != nil
        case .noRecord: return false
        }
    }

    /// Whether records end exactly at `offset` of `file` (version 2): a record whose header
    /// verifies starts within `window` bytes before it, and the records from there verify, one
    /// after the other, up to `offset`. A version-2 header is bound to the store secret, the
    /// segment and its offset, so no payload bytes pass for one: the answer is sound whatever
    /// the bytes. The record magic is looked for backwards from `offset`, and at most
    /// `candidates` places are tried; false when none does (or for version 1), which says
    /// nothing: the caller scans from the header instead. The header's end counts (no record,
    /// and none cut, before it).
    public static func endsRecords(
        _ file: SegmentFile, at offset: UInt64, window: UInt64 = 64 << 10, candidates: Int = 16
    ) throws -> Bool {
        guard file.format.version == 2, offset > file.headerSize else { return offset == file.headerSize }
        let lower = max(file.headerSize, offset > window ? offset - window : 0)
        let count = Int(offset - lower)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: count, alignment: 16)
        defer { buffer.deallocate() }
        guard try file.read(into: buffer, at: lower) == count else { return false }
        let magic = PackFormat.recordMagicBytes
        var tried = 0
        var i = count - magic.count
        while i >= 0 && tried < candidates {
            defer { i -= 1 }
            guard buffer[i] == magic[0], buffer[i + 1] == magic[1], buffer[i + 2] == magic[2], buffer[i + 3] == magic[3]
            else { continue }
            tried += 1
            let report = try scan(file, from: lower + UInt64(i), upTo: offset, pastDamage: false) { _ in }
            if report.damage.isEmpty && report.recordCount > 0 { return true }
        }
        return false
    }

    // MARK: One record

    enum Outcome {
        case intact(ScannedRecord)
        /// The header verified (the record's place and length are known) but the body did not.
        case damagedBody(length: UInt64, identity: RecordIdentity?, reason: String, cutShort: Bool = false)
        /// No record starts here (`cutShort`: a record header or record runs past the end of
        /// the file).
        case noRecord(String, cutShort: Bool = false)
    }

    static func readRecord(_ reader: inout BufferedReader, file: SegmentFile, at position: UInt64) throws -> Outcome {
        let format = file.format
        let headerSize = format.recordHeaderSize
        guard reader.size - position >= UInt64(headerSize) else {
            return .noRecord("a record header at \(position) is cut short by the end of the file", cutShort: true)
        }
        let rawHeader = Array(try reader.bytes(at: position, count: headerSize))
        let parsed = rawHeader.withUnsafeBytes { h in
            format.version == 1
                ? RecordCodec.headerV1(h) : RecordCodec.headerV2(h, format: format, segment: file.id, offset: position)
        }
        let header: RecordHeader
        switch parsed {
        case .failure(let defect): return .noRecord("no record at \(position): \(defect.rawValue)")
        case .success(let h): header = h
        }
        guard position + header.recordLength <= reader.size else {
            if format.version == 2 {
                return .damagedBody(
                    length: reader.size - position, identity: header.identity,
                    reason: "the record at \(position) is cut short by the end of the file", cutShort: true)
            }
            return .noRecord(
                "the record at \(position) claims \(header.bodyLength) bytes past the end of the file", cutShort: true)
        }
        let bodyStart = position + UInt64(headerSize)
        let seed =
            format.version == 1
            ? rawHeader.withUnsafeBytes { RecordCodec.bodySeedV1($0) } : format.bodySeed(header.type)
        // Blob payloads are only hashed; links and tombstones are decoded too, so they are read
        // whole (they are small).
        var body: [UInt8] = []
        let checksum: UInt64
        if header.type == .blob && format.version == 2 {
            checksum = try reader.hash(from: bodyStart, count: header.bodyLength, seed: seed)
        } else if header.bodyLength <= UInt64(bufferSize) {
            body = Array(try reader.bytes(at: bodyStart, count: Int(header.bodyLength)))
            checksum = body.withUnsafeBytes { XXH3.hash64($0, seed: seed) }
        } else if header.type == .blob {
            // A version-1 blob: its prefix (hash and id) is needed, the payload only hashed.
            body = Array(try reader.bytes(at: bodyStart, count: PackFormat.Version1.blobPrefixSize))
            checksum = try reader.hash(from: bodyStart, count: header.bodyLength, seed: seed)
        } else {
            body = try reader.readWhole(at: bodyStart, count: Int(header.bodyLength))
            checksum = body.withUnsafeBytes { XXH3.hash64($0, seed: seed) }
        }
        guard checksum == header.bodyChecksum else {
            return format.version == 2
                ? .damagedBody(
                    length: header.recordLength, identity: header.identity,
                    reason: "the record at \(position) fails its body checksum")
                : .noRecord("the record at \(position) fails its checksum")
        }
        let content: ScannedRecord.Content?
        if format.version == 2 {
            content =
                header.type == .blob
                ? header.identity.map { .blob(hash: $0.digest, id: $0.sequence, payloadLength: header.bodyLength) }
                : body.withUnsafeBytes { RecordCodec.contentV2(header: header, body: $0) }
        } else if header.type == .blob {
            content = body.withUnsafeBytes { RecordCodec.blobPrefixV1($0) }.map {
                .blob(hash: $0.hash, id: $0.id, payloadLength: header.bodyLength - UInt64(PackFormat.Version1.blobPrefixSize))
            }
        } else {
            content = body.withUnsafeBytes { RecordCodec.contentV1(type: header.type, body: $0) }
        }
        guard let content else {
            let reason = "the \(header.type) record at \(position) has a malformed body"
            return format.version == 2
                ? .damagedBody(length: header.recordLength, identity: header.identity, reason: reason) : .noRecord(reason)
        }
        return .intact(ScannedRecord(offset: position, length: header.recordLength, content: content))
    }

    // MARK: Past damage (version 2)

    /// The first offset after `position` where a version-2 header verifies, or nil.
    static func nextVerifiedHeader(_ reader: inout BufferedReader, file: SegmentFile, after position: UInt64) throws
        -> UInt64?
    {
        var candidate = position + 1
        let headerSize = PackFormat.Version2.recordHeaderSize
        while candidate + UInt64(headerSize) <= reader.size {
            guard let found = try reader.find(PackFormat.recordMagicBytes, from: candidate),
                found + UInt64(headerSize) <= reader.size
            else { return nil }
            let header = try reader.bytes(at: found, count: headerSize)
            var verifies = false
            if case .success = RecordCodec.headerV2(header, format: file.format, segment: file.id, offset: found) {
                verifies = true
            }
            if verifies { return found }
            candidate = found + 1
        }
        return nil
    }

    /// Reads `[start, end)` as one record whose header is damaged: when the body checksum the
    /// header stored matches the bytes after it under the link or tombstone seed, and they
    /// decode, the record is intact but for its header. Blobs are never salvaged this way: their
    /// id is only in the header.
    static func salvage(_ reader: inout BufferedReader, file: SegmentFile, from start: UInt64, to end: UInt64) throws
        -> ScannedRecord?
    {
        let headerSize = UInt64(PackFormat.Version2.recordHeaderSize)
        guard file.format.version == 2, end >= start + headerSize, end - start - headerSize <= UInt64(bufferSize) else {
            return nil
        }
        let stored = RecordCodec.storedBodyChecksumV2(try reader.bytes(at: start, count: Int(headerSize)))
        let body = Array(try reader.bytes(at: start + headerSize, count: Int(end - start - headerSize)))
        for type in [RecordType.link, .tombstone] {
            let matches = body.withUnsafeBytes { XXH3.hash64($0, seed: file.format.bodySeed(type)) == stored }
            guard matches else { continue }
            let content: ScannedRecord.Content? = body.withUnsafeBytes { b in
                type == .link
                    ? RecordCodec.link(b, version: 2).map { .link($0) } : RecordCodec.tombstone(b).map { .tombstone($0) }
            }
            if let content { return ScannedRecord(offset: start, length: end - start, content: content) }
        }
        return nil
    }
}

/// Sequential reads of a segment through one buffer, so a scan costs a `pread` per megabyte
/// rather than one per record or per byte.
struct BufferedReader {
    let file: SegmentFile
    let size: UInt64
    private let buffer: UnsafeMutableRawBufferPointer
    private var bufferStart: UInt64 = 0
    private var bufferCount = 0

    init(file: SegmentFile, limit: UInt64? = nil) throws {
        self.file = file
        let size = try file.size()
        self.size = limit.map { min($0, size) } ?? size
        buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: SegmentScanner.bufferSize + 64, alignment: 16)
    }

    func deallocate() { buffer.deallocate() }

    /// The `count` bytes at `offset` (count at most the buffer size; fewer at the end of the
    /// file), valid until the next call.
    mutating func bytes(at offset: UInt64, count: Int) throws -> UnsafeRawBufferPointer {
        let all = try window(at: offset, minimum: count)
        return UnsafeRawBufferPointer(rebasing: all[0..<min(count, all.count)])
    }

    /// Every buffered byte from `offset` on, at least `minimum` of them (at most the buffer
    /// size; fewer only at the end of the file): the buffer is refilled from `offset` only when
    /// it does not hold that many. Valid until the next call.
    mutating func window(at offset: UInt64, minimum: Int) throws -> UnsafeRawBufferPointer {
        precondition(minimum <= buffer.count)
        let bufferEnd = bufferStart + UInt64(bufferCount)
        if offset < bufferStart || offset > bufferEnd || (bufferEnd - offset < UInt64(minimum) && bufferEnd < size) {
            bufferStart = offset
            let wanted = Int(min(UInt64(buffer.count), size - min(offset, size)))
            bufferCount = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<wanted]), at: offset)
        }
        let start = Int(offset - bufferStart)
        return UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(buffer)[start..<bufferCount])
    }

    /// XXH3-64 of `count` bytes from `offset`, streamed through the buffer.
    mutating func hash(from offset: UInt64, count: UInt64, seed: UInt64) throws -> UInt64 {
        if count <= UInt64(SegmentScanner.bufferSize) {
            return XXH3.hash64(try bytes(at: offset, count: Int(count)), seed: seed)
        }
        var stream = XXH3.Stream64(seed: seed)
        var done: UInt64 = 0
        while done < count {
            let chunk = try bytes(at: offset + done, count: Int(min(UInt64(SegmentScanner.bufferSize), count - done)))
            if chunk.isEmpty { break }
            stream.update(chunk)
            done += UInt64(chunk.count)
        }
        return stream.digest()
    }

    /// `count` bytes from `offset` in an array of their own (for a body larger than the buffer).
    mutating func readWhole(at offset: UInt64, count: Int) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        let n = try out.withUnsafeMutableBytes { try file.read(into: $0, at: offset) }
        return Array(out[0..<n])
    }

    /// The offset of the first occurrence of `pattern` (4 bytes) at or after `offset`, or nil.
    mutating func find(_ pattern: [UInt8], from offset: UInt64) throws -> UInt64? {
        var position = offset
        while position + UInt64(pattern.count) <= size {
            let window = try window(at: position, minimum: pattern.count)
            if window.count < pattern.count { return nil }
            if let hit = window.firstIndex(of4: pattern) { return position + UInt64(hit) }
            // The pattern may straddle the window's end: go on from its last bytes.
            position += UInt64(window.count - pattern.count + 1)
        }
        return nil
    }
}

extension UnsafeRawBufferPointer {
    /// The index of the first occurrence of the 4-byte `pattern`, found with memchr.
    func firstIndex(of4 pattern: [UInt8]) -> Int? {
        guard count >= 4, let base = baseAddress else { return nil }
        var start = 0
        while start + 4 <= count {
            guard let hit = memchr(base + start, Int32(pattern[0]), count - start - 3) else { return nil }
            let index = base.distance(to: UnsafeRawPointer(hit))
            if self[index + 1] == pattern[1] && self[index + 2] == pattern[2] && self[index + 3] == pattern[3] {
                return index
            }
            start = index + 1
        }
        return nil
    }
}
