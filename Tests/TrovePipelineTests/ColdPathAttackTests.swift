import Dispatch
import Foundation
import Testing
import TroveCodec
import TroveCore
import TroveHTTP
import TroveOrigin
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore
@testable import Trove

/// Attacks on the cold path of 533b220: a new original stored inline through
/// `Store.putWithoutWaiting`, the pool fallback, and `PipelineError.shutDown` after shutdown.
@Suite struct ColdPathAttackTests {
    let thumb = Variant(width: 64, height: 64)

    func thumbnail(of bytes: [UInt8]) throws -> Data {
        Data(try ImageDecoder.thumbnail(bytes, variant: thumb, limits: DecodeLimits()).data)
    }

    // MARK: Variants of an older original

    /// The original is evicted while its variant survives; the origin changes. The new original
    /// must not be stored next to the old variant, in the store or in memory.
    @Test func anEvictedOriginalsSurvivingVariantGoesWhenANewOriginalArrives() async throws {
        try await PipelineFixture.with { f in
            let url = f.url("/e.jpg")
            let old = try jpeg(256, 192, seed: 1)
            let new = try jpeg(256, 192, seed: 90)
            f.origin.set("/e.jpg", f.resource(old, cacheControl: "max-age=600"))
            let variantKey = CacheKey(url: url, variant: thumb.description)
            #expect(try await f.pipeline.image(for: url, variant: thumb).data == (try thumbnail(of: old)))
            #expect(try f.store.contains(variantKey))
            // Eviction of the original alone.
            #expect(try f.store.remove(CacheKey(url: url)))
            f.origin.set("/e.jpg", f.resource(new, cacheControl: "max-age=600"))
            let original = try await f.pipeline.image(for: url)
            #expect(original.source == .network)
            #expect(original.data == Data(new))
            #expect(try f.store.data(for: CacheKey(url: url)) == Data(new))
            #expect(try f.store.contains(variantKey) == false, "the old original's variant survived the new original")
            #expect(f.memory.entry(for: variantKey) == nil)
            let variant = try await f.pipeline.image(for: url, variant: thumb)
            #expect(variant.data == (try thumbnail(of: new)))
        }
    }

    /// The same, with the evicted original's variant only in the write queue (not committed):
    /// `keys(url:)` must see it.
    @Test func aQueuedVariantOfAnEvictedOriginalIsSeen() async throws {
        try await PipelineFixture.with(configureStore: { $0.batchInterval = .seconds(3600) }) { f in
            let url = f.url("/q.jpg")
            let new = try jpeg(seed: 44)
            let variantKey = CacheKey(url: url, variant: thumb.description)
            try f.store.put(Data(try jpeg(seed: 3)), for: CacheKey(url: url))
            try f.store.put(Data([1, 2, 3]), for: variantKey)
            try f.store.remove(CacheKey(url: url))
            f.origin.set("/q.jpg", f.resource(new, cacheControl: "max-age=600"))
            #expect(try await f.pipeline.image(for: url).data == Data(new))
            #expect(try f.store.contains(variantKey) == false)
            #expect(try f.store.data(for: CacheKey(url: url)) == Data(new))
        }
    }

