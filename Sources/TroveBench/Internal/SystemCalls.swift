// The system calls of the benchmark engines, in one place: each retries on EINTR and throws
// BenchmarkError instead of returning -1.

import Foundation

#if canImport(Glibc)
    import Glibc
#endif

enum SystemCall {
    static func fail(_ call: String, _ path: String) -> BenchmarkError {
        BenchmarkError("\(call) \(path): \(String(cString: strerror(errno)))")
    }

    static func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0o644) throws -> Int32 {
        while true {
            let fd = Glibc.open(path, flags | O_CLOEXEC, mode)
            if fd >= 0 { return fd }
            if errno != EINTR { throw fail("open", path) }
        }
    }

    /// Like `open`, but nil when the file does not exist.
    static func openIfExists(_ path: String, _ flags: Int32) throws -> Int32? {
        while true {
            let fd = Glibc.open(path, flags | O_CLOEXEC)
            if fd >= 0 { return fd }
            if errno == ENOENT { return nil }
            if errno != EINTR { throw fail("open", path) }
        }
    }

    static func close(_ fd: Int32) { _ = Glibc.close(fd) }

    static func preadAll(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64, path: String) throws -> Int {
        var done = 0
        while done < buffer.count {
            let n = Glibc.pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
            if n > 0 { done += n } else if n == 0 { break } else if errno != EINTR { throw fail("pread", path) }
        }
        return done
    }

    /// A value read into an uninitialized buffer of `count` bytes that the returned `Data` then
    /// owns — no zero fill, no second copy: `fill` reads into the buffer and returns the range
    /// of it that is the value.
    static func readOwned(count: Int, _ fill: (UnsafeMutableRawBufferPointer) throws -> Range<Int>) throws -> Data {
        let base = UnsafeMutableRawPointer.allocate(byteCount: max(count, 1), alignment: 16)
        var handedOver = false
        defer { if !handedOver { base.deallocate() } }
        let value = try fill(UnsafeMutableRawBufferPointer(start: base, count: count))
        precondition(value.lowerBound >= 0 && value.upperBound <= count, "a range of the buffer")
        handedOver = true
        let start = value.lowerBound
        return Data(
            bytesNoCopy: base + start, count: value.count, deallocator: .custom { pointer, _ in (pointer - start).deallocate() })
    }

    static func pwriteAll(_ fd: Int32, _ buffer: UnsafeRawBufferPointer, at offset: UInt64, path: String) throws {
        var done = 0
        while done < buffer.count {
            let n = Glibc.pwrite(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
            if n > 0 {
                done += n
            } else if n == 0 {
                throw BenchmarkError("pwrite \(path): wrote nothing")
            } else if errno != EINTR {
                throw fail("pwrite", path)
            }
        }
    }

    static func fileSize(_ fd: Int32, path: String) throws -> Int {
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw fail("fstat", path) }
        return Int(st.st_size)
    }

    static func fsync(_ fd: Int32, path: String) throws {
        while Glibc.fsync(fd) != 0 { if errno != EINTR { throw fail("fsync", path) } }
    }

    static func fdatasync(_ fd: Int32, path: String) throws {
        while Glibc.fdatasync(fd) != 0 { if errno != EINTR { throw fail("fdatasync", path) } }
    }

    /// Sets the file's access and modification times to now.
    static func touch(_ fd: Int32, path: String) throws {
        guard futimens(fd, nil) == 0 else { throw fail("futimens", path) }
    }

    static func rename(_ from: String, _ to: String) throws {
        guard Glibc.rename(from, to) == 0 else { throw fail("rename", from) }
    }

    static func unlink(_ path: String) -> Bool { Glibc.unlink(path) == 0 }

    static func makeDirectory(_ path: String) throws {
        if mkdir(path, 0o755) != 0 && errno != EEXIST { throw fail("mkdir", path) }
    }

    static func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFDIR
    }
}

/// Walks a directory tree with lstat.
enum FileTree {
    struct File {
        var path: String
        var allocated: Int64
        var modified: timespec
        var isDirectory: Bool
    }

    static func walk(_ root: String, _ body: (File) -> Void) {
        guard let dir = opendir(root) else { return }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
            }
            if name == "." || name == ".." { continue }
            let path = root + "/" + name
            var st = stat()
            guard lstat(path, &st) == 0 else { continue }
            let isDirectory = st.st_mode & S_IFMT == S_IFDIR
            body(File(path: path, allocated: Int64(st.st_blocks) * 512, modified: st.st_mtim, isDirectory: isDirectory))
            if isDirectory { walk(path, body) }
        }
    }

    static func allocatedBytes(under root: String) -> Int64 {
        var total: Int64 = 0
        var st = stat()
        if stat(root, &st) == 0 { total += Int64(st.st_blocks) * 512 }
        walk(root) { total += $0.allocated }
        return total
    }

    /// Allocated bytes of the files under `root` whose names end with `suffix`.
    static func allocatedBytes(under root: String, suffix: String) -> Int64 {
        var total: Int64 = 0
        walk(root) { if !$0.isDirectory && $0.path.hasSuffix(suffix) { total += $0.allocated } }
        return total
    }
}

/// A failure of a benchmark engine or workload.
public struct BenchmarkError: Error, CustomStringConvertible, Sendable {
    /// What failed.
    public var description: String
    init(_ description: String) { self.description = description }
}
