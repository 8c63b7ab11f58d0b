import AsyncHTTPClient
import Dispatch
import Foundation
import NIOCore
import NIOHTTP1
import Trove
import TroveCodec
import TroveCore
import TroveHTTP
import TroveOrigin
import TroveStore

/// The pipeline's rows of ``BenchmarkSuite`` (Docs/Benchmarks.md § Pipeline):
///
/// - **pipeline disk hit 4KiB / 64KiB**: `ImagePipeline.image(for:)` with no memory tier, so
///   every call is a fresh entry read from the store (its freshness judged from its stored
///   policy), against `Store.data(for:)` of the same keys in the same order, in the same task.
/// - **cold fetch 64KiB ×N c16**: N distinct 64 KiB JPEGs from a loopback origin, 16 at a time,
///   into an empty store through the pipeline (fetch, check, store, memory), against bare
///   AsyncHTTPClient GETs of the same URLs collecting the same bodies. Both clients allow 16
///   connections to the host; the bare run goes first once untimed so both find the origin's
///   files warm.
///
/// Every response is checked: the pipeline's bytes must be the origin's, and the bare GETs'
/// bodies must have the right length.
enum PipelineBenchmark {
    /// Runs the pipeline workloads (blocking the calling thread, which must not be one of
    /// Swift's cooperative threads).
    static func run(
        plan: BenchmarkPlan, pool: ContentPool, directory: String, progress: @escaping @Sendable (String) -> Void
    ) throws -> [BenchmarkResult] {
        let box = Locked<Result<[BenchmarkResult], any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            let result: Result<[BenchmarkResult], any Error>
            do {
                var rows: [BenchmarkResult] = []
                for size in [4 << 10, 64 << 10] {
                    rows += try await diskHits(plan: plan, size: size, directory: directory + "/disk-\(size)", progress: progress)
                }
                rows += try await coldFetch(plan: plan, directory: directory + "/cold", progress: progress)
                result = .success(rows)
            } catch {
                result = .failure(error)
            }
            box.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        return try box.withLock { $0! }.get()
    }

    /// DESIGN.md's pipeline targets, checked against `results`.
    static func targets(_ results: [BenchmarkResult]) -> [TargetCheck] {
        func find(_ workload: String, _ engine: String) -> BenchmarkResult? {
            results.first { $0.workload == workload && $0.engine == engine }
        }
        var checks: [TargetCheck] = []
        for size in ["4KiB", "64KiB"] {
            let workload = "pipeline disk hit \(size)"
            guard let pipeline = find(workload, "Trove ImagePipeline"), let store = find(workload, "Trove Store.data") else {
                continue
            }
            let r = store.opsPerSecond / pipeline.opsPerSecond
            checks.append(
                TargetCheck(target: "\(workload): time vs Store.data", measured: r, required: "≤ 1.5×", met: r <= 1.5))
        }
        if let pipeline = results.first(where: { $0.workload.hasPrefix("cold fetch") && $0.engine == "Trove ImagePipeline" }),
            let bare = find(pipeline.workload, "AsyncHTTPClient")
        {
            let r = pipeline.seconds / bare.seconds
            checks.append(
                TargetCheck(target: "\(pipeline.workload): time vs bare GETs", measured: r, required: "≤ 1.2×", met: r <= 1.2))
        }
        return checks
    }

    // MARK: Disk hits

    static func diskHits(
        plan: BenchmarkPlan, size: Int, directory: String, progress: (String) -> Void
    ) async throws -> [BenchmarkResult] {
        let label = size == 4 << 10 ? "4KiB" : "64KiB"
        let workload = "pipeline disk hit \(label)"
        progress(workload)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var configuration = Store.Configuration()
        configuration.compactionInterval = nil
        let store = try Store(directory: directory, configuration: configuration)
        defer { try? store.close() }
        // Entries as the pipeline stores them: fresh for an hour by their policy.
        let now = Date()
        let freshness = ResponseFreshness(
            status: 200, headers: [(name: "Cache-Control", value: "max-age=3600"), (name: "ETag", value: "\"b\"")],
            requestTime: now, responseTime: now)
        let metadata = EntryMetadata(
            etag: "\"b\"", expiresAt: freshness.policy.hardExpiry(settings: FreshnessSettings()),
            cachePolicy: freshness.policy.encoded)
        let count = 2_000
        var values: [Data] = []
        for i in 0..<count {
            var bytes = [UInt8](repeating: 0, count: size)
            var state = UInt64(i) &* 0x9E37_79B9_7F4A_7C15 | 1
            for j in 0..<size {
                state ^= state << 13
                state ^= state >> 7
                state ^= state << 17
                bytes[j] = UInt8(truncatingIfNeeded: state)
            }
            let data = Data(bytes)
            values.append(data)
            try store.put(data, for: CacheKey(url: "https://bench.example/\(i).jpg"), metadata: metadata)
        }
        try store.flush()
        let origin = UnreachableOrigin()
        let pipeline = ImagePipeline(store: store, memory: nil, origin: origin)
        let operations = plan.operations(20_000)
        var order = [Int](repeating: 0, count: operations)
        var generator = SplitMix(state: 7)
        for i in 0..<operations { order[i] = Int(generator.next() % UInt64(count)) }
        let urls = (0..<count).map { "https://bench.example/\($0).jpg" }
        let keys = urls.map { CacheKey(url: $0) }
        // Warm both paths once (page cache, the location map).
        for key in keys { _ = try store.data(for: key) }

        let clock = ContinuousClock()
        var rows: [BenchmarkResult] = []
        for round in 0..<2 {
            var direct = Measurement()
            for i in order {
                let start = clock.now
                let data = try store.data(for: keys[i])
                let elapsed = clock.now - start
                direct.latencies.append(nanoseconds(elapsed))
                direct.total += elapsed
                guard data?.count == size else { throw BenchmarkError("\(workload): Store.data returned the wrong bytes") }
            }
            var piped = Measurement()
            for i in order {
                let start = clock.now
                let response = try await pipeline.image(for: urls[i])
                let elapsed = clock.now - start
                piped.latencies.append(nanoseconds(elapsed))
                piped.total += elapsed
                guard response.source == .disk, response.data == values[i] else {
                    throw BenchmarkError("\(workload): the pipeline served \(response.source), not the stored bytes")
                }
            }
            // The second round is kept: both paths warm.
            if round == 1 {
                rows.append(row(workload, "Trove Store.data", direct))
                rows.append(row(workload, "Trove ImagePipeline", piped))
            }
        }
        return rows
    }

