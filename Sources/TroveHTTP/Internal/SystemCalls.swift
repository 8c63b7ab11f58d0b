#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The system calls of ``FileOrigin``: each retries on `EINTR` and throws the `errno` of a
/// failure; no caller sees `-1`.
enum SystemCalls {
    /// An `errno` value.
    struct Failure: Error {
        var code: Int32
        var description: String { String(cString: strerror(code)) }
    }

    /// Opens `path` for reading: close-on-exec, not following a final symbolic link (a path
    /// already resolved has none), and non-blocking so a FIFO cannot hold the caller.
    static func openForReading(_ path: String) throws(Failure) -> ReadOnlyFile {
        while true {
            let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
            if descriptor >= 0 { return ReadOnlyFile(descriptor: descriptor) }
            if errno != EINTR { throw Failure(code: errno) }
        }
    }

    /// `realpath(3)`: `path` with every symbolic link, `.` and `..` resolved.
    static func resolvedPath(_ path: String) throws(Failure) -> String {
        guard let resolved = realpath(path, nil) else { throw Failure(code: errno) }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}

/// An open file descriptor, closed when this value is released.
final class ReadOnlyFile {
    /// What `fstat` says of the file.
    struct Status: Equatable {
        var isRegularFile: Bool
        var size: Int
        /// The modification time in nanoseconds since 1970.
        var modificationNanoseconds: Int64
    }

    private let descriptor: Int32

    init(descriptor: Int32) { self.descriptor = descriptor }

    deinit { close(descriptor) }

    func status() throws(SystemCalls.Failure) -> Status {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw SystemCalls.Failure(code: errno) }
        return Status(
            isRegularFile: info.st_mode & S_IFMT == S_IFREG, size: Int(info.st_size),
            modificationNanoseconds: Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec))
    }

    /// Reads up to `count` bytes at `offset` into `buffer`; 0 at the end of the file.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws(SystemCalls.Failure) -> Int {
        while true {
            let count = pread(descriptor, buffer.baseAddress, buffer.count, off_t(offset))
            if count >= 0 { return count }
            if errno != EINTR { throw SystemCalls.Failure(code: errno) }
        }
    }
}
