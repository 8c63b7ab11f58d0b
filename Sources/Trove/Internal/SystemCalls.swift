// Every system call of the Trove module (the process lock, directory creation, file sizes),
// in one place: each retries on EINTR and reports failure through a thrown StoreError.

#if canImport(Glibc)
    import Glibc
#endif

enum SystemCall {
    static func errorText(_ code: Int32) -> String { String(cString: strerror(code)) }

    /// Creates `path` and its missing parents.
    static func makeDirectories(_ path: String) throws(StoreError) {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/" + component
            if mkdir(current, 0o755) != 0 && errno != EEXIST {
                throw StoreError(
                    code: .invalidDirectory,
                    message: "cannot create directory \(current): \(errorText(errno))")
            }
        }
        var st = stat()
        guard stat(path, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
            throw StoreError(code: .invalidDirectory, message: "\(path) is not a directory")
        }
    }

    /// The size of the file at `path`, or nil when it does not exist.
    static func fileSize(_ path: String) -> Int64? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return Int64(st.st_size)
    }

    static func openLockFile(_ path: String) throws(StoreError) -> Int32 {
        while true {
            let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
            if fd >= 0 { return fd }
            if errno == EINTR { continue }
            throw StoreError(code: .invalidDirectory, message: "cannot open lock file \(path): \(errorText(errno))")
        }
    }

    /// Takes an exclusive flock without waiting; false when another open file holds it.
    static func tryLock(_ fd: Int32, path: String) throws(StoreError) -> Bool {
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            if errno == EINTR { continue }
            if errno == EWOULDBLOCK { return false }
            throw StoreError(code: .io, message: "cannot lock \(path): \(errorText(errno))")
        }
        return true
    }

    static func readAll(_ fd: Int32, limit: Int) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: limit)
        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, limit, 0) }
        return n > 0 ? Array(buffer[0..<n]) : []
    }

    static func replaceContents(_ fd: Int32, with bytes: [UInt8]) {
        _ = ftruncate(fd, 0)
        _ = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
    }

    static func close(_ fd: Int32) { _ = Glibc.close(fd) }

    static var processID: Int32 { getpid() }
}
