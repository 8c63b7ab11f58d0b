import Foundation
import TroveCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Fetches local originals from `file:` URLs, with validators made from the file's size and
/// modification time, so a stored copy is revalidated like an HTTP one.
///
/// - **Validators**: `ETag: "<size>-<mtime in ns>"` (both hexadecimal; any change of size or
///   modification time changes it) and `Last-Modified` (the modification time as an HTTP date).
///   A request whose `If-None-Match` entity tag matches (weak comparison), or — without an
///   entity tag — whose `If-Modified-Since` is not earlier than the modification time, gets a
///   304 without the file being read.
/// - **Which files**: regular files only; a directory, FIFO or device is ``OriginError/Code/io``
///   (nothing is opened in a way that could block). With a ``root``, only files whose resolved
///   path lies under it; others are a 403 status error. A missing file is a 404 status error.
/// - **Size**: a file over ``maximumBodySize`` is ``OriginError/Code/tooLarge`` before it is read.
/// - **Integrity**: the file is read through one descriptor, and its size and modification time
///   are checked again after reading; a file that changed meanwhile is
///   ``OriginError/Code/lengthMismatch`` (read it again). When an image is required, a file that
///   is not JPEG, PNG or WebP is ``OriginError/Code/notAnImage``, and one that ends before the
///   end its format marks (still being written, or cut) is ``OriginError/Code/truncated``.
/// - **Cancellation** is checked before the file is opened and between 1 MiB reads.
///
/// Reads are synchronous on the calling task's thread, in 1 MiB steps: local originals are
/// read about as fast as they are copied.
///
/// ```swift
/// let files = FileOrigin(root: "/srv/originals")
/// let response = try await files.fetch(OriginRequest(url: "file:///srv/originals/cat.jpg"))
/// ```
public struct FileOrigin: OriginFetching {
    /// The largest file read, in bytes. Default 64 MiB, as ``OriginLimits/maximumBodySize``.
    public var maximumBodySize: Int
    /// When set, only files under this directory (after resolving symbolic links) are read.
    public var root: String?

    private static let readSize = 1 << 20

    /// Makes a file fetcher.
    ///
    /// - Parameters:
    ///   - maximumBodySize: The largest file read; 64 MiB by default.
    ///   - root: The directory files must lie under; nil (the default) allows any readable file.
    public init(maximumBodySize: Int = OriginLimits().maximumBodySize, root: String? = nil) {
        self.maximumBodySize = maximumBodySize
        self.root = root
    }

    /// Reads the file `request.url` names; see ``FileOrigin`` for the rules.
    ///
    /// - Returns: A 200 with the file's bytes, or a 304 when the request's validators match.
    /// - Throws: ``OriginError``.
    public func fetch(_ request: OriginRequest) async throws(OriginError) -> OriginResponse {
        let url = request.url
        guard let path = Self.path(of: url) else {
            throw OriginError(
                code: .invalidURL,
                message: "\(url) is not a file URL with an absolute path on this host (file:///path)", url: url)
        }
        if Task.isCancelled { throw .cancelled(url) }
        let requestTime = Date()
        let resolved = try resolve(path, url: url)
        let file: ReadOnlyFile
        let status: ReadOnlyFile.Status
        do throws(SystemCalls.Failure) {
            file = try SystemCalls.openForReading(resolved)
            status = try file.status()
        } catch {
            throw Self.error(error, path: path, url: url)
        }
        guard status.isRegularFile else {
            throw OriginError(
                code: .io, message: "\(path) is not a regular file; only regular files are fetched", url: url)
        }
        guard status.size <= maximumBodySize else {
            throw OriginError(
                code: .tooLarge,
                message: "\(path) holds \(status.size) bytes, over the limit of \(maximumBodySize); not read",
                url: url)
        }

        let seconds =
            status.modificationNanoseconds >= 0
            ? status.modificationNanoseconds / 1_000_000_000 : (status.modificationNanoseconds + 1) / 1_000_000_000 - 1
        let entityTag = "\"\(String(status.size, radix: 16))-\(String(status.modificationNanoseconds, radix: 16))\""
        let lastModified = HTTPDate(secondsSince1970: seconds).description
        var headers: OriginHeaders = [("ETag", entityTag), ("Last-Modified", lastModified)]

        if Self.isNotModified(request.validators, entityTag: entityTag, modifiedSeconds: seconds) {
            return OriginResponse(
                status: 304, headers: headers, requestedURL: url, requestTime: requestTime, responseTime: Date())
        }

        let body = try read(file, status: status, path: path, url: url)
        let format = ImageFormat.sniff(body)
        if request.requiresImage {
            guard let format else { throw .notAnImage(url) }
            guard body.withUnsafeBytes({ ImageCompleteness.isComplete($0, format: format) }) else {
                throw .incompleteImage(url, format: format, received: body.count)
            }
        }
        headers.add(name: "Content-Length", value: String(body.count))
        headers.add(name: "Content-Type", value: format.map { "image/\($0.rawValue)" } ?? "application/octet-stream")
        return OriginResponse(
            status: 200, headers: headers, body: body, requestedURL: url, format: format, requestTime: requestTime,
            responseTime: Date())
    }

