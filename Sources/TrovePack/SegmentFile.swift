public import Foundation
public import TroveCore

#if canImport(Glibc)
    import Glibc
#endif

/// What a segment file's header says.
public struct SegmentHeader: Sendable, Hashable {
    /// The segment id written in the header (normally the number in the file name).
    public var id: UInt32
    /// The segment's format: its version and, for version 2, the store secret.
    public var format: SegmentFormat
    /// When the segment was created, milliseconds since 1970.
    public var createdAt: Int64

    /// The header's bytes.
    var bytes: [UInt8] {
        var w = ByteWriter(capacity: format.headerSize)
        w.append(contentsOf: PackFormat.segmentMagic)
        w.append(UInt32(format.version))
        w.append(id)
        w.append(createdAt)
        if let secret = format.secret { w.append(contentsOf: secret.bytes) }
        let checksum = w.bytes.withUnsafeBytes { XXH3.hash64($0) }
        w.append(checksum)
        return w.bytes
    }

    /// Parses a header; nil when `raw` does not start with a valid segment header of a known
    /// version.
    static func parse(_ raw: [UInt8]) -> SegmentHeader? {
        guard raw.count >= PackFormat.Version1.segmentHeaderSize, Array(raw[0..<8]) == PackFormat.segmentMagic else {
            return nil
        }
        return raw.withUnsafeBytes { b -> SegmentHeader? in
            let version = b.loadLE(UInt32.self, at: 8)
            let id = b.loadLE(UInt32.self, at: 12)
            let created = Int64(bitPattern: b.loadLE(UInt64.self, at: 16))
            let header: SegmentHeader
            switch version {
            case 1:
                header = SegmentHeader(id: id, format: .version1, createdAt: created)
            case 2 where b.count >= PackFormat.Version2.segmentHeaderSize:
                let secret = PackSecret(first: b.loadLE(UInt64.self, at: 24), second: b.loadLE(UInt64.self, at: 32))
                header = SegmentHeader(id: id, format: .version2(secret: secret), createdAt: created)
            default:
                return nil
            }
            // The checksum is the last 8 bytes and covers everything before them.
            guard Array(raw[0..<header.format.headerSize]) == header.bytes, id > 0 else { return nil }
            return header
        }
    }
}

/// One pack segment file, open for positional reads (and writes, for the active segment).
///
/// The descriptor is owned by this object and closed when the last reference goes, so a
/// reader that holds a `SegmentFile` can finish its read even after the file was unlinked:
/// that is how a segment is never removed under an in-flight read.
///
/// Thread safety: immutable after `init`; `pread` and `pwrite` are positional, so any number
/// of threads may read at once. Writes are serialized by the owner of the active segment.
public final class SegmentFile: Sendable {
    /// The segment id (its file name is ``PackFormat/fileName(forSegment:)``).
    public let id: UInt32
    /// The file's path.
    public let path: String
    /// The segment's version and seeds.
    public let format: SegmentFormat
    /// When the segment was created, milliseconds since 1970.
    public let createdAt: Int64
    let faults: FaultInjector?
    private let descriptor: Int32
    /// The first failed sync of this opening, which every later sync throws again
    /// (``PackError/Code/syncFailed``).
    private let failedSync = Locked<PackError?>(nil)

    private init(header: SegmentHeader, path: String, descriptor: Int32, faults: FaultInjector?) {
        self.id = header.id
        self.format = header.format
        self.createdAt = header.createdAt
        self.path = path
        self.descriptor = descriptor
        self.faults = faults
    }

    deinit { SystemCall.close(descriptor) }

    /// The offset of the first record.
    public var headerSize: UInt64 { UInt64(format.headerSize) }

    /// Creates segment `id` in `directory` with its header; fails if the file exists.
    ///
    /// - Parameters:
    ///   - format: the segment's format; new segments are ``SegmentFormat/version2(secret:)``.
    ///   - synchronize: fdatasync the header and the directory entry before returning.
    public static func create(
        id: UInt32, in directory: String, createdAt: Int64, format: SegmentFormat, synchronize: Bool,
        faults: FaultInjector? = nil
    ) throws -> SegmentFile {
        let path = PackDirectory.segmentPath(id, in: directory)
        let header = SegmentHeader(id: id, format: format, createdAt: createdAt)
        let fd = try SystemCall.open(path, flags: O_RDWR | O_CREAT | O_EXCL, faults: faults)
        let file = SegmentFile(header: header, path: path, descriptor: fd, faults: faults)
        try header.bytes.withUnsafeBytes { raw throws in try SystemCall.pwrite(fd, [raw], at: 0, path: path, faults: faults) }
        if synchronize {
            do {
                try SystemCall.fdatasync(fd, path: path, faults: faults)
                try SystemCall.fsyncDirectory(directory, faults: faults)
            } catch {
                // A sync that failed cannot be retried (``synchronize()``): a later opening of
                // this file would sync it "successfully" on a new descriptor. Best effort: the
                // file goes, so nothing adopts a header that may not be on disk.
                try? SystemCall.unlink(path)
                throw error
            }
        }
        return file
    }