    /// A variant of the old original is being made (its decode waits for a pool thread) while
    /// the original is evicted and a different one is fetched and written inline (it needs no
    /// pool thread). When the variant's write comes, the variant of the old bytes must not be
    /// kept next to the new original.
    @Test func aVariantMadeFromTheOldOriginalWhileANewOneIsWrittenInline() async throws {
        try await PipelineFixture.with(configure: { $0.blockingThreads = 2 }) { f in
            let url = f.url("/r.jpg")
            let old = try jpeg(256, 192, seed: 5)
            let new = try jpeg(256, 192, seed: 120)
            f.origin.set("/r.jpg", f.resource(old, cacheControl: "max-age=600"))
            _ = try await f.pipeline.image(for: url)
            let gate = DispatchSemaphore(value: 0)
            let pool = f.pipeline.pool
            let blockers = (0..<pool.threadCount).map { _ in Task { try await pool.run { gate.wait() } } }
            let pipeline = f.pipeline
            let thumb = self.thumb
            let variantTask = Task { try await pipeline.image(for: url, variant: thumb) }
            // The variant stage has its original (from memory) and waits for the pool.
            try await Task.sleep(for: .milliseconds(100))
            #expect(try f.store.remove(CacheKey(url: url)))
            _ = f.memory.removeAll(url: url)
            f.origin.set("/r.jpg", f.resource(new, cacheControl: "max-age=600"))
            let fresh = try await within(.seconds(10)) { try await pipeline.image(for: url) }
            #expect(fresh.data == Data(new))
            for _ in blockers { gate.signal() }
            for blocker in blockers { try await blocker.value }
            _ = try await variantTask.value
            let variantKey = CacheKey(url: url, variant: thumb.description)
            #expect(try f.store.data(for: CacheKey(url: url)) == Data(new))
            if let stored = try f.store.data(for: variantKey) {
                #expect(stored == (try thumbnail(of: new)), "a variant of the old original is stored next to the new one")
            }
            if let cached = f.memory.entry(for: variantKey) {
                #expect(cached.data == (try thumbnail(of: new)), "memory holds a variant of the old original")
            }
            #expect(try await pipeline.image(for: url, variant: thumb).data == (try thumbnail(of: new)))
        }
    }

    // MARK: Durability and back-pressure

    /// Under `full` durability nothing is written inline: the write goes to the pool, and it is
    /// written once.
    @Test func fullDurabilityWritesOnceOnThePool() async throws {
        try await PipelineFixture.with(configureStore: { $0.durability = .full }, configure: { $0.blockingThreads = 2 }) { f in
            let url = f.url("/full.jpg")
            let bytes = try jpeg(seed: 9)
            f.origin.set("/full.jpg", f.resource(bytes, cacheControl: "max-age=600"))
            let gate = DispatchSemaphore(value: 0)
            let pool = f.pipeline.pool
            let blockers = (0..<pool.threadCount).map { _ in Task { try await pool.run { gate.wait() } } }
            let pipeline = f.pipeline
            let request = Task { try await pipeline.image(for: url) }
            #expect(await f.origin.wait { $0.requests >= 1 && $0.inFlightRequests == 0 })
            try await Task.sleep(for: .milliseconds(100))
            #expect(try f.store.contains(CacheKey(url: url)) == false, "written inline under full durability")
            for _ in blockers { gate.signal() }
            for blocker in blockers { try await blocker.value }
            #expect(try await request.value.data == Data(bytes))
            #expect(try f.store.data(for: CacheKey(url: url)) == Data(bytes))
            let stats = try f.store.statistics()
            #expect(stats.entries == 1)
            #expect(stats.blobs == 1)
        }
    }

