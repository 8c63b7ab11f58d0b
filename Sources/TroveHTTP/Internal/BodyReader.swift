import AsyncHTTPClient
import Foundation
import NIOCore
import TroveCore

/// Reads a 200's body into memory within the size limit, and checks it is whole.
///
/// - A declared `Content-Length` over the limit fails before a byte is read.
/// - Each chunk is counted before it is kept: the one that would pass the limit fails the read,
///   so at most `limit` bytes are ever buffered, whatever the origin sends.
/// - When an image is required, the first 12 bytes decide (``ImageFormat/sniff(_:)``), and a
///   body that is none fails there, without downloading the rest.
/// - At the end, the count must equal the declared length: fewer is `truncated`, more is
///   `lengthMismatch`. A connection that fails mid-body is `truncated` too.
/// - When an image is required, it must reach the end its format marks
///   (``ImageCompleteness``): a body whose framing understated it, or whose close-delimited
///   connection was cut, is `truncated`.
/// - A body stream ended by the task's cancellation (it may simply stop) is `cancelled`,
///   never taken for a complete body.
struct BodyReader {
    let url: String
    let limit: Int
    let requiresImage: Bool

    /// The first bytes a format check needs (a WebP header is the longest: 12).
    private static let sniffLength = 12
    /// The most memory reserved up front from a declared length, which the origin may lie about;
    /// past it the buffer grows as bytes actually arrive.
    private static let reservationLimit = 4 << 20

    func read(_ body: HTTPClientResponse.Body, headers: OriginHeaders) async throws(OriginError) -> (
        Data, ImageFormat?
    ) {
        let declared = Self.declaredLength(headers)
        if let declared, declared > limit {
            throw OriginError(
                code: .tooLarge,
                message: "\(url) declares \(declared) bytes, over the limit of \(limit); not downloaded "
                    + "(raise OriginLimits.maximumBodySize to accept it)",
                url: url)
        }
        var data = Data()
        data.reserveCapacity(min(declared ?? 64 * 1024, Self.reservationLimit))
        var formatChecked = !requiresImage
        var iterator = body.makeAsyncIterator()
        while true {
            let next: ByteBuffer?
            do {
                next = try await iterator.next()
            } catch {
                if Task.isCancelled { throw .cancelled(url) }
                throw OriginError(
                    code: .truncated,
                    message: "the connection to \(url) failed after \(data.count) of "
                        + "\(declared.map(String.init) ?? "an undeclared number of") body bytes: \(error); "
                        + "nothing was kept, try again",
                    url: url, underlying: error)
            }
            guard let chunk = next else { break }
            guard chunk.readableBytes <= limit - data.count else {
                throw OriginError(
                    code: .tooLarge,
                    message: "\(url) sent more than the limit of \(limit) bytes; stopped there, nothing was kept "
                        + "(raise OriginLimits.maximumBodySize to accept it)",
                    url: url)
            }
            chunk.withUnsafeReadableBytes { data.append($0.assumingMemoryBound(to: UInt8.self)) }
            if !formatChecked, data.count >= Self.sniffLength {
                formatChecked = true
                guard ImageFormat.sniff(data) != nil else { throw .notAnImage(url) }
            }
        }
        // The stream may end early, without an error, because the task was cancelled.
        if Task.isCancelled { throw .cancelled(url) }
        if let declared, data.count != declared {
            let shorter = data.count < declared
            throw OriginError(
                code: shorter ? .truncated : .lengthMismatch,
                message: "\(url) declared \(declared) bytes but sent \(data.count)"
                    + (shorter ? " before the connection ended" : "") + "; nothing was kept, try again",
                url: url)
        }
        let format = ImageFormat.sniff(data)
        if requiresImage {
            guard let format else { throw .notAnImage(url) }
            guard data.withUnsafeBytes({ ImageCompleteness.isComplete($0, format: format) }) else {
                throw .incompleteImage(url, format: format, received: data.count)
            }
        }
        return (data, format)
    }

    /// The `Content-Length` a body is framed by: nil with `Transfer-Encoding` (which overrides
    /// it, RFC 9112 §6.3) or without one. The HTTP parser has already refused conflicting or
    /// malformed values.
    static func declaredLength(_ headers: OriginHeaders) -> Int? {
        guard !headers.contains("Transfer-Encoding"), let value = headers["Content-Length"] else { return nil }
        let digits = value.trimmingCharacters(in: .whitespaces)
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return nil
        }
        return Int(digits) ?? Int.max
    }
}