    /// Opens segment `id` in `directory` and checks its header, which must name `id`.
    ///
    /// - Throws: ``PackError/Code/io`` when the file cannot be opened (errno ENOENT when it is
    ///   missing); ``PackError/Code/notASegment`` when it is not a regular file or its header is
    ///   not a valid segment header for `id`.
    public static func open(id: UInt32, in directory: String, writable: Bool, faults: FaultInjector? = nil) throws
        -> SegmentFile
    {
        let path = PackDirectory.segmentPath(id, in: directory)
        let fd = try SystemCall.open(path, flags: writable ? O_RDWR : O_RDONLY, faults: faults)
        var raw = [UInt8](repeating: 0, count: PackFormat.Version2.segmentHeaderSize)
        let n: Int
        do {
            n = try raw.withUnsafeMutableBytes { b throws in try SystemCall.pread(fd, into: b, at: 0, path: path, faults: faults)
            }
        } catch {
            SystemCall.close(fd)
            throw error
        }
        guard let header = SegmentHeader.parse(Array(raw[0..<n])), header.id == id else {
            SystemCall.close(fd)
            throw PackError(
                code: .notASegment,
                message: "\(path) has no valid Trove segment header for segment \(id); "
                    + "move it out of packs/ or run `trove fsck --repair`",
                path: path, offset: 0)
        }
        return SegmentFile(header: header, path: path, descriptor: fd, faults: faults)
    }

    /// Opens segment `id` in `directory` whose header is damaged, as a segment of `format`, to
    /// salvage its records: only records bound to `format`'s secret, this id and their offset
    /// verify (so only a version-2 format makes sense).
    public static func openForSalvage(id: UInt32, in directory: String, format: SegmentFormat, faults: FaultInjector? = nil)
        throws -> SegmentFile
    {
        let path = PackDirectory.segmentPath(id, in: directory)
        let fd = try SystemCall.open(path, flags: O_RDONLY, faults: faults)
        return SegmentFile(
            header: SegmentHeader(id: id, format: format, createdAt: 0), path: path, descriptor: fd, faults: faults)
    }

    /// The header of the segment file at `path`, whatever its name says; nil when it is not a
    /// regular file with a valid segment header (or cannot be read).
    public static func header(atPath path: String) -> SegmentHeader? {
        (try? readHeader(atPath: path)) ?? nil
    }

    /// The header of the segment file at `path`, whatever its name says; nil when there is no
    /// file there or it holds no valid segment header.
    ///
    /// - Throws: ``PackError/Code/io`` when the file is there but could not be read (`EIO`,
    ///   `EACCES`, …): a failure that may pass, unlike a header that is not valid.
    public static func readHeader(atPath path: String, faults: FaultInjector? = nil) throws(PackError) -> SegmentHeader? {
        let fd: Int32
        do {
            fd = try SystemCall.open(path, flags: O_RDONLY, faults: faults)
        } catch {
            if !error.isFailedAccess { return nil }
            throw error
        }
        defer { SystemCall.close(fd) }
        var raw = [UInt8](repeating: 0, count: PackFormat.Version2.segmentHeaderSize)
        let n: Int
        do {
            n = try raw.withUnsafeMutableBytes { b in try SystemCall.pread(fd, into: b, at: 0, path: path, faults: faults) }
        } catch {
            throw error as? PackError ?? PackError(code: .io, message: "\(error)", path: path)
        }
        return SegmentHeader.parse(Array(raw[0..<n]))
    }

    /// The file's current size in bytes.
    public func size() throws -> UInt64 {
        try SystemCall.size(descriptor, path: path)
    }

    /// Writes `parts` in order at `offset`.
    public func write(_ parts: [UnsafeRawBufferPointer], at offset: UInt64) throws {
        try SystemCall.pwrite(descriptor, parts, at: offset, path: path, faults: faults)
    }

