public import Foundation
public import TroveCore

#if canImport(Glibc)
    import Glibc
#endif

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
    private let descriptor: Int32

    private init(id: UInt32, path: String, descriptor: Int32) {
        self.id = id
        self.path = path
        self.descriptor = descriptor
    }

    deinit { SystemCall.close(descriptor) }

    /// Creates segment `id` in `directory` with its header; fails if the file exists.
    ///
    /// - Parameter synchronize: fdatasync the header and the directory entry before returning.
    public static func create(id: UInt32, in directory: String, createdAt: Int64, synchronize: Bool) throws
        -> SegmentFile
    {
        let path = directory + "/" + PackFormat.fileName(forSegment: id)
        let fd = try SystemCall.open(path, flags: O_RDWR | O_CREAT | O_EXCL)
        let file = SegmentFile(id: id, path: path, descriptor: fd)
        let header = headerBytes(id: id, createdAt: createdAt)
        try header.withUnsafeBytes { raw in try SystemCall.pwrite(fd, [raw], at: 0, path: path) }
        if synchronize {
            try SystemCall.fdatasync(fd, path: path)
            try SystemCall.fsyncDirectory(directory)
        }
        return file
    }

    /// Opens segment `id` in `directory` and checks its header.
    ///
    /// - Throws: ``PackError/Code/io`` when the file cannot be opened (errno ENOENT when it is
    ///   missing); ``PackError/Code/notASegment`` when its header is not a valid segment header
    ///   for `id`.
    public static func open(id: UInt32, in directory: String, writable: Bool) throws -> SegmentFile {
        let path = directory + "/" + PackFormat.fileName(forSegment: id)
        let fd = try SystemCall.open(path, flags: writable ? O_RDWR : O_RDONLY)
        let file = SegmentFile(id: id, path: path, descriptor: fd)
        var raw = [UInt8](repeating: 0, count: PackFormat.segmentHeaderSize)
        let n = try raw.withUnsafeMutableBytes { b in try SystemCall.pread(fd, into: b, at: 0, path: path) }
        guard n == raw.count, raw == headerBytes(id: id, createdAt: file.createdAt(raw)) else {
            throw PackError(
                code: .notASegment,
                message: "\(path) has no valid Trove segment header for segment \(id); "
                    + "move it out of packs/ or run `trove fsck --repair`",
                path: path, offset: 0)
        }
        return file
    }

    private func createdAt(_ header: [UInt8]) -> Int64 {
        header.withUnsafeBytes { Int64(bitPattern: $0.loadLE(UInt64.self, at: 16)) }
    }

    static func headerBytes(id: UInt32, createdAt: Int64) -> [UInt8] {
        var w = ByteWriter(capacity: PackFormat.segmentHeaderSize)
        w.append(contentsOf: PackFormat.segmentMagic)
        w.append(UInt32(PackFormat.version))
        w.append(id)
        w.append(createdAt)
        let checksum = w.bytes.withUnsafeBytes { XXH3.hash64($0) }
        w.append(checksum)
        return w.bytes
    }

    /// The file's current size in bytes.
    public func size() throws -> UInt64 {
        try SystemCall.size(descriptor, path: path)
    }

    /// Writes `parts` in order at `offset`.
    public func write(_ parts: [UnsafeRawBufferPointer], at offset: UInt64) throws {
        try SystemCall.pwrite(descriptor, parts, at: offset, path: path)
    }

    /// Makes written data durable (fdatasync).
    public func synchronize() throws {
        try SystemCall.fdatasync(descriptor, path: path)
    }

    /// Cuts the file to `length` bytes.
    public func truncate(to length: UInt64) throws {
        try SystemCall.truncate(descriptor, to: length, path: path)
    }

    /// Reads up to `buffer.count` bytes at `offset`; fewer only at the end of the file.
    public func read(into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws -> Int {
        try SystemCall.pread(descriptor, into: buffer, at: offset, path: path)
    }

    /// Reads the blob record at `offset` and returns its payload, verified.
    ///
    /// One `pread` of the whole record; the checksum covers header and body, and the hash and
    /// id in the body must be `hash` and `id`. The returned `Data` owns the read buffer (no
    /// second copy).
    ///
    /// - Throws: ``PackError/Code/corruptRecord`` when the record fails any check,
    ///   ``PackError/Code/truncatedRecord`` when it runs past the end of the file.
    /// - Complexity: one system call and one pass of XXH3-64 over the payload.
    public func readBlob(at offset: UInt64, payloadLength: UInt64, hash: ContentHash, id: UInt64) throws -> Data {
        let bodyLength = UInt64(PackFormat.blobPrefixSize) + payloadLength
        guard bodyLength <= PackFormat.maximumBodyLength else {
            throw corrupt(at: offset, "the index names a blob larger than the format allows")
        }
        let total = PackFormat.recordHeaderSize + Int(bodyLength)
        let prefix = PackFormat.recordHeaderSize + PackFormat.blobPrefixSize
        let base = UnsafeMutableRawPointer.allocate(byteCount: max(total, 1), alignment: 16)
        var handedOver = false
        defer { if !handedOver { base.deallocate() } }
        let buffer = UnsafeMutableRawBufferPointer(start: base, count: total)
        let n = try SystemCall.pread(descriptor, into: buffer, at: offset, path: path)
        guard n == total else {
            throw PackError(
                code: .truncatedRecord,
                message: "blob record at \(path):\(offset) is cut short (\(n) of \(total) bytes)", path: path,
                offset: offset)
        }
        let raw = UnsafeRawBufferPointer(buffer)
        let header = UnsafeRawBufferPointer(rebasing: raw[0..<PackFormat.recordHeaderSize])
        let body = UnsafeRawBufferPointer(rebasing: raw[PackFormat.recordHeaderSize...])
        switch RecordDecoder.header(header) {
        case .failure(let e): throw corrupt(at: offset, e.defect.rawValue)
        case .success(let h):
            guard h.type == .blob, h.bodyLength == bodyLength else {
                throw corrupt(at: offset, "not the blob record the index names")
            }
        }
        guard RecordDecoder.verify(rawHeader: header, body: body) else {
            throw corrupt(at: offset, RecordDecoder.Defect.checksumMismatch.rawValue)
        }
        guard let identity = RecordDecoder.blobIdentity(body), identity.hash == hash, identity.id == id else {
            throw corrupt(at: offset, "blob hash or id differs from the index")
        }
        handedOver = true
        return Data(
            bytesNoCopy: base + prefix, count: total - prefix,
            deallocator: .custom { pointer, _ in (pointer - prefix).deallocate() })
    }

    /// Reads and verifies the whole record at `offset`: its header and its body bytes.
    ///
    /// - Parameter limit: the end of the valid region (normally the file size).
    public func readRecord(at offset: UInt64, limit: UInt64) throws -> (RecordDecoder.Header, [UInt8]) {
        let (header, _, body) = try readVerifiedRecord(at: offset, limit: limit)
        return (header, body)
    }

    /// Reads the whole record at `offset`, verified, as its on-disk bytes (header and body),
    /// for copying it unchanged into another segment.
    public func readRawRecord(at offset: UInt64, limit: UInt64) throws -> [UInt8] {
        let (_, rawHeader, body) = try readVerifiedRecord(at: offset, limit: limit)
        return rawHeader + body
    }

    private func readVerifiedRecord(at offset: UInt64, limit: UInt64) throws -> (RecordDecoder.Header, [UInt8], [UInt8]) {
        let headerSize = UInt64(PackFormat.recordHeaderSize)
        guard offset + headerSize <= limit else {
            throw PackError(
                code: .truncatedRecord, message: "record header at \(path):\(offset) is cut short", path: path,
                offset: offset)
        }
        var rawHeader = [UInt8](repeating: 0, count: PackFormat.recordHeaderSize)
        _ = try rawHeader.withUnsafeMutableBytes { b in
            try SystemCall.pread(descriptor, into: b, at: offset, path: path)
        }
        let header: RecordDecoder.Header
        switch rawHeader.withUnsafeBytes({ RecordDecoder.header($0) }) {
        case .failure(let e): throw corrupt(at: offset, e.defect.rawValue)
        case .success(let h): header = h
        }
        guard offset + headerSize + header.bodyLength <= limit else {
            throw PackError(
                code: .truncatedRecord,
                message: "record at \(path):\(offset) claims \(header.bodyLength) bytes past the end",
                path: path, offset: offset)
        }
        var body = [UInt8](repeating: 0, count: Int(header.bodyLength))
        let n = try body.withUnsafeMutableBytes { b in
            try SystemCall.pread(descriptor, into: b, at: offset + headerSize, path: path)
        }
        guard n == body.count else {
            throw PackError(
                code: .truncatedRecord, message: "record at \(path):\(offset) is cut short", path: path,
                offset: offset)
        }
        let valid = rawHeader.withUnsafeBytes { h in body.withUnsafeBytes { RecordDecoder.verify(rawHeader: h, body: $0) } }
        guard valid else { throw corrupt(at: offset, RecordDecoder.Defect.checksumMismatch.rawValue) }
        return (header, rawHeader, body)
    }

    private func corrupt(at offset: UInt64, _ reason: String) -> PackError {
        PackError(
            code: .corruptRecord,
            message: "record at \(path):\(offset) is corrupt (\(reason)); it is not served — "
                + "run `trove fsck` to see all damage",
            path: path, offset: offset)
    }
}

/// Creating the packs directory and listing the segments in it.
public enum PackDirectory {
    /// Creates `path` if it does not exist.
    public static func create(_ path: String) throws {
        try SystemCall.makeDirectory(path)
    }

    /// The ids of the segment files in `path`, ascending; other names are ignored.
    public static func segmentIDs(in path: String) throws -> [UInt32] {
        try SystemCall.listDirectory(path).compactMap(PackFormat.segmentID(fromFileName:)).sorted()
    }

    /// Removes segment `id`'s file from `path`.
    public static func removeSegment(_ id: UInt32, in path: String) throws {
        try SystemCall.unlink(path + "/" + PackFormat.fileName(forSegment: id))
    }

    /// Renames segment `id`'s file to `<name>.damaged`, out of the segment namespace, so that
    /// nothing reads or overwrites it and a person can inspect it.
    public static func quarantineSegment(_ id: UInt32, in path: String) throws {
        let name = path + "/" + PackFormat.fileName(forSegment: id)
        try SystemCall.rename(name, to: name + ".damaged")
    }

    /// Makes the directory's entries (created or removed files) durable.
    public static func synchronize(_ path: String) throws {
        try SystemCall.fsyncDirectory(path)
    }
}