    // MARK: Cold fetches

    static func coldFetch(
        plan: BenchmarkPlan, directory: String, progress: (String) -> Void
    ) async throws -> [BenchmarkResult] {
        let count = plan.operationScale >= 1 ? 1_000 : 200
        let workload = "cold fetch 64KiB ×\(count) c16"
        progress(workload)
        let bodies = try distinctJPEGs(count: count, size: 64 << 10)
        let origin = try await OriginServer.start()
        defer { Task { try? await origin.shutdown() } }
        for (i, body) in bodies.enumerated() {
            origin.set("/\(i).jpg", OriginResource(body: body, etag: "\"\(i)\"", cacheControl: "max-age=3600"))
        }
        let urls = (0..<count).map { origin.url("/\($0).jpg") }
        // Each client opens its 16 connections on this before its timed run.
        origin.set("/warm.jpg", OriginResource(body: bodies[0], etag: "\"w\"", cacheControl: "max-age=3600"))
        let warm = [String](repeating: origin.url("/warm.jpg"), count: 64)

        var clientConfiguration = HTTPClient.Configuration()
        clientConfiguration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 16
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfiguration)
        let bare: Measurement
        do {
            _ = try await concurrently(warm, width: 16) { url in _ = try await bareGET(client, url) }

            bare = try await concurrently(Array(urls.enumerated()), width: 16) { item in
                let body = try await bareGET(client, item.element)
                guard body.withUnsafeReadableBytes({ same($0, bodies[item.offset]) }) else {
                    throw BenchmarkError("\(workload): a bare GET got other bytes")
                }
            }
        } catch {
            try? await client.shutdown()
            throw error
        }
        try await client.shutdown()