    /// Writes zeros over `range` (``ZeroFill``), a megabyte per system call.
    public func writeZeros(_ range: Range<UInt64>) throws {
        let chunk = 1 << 20
        let zeros = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)
        defer { zeros.deallocate() }
        zeros.initializeMemory(as: UInt8.self, repeating: 0)
        var offset = range.lowerBound
        while offset < range.upperBound {
            let count = Int(min(UInt64(chunk), range.upperBound - offset))
            try write([UnsafeRawBufferPointer(rebasing: zeros[0..<count])], at: offset)
            offset += UInt64(count)
        }
    }

    /// Where the hole that lasts to the file's end starts, if it ends in one the file system
    /// reports (``PreparedTail``).
    public func trailingHole() throws -> UInt64? {
        SystemCall.trailingHole(descriptor, size: try size())
    }

    /// The file system's block size for this file, if it says.
    public var blockSize: UInt64? { SystemCall.blockSize(descriptor) }

    /// Asks the kernel to read `range` into the page cache now (``WarmAheadPolicy``): over a
    /// hole it allocates zeroed pages without reading the disk. Best effort: a failure reads
    /// nothing, and a range past the file's end is left alone.
    public func warm(_ range: Range<UInt64>) {
        SystemCall.willNeed(descriptor, range)
    }

    /// Makes written data durable (fdatasync).
    ///
    /// A failed sync is final for this opening of the file: Linux marks the pages whose
    /// writeback failed clean and reports the error to one sync only, so a retry could report
    /// success for bytes the disk never got (PostgreSQL's "fsyncgate"). The first failure is
    /// kept, and this and every later call throw it as ``PackError/Code/syncFailed`` without
    /// asking the kernel again.
    ///
    /// - Throws: ``PackError/Code/syncFailed``, naming the file and the system error.
    public func synchronize() throws(PackError) {
        if let failure = failedSync.withLock({ $0 }) { throw failure }
        do {
            try SystemCall.fdatasync(descriptor, path: path, faults: faults)
        } catch {
            throw keepSyncFailure(error)
        }
    }

    /// Keeps `error`, a failed fdatasync of this file, as the failure every later
    /// ``synchronize()`` throws; returns the one kept (two threads failing at once keep one,
    /// the first).
    private func keepSyncFailure(_ error: PackError) -> PackError {
        let failure = PackError(
            code: .syncFailed,
            message: "\(error.message); bytes written to this segment since its last sync may not be on disk, "
                + "and a later sync cannot prove they are, so it refuses every sync until the store is reopened",
            path: path, errno: error.errno)
        return failedSync.withLock { (slot) -> PackError in
            if slot == nil { slot = failure }
            return slot!
        }
    }

    /// Syncs the file through a descriptor opened for it (``ZeroFill``), beside the syncs of
    /// the file's own descriptor. Linux reports a writeback error once to each open file
    /// description, so a failure this sync sees is still reported to the next sync of the
    /// file's own descriptor (two syncs of one descriptor at once could each leave the other's
    /// failure unseen). A failed sync here is kept as the file's all the same, so the next
    /// ``synchronize()`` refuses at once; a success proves nothing to it, and a descriptor
    /// that cannot be opened syncs nothing (and loses nothing).
    public func synchronizeSeparately() {
        guard let fd = try? SystemCall.open(path, flags: O_RDONLY, faults: faults) else { return }
        defer { SystemCall.close(fd) }
        do {
            try SystemCall.fdatasync(fd, path: path, faults: faults)
        } catch {
            _ = keepSyncFailure(error)
        }
    }

    /// The failed sync that makes this file refuse every sync (see ``synchronize()``), if any.
    public var syncFailure: PackError? { failedSync.withLock { $0 } }

    /// Writes the bytes in `range` again, unchanged, at the same place, so that the next
    /// ``synchronize()`` writes them to the disk or fails.
    ///
    /// Bytes past a file's last successful sync may exist only in the page cache: when their
    /// writeback failed, Linux marked those pages clean, so reading them still returns what was
    /// written and a sync through a new opening of the file succeeds without writing them.
    /// Writing them again marks them dirty. Recovery does this to the tails it replays before it
    /// syncs and indexes them, so that a store reopened after a failed sync, in the same boot,
    /// never commits bytes the disk lost. The content does not change, so a crash during the
    /// rewrite leaves every byte as it was or as it was meant to be.
    ///
    /// - Throws: ``PackError/Code/io`` when a read or write fails or the file ends before
    ///   `range` does.
    public func rewriteUnchanged(_ range: Range<UInt64>) throws(PackError) {
        let chunk = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)
        defer { buffer.deallocate() }
        var offset = range.lowerBound
        while offset < range.upperBound {
            let wanted = Int(min(UInt64(chunk), range.upperBound - offset))
            let part = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<wanted])
            let n = try SystemCall.pread(descriptor, into: part, at: offset, path: path, faults: faults)
            guard n == wanted else {
                throw PackError(
                    code: .io,
                    message:
                        "the file ends at \(offset + UInt64(n)), before the end of the bytes to rewrite (\(range.upperBound))",
                    path: path, offset: offset)
            }
            try SystemCall.pwrite(descriptor, [UnsafeRawBufferPointer(part)], at: offset, path: path, faults: faults)
            offset += UInt64(n)
        }
    }

    /// Cuts the file to `length` bytes.
    public func truncate(to length: UInt64) throws {
        try SystemCall.truncate(descriptor, to: length, path: path, faults: faults)
    }

    /// Reads up to `buffer.count` bytes at `offset`; fewer only at the end of the file.
    public func read(into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws -> Int {
        try SystemCall.pread(descriptor, into: buffer, at: offset, path: path, faults: faults)
    }

    /// Reads the blob record at `offset` and returns its payload, verified.
    ///
    /// One `pread` of the whole record; the checksums cover header and body (version 2: the
    /// header checksum also proves the record was written at this offset of this segment by
    /// this store), and the hash and id the record states must be `hash` and `id`. The
    /// returned `Data` owns the read buffer (no second copy).
    ///
    /// - Throws: ``PackError/Code/corruptRecord`` when the record fails any check,
    ///   ``PackError/Code/truncatedRecord`` when it runs past the end of the file,
    ///   ``PackError/Code/io`` when the read fails.
    /// - Complexity: one system call and one pass of XXH3-64 over the payload.
    public func readBlob(
        at offset: UInt64, payloadLength: UInt64, hash: ContentHash, id: UInt64, buffers: ReadBuffers? = nil
    ) throws -> Data {
        // With no bytes after the record asked for, the check of them cannot fail.
        try readBlob(at: offset, payloadLength: payloadLength, hash: hash, id: id, trailing: 0, buffers: buffers) { _, _ in
            true
        }!
    }

    /// Reads the blob record at `offset` together with the header of the link record at
    /// `linkOffset`, in one `pread`, and returns the payload when both are what the caller
    /// names: the blob as ``readBlob(at:payloadLength:hash:id:)`` checks it, the link as
    /// ``holdsLink(at:identity:body:)`` does (its header intact, written there by this store,
    /// with `identity` and the checksum of `body`).
    ///
    /// A put appends a new blob's record and its link's in one write, so a cold read of such an
    /// entry verifies both with one system call instead of two.
    ///
    /// - Returns: nil when `linkOffset` is not where the blob record ends (as its payload length
    ///   gives it, not as any caller's count says), when the header there is not that link, or
    ///   for a version-1 segment (whose records carry no such header): check the link on its
    ///   own then.
    /// - Throws: what ``readBlob(at:payloadLength:hash:id:)`` throws.
    public func readBlob(
        at offset: UInt64, payloadLength: UInt64, hash: ContentHash, id: UInt64, thenLinkAt linkOffset: UInt64,
        identity: RecordIdentity, body: [UInt8], buffers: ReadBuffers? = nil
    ) throws -> Data? {
        guard format.version == 2, payloadLength <= PackFormat.maximumBodyLength,
            linkOffset >= offset, linkOffset - offset == format.blobRecordLength(payloadLength: payloadLength)
        else { return nil }
        return try readBlob(
            at: offset, payloadLength: payloadLength, hash: hash, id: id, trailing: PackFormat.Version2.recordHeaderSize,
            buffers: buffers
        ) { raw, at in
            intactHeader(raw, at: at).map { isLink($0, identity: identity, body: body) } ?? false
        }
    }

    /// Spans above this are checked against the file's size before anything is allocated.
    static let spanCheckedAgainstSize = 16 << 20

    /// An entry read through its place, without an index row: the verified payload and the link
    /// record that states what it is.
    public struct PlacedEntry: Sendable {
        /// The blob's payload, verified.
        public var payload: Data
        /// The link record, verified and decoded.
        public var link: LinkRecord
        /// The blob record's length (where the link record starts, from the blob's offset).
        public var blobRecordBytes: UInt64
        /// The link record's length.
        public var linkRecordBytes: UInt64
    }

    /// Reads the `span` bytes at `offset` with one `pread` and returns the entry there when they
    /// are exactly a blob record followed by the link record with `identity` (a key digest and a
    /// sequence) that names that blob: both headers intact and written there by this store, both
    /// bodies matching their checksums, the link decoding to `identity`'s key and sequence, and
    /// its blob id, content hash and length those of the blob record.
    ///
    /// Nil when anything differs — a version-1 segment, a span that is not the two records, damage,
    /// other records, an I/O error or a short read — without saying which: the caller then
    /// reads the entry the way that tells damage from a move and reports it.
    public func readPlacedEntry(at offset: UInt64, span: Int, identity: RecordIdentity, buffers: ReadBuffers? = nil)
        -> PlacedEntry?
    {
        let headerSize = PackFormat.Version2.recordHeaderSize
        guard format.version == 2, identity.type == .link, span >= 2 * headerSize,
            UInt64(span) <= 2 * (PackFormat.maximumBodyLength + UInt64(headerSize))
        else { return nil }
        // A span past the file's end (a damaged row) must not cost its allocation: large ones
        // are held to the file's size first (an fstat; a value's span rarely gets there).
        if span > Self.spanCheckedAgainstSize {
            guard let size = try? size(), offset <= size, UInt64(span) <= size - offset else { return nil }
        }
        let (base, capacity) = ReadBuffers.take(byteCount: span, from: buffers)
        var handedOver = false
        defer { if !handedOver { ReadBuffers.giveBack(base, capacity: capacity, to: buffers) } }
        let raw = UnsafeRawBufferPointer(start: base, count: span)
        guard
            let n = try? SystemCall.pread(
                descriptor, into: UnsafeMutableRawBufferPointer(start: base, count: span), at: offset, path: path,
                faults: faults),
            n == span
        else { return nil }
        // The blob record: its header, then its body must leave room for a link header.
        guard let blob = intactHeader(UnsafeRawBufferPointer(rebasing: raw[0..<headerSize]), at: offset),
            blob.type == .blob, let blobIdentity = blob.identity, blob.recordLength <= UInt64(span - headerSize)
        else { return nil }
        let linkStart = Int(blob.recordLength)
        guard
            let linkHeader = intactHeader(
                UnsafeRawBufferPointer(rebasing: raw[linkStart..<linkStart + headerSize]), at: offset + UInt64(linkStart)),
            linkHeader.identity == identity, UInt64(linkStart) + linkHeader.recordLength == UInt64(span)
        else { return nil }
        let linkBody = UnsafeRawBufferPointer(rebasing: raw[(linkStart + headerSize)...])
        guard XXH3.hash64(linkBody, seed: format.bodySeed(.link)) == linkHeader.bodyChecksum,
            case .link(let link)? = RecordCodec.contentV2(header: linkHeader, body: linkBody),
            link.blobID == blobIdentity.sequence, link.blobHash == blobIdentity.digest,
            link.blobLength == blob.bodyLength
        else { return nil }
        let payload = UnsafeRawBufferPointer(rebasing: raw[headerSize..<linkStart])
        guard XXH3.hash64(payload, seed: format.bodySeed(.blob)) == blob.bodyChecksum else { return nil }
        handedOver = true
        let data = ReadBuffers.data(base, capacity: capacity, offset: headerSize, count: payload.count, from: buffers)
        return PlacedEntry(
            payload: data, link: link, blobRecordBytes: blob.recordLength, linkRecordBytes: linkHeader.recordLength)
    }

    /// One `pread` of the blob record at `offset` and `trailing` bytes after it; the payload
    /// when the record verifies and `trailingHolds` accepts the bytes after it (and where they
    /// start), nil when it does not or they are cut short by the end of the file.
    private func readBlob(
        at offset: UInt64, payloadLength: UInt64, hash: ContentHash, id: UInt64, trailing: Int, buffers: ReadBuffers?,
        trailingHolds: (UnsafeRawBufferPointer, UInt64) -> Bool
    ) throws -> Data? {
        let total64 = format.blobRecordLength(payloadLength: payloadLength)
        guard total64 - UInt64(format.recordHeaderSize) <= PackFormat.maximumBodyLength else {
            throw corrupt(at: offset, "the index names a blob larger than the format allows")
        }
        let total = Int(total64)
        let prefix = total - Int(payloadLength)
        let (base, capacity) = ReadBuffers.take(byteCount: total + trailing, from: buffers)
        var handedOver = false
        defer { if !handedOver { ReadBuffers.giveBack(base, capacity: capacity, to: buffers) } }
        let buffer = UnsafeMutableRawBufferPointer(start: base, count: total + trailing)
        let n = try SystemCall.pread(descriptor, into: buffer, at: offset, path: path, faults: faults)
        guard n >= total else {
            throw PackError(
                code: .truncatedRecord,
                message: "blob record at \(path):\(offset) is cut short (\(n) of \(total) bytes)", path: path,
                offset: offset)
        }
        let raw = UnsafeRawBufferPointer(start: base, count: total)
        let header = UnsafeRawBufferPointer(rebasing: raw[0..<format.recordHeaderSize])
        let body = UnsafeRawBufferPointer(rebasing: raw[format.recordHeaderSize...])
        if format.version == 1 {
            // Version 1's checksum covers header and body together: a record whose hash and id
            // are the ones named but whose checksum fails is that record, damaged.
            guard case .success(let h) = RecordCodec.headerV1(header) else {
                throw corrupt(at: offset, "no record header here")
            }
            guard h.type == .blob, h.bodyLength == UInt64(body.count), let stated = RecordCodec.blobPrefixV1(body) else {
                throw mismatch(at: offset)
            }
            guard stated.hash == hash, stated.id == id else { throw mismatch(at: offset) }
            guard XXH3.hash64(body, seed: RecordCodec.bodySeedV1(header)) == h.bodyChecksum else {
                throw damaged(at: offset)
            }
        } else {
            guard case .success(let h) = RecordCodec.headerV2(header, format: format, segment: self.id, offset: offset) else {
                throw corrupt(at: offset, "no record of this store was written here, or its header is damaged")
            }
            guard h.type == .blob, h.bodyLength == UInt64(body.count), let stated = h.identity,
                stated.digest == hash, stated.sequence == id
            else { throw mismatch(at: offset) }
            guard XXH3.hash64(body, seed: format.bodySeed(.blob)) == h.bodyChecksum else { throw damaged(at: offset) }
        }
        guard n == total + trailing,
            trailingHolds(UnsafeRawBufferPointer(start: base + total, count: trailing), offset + UInt64(total))
        else { return nil }
        handedOver = true
        return ReadBuffers.data(base, capacity: capacity, offset: prefix, count: total - prefix, from: buffers)
    }

    /// A record read whole and verified: what it is, its header and its body bytes.
    public struct VerifiedRecord: Sendable {
        /// The decoded record.
        public var record: ScannedRecord
        /// Its header.
        public var header: RecordHeader
        /// Its body, as stored.
        public var body: [UInt8]
    }

    /// Reads and verifies the whole record at `offset` (for a version-1 segment, only trust a
    /// record at an offset something else vouches for: the index, or a scan from the start).
    ///
    /// - Parameter limit: the end of the valid region (normally the file size).
    /// - Throws: ``PackError/Code/corruptRecord`` or ``PackError/Code/truncatedRecord`` when no
    ///   intact record starts at `offset`.
    public func readRecord(at offset: UInt64, limit: UInt64) throws -> VerifiedRecord {
        let headerSize = UInt64(format.recordHeaderSize)
        guard offset >= headerSizeOfSegment, offset + headerSize <= limit else {
            throw PackError(
                code: .truncatedRecord, message: "record header at \(path):\(offset) is cut short", path: path,
                offset: offset)
        }
        var rawHeader = [UInt8](repeating: 0, count: format.recordHeaderSize)
        _ = try rawHeader.withUnsafeMutableBytes { b throws in
            try SystemCall.pread(descriptor, into: b, at: offset, path: path, faults: faults)
        }
        let parsed = rawHeader.withUnsafeBytes { h in
            format.version == 1 ? RecordCodec.headerV1(h) : RecordCodec.headerV2(h, format: format, segment: id, offset: offset)
        }
        let header: RecordHeader
        switch parsed {
        case .failure(let defect): throw corrupt(at: offset, defect.rawValue)
        case .success(let h): header = h
        }
        guard offset + header.recordLength <= limit else {
            throw PackError(
                code: .truncatedRecord,
                message: "record at \(path):\(offset) claims \(header.bodyLength) bytes past the end",
                path: path, offset: offset)
        }
        var body = [UInt8](repeating: 0, count: Int(header.bodyLength))
        let n = try body.withUnsafeMutableBytes { b throws in
            try SystemCall.pread(descriptor, into: b, at: offset + headerSize, path: path, faults: faults)
        }
        guard n == body.count else {
            throw PackError(
                code: .truncatedRecord, message: "record at \(path):\(offset) is cut short", path: path,
                offset: offset)
        }
        let content: ScannedRecord.Content? = body.withUnsafeBytes { b in
            rawHeader.withUnsafeBytes { h in
                if format.version == 1 {
                    guard XXH3.hash64(b, seed: RecordCodec.bodySeedV1(h)) == header.bodyChecksum else { return nil }
                    return RecordCodec.contentV1(type: header.type, body: b)
                }
                guard XXH3.hash64(b, seed: format.bodySeed(header.type)) == header.bodyChecksum else { return nil }
                return RecordCodec.contentV2(header: header, body: b)
            }
        }
        guard let content else { throw corrupt(at: offset, RecordDefect.checksumMismatch.rawValue) }
        return VerifiedRecord(
            record: ScannedRecord(offset: offset, length: header.recordLength, content: content), header: header,
            body: body)
    }

    private var headerSizeOfSegment: UInt64 { UInt64(format.headerSize) }

    /// Whether the record at `offset` is a link with `identity` (its key digest and sequence)
    /// whose body is exactly `body` — checked from the 52-byte header alone (version 2): the
    /// header's own checksum proves it is a record of this store written here, and the body
    /// checksum it stores matches `body`'s only if the bodies are equal. One small `pread`, no
    /// decoding.
    ///
    /// - Returns: false when the record is not that link (damaged, another record, nothing);
    ///   nil for a version-1 segment, whose records carry no such header (read it whole).
    /// - Throws: ``PackError/Code/io`` when the read fails.
    public func holdsLink(at offset: UInt64, identity: RecordIdentity, body: [UInt8]) throws -> Bool? {
        guard format.version == 2 else { return nil }
        return try intactHeader(at: offset).map { isLink($0, identity: identity, body: body) } ?? false
    }

    /// Whether `header` is that of a link with `identity` whose body is exactly `body` (the
    /// body checksum it stores matches `body`'s only if the bodies are equal).
    private func isLink(_ header: RecordHeader, identity: RecordIdentity, body: [UInt8]) -> Bool {
        header.identity == identity && header.bodyLength == UInt64(body.count)
            && body.withUnsafeBytes { XXH3.hash64($0, seed: format.bodySeed(.link)) } == header.bodyChecksum
    }

    /// Whether an intact record header with `identity` and a body of `bodyLength` bytes is at
    /// `offset` — the header alone, one small `pread` (version 2). For a blob, `identity` is
    /// its id and content hash: a record that passes is that blob's record, written here by
    /// this store (its body is checked when it is read).
    ///
    /// - Returns: false when it is not; nil for a version-1 segment (read the record whole).
    /// - Throws: ``PackError/Code/io`` when the read fails.
    public func holdsRecord(at offset: UInt64, identity: RecordIdentity, bodyLength: UInt64) throws -> Bool? {
        guard format.version == 2 else { return nil }
        guard let header = try intactHeader(at: offset) else { return false }
        return header.identity == identity && header.bodyLength == bodyLength
    }

    /// The version-2 record header at `offset` if it is intact (its checksum, seeded with this
    /// store's secret and the place, matches).
    private func intactHeader(at offset: UInt64) throws -> RecordHeader? {
        var raw = [UInt8](repeating: 0, count: PackFormat.Version2.recordHeaderSize)
        let n = try raw.withUnsafeMutableBytes { b in
            try SystemCall.pread(descriptor, into: b, at: offset, path: path, faults: faults)
        }
        guard n == raw.count else { return nil }
        return raw.withUnsafeBytes { intactHeader($0, at: offset) }
    }

    /// The version-2 record header in `raw` (read at `offset`) if it is intact.
    private func intactHeader(_ raw: UnsafeRawBufferPointer, at offset: UInt64) -> RecordHeader? {
        guard case .success(let header) = RecordCodec.headerV2(raw, format: format, segment: id, offset: offset) else {
            return nil
        }
        return header
    }

    private func damaged(at offset: UInt64) -> PackError {
        PackError(
            code: .damagedPayload,
            message: "the blob record at \(path):\(offset) is damaged (its payload fails its checksum); "
                + "it is not served", path: path, offset: offset)
    }

    private func mismatch(at offset: UInt64) -> PackError {
        PackError(
            code: .recordMismatch,
            message: "the record at \(path):\(offset) is intact but not the one the index names; the index is "
                + "damaged — run `trove fsck --repair`", path: path, offset: offset)
    }

    func corrupt(at offset: UInt64, _ reason: String) -> PackError {
        PackError(
            code: .corruptRecord,
            message: "record at \(path):\(offset) is corrupt (\(reason)); it is not served — "
                + "run `trove fsck` to see all damage",
            path: path, offset: offset)
    }
}

