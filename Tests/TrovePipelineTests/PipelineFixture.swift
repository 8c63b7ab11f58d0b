import Foundation
import Testing
import Trove
import TroveCodec
import TroveCore
import TroveHTTP
import TroveOrigin
import TroveStoreTestSupport
import TroveTestSupport

/// A real JPEG of `width` × `height`, its colours from `seed` (different seeds, different bytes).
func jpeg(_ width: Int = 320, _ height: Int = 240, seed: UInt8 = 0) throws -> [UInt8] {
    var pixels = [UInt8](repeating: 255, count: width * height * 4)
    for y in 0..<height {
        for x in 0..<width {
            let i = (y * width + x) * 4
            pixels[i] = UInt8(truncatingIfNeeded: x &+ Int(seed) &* 40)
            pixels[i + 1] = UInt8(truncatingIfNeeded: y &* 2 &+ Int(seed))
            pixels[i + 2] = UInt8(truncatingIfNeeded: (x ^ y) &+ Int(seed) &* 7)
        }
    }
    return try ImageEncoder.jpeg(RGBAImage(width: width, height: height, pixels: pixels), quality: 85)
}

/// A settable clock for freshness decisions.
final class PipelineClock: Sendable {
    private let now = Locked(Date())
    var date: Date { now.withLock { $0 } }
    func advance(_ seconds: TimeInterval) { now.withLock { $0 += seconds } }
    var reading: @Sendable () -> Date { { self.date } }
}

/// A pipeline over a real store in a temporary directory, fetching from a real origin on
/// 127.0.0.1 through AsyncHTTPClient.
struct PipelineFixture {
    let origin: OriginServer
    let pipeline: ImagePipeline
    let store: Store
    let memory: MemoryCache
    let clock: PipelineClock
    let http: HTTPOrigin

    /// Runs `body` with a fixture; everything is shut down afterwards.
    static func with(
        limits: OriginLimits = OriginLimits(connectTimeout: .seconds(2), requestTimeout: .seconds(5)),
        configureStore: (inout Store.Configuration) -> Void = { _ in },
        configure: (inout ImagePipeline.Configuration) -> Void = { _ in },
        _ body: (PipelineFixture) async throws -> Void
    ) async throws {
        try await withTemporaryDirectory { dir in
            let origin = try await OriginServer.start()
            let clock = PipelineClock()
            let memory = MemoryCache()
            var storeConfiguration = Store.Configuration()
            storeConfiguration.compactionInterval = nil
            configureStore(&storeConfiguration)
            memory.attach(to: &storeConfiguration)
            let store = try Store(directory: dir + "/store", configuration: storeConfiguration)
            let http = HTTPOrigin(limits: limits)
            var configuration = ImagePipeline.Configuration()
            configuration.clock = clock.reading
            configure(&configuration)
            let pipeline = ImagePipeline(store: store, memory: memory, origin: http, configuration: configuration)
            let fixture = PipelineFixture(
                origin: origin, pipeline: pipeline, store: store, memory: memory, clock: clock, http: http)
            do {
                try await body(fixture)
            } catch {
                try? await pipeline.shutdown()
                try? await http.shutdown()
                try? await origin.shutdown()
                try? store.close()
                throw error
            }
            try await pipeline.shutdown()
            try await http.shutdown()
            try await origin.shutdown()
            try store.close()
        }
    }

    func url(_ path: String) -> String { origin.url(path) }

    /// A resource whose `Date` is the fixture's clock: the origin's clock moves with it, so
    /// that an advanced clock does not make every later response look old (RFC 9111 §4.2.3).
    /// Set it again after advancing the clock.
    func resource(
        _ body: [UInt8], etag: String? = nil, lastModified: String? = nil, cacheControl: String? = nil,
        headDelay: Duration = .zero
    ) -> OriginResource {
        OriginResource(
            body: body, etag: etag, lastModified: lastModified, cacheControl: cacheControl,
            headers: [("Date", HTTPDate(clock.date).description)], headDelay: headDelay)
    }
}

/// A test step that took longer than its limit.
struct TimedOut: Error {}

/// Runs `body`, failing instead of hanging when it takes longer than `limit`.
func within<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else { throw TimedOut() }
        return value
    }
}