        // The transport alone (HTTPOrigin: limits, timer, image check), to show where the
        // pipeline's time goes.
        let transportOnly = HTTPOrigin(limits: OriginLimits(maximumConcurrentRequestsPerHost: 16))
        let transport: Measurement
        do {
            _ = try await concurrently(warm, width: 16) { url in _ = try await transportOnly.fetch(OriginRequest(url: url)) }
            transport = try await concurrently(Array(urls.enumerated()), width: 16) { item in
                let response = try await transportOnly.fetch(OriginRequest(url: item.element))
                guard response.body.withUnsafeBytes({ same($0, bodies[item.offset]) }) else {
                    throw BenchmarkError("\(workload): HTTPOrigin got other bytes")
                }
            }
        } catch {
            try? await transportOnly.shutdown()
            throw error
        }
        try await transportOnly.shutdown()

        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var storeConfiguration = Store.Configuration()
        storeConfiguration.compactionInterval = nil
        let http = HTTPOrigin(limits: OriginLimits(maximumConcurrentRequestsPerHost: 16))
        let pipeline: ImagePipeline
        do {
            pipeline = try ImagePipeline.open(directory: directory, storeConfiguration: storeConfiguration, origin: http)
        } catch {
            try? await http.shutdown()
            throw error
        }
        let piped: Measurement
        do {
            _ = try await concurrently(warm, width: 16) { url in _ = try await http.fetch(OriginRequest(url: url)) }
            piped = try await concurrently(Array(urls.enumerated()), width: 16) { item in
                let response = try await pipeline.image(for: item.element)
                guard response.source == .network, response.data.withUnsafeBytes({ same($0, bodies[item.offset]) }) else {
                    throw BenchmarkError("\(workload): the pipeline served \(response.source) or other bytes")
                }
            }
            try pipeline.store.flush()
        } catch {
            try? await pipeline.shutdown()
            try? await http.shutdown()
            throw error
        }
        try await pipeline.shutdown()
        try await http.shutdown()
        // The process's CPU per image shows where the time goes when the run is not CPU-bound
        // (it includes the in-process origin's share, the same for every row).
        return [
            row(workload, "AsyncHTTPClient", bare, cpu: true), row(workload, "Trove HTTPOrigin", transport, cpu: true),
            row(workload, "Trove ImagePipeline", piped, cpu: true),
        ]
    }

    /// GETs `url` and collects its body.
    static func bareGET(_ client: HTTPClient, _ url: String) async throws -> ByteBuffer {
        let response = try await client.execute(HTTPClientRequest(url: url), timeout: .seconds(30))
        guard response.status == .ok else { throw BenchmarkError("bare GET \(url): \(response.status)") }
        return try await response.body.collect(upTo: 1 << 20)
    }

    /// Whether `bytes` are `expected`, compared in place (every row checks the bytes it got the
    /// same way, without copying them).
    static func same(_ bytes: UnsafeRawBufferPointer, _ expected: [UInt8]) -> Bool {
        bytes.count == expected.count
            && expected.withUnsafeBytes { memcmp($0.baseAddress!, bytes.baseAddress!, bytes.count) == 0 }
    }

    /// Runs `body` for every item, `width` at a time; the whole wall time and each item's time.
    static func concurrently<Item: Sendable>(
        _ items: [Item], width: Int, _ body: @escaping @Sendable (Item) async throws -> Void
    ) async throws -> Measurement {
        let clock = ContinuousClock()
        let start = clock.now
        let cpuStart = processCPUSeconds()
        ResidentMemory.resetPeak()
        var measurement = Measurement()
        try await withThrowingTaskGroup(of: UInt64.self) { group in
            var next = 0
            func add() {
                let item = items[next]
                next += 1
                group.addTask {
                    let t = clock.now
                    try await body(item)
                    return nanoseconds(clock.now - t)
                }
            }
            while next < min(width, items.count) { add() }
            while let latency = try await group.next() {
                measurement.latencies.append(latency)
                if next < items.count { add() }
            }
        }
        measurement.total = clock.now - start
        measurement.cpuSeconds = processCPUSeconds() - cpuStart
        measurement.peakResidentBytes = ResidentMemory.peakBytes()
        return measurement
    }

    /// `count` distinct real JPEGs of exactly `size` bytes: one picture, padded to the size with
    /// an APP15 segment whose bytes differ per image.
    static func distinctJPEGs(count: Int, size: Int) throws -> [[UInt8]] {
        let width = 256
        let height = 192
        var pixels = [UInt8](repeating: 255, count: width * height * 4)
        for y in 0..<height {
            for x in 0..<width {
                let i = (y * width + x) * 4
                pixels[i] = UInt8(truncatingIfNeeded: x)
                pixels[i + 1] = UInt8(truncatingIfNeeded: y &* 3)
                pixels[i + 2] = UInt8(truncatingIfNeeded: (x &* y) >> 4)
            }
        }
        let base = try ImageEncoder.jpeg(RGBAImage(width: width, height: height, pixels: pixels), quality: 85)
        let padding = size - base.count - 4
        guard padding > 0, padding <= 65_533 else {
            throw BenchmarkError("the base JPEG is \(base.count) bytes; it cannot be padded to \(size)")
        }
        return (0..<count).map { i in
            var segment: [UInt8] = [0xFF, 0xEF, UInt8((padding + 2) >> 8), UInt8((padding + 2) & 0xFF)]
            var filler = [UInt8](repeating: 0x20, count: padding)
            withUnsafeBytes(of: UInt64(i).littleEndian) { for (j, b) in $0.enumerated() { filler[j] = b } }
            segment += filler
            return Array(base[0..<2]) + segment + Array(base[2...])
        }
    }

    static func row(_ workload: String, _ engine: String, _ m: Measurement, cpu: Bool = false) -> BenchmarkResult {
        let cpuPerOperation = m.cpuSeconds.map { $0 * 1e6 / Double(max(m.latencies.count, 1)) }
        var result = BenchmarkResult(
            workload: workload, engine: engine, operations: m.latencies.count, seconds: m.seconds,
            opsPerSecond: Double(m.latencies.count) / max(m.seconds, 1e-9), p50Microseconds: m.percentile(50),
            p99Microseconds: m.percentile(99), metric: cpu ? cpuPerOperation : nil,
            metricName: cpu ? "process CPU µs per image" : nil)
        result.peakResidentMiB = m.peakResidentBytes.map { Double($0) / 1_048_576 }
        return result
    }
}

/// The disk-hit rows never reach an origin: every entry is fresh.
private struct UnreachableOrigin: OriginFetching {
    func fetch(_ request: OriginRequest) async throws(OriginError) -> OriginResponse {
        throw OriginError(code: .transport, message: "the benchmark's entries are all fresh", url: request.url)
    }
}
