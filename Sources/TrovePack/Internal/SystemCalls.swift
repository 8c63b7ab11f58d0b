// Every system call of the pack layer, in one place. Each retries on EINTR, completes short
// reads and writes, throws PackError instead of returning -1, and asks the fault injector (a
// test seam; nil in production) before it runs.

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

enum SystemCall {
    static func errorText(_ code: Int32) -> String {
        String(cString: strerror(code))
    }

    static func ioError(_ call: String, path: String, offset: UInt64? = nil, errno code: Int32) -> PackError {
        PackError(
            code: .io, message: "\(call) failed on \(path): \(errorText(code))", path: path, offset: offset,
            errno: code)
    }

    /// Throws the injected error for `operation`, if any (short writes are handled by pwrite).
    private static func inject(
        _ faults: FaultInjector?, _ operation: FaultInjector.Operation, _ call: String, path: String, offset: UInt64? = nil
    ) throws(PackError) {
        guard let faults, case .error(let code)? = faults.fault(operation, path) else { return }
        throw ioError(call, path: path, offset: offset, errno: code)
    }

    /// Opens `path` without following a symbolic link in its last component, and refuses
    /// anything but a regular file (or a directory, with `O_DIRECTORY`): a FIFO would block, a
    /// device would read forever, and a link could point outside the store.
    static func open(_ path: String, flags: Int32, mode: mode_t = 0o644, faults: FaultInjector? = nil) throws(PackError)
        -> Int32
    {
        try inject(faults, .open, "open", path: path)
        let fd: Int32
        while true {
            let opened = Glibc.open(path, flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, mode)
            if opened >= 0 {
                fd = opened
                break
            }
            if errno == EINTR { continue }
            if errno == ELOOP {
                throw PackError(
                    code: .notASegment, message: "\(path) is a symbolic link; Trove does not follow links in its store",
                    path: path, errno: ELOOP)
            }
            if errno == EISDIR {
                throw PackError(
                    code: .notASegment, message: "\(path) is a directory, not a segment file", path: path, errno: EISDIR)
            }
            throw ioError("open", path: path, errno: errno)
        }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            // A failed call says nothing of what the file is (an I/O error, not "no segment").
            let code = errno
            close(fd)
            throw ioError("fstat", path: path, errno: code)
        }
        let kind = st.st_mode & S_IFMT
        let wanted = flags & O_DIRECTORY != 0 ? S_IFDIR : S_IFREG
        guard kind == wanted else {
            close(fd)
            throw PackError(
                code: .notASegment, message: "\(path) is not a \(wanted == S_IFDIR ? "directory" : "regular file")",
                path: path, errno: kind == S_IFDIR ? EISDIR : EINVAL)
        }
        // O_NONBLOCK only kept open() from hanging on a FIFO; a regular file ignores it, but
        // clear it anyway so the descriptor behaves as a plain one.
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        return fd
    }

    static func close(_ fd: Int32) {
        // Linux closes the descriptor even when close reports EINTR: never retry.
        _ = Glibc.close(fd)
    }

    /// Reads exactly `buffer.count` bytes at `offset`, or fewer only at end of file.
    static func pread(
        _ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64, path: String,
        faults: FaultInjector? = nil
    ) throws(PackError) -> Int {
        try inject(faults, .read, "pread", path: path, offset: offset)
        // An offset no file reaches (from a damaged index row) reads nothing, like the end of
        // the file: never an arithmetic trap.
        guard offset <= UInt64(Int64.max) - UInt64(buffer.count) else { return 0 }
        var done = 0
        while done < buffer.count {
            let n = Glibc.pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
            if n > 0 {
                done += n
            } else if n == 0 {
                break
            } else if errno != EINTR {
                throw ioError("pread", path: path, offset: offset, errno: errno)
            }
        }
        return done
    }

    /// Writes all of `parts`, in order, starting at `offset`.
    static func pwrite(
        _ fd: Int32, _ parts: [UnsafeRawBufferPointer], at offset: UInt64, path: String, faults: FaultInjector? = nil
    ) throws(PackError) {
        var budget = Int.max
        var failure: Int32?
        switch faults?.fault(.write, path) {
        case .error(let code)?: throw ioError("pwrite", path: path, offset: offset, errno: code)
        case .shortWrite(let bytes, let code)?:
            budget = bytes
            failure = code
        case nil: break
        }
        let total = parts.reduce(0) { $0 + $1.count }
        guard offset <= UInt64(Int64.max) - UInt64(total) else {
            throw ioError("pwrite", path: path, offset: offset, errno: EFBIG)
        }
        // One pwritev(2) for all parts (a record's header and body, or several records): a put
        // is one system call, not one per part. `budget` stops it short where a fault says so.
        let limit = min(total, budget)
        var done = 0
        while done < limit {
            let n = withUnsafeTemporaryAllocation(of: iovec.self, capacity: max(parts.count, 1)) { iov -> Int in
                // The iovecs of what is left: skip `done` bytes, stop at `limit`.
                var count = 0
                var skip = done
                var room = limit - done
                for part in parts where part.count > 0 && room > 0 {
                    if skip >= part.count {
                        skip -= part.count
                        continue
                    }
                    let length = min(part.count - skip, room)
                    iov[count] = iovec(iov_base: UnsafeMutableRawPointer(mutating: part.baseAddress! + skip), iov_len: length)
                    count += 1
                    room -= length
                    skip = 0
                }
                return Glibc.pwritev(fd, iov.baseAddress, Int32(count), off_t(offset) + off_t(done))
            }
            if n > 0 {
                done += n
            } else if n == 0 {
                throw ioError("pwritev", path: path, offset: offset, errno: EIO)
            } else if errno != EINTR {
                throw ioError("pwrite", path: path, offset: offset, errno: errno)
            }
        }
        if let failure { throw ioError("pwrite", path: path, offset: offset, errno: failure) }
    }

    static func fdatasync(_ fd: Int32, path: String, faults: FaultInjector? = nil) throws(PackError) {
        try inject(faults, .sync, "fdatasync", path: path)
        while Glibc.fdatasync(fd) != 0 {
            if errno != EINTR { throw ioError("fdatasync", path: path, errno: errno) }
        }
    }

    static func fsyncDirectory(_ path: String, faults: FaultInjector? = nil) throws(PackError) {
        try inject(faults, .sync, "fsync", path: path)
        let fd = try open(path, flags: O_RDONLY | O_DIRECTORY)
        defer { close(fd) }
        while Glibc.fsync(fd) != 0 {
            if errno != EINTR { throw ioError("fsync", path: path, errno: errno) }
        }
    }

    /// The file system's block size for the file (`st_blksize`), or nil.
    static func blockSize(_ fd: Int32) -> UInt64? {
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_blksize > 0 else { return nil }
        return UInt64(st.st_blksize)
    }

    static func size(_ fd: Int32, path: String) throws(PackError) -> UInt64 {
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw ioError("fstat", path: path, errno: errno) }
        return UInt64(st.st_size)
    }

    /// Where the hole that lasts to the end of a file of `size` bytes starts (`SEEK_DATA` and
    /// `SEEK_HOLE`): nil when the file's last byte is data, or when the file system cannot tell
    /// (it then reports every byte as data, or refuses the calls).
    static func trailingHole(_ fd: Int32, size: UInt64) -> UInt64? {
        // Linux's values (`_GNU_SOURCE` names Glibc does not export to Swift).
        let seekData: Int32 = 3
        let seekHole: Int32 = 4
        var offset: off_t = 0
        while UInt64(offset) < size {
            let data = lseek(fd, offset, seekData)
            if data < 0 { return errno == ENXIO ? UInt64(offset) : nil }
            let hole = lseek(fd, data, seekHole)
            guard hole > data else { return nil }
            offset = hole
        }
        return nil
    }

    /// `posix_fadvise(POSIX_FADV_WILLNEED)`: reads `range` into the page cache; errors ignored
    /// (a hint).
    static func willNeed(_ fd: Int32, _ range: Range<UInt64>) {
        _ = posix_fadvise(fd, off_t(range.lowerBound), off_t(range.count), POSIX_FADV_WILLNEED)
    }

    static func truncate(_ fd: Int32, to length: UInt64, path: String, faults: FaultInjector? = nil) throws(PackError) {
        try inject(faults, .truncate, "ftruncate", path: path, offset: length)
        while ftruncate(fd, off_t(length)) != 0 {
            if errno != EINTR { throw ioError("ftruncate", path: path, offset: length, errno: errno) }
        }
    }

    static func unlink(_ path: String, faults: FaultInjector? = nil) throws(PackError) {
        try inject(faults, .unlink, "unlink", path: path)
        guard Glibc.unlink(path) == 0 else { throw ioError("unlink", path: path, errno: errno) }
    }

    /// Renames `from` to `to`; with `replacing: false`, fails with EEXIST rather than replace
    /// an existing `to` (a check then a rename: callers hold the store's lock, so nothing else
    /// creates names in the directory meanwhile).
    static func rename(_ from: String, to: String, replacing: Bool = true, faults: FaultInjector? = nil) throws(PackError) {
        try inject(faults, .rename, "rename", path: from)
        if !replacing {
            var st = stat()
            if lstat(to, &st) == 0 { throw ioError("rename to \(to)", path: from, errno: EEXIST) }
        }
        guard Glibc.rename(from, to) == 0 else { throw ioError("rename", path: from, errno: errno) }
    }

    /// The names in a directory, without "." and "..".
    static func listDirectory(_ path: String) throws(PackError) -> [String] {
        guard let dir = opendir(path) else { throw ioError("opendir", path: path, errno: errno) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Creates the directory `path`; an existing directory is fine, anything else at that name
    /// (a file, a symbolic link) is refused.
    static func makeDirectory(_ path: String) throws(PackError) {
        if mkdir(path, 0o755) != 0 && errno != EEXIST {
            throw ioError("mkdir", path: path, errno: errno)
        }
        var st = stat()
        guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
            throw PackError(
                code: .io, message: "\(path) is not a directory (a symbolic link or a file is in its place)",
                path: path, errno: ENOTDIR)
        }
    }

    /// The size of the file at `path` (not following a link), or nil when there is none.
    static func fileSize(_ path: String) -> UInt64? {
        var st = stat()
        guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { return nil }
        return UInt64(st.st_size)
    }

    /// What is at `path`, not following a link: "file", "directory", "link", "other", or nil.
    static func kind(_ path: String) -> String? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        switch st.st_mode & S_IFMT {
        case S_IFREG: return "file"
        case S_IFDIR: return "directory"
        case S_IFLNK: return "link"
        default: return "other"
        }
    }
}
