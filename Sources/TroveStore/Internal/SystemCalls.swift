// Every system call of the TroveStore module (the process lock, directory creation, file
// sizes), in one place: each retries on EINTR and reports failure through a thrown StoreError —
// but for the two best-effort helpers of the lock file's pid (`readAll`, `replaceContents`),
// which retry on EINTR and otherwise give up quietly.

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

    /// The size of the regular file at `path` (not following a link), or nil when there is none.
    static func fileSize(_ path: String) -> Int64? {
        var st = stat()
        guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { return nil }
        return Int64(st.st_size)
    }

    /// What is at `path`, not following a link: its `S_IFMT` bits, or nil when nothing is.
    static func fileKind(_ path: String) -> mode_t? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        return st.st_mode & S_IFMT
    }

    /// Opens (creating) the lock file without following a symbolic link, and refuses anything
    /// but a regular file: the pid written into it must never land outside the store.
    static func openLockFile(_ path: String) throws(StoreError) -> Int32 {
        var fd: Int32 = -1
        while true {
            fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0o644)
            if fd >= 0 { break }
            if errno == EINTR { continue }
            let reason = errno == ELOOP ? "it is a symbolic link; remove it" : errorText(errno)
            throw StoreError(code: .invalidDirectory, message: "cannot open lock file \(path): \(reason)")
        }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw StoreError(
                code: .invalidDirectory, message: "cannot use lock file \(path): it is not a regular file; remove it")
        }
        return fd
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

    /// Up to `limit` bytes from the start of the file.
    static func readAll(_ fd: Int32, limit: Int) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: limit)
        var n = -1
        while n < 0 {
            n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, limit, 0) }
            if n < 0 && errno != EINTR { return [] }
        }
        return Array(buffer[0..<n])
    }

    /// Replaces the file's contents with `bytes` (best effort: the pid in the lock file is a
    /// courtesy to whoever is refused the lock).
    static func replaceContents(_ fd: Int32, with bytes: [UInt8]) {
        while ftruncate(fd, 0) != 0 && errno == EINTR {}
        var done = 0
        while done < bytes.count {
            let n = bytes[done...].withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(done)) }
            if n > 0 {
                done += n
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                return
            }
        }
    }

    static func close(_ fd: Int32) { _ = Glibc.close(fd) }

    /// Renames `from` to `to` (replacing `to`), or throws `.io` naming both.
    static func rename(_ from: String, to: String) throws(StoreError) {
        guard Glibc.rename(from, to) == 0 else {
            throw StoreError(code: .io, message: "cannot rename \(from) to \(to): \(errorText(errno))")
        }
    }

    /// Removes the file at `path`; a missing file is not an error.
    static func removeFile(_ path: String) throws(StoreError) {
        guard unlink(path) == 0 || errno == ENOENT else {
            throw StoreError(code: .io, message: "cannot remove \(path): \(errorText(errno))")
        }
    }

    static var processID: Int32 { getpid() }

    /// Sleeps the calling thread.
    static func pause(milliseconds: Int) { usleep(useconds_t(milliseconds * 1000)) }
}
