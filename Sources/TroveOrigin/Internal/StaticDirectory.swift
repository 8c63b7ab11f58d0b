import NIOCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Static directory mode: request paths name regular files under one directory.
///
/// A path is percent-decoded and split into segments; an empty, `.` or `..` segment, a NUL, or
/// a path not starting with `/` is refused (404) before the file system is asked. The joined
/// path is then resolved with `realpath`, and the result must still lie under the directory's
/// own resolved path, so a symbolic link may point anywhere inside the directory but never out
/// of it. The file is opened without following a final link, and anything but a regular file
/// (a directory, a FIFO, a device) is a 404. `fstat` of the open descriptor gives the size and
/// modification time, so the validators describe the bytes that are read.
struct StaticDirectory: Sendable {
    /// The largest file served; larger ones are a 404 (this is a test and demo origin).
    static let maximumFileSize = 1 << 30

    /// The directory's resolved absolute path.
    let root: String
    /// The `Cache-Control` field sent with every file, if any.
    let cacheControl: String?

    /// Resolves `path`; throws when it is not a directory.
    init(path: String, cacheControl: String?) throws(OriginServerError) {
        guard let resolved = Self.realPath(path) else {
            throw OriginServerError(
                code: .invalidDirectory,
                message: "cannot serve \(path): it does not exist or cannot be resolved; pass an existing directory")
        }
        var info = stat()
        guard stat(resolved, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            throw OriginServerError(
                code: .invalidDirectory, message: "cannot serve \(path): it is not a directory; pass a directory")
        }
        root = resolved
        self.cacheControl = cacheControl
    }

    /// The file `requestPath` names, read whole, or nil (a 404). Blocking: runs on a thread pool.
    func load(_ requestPath: String) -> StoredResource? {
        guard let relative = Self.relativePath(requestPath) else { return nil }
        guard let resolved = Self.realPath(root + "/" + relative),
            // By bytes: `hasPrefix` would take a canonically equivalent sibling for the root.
            resolved.utf8.starts(with: (root == "/" ? "/" : root + "/").utf8)
        else { return nil }
        let descriptor = open(resolved, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        let size = Int(info.st_size)
        guard size <= Self.maximumFileSize else { return nil }
        var body = ByteBufferAllocator().buffer(capacity: size)
        var offset = 0
        while offset < size {
            var result = 0
            body.writeWithUnsafeMutableBytes(minimumWritableBytes: size - offset) { buffer in
                result = pread(descriptor, buffer.baseAddress, size - offset, off_t(offset))
                return max(result, 0)
            }
            if result < 0, errno == EINTR { continue }
            guard result > 0 else { return nil }  // the file shrank, or cannot be read
            offset += result
        }
        let seconds = Int(info.st_mtim.tv_sec)
        let nanoseconds = seconds * 1_000_000_000 + Int(info.st_mtim.tv_nsec)
        let resource = OriginResource(
            etag: "\"\(String(size, radix: 16))-\(String(nanoseconds, radix: 16))\"",
            lastModified: HTTPDate.format(secondsSinceEpoch: seconds), cacheControl: cacheControl,
            contentType: Self.contentType(of: resolved))
        return StoredResource(resource: resource, body: body)
    }

    /// The decoded path without its leading `/`, or nil when it is unsafe or malformed. Split
    /// and checked by bytes: split by characters, a combining or prepended mark would glue a
    /// `/` to its neighbour and hide a `..` segment.
    static func relativePath(_ requestPath: String) -> String? {
        guard requestPath.utf8.first == UInt8(ascii: "/"),
            let decoded = percentDecoded(Substring(requestPath.utf8.dropFirst()))
        else { return nil }
        let segments = decoded.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        guard !segments.isEmpty,
            segments.allSatisfy({ segment in
                !segment.isEmpty && !segment.elementsEqual(".".utf8) && !segment.elementsEqual("..".utf8)
                    && !segment.contains(0)
            })
        else { return nil }
        return decoded
    }

    private static func percentDecoded(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                return nil
            }
            bytes.append(high << 4 | low)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    private static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    private static func contentType(of path: String) -> String {
        let name = path.split(separator: "/").last.map(String.init) ?? ""
        let suffix = name.split(separator: ".").count > 1 ? name.split(separator: ".").last!.lowercased() : ""
        switch suffix {
        case "jpg", "jpeg": return "image/jpeg"
        case "png": return "image/png"
        case "webp": return "image/webp"
        case "gif": return "image/gif"
        case "svg": return "image/svg+xml"
        case "html", "htm": return "text/html; charset=utf-8"
        case "txt": return "text/plain; charset=utf-8"
        case "json": return "application/json"
        default: return "application/octet-stream"
        }
    }
}
