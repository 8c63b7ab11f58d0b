import Dispatch
import Foundation
import MetricsTestKit
import Testing
import TroveCore
import TroveHTTP
import TroveOrigin

@testable import Trove

/// The pipeline's threads, prefetching and metrics.
@Suite struct PipelineThreadingTests {
    /// Work that blocks — here, every pool thread stuck and more jobs queued behind them, and
    /// a variant whose decode waits for a thread — never delays memory hits: they run on the
    /// cooperative threads, which the blocked work does not hold.
    @Test func blockedWorkNeverDelaysMemoryHits() async throws {
        try await PipelineFixture.with(configure: { $0.blockingThreads = 2 }) { f in
            let hot = f.url("/hot.jpg")
            f.origin.set("/hot.jpg", f.resource(try jpeg(), cacheControl: "max-age=600"))
            f.origin.set("/cold.jpg", f.resource(try jpeg(seed: 3), cacheControl: "max-age=600"))
            _ = try await f.pipeline.image(for: hot)
            _ = try await f.pipeline.image(for: f.url("/cold.jpg"))
            let gate = DispatchSemaphore(value: 0)
            let pool = f.pipeline.pool
            // More blocked jobs than the machine has cooperative threads.
            let blockers = (0..<(2 + 2 * ProcessInfo.processInfo.activeProcessorCount)).map { _ in
                Task { try await pool.run { gate.wait() } }
            }
            let variant = Task { try await f.pipeline.image(for: f.url("/cold.jpg"), variant: Variant(width: 32, height: 32)) }
            let pipeline = f.pipeline
            let hits = try await within(.seconds(20)) {
                var sources: [ImageResponse.Source] = []
                for _ in 0..<1_000 { sources.append(try await pipeline.image(for: hot).source) }
                return sources
            }
            #expect(hits.allSatisfy { $0 == .memory })
            #expect(f.pipeline.statistics.variantsMade == 0, "the variant's decode is still queued")
            for _ in blockers { gate.signal() }
            for blocker in blockers { try await blocker.value }
            #expect(try await variant.value.madeVariant)
        }
    }

    /// A new original is stored inline (Docs/Pipeline.md, "Threads"): with every pool thread
    /// held, a cold fetch still completes and is stored. Replacing a stored original may wait
    /// (its variants go first), so that write waits for a pool thread.
    @Test func aNewOriginalNeedsNoPoolThreadButAReplacementDoes() async throws {
        try await PipelineFixture.with(configure: { $0.blockingThreads = 2 }) { f in
            f.origin.set("/new.jpg", f.resource(try jpeg(seed: 5), cacheControl: "max-age=600"))
            f.origin.set("/old.jpg", f.resource(try jpeg(seed: 6), etag: "\"1\"", cacheControl: "max-age=0"))
            _ = try await f.pipeline.image(for: f.url("/old.jpg"))
            let gate = DispatchSemaphore(value: 0)
            let pool = f.pipeline.pool
            let blockers = (0..<pool.threadCount).map { _ in Task { try await pool.run { gate.wait() } } }
            let pipeline = f.pipeline
            let url = f.url("/new.jpg")
            let fresh = try await within(.seconds(20)) { try await pipeline.image(for: url) }
            #expect(fresh.source == .network)
            #expect(try f.store.data(for: CacheKey(url: url)) == fresh.data)
            // The stored original changes at the origin: its replacement needs the pool.
            f.origin.set("/old.jpg", f.resource(try jpeg(seed: 7), etag: "\"2\"", cacheControl: "max-age=600"))
            let replacement = Task { try await pipeline.image(for: f.url("/old.jpg")) }
            try await Task.sleep(for: .milliseconds(300))
            #expect(try f.store.info(for: CacheKey(url: f.url("/old.jpg")))?.etag == "\"1\"")
            for _ in blockers { gate.signal() }
            for blocker in blockers { try await blocker.value }
            #expect(try await replacement.value.source == .network)
            #expect(try f.store.info(for: CacheKey(url: f.url("/old.jpg")))?.etag == "\"2\"")
        }
    }

    /// A caller that leaves a queued job stops waiting at once, and the job never runs.
    @Test func aCancelledWaiterLeavesThePoolQueueAtOnce() async throws {
        let pool = BlockingPool(threads: 1, name: "test")
        defer { pool.shutdown() }
        let gate = DispatchSemaphore(value: 0)
        let ran = Locked(false)
        let started = Locked(false)
        let blocker = Task {
            try await pool.run {
                started.withLock { $0 = true }
                gate.wait()
            }
        }
        // The blocker holds the pool's one thread before the job to cancel is queued (two tasks
        // start in no set order: under TSan the second once ran first, fresh-clone CI of eca38fc).
        while !started.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
        let queued = Task { try await pool.run { ran.withLock { $0 = true } } }
        try await Task.sleep(for: .milliseconds(50))
        queued.cancel()
        await #expect(throws: CancellationError.self) { try await queued.value }
        gate.signal()
        try await blocker.value
        try await pool.run {}
        #expect(ran.withLock { $0 } == false)
    }

    /// A prefetch stores the image; cancelling one whose download stalls closes the connection.
    @Test func prefetchLoadsAheadAndCancelStopsTheDownload() async throws {
        try await PipelineFixture.with { f in
            f.origin.set("/p.jpg", f.resource(try jpeg(), cacheControl: "max-age=600"))
            await f.pipeline.prefetch(f.url("/p.jpg"), variant: Variant(width: 48, height: 48)).value
            #expect(try f.store.entries(url: f.url("/p.jpg")).count == 2)
            #expect(try await f.pipeline.image(for: f.url("/p.jpg")).source == .memory)

            f.origin.set("/stall.jpg", OriginResource(body: try jpeg(), behaviour: .stall(afterBytes: 64)))
            f.origin.resetObservations()
            let prefetch = f.pipeline.prefetch(f.url("/stall.jpg"))
            #expect(await f.origin.wait { $0.bodyBytesSent >= 64 })
            prefetch.cancel()
            await prefetch.value
            #expect(await f.origin.wait { $0.connectionsClosedByClient >= 1 })
            #expect(try f.store.entries(url: f.url("/stall.jpg")).isEmpty)
        }
    }

    /// The counters reach the metrics backend.
    @Test func countersReachTheMetricsBackend() async throws {
        let metrics = TestMetrics()
        try await PipelineFixture.with(configure: { $0.metricsFactory = metrics }) { f in
            let bytes = try jpeg()
            f.origin.set("/m.jpg", f.resource(bytes, etag: "\"m\"", cacheControl: "no-cache"))
            let url = f.url("/m.jpg")
            _ = try await f.pipeline.image(for: url)
            _ = try await f.pipeline.image(for: url)
            let network = try metrics.expectCounter("trove_pipeline_responses_total", [("source", "network")])
            let revalidated = try metrics.expectCounter("trove_pipeline_responses_total", [("source", "revalidated")])
            #expect(network.totalValue == 1)
            #expect(revalidated.totalValue == 1)
            #expect(try metrics.expectCounter("trove_pipeline_not_modified_total").totalValue == 1)
            #expect(try metrics.expectCounter("trove_pipeline_fetched_bytes_total").totalValue == Int64(bytes.count))
            let statistics = f.pipeline.statistics
            #expect(statistics.networkResponses == 1)
            #expect(statistics.revalidatedHits == 1)
            #expect(statistics.bytesFetched == bytes.count)
        }
    }
}