    /// A store that cannot write — here a sync failed, after which it refuses every write until
    /// reopened — does not fail requests: fetched originals and made variants are served
    /// unstored (`info` nil), counted, and a stored original's variants are served too.
    @Test func aStoreThatCannotWriteServesResponsesUnstored() async throws {
        let armed = Locked(false)
        let faults = FaultInjector { operation, path in
            operation == .sync && path.hasSuffix(".pack") && armed.withLock({ $0 }) ? .error(EIO) : nil
        }
        try await PipelineFixture.with(configureStore: {
            $0.durability = .full
            $0.faultInjector = faults
        }) { f in
            let (a, b, c) = (try jpeg(seed: 1), try jpeg(seed: 2), try jpeg(seed: 3))
            for (path, bytes) in [("/a.jpg", a), ("/b.jpg", b), ("/c.jpg", c)] {
                f.origin.set(path, f.resource(bytes, cacheControl: "max-age=600"))
            }
            let stored = try await f.pipeline.image(for: f.url("/a.jpg"))
            #expect(stored.info != nil)
            armed.withLock { $0 = true }
            let fetched = try await f.pipeline.image(for: f.url("/b.jpg"))
            #expect(fetched.data == Data(b))
            #expect(fetched.info == nil)
            #expect(fetched.source == .network)
            // A variant of an original that could not be stored: made, served, unstored.
            let fresh = try await f.pipeline.image(for: f.url("/c.jpg"), variant: thumb)
            #expect(fresh.data == (try thumbnail(of: c)))
            #expect(fresh.info == nil)
            #expect(fresh.madeVariant)
            // A variant of the stored original: its write is refused, it is served.
            let variant = try await f.pipeline.image(for: f.url("/a.jpg"), variant: thumb)
            #expect(variant.data == (try thumbnail(of: a)))
            #expect(variant.info == nil)
            let stats = f.pipeline.statistics
            #expect(stats.unstoredResponses == 3, "\(stats)")
            #expect(stats.failures == 0)
            #expect(f.store.backgroundError == nil || f.store.backgroundError?.code == .syncFailed)
            // The refused put is still queued: closing reports the failed sync (and closes).
            #expect((#expect(throws: StoreError.self) { try f.store.close() })?.code == .syncFailed)
        }
    }

