public import Foundation
import TroveCore

/// One file per key under a two-level hashed fan-out: how iOS and Android image caches store
/// data (SDWebImage, Kingfisher, Glide, Coil's disk caches all keep a file per entry).
///
/// Written with POSIX calls so the durability is explicit (Foundation's `Data.write` fsyncs
/// every file on Linux). A put writes a temporary file and renames it over the entry; with
/// ``fsyncWrites`` the temporary file is fsynced before the rename. A get is one
/// open/fstat/read/close (read into an uninitialized buffer that the returned value then is:
/// no zero fill, no second copy), and on a hit touches the file's times, the LRU order such
/// caches keep; ``sweep(toBytes:)`` evicts the oldest files by those times.
///
/// A file holds a 4-byte ETag length, the ETag, then the value.
///
/// Puts and gets may run on several threads at once (each put has its own temporary file);
/// ``fsyncWrites`` changes only between workloads.
public final class FilePerEntryEngine: BlobStoring, @unchecked Sendable {
    public let directory: String
    /// fsync each file before renaming it into place.
    public var fsyncWrites: Bool
    private let temporaryCounter = Locked(0)

    public var name: String { fsyncWrites ? "FilePerEntry fsync" : "FilePerEntry" }

    /// Opens (creating) a cache in `directory`.
    public init(directory: String, fsyncWrites: Bool = false) throws {
        self.directory = directory
        self.fsyncWrites = fsyncWrites
        try SystemCall.makeDirectory(directory)
    }

    /// `<dir>/ab/cd/<16 hex digits of XXH3-64(key)>`, creating the two fan-out levels.
    private func path(for key: String, create: Bool) throws -> String {
        let digest = Array(key.utf8).withUnsafeBytes { XXH3.hash64($0) }
        let hex = String(digest, radix: 16)
        let name = String(repeating: "0", count: 16 - hex.count) + hex
        let first = directory + "/" + name.prefix(2)
        let second = first + "/" + name.dropFirst(2).prefix(2)
        if create && !SystemCall.isDirectory(second) {
            try SystemCall.makeDirectory(first)
            try SystemCall.makeDirectory(second)
        }
        return second + "/" + name
    }

    public func put(_ data: Data, key: String, etag: String) throws {
        let final = try path(for: key, create: true)
        let number = temporaryCounter.withLock { counter in
            counter += 1
            return counter
        }
        let temporary = final + ".tmp\(number)"
        let fd = try SystemCall.open(temporary, O_WRONLY | O_CREAT | O_TRUNC)
        do {
            var header = withUnsafeBytes(of: UInt32(etag.utf8.count).littleEndian) { Array($0) }
            header += Array(etag.utf8)
            try header.withUnsafeBytes { try SystemCall.pwriteAll(fd, $0, at: 0, path: temporary) }
            try data.withUnsafeBytes { try SystemCall.pwriteAll(fd, $0, at: UInt64(header.count), path: temporary) }
            if fsyncWrites { try SystemCall.fsync(fd, path: temporary) }
        } catch {
            SystemCall.close(fd)
            _ = SystemCall.unlink(temporary)
            throw error
        }
        SystemCall.close(fd)
        try SystemCall.rename(temporary, final)
    }

    public func get(_ key: String) throws -> Data? {
        let path = try path(for: key, create: false)
        guard let fd = try SystemCall.openIfExists(path, O_RDONLY) else { return nil }
        defer { SystemCall.close(fd) }
        let size = try SystemCall.fileSize(fd, path: path)
        // One read of the whole file; the value is the buffer past the header (one copy out of
        // the page cache, as a cache without a header makes).
        return try SystemCall.readOwned(count: size) { buffer in
            let n = try SystemCall.preadAll(fd, into: buffer, at: 0, path: path)
            guard n == size, n >= 4 else { throw BenchmarkError("short file \(path)") }
            try SystemCall.touch(fd, path: path)
            let etagLength = Int(UInt32(littleEndian: buffer.loadUnaligned(as: UInt32.self)))
            guard 4 + etagLength <= n else { throw BenchmarkError("bad header in \(path)") }
            return (4 + etagLength)..<n
        }
    }

    public func flush() throws {}
    public func close() throws {}

    /// The allocated bytes of `key`'s file (0 when absent).
    func allocatedBytes(of key: String) -> Int64 {
        guard let path = try? path(for: key, create: false) else { return 0 }
        var total: Int64 = 0
        FileTree.walk((path as NSString).deletingLastPathComponent) { if $0.path == path { total = $0.allocated } }
        return total
    }

    /// Deletes the least recently used files (oldest modification time) until the cache holds
    /// at most `limit` allocated bytes. Returns how many files were deleted.
    @discardableResult
    public func sweep(toBytes limit: Int64) -> Int {
        var files: [FileTree.File] = []
        var total: Int64 = 0
        FileTree.walk(directory) { file in
            total += file.allocated
            if !file.isDirectory { files.append(file) }
        }
        files.sort { ($0.modified.tv_sec, $0.modified.tv_nsec) < ($1.modified.tv_sec, $1.modified.tv_nsec) }
        var removed = 0
        for file in files where total > limit {
            if SystemCall.unlink(file.path) {
                total -= file.allocated
                removed += 1
            }
        }
        return removed
    }
}