    // MARK: Paths

    /// The path of a `file:` URL: `file:///p` or `file://localhost/p`, percent-decoded.
    static func path(of url: String) -> String? {
        guard let parsed = URL(string: url), parsed.scheme?.lowercased() == "file" else { return nil }
        let host = parsed.host ?? ""
        guard host.isEmpty || host.lowercased() == "localhost" else { return nil }
        let path = parsed.path
        guard path.hasPrefix("/"), !path.contains("\0") else { return nil }
        return path
    }

    /// The file's resolved path, checked against ``root``.
    private func resolve(_ path: String, url: String) throws(OriginError) -> String {
        let resolved: String
        do throws(SystemCalls.Failure) {
            resolved = try SystemCalls.resolvedPath(path)
        } catch {
            throw Self.error(error, path: path, url: url)
        }
        guard let root else { return resolved }
        let resolvedRoot: String
        do throws(SystemCalls.Failure) {
            resolvedRoot = try SystemCalls.resolvedPath(root)
        } catch {
            throw OriginError(
                code: .io, message: "the root directory \(root) cannot be resolved: \(error.description)", url: url,
                underlying: error)
        }
        // By bytes: `hasPrefix` compares characters, and would take a sibling directory whose
        // name is a canonically equivalent spelling of the root's for the root itself.
        guard resolved.utf8.starts(with: (resolvedRoot == "/" ? "/" : resolvedRoot + "/").utf8) else {
            throw OriginError(
                code: .status, message: "\(path) lies outside \(root), the only directory files are fetched from",
                url: url, status: 403)
        }
        return resolved
    }

    // MARK: Reading

    private func read(_ file: ReadOnlyFile, status: ReadOnlyFile.Status, path: String, url: String)
        throws(OriginError) -> Data
    {
        enum Outcome {
            case complete, cancelled, changed
            case failed(SystemCalls.Failure)
        }
        var data = Data(count: status.size)
        let outcome: Outcome = data.withUnsafeMutableBytes { buffer in
            var offset = 0
            do throws(SystemCalls.Failure) {
                while offset < status.size {
                    if Task.isCancelled { return .cancelled }
                    let end = min(offset + Self.readSize, status.size)
                    let count = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[offset..<end]), at: offset)
                    if count == 0 { return .changed }  // the file shrank
                    offset += count
                }
                // One byte more would mean the file grew.
                // (A scoped withUnsafeMutableBytes would lose the typed throws.)
                let probe = UnsafeMutableRawBufferPointer.allocate(byteCount: 1, alignment: 1)
                defer { probe.deallocate() }
                return try file.read(into: probe, at: offset) == 0 ? .complete : .changed
            } catch {
                return .failed(error)
            }
        }
        switch outcome {
        case .complete:
            break
        case .cancelled:
            throw .cancelled(url)
        case .failed(let failure):
            throw Self.error(failure, path: path, url: url)
        case .changed:
            throw Self.changed(path, url: url)
        }
        let after: ReadOnlyFile.Status
        do throws(SystemCalls.Failure) {
            after = try file.status()
        } catch {
            throw Self.error(error, path: path, url: url)
        }
        guard after == status else { throw Self.changed(path, url: url) }
        return data
    }

    // MARK: Validators

    /// Whether the stored response the validators describe is the file as it is now.
    static func isNotModified(_ validators: Validators, entityTag: String, modifiedSeconds: Int64) -> Bool {
        if let stored = validators.entityTag {
            // Weak comparison, by octets (RFC 9110 §8.8.3), not as Swift strings.
            return Validators.weaklyMatch(stored, entityTag)
        }
        guard let stored = validators.lastModified, let date = HTTPDate(stored, now: Date()) else { return false }
        return modifiedSeconds <= date.secondsSince1970
    }

    // MARK: Errors

    private static func error(_ failure: SystemCalls.Failure, path: String, url: String) -> OriginError {
        switch failure.code {
        case ENOENT, ENOTDIR:
            OriginError(code: .status, message: "\(path) does not exist", url: url, status: 404, underlying: failure)
        case EACCES, EPERM:
            OriginError(
                code: .status, message: "\(path) cannot be read: permission denied", url: url, status: 403,
                underlying: failure)
        default:
            OriginError(
                code: .io, message: "\(path) cannot be read: \(failure.description)", url: url, underlying: failure)
        }
    }

    private static func changed(_ path: String, url: String) -> OriginError {
        OriginError(
            code: .lengthMismatch, message: "\(path) changed while it was read; nothing was kept, fetch it again",
            url: url)
    }
}