/// Creating the packs directory and listing, moving and removing the files in it.
public enum PackDirectory {
    /// Creates `path` if it does not exist; refuses a file or a symbolic link in its place.
    public static func create(_ path: String) throws {
        try SystemCall.makeDirectory(path)
    }

    /// The ids of the segment files in `path`, ascending; other names are ignored.
    public static func segmentIDs(in path: String) throws -> [UInt32] {
        try SystemCall.listDirectory(path).compactMap(PackFormat.segmentID(fromFileName:)).sorted()
    }

    /// Every name in `path`.
    public static func names(in path: String) throws -> [String] {
        try SystemCall.listDirectory(path).sorted()
    }

    /// The path of segment `id`'s file in `path`.
    public static func segmentPath(_ id: UInt32, in path: String) -> String {
        path + "/" + PackFormat.fileName(forSegment: id)
    }

    /// The bytes of every segment file in `path` (0 when it cannot be listed).
    public static func totalSize(in path: String) -> Int64 {
        let ids = (try? segmentIDs(in: path)) ?? []
        return ids.reduce(Int64(0)) { $0 + Int64(segmentSize($1, in: path) ?? 0) }
    }

    /// The size of segment `id`'s file, or nil when there is no regular file by that name.
    public static func segmentSize(_ id: UInt32, in path: String) -> UInt64? {
        SystemCall.fileSize(segmentPath(id, in: path))
    }

