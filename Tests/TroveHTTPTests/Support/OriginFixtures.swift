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

/// `count` bytes that sniff as JPEG: the SOI marker, then seeded noise.
func jpegLike(count: Int, seed: UInt64 = 1) -> [UInt8] {
    precondition(count >= 3)
    return [0xFF, 0xD8, 0xFF] + testBytes(seed: seed, count: count - 3)
}

/// `count` bytes that sniff as PNG: the signature, then seeded noise.
func pngLike(count: Int, seed: UInt64 = 2) -> [UInt8] {
    precondition(count >= 8)
    return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + testBytes(seed: seed, count: count - 8)
}
