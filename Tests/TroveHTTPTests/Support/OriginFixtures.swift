import AsyncHTTPClient
import TroveOrigin
import TroveTestSupport

/// Runs `body` with a fresh origin on 127.0.0.1 — serving `directory` when given — and shuts
/// it down afterwards, thrown or not.
func withOriginServer<T>(
    serving directory: String? = nil, cacheControl: String? = nil, _ body: (OriginServer) async throws -> T
) async throws -> T {
    let origin =
        if let directory {
            try await OriginServer.start(serving: directory, cacheControl: cacheControl)
        } else {
            try await OriginServer.start()
        }
    do {
        let result = try await body(origin)
        try await origin.shutdown()
        return result
    } catch {
        try? await origin.shutdown()
        throw error
    }
}

/// Runs `body` with a plain AsyncHTTPClient (no redirects followed) and shuts it down afterwards.
func withPlainClient<T>(_ body: (HTTPClient) async throws -> T) async throws -> T {
    var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow)
    configuration.httpVersion = .http1Only
    let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    do {
        let result = try await body(client)
        try await client.shutdown()
        return result
    } catch {
        try? await client.shutdown()
        throw error
    }
}

/// `count` bytes of a structurally whole JPEG (not decodable): SOI, comment segments of
/// seeded noise, EOI. `count` is 4 or at least 8.
func jpegLike(count: Int, seed: UInt64 = 1) -> [UInt8] {
    precondition(count == 4 || count >= 8)
    let noise = testBytes(seed: seed, count: count)
    var bytes: [UInt8] = [0xFF, 0xD8]
    bytes.reserveCapacity(count)
    var remaining = count - 4
    while remaining > 0 {
        var segment = min(remaining, 65_537)
        if (1..<4).contains(remaining - segment) { segment -= 4 }  // room for a last segment
        let length = segment - 2
        bytes += [0xFF, 0xFE, UInt8(length >> 8), UInt8(length & 0xFF)]
        bytes += noise[bytes.count..<(bytes.count + segment - 4)]
        remaining -= segment
    }
    return bytes + [0xFF, 0xD9]
}

/// `count` (at least 32) bytes of a structurally whole PNG (not decodable): the signature, a
/// text chunk of seeded noise, IEND.
func pngLike(count: Int, seed: UInt64 = 2) -> [UInt8] {
    precondition(count >= 32)
    let length = count - 32
    let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
    let text = bigEndian(UInt32(length)) + Array("tEXt".utf8) + testBytes(seed: seed, count: length) + [0, 0, 0, 0]
    return signature + text + [0, 0, 0, 0] + Array("IEND".utf8) + [0xAE, 0x42, 0x60, 0x82]
}

/// `count` (at least 12) bytes of a structurally whole WebP (not decodable): a RIFF header
/// whose size covers seeded noise.
func webpLike(count: Int, seed: UInt64 = 3) -> [UInt8] {
    precondition(count >= 12)
    let size = UInt32(count - 8)
    let sizeBytes = [UInt8(size & 0xFF), UInt8(size >> 8 & 0xFF), UInt8(size >> 16 & 0xFF), UInt8(size >> 24)]
    return Array("RIFF".utf8) + sizeBytes + Array("WEBP".utf8) + testBytes(seed: seed, count: count - 12)
}

private func bigEndian(_ value: UInt32) -> [UInt8] {
    [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
}