    /// What is at `name` in `path` without following links: "file", "directory", "link",
    /// "other", or nil when nothing is.
    public static func kind(of name: String, in path: String) -> String? {
        SystemCall.kind(path + "/" + name)
    }

    /// The size of the regular file `name` in `path`, or nil when there is none.
    public static func size(of name: String, in path: String) -> UInt64? {
        SystemCall.fileSize(path + "/" + name)
    }

    /// Removes the file `name` from `path`.
    public static func remove(_ name: String, in path: String, faults: FaultInjector? = nil) throws {
        try SystemCall.unlink(path + "/" + name, faults: faults)
    }

    /// Removes segment `id`'s file from `path`.
    public static func removeSegment(_ id: UInt32, in path: String, faults: FaultInjector? = nil) throws {
        try SystemCall.unlink(segmentPath(id, in: path), faults: faults)
    }

    /// Renames `name` to `newName` within `path`, never replacing an existing file.
    public static func rename(_ name: String, to newName: String, in path: String, faults: FaultInjector? = nil) throws {
        try SystemCall.rename(path + "/" + name, to: path + "/" + newName, replacing: false, faults: faults)
    }

    /// Renames `name` out of the segment namespace to `<name>.<suffix>` (or, when that exists,
    /// `<name>.<suffix>-2`, …), so that nothing reads or overwrites it and a person can inspect
    /// it. Returns the new name.
    @discardableResult
    public static func quarantine(_ name: String, suffix: String, in path: String, faults: FaultInjector? = nil) throws
        -> String
    {
        var candidate = name + "." + suffix
        var n = 2
        while SystemCall.kind(path + "/" + candidate) != nil {
            candidate = name + "." + suffix + "-\(n)"
            n += 1
        }
        try SystemCall.rename(path + "/" + name, to: path + "/" + candidate, replacing: false, faults: faults)
        return candidate
    }

    /// Makes the directory's entries (created or removed files) durable.
    ///
    /// Unlike a segment's data sync (``SegmentFile/synchronize()``), a failure is not kept: a
    /// directory's entries are journaled metadata on the file systems Trove is meant for, and a
    /// journal commit that fails aborts the journal (ext4 and XFS with their journals), so every
    /// later sync fails too instead of reporting lost entries as durable. On a file system
    /// without a journal (ext2, ext4 without one) that reasoning does not hold.
    public static func synchronize(_ path: String, faults: FaultInjector? = nil) throws {
        try SystemCall.fsyncDirectory(path, faults: faults)
    }
}
