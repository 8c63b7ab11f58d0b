// Every system call of the pack layer, in one place. Each retries on EINTR, completes short
// reads and writes, and throws PackError instead of returning -1.

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

    static func open(_ path: String, flags: Int32, mode: mode_t = 0o644) throws -> Int32 {
        while true {
            let fd = Glibc.open(path, flags | O_CLOEXEC, mode)
            if fd >= 0 { return fd }
            if errno == EINTR { continue }
            throw ioError("open", path: path, errno: errno)
        }
    }

    static func close(_ fd: Int32) {
        // Linux closes the descriptor even when close reports EINTR: never retry.
        _ = Glibc.close(fd)
    }

    /// Reads exactly `buffer.count` bytes at `offset`, or fewer only at end of file.
    static func pread(
        _ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64, path: String
    ) throws -> Int {
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
        _ fd: Int32, _ parts: [UnsafeRawBufferPointer], at offset: UInt64, path: String
    ) throws {
        var position = off_t(offset)
        for part in parts where part.count > 0 {
            var done = 0
            while done < part.count {
                let n = Glibc.pwrite(fd, part.baseAddress! + done, part.count - done, position)
                if n >= 0 {
                    done += n
                    position += off_t(n)
                } else if errno != EINTR {
                    throw ioError("pwrite", path: path, offset: offset, errno: errno)
                }
            }
        }
    }

    static func fdatasync(_ fd: Int32, path: String) throws {
        while Glibc.fdatasync(fd) != 0 {
            if errno != EINTR { throw ioError("fdatasync", path: path, errno: errno) }
        }
    }

    static func fsyncDirectory(_ path: String) throws {
        let fd = try open(path, flags: O_RDONLY | O_DIRECTORY)
        defer { close(fd) }
        while Glibc.fsync(fd) != 0 {
            if errno != EINTR { throw ioError("fsync", path: path, errno: errno) }
        }
    }

    static func size(_ fd: Int32, path: String) throws -> UInt64 {
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw ioError("fstat", path: path, errno: errno) }
        return UInt64(st.st_size)
    }

    static func truncate(_ fd: Int32, to length: UInt64, path: String) throws {
        while ftruncate(fd, off_t(length)) != 0 {
            if errno != EINTR { throw ioError("ftruncate", path: path, offset: length, errno: errno) }
        }
    }

    static func unlink(_ path: String) throws {
        guard Glibc.unlink(path) == 0 else { throw ioError("unlink", path: path, errno: errno) }
    }

    static func rename(_ from: String, to: String) throws {
        guard Glibc.rename(from, to) == 0 else { throw ioError("rename", path: from, errno: errno) }
    }

    /// The names in a directory, without "." and "..".
    static func listDirectory(_ path: String) throws -> [String] {
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

    static func makeDirectory(_ path: String) throws {
        if mkdir(path, 0o755) != 0 && errno != EEXIST {
            throw ioError("mkdir", path: path, errno: errno)
        }
    }
}