    /// With commits held, cold fetches are stored inline until the queue nears back-pressure;
    /// then the write goes to the pool (which waits for the commit). Nothing is lost, nothing
    /// is written twice, and every request completes once commits run again.
    @Test func backPressureFallsBackToThePoolAndLosesNothing() async throws {
        try await PipelineFixture.with(
            configureStore: {
                $0.batchSize = 2
                $0.batchInterval = .seconds(3600)
            }
        ) { f in
            let count = 12
            var bodies: [[UInt8]] = []
            for i in 0..<count {
                let body = try jpeg(64, 48, seed: UInt8(i * 17))
                bodies.append(body)
                f.origin.set("/bp\(i).jpg", f.resource(body, cacheControl: "max-age=600"))
            }
            let store = f.store
            let held = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let holder = Thread {
                store.committer.withLock { _ in
                    held.signal()
                    release.wait()
                }
            }
            holder.start()
            held.wait()
            let pipeline = f.pipeline
            var inline = 0
            // 8 × batchSize = 16 records: seven new originals (14 records) go in inline.
            for i in 0..<7 {
                let url = f.url("/bp\(i).jpg")
                let response = try await within(.seconds(10)) { try await pipeline.image(for: url) }
                #expect(response.data == Data(bodies[i]))
                inline += 1
            }
            #expect(store.appender.withLock { $0.queue.count } == 14)
            let rest = (7..<count).map { i in
                let url = f.url("/bp\(i).jpg")
                return Task { try await pipeline.image(for: url) }
            }
            release.signal()
            for (offset, task) in rest.enumerated() {
                #expect(try await task.value.data == Data(bodies[7 + offset]))
            }
            try store.flush()
            for i in 0..<count { #expect(try store.data(for: CacheKey(url: f.url("/bp\(i).jpg"))) == Data(bodies[i])) }
            let stats = try store.statistics()
            #expect(stats.entries == count)
            #expect(stats.blobs == count)
            #expect(f.origin.statistics.requests == count)
        }
    }

    // MARK: Shutdown

    /// A cold fetch in flight when the pipeline shuts down: its write (inline) must not happen,
    /// and its caller gets `shutDown`.
    @Test func shutdownWhileAColdFetchIsInFlight() async throws {
        try await PipelineFixture.with { f in
            let url = f.url("/sd.jpg")
            f.origin.set("/sd.jpg", f.resource(try jpeg(seed: 2), cacheControl: "max-age=600", headDelay: .milliseconds(400)))
            let pipeline = f.pipeline
            let request = Task { try await pipeline.image(for: url) }
            #expect(await f.origin.wait { $0.inFlightRequests == 1 })
            try await pipeline.shutdown()
            do {
                let response = try await request.value
                Issue.record("served after shutdown from \(response.source)")
            } catch let error as PipelineError {
                #expect(error.code == .shutDown)
            }
            #expect(try f.store.keys(url: url).isEmpty, "written after shutdown")
            // Every request after shutdown fails with shutDown, a memory hit included.
            await #expect(throws: PipelineError.self) { try await pipeline.image(for: url) }
        }
    }

    /// Over the inline limit the write goes to the pool; at the limit it is inline.
    @Test func theInlineLimitIsExact() async throws {
        try await PipelineFixture.with(configure: { $0.blockingThreads = 2 }) { f in
            let limit = ImagePipeline.inlineWriteLimit
            let small = try jpeg(seed: 1)
            func image(_ size: Int) -> [UInt8] { small + [UInt8](repeating: 0, count: size - small.count) }
            f.origin.set("/at.jpg", f.resource(image(limit), cacheControl: "max-age=600"))
            f.origin.set("/over.jpg", f.resource(image(limit + 1), cacheControl: "max-age=600"))
            f.store.waitForLoads()  // until the dedup hints load, an inline write is refused too
            let gate = DispatchSemaphore(value: 0)
            let pool = f.pipeline.pool
            let blockers = (0..<pool.threadCount).map { _ in Task { try await pool.run { gate.wait() } } }
            let pipeline = f.pipeline
            let at = f.url("/at.jpg")
            #expect(try await within(.seconds(10)) { try await pipeline.image(for: at) }.data.count == limit)
            let over = Task { try await pipeline.image(for: f.url("/over.jpg")) }
            #expect(await f.origin.wait { $0.requests >= 2 && $0.inFlightRequests == 0 })
            try await Task.sleep(for: .milliseconds(100))
            #expect(try f.store.contains(CacheKey(url: f.url("/over.jpg"))) == false)
            for _ in blockers { gate.signal() }
            for blocker in blockers { try await blocker.value }
            #expect(try await over.value.data.count == limit + 1)
            #expect(try f.store.info(for: CacheKey(url: f.url("/over.jpg")))?.cost == limit + 1)
        }
    }

    /// Concurrent cold requests for many URLs, originals and variants mixed, with the origin
    /// changing between rounds and originals evicted at random: every stored variant is a
    /// variant of the stored original.
    @Test func variantsAlwaysMatchTheirOriginalUnderChurn() async throws {
        try await PipelineFixture.with { f in
            let urls = (0..<3).map { f.url("/c\($0).jpg") }
            var originals: [[UInt8]] = []
            for seed in 0..<3 { originals.append(try jpeg(160, 120, seed: UInt8(seed * 70))) }
            var variantsOf: [Data: Data] = [:]
            for original in originals { variantsOf[Data(original)] = try thumbnail(of: original) }
            let thumb = self.thumb
            for round in 0..<8 {
                for (i, url) in urls.enumerated() {
                    f.origin.set("/c\(i).jpg", f.resource(originals[(round + i) % 3], cacheControl: "max-age=600"))
                    // Evict the original (variants survive) so the next request fetches anew.
                    _ = try f.store.remove(CacheKey(url: url))
                    _ = f.memory.removeAll(url: url)
                }
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for i in 0..<12 {
                        let url = urls[i % urls.count]
                        group.addTask {
                            if i % 2 == 0 {
                                _ = try await f.pipeline.image(for: url)
                            } else {
                                _ = try await f.pipeline.image(for: url, variant: thumb)
                            }
                        }
                    }
                    try await group.waitForAll()
                }
                for url in urls {
                    guard let original = try f.store.data(for: CacheKey(url: url)) else { continue }
                    let variantKey = CacheKey(url: url, variant: thumb.description)
                    if let variant = try f.store.data(for: variantKey) {
                        #expect(variant == variantsOf[original], "round \(round): stored variant of another original")
                    }
                    if let cached = f.memory.entry(for: variantKey) {
                        #expect(cached.data == variantsOf[original], "round \(round): memory variant of another original")
                    }
                }
            }
        }
    }
}
