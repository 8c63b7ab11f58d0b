import Foundation
import Testing
import Trove
import TroveCodec
import TroveCore
import TroveHTTP
import TroveOrigin

/// The pipeline against a real origin on 127.0.0.1: tiers, freshness, revalidation,
/// coalescing, cancellation, failures.
@Suite struct PipelineTests {
    let thumb = Variant(width: 64, height: 64)

    @Test func aFirstFetchIsStoredThenServedFromMemoryAndDisk() async throws {
        try await PipelineFixture.with { f in
            let bytes = try jpeg()
            f.origin.set("/a.jpg", OriginResource(body: bytes, etag: "\"a1\"", cacheControl: "max-age=600"))
            let first = try await f.pipeline.image(for: f.url("/a.jpg"))
            #expect(first.source == .network)
            #expect(first.status == 200)
            #expect(first.data == Data(bytes))
            #expect(first.info?.etag == "\"a1\"")
            let second = try await f.pipeline.image(for: f.url("/a.jpg"))
            #expect(second.source == .memory)
            f.memory.removeAll()
            let third = try await f.pipeline.image(for: f.url("/a.jpg"))
            #expect(third.source == .disk)
            #expect(third.data == Data(bytes))
            #expect(f.origin.requestCount(for: "/a.jpg") == 1)
            let variant = try await f.pipeline.image(for: f.url("/a.jpg"), variant: thumb)
            #expect(variant.madeVariant)
            #expect(variant.format == .webp)
            #expect(try ImageDecoder.dimensions([UInt8](variant.data)).width == 64)
            #expect(try await f.pipeline.image(for: f.url("/a.jpg"), variant: thumb).source == .memory)
            #expect(f.origin.requestCount(for: "/a.jpg") == 1)
            #expect(f.pipeline.statistics.variantsMade == 1)
        }
    }

    /// 100 identical concurrent callers: one origin request, one variant made.
    @Test func identicalConcurrentRequestsShareOneFetchAndOneVariant() async throws {
        try await PipelineFixture.with { f in
            f.origin.set(
                "/c.jpg", OriginResource(body: try jpeg(640, 480), cacheControl: "max-age=600", headDelay: .milliseconds(200)))
            let url = f.url("/c.jpg")
            let variant = thumb
            let sizes = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<100 {
                    group.addTask { try await f.pipeline.image(for: url, variant: variant).data.count }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(sizes.count == 100)
            #expect(Set(sizes).count == 1)
            #expect(f.origin.requestCount(for: "/c.jpg") == 1)
            #expect(f.pipeline.statistics.variantsMade == 1)
        }
    }

    /// Every waiter cancels: the download stops (the origin sees its connection closed) and
    /// nothing is stored.
    @Test func cancellingEveryWaiterClosesTheConnectionAndStoresNothing() async throws {
        // The stalled download would last the whole 60 s request timeout.
        try await PipelineFixture.with(limits: OriginLimits(connectTimeout: .seconds(2), requestTimeout: .seconds(60))) { f in
            f.origin.set(
                "/s.jpg", OriginResource(body: try jpeg(), repetitions: 1, behaviour: .stall(afterBytes: 100)))
            let url = f.url("/s.jpg")
            let tasks = (0..<5).map { _ in Task { try await f.pipeline.image(for: url) } }
            #expect(await f.origin.wait { $0.bodyBytesSent >= 100 })
            let started = ContinuousClock.now
            for task in tasks { task.cancel() }
            for task in tasks {
                await #expect(throws: CancellationError.self) { try await task.value }
            }
            #expect(ContinuousClock.now - started < .seconds(10), "the awaits end at once")
            #expect(await f.origin.wait { $0.connectionsClosedByClient >= 1 })
            #expect(try f.store.info(for: CacheKey(url: url)) == nil)
            #expect(f.pipeline.statistics.cancellations == 5)
        }
    }

    /// One waiter leaving does not stop the work the others wait for.
    @Test func oneWaiterCancellingLeavesTheOthersServed() async throws {
        try await PipelineFixture.with { f in
            let bytes = try jpeg()
            f.origin.set("/o.jpg", OriginResource(body: bytes, cacheControl: "max-age=60", headDelay: .milliseconds(300)))
            let url = f.url("/o.jpg")
            let leaving = Task { try await f.pipeline.image(for: url) }
            let staying = (0..<3).map { _ in Task { try await f.pipeline.image(for: url) } }
            #expect(await f.origin.wait { $0.requests >= 1 })
            leaving.cancel()
            await #expect(throws: CancellationError.self) { try await leaving.value }
            for task in staying { #expect(try await task.value.data == Data(bytes)) }
            #expect(f.origin.requestCount(for: "/o.jpg") == 1)
            #expect(try f.store.info(for: CacheKey(url: url)) != nil)
        }
    }

    /// A stale entry is revalidated with its validators; a 304 keeps the bytes, refreshes the
    /// freshness of the original and its variants, and writes no blob.
    @Test func revalidationKeepsTheBytesAndWritesOnlyLinks() async throws {
        try await PipelineFixture.with { f in
            let bytes = try jpeg(800, 600)
            func set() {
                f.origin.set(
                    "/r.jpg",
                    f.resource(bytes, etag: "\"r1\"", lastModified: "Mon, 01 Jan 2024 00:00:00 GMT", cacheControl: "max-age=60"))
            }
            set()
            let url = f.url("/r.jpg")
            _ = try await f.pipeline.image(for: url)
            _ = try await f.pipeline.image(for: url, variant: thumb)
            try f.store.flush()
            let before = try f.store.statistics()
            let expiryBefore = try #require(try f.store.info(for: CacheKey(url: url))?.expiresAt)
            f.clock.advance(120)
            set()
            let again = try await f.pipeline.image(for: url)
            #expect(again.source == .revalidated)
            #expect(again.status == 304)
            #expect(again.data == Data(bytes))
            let sent = try #require(f.origin.requests(for: "/r.jpg").last)
            #expect(sent.header("If-None-Match") == "\"r1\"")
            #expect(sent.header("If-Modified-Since") == "Mon, 01 Jan 2024 00:00:00 GMT")
            try f.store.flush()
            let after = try f.store.statistics()
            #expect(after.blobs == before.blobs)
            #expect(after.packBytes - before.packBytes < 2_000, "link records only, not \(bytes.count) bytes")
            let expiryAfter = try #require(try f.store.info(for: CacheKey(url: url))?.expiresAt)
            #expect(expiryAfter > expiryBefore)
            // The variant was refreshed with its original: fresh, no second revalidation.
            f.memory.removeAll()
            #expect(try await f.pipeline.image(for: url, variant: thumb).source == .disk)
            #expect(f.origin.requestCount(for: "/r.jpg") == 2)
            #expect(f.pipeline.statistics.notModified == 1)
        }
    }

    /// Changed content at the origin replaces the original and drops its variants.
    @Test func changedContentReplacesTheOriginalAndDropsItsVariants() async throws {
        try await PipelineFixture.with { f in
            let url = f.url("/x.jpg")
            f.origin.set("/x.jpg", OriginResource(body: try jpeg(seed: 1), etag: "\"x1\"", cacheControl: "max-age=60"))
            _ = try await f.pipeline.image(for: url)
            let oldVariant = try await f.pipeline.image(for: url, variant: thumb).data
            let newBytes = try jpeg(seed: 99)
            f.clock.advance(120)
            f.origin.set("/x.jpg", f.resource(newBytes, etag: "\"x2\"", cacheControl: "max-age=60"))
            let fresh = try await f.pipeline.image(for: url)
            #expect(fresh.source == .network)
            #expect(fresh.data == Data(newBytes))
            #expect(try f.store.entries(url: url).map(\.key.variant) == [""], "the variant is gone")
            let newVariant = try await f.pipeline.image(for: url, variant: thumb)
            #expect(newVariant.madeVariant)
            #expect(newVariant.data != oldVariant)
        }
    }

    /// stale-if-error: a stale entry stands in for an origin that is down — unless
    /// must-revalidate forbids it.
    @Test func staleIfErrorServesStaleWhenTheOriginIsDown() async throws {
        try await PipelineFixture.with { f in
            let bytes = try jpeg()
            f.origin.set("/e.jpg", OriginResource(body: bytes, etag: "\"e\"", cacheControl: "max-age=60, stale-if-error=600"))
            f.origin.set("/m.jpg", OriginResource(body: bytes, etag: "\"m\"", cacheControl: "max-age=60, must-revalidate"))
            _ = try await f.pipeline.image(for: f.url("/e.jpg"))
            _ = try await f.pipeline.image(for: f.url("/m.jpg"))
            f.clock.advance(120)
            f.origin.set("/e.jpg", .failure(status: 503))
            f.origin.set("/m.jpg", .failure(status: 503))
            let stale = try await f.pipeline.image(for: f.url("/e.jpg"))
            #expect(stale.source == .stale(.originFailed(.status)))
            #expect(stale.data == Data(bytes))
            let error = await #expect(throws: PipelineError.self) { try await f.pipeline.image(for: f.url("/m.jpg")) }
            #expect(error?.code == .origin)
            #expect(error?.originError?.status == 503)
            // A 404 says the image is gone: no stale copy stands in for it (RFC 5861 §4).
            f.origin.set("/e.jpg", .failure(status: 404))
            let gone = await #expect(throws: PipelineError.self) { try await f.pipeline.image(for: f.url("/e.jpg")) }
            #expect(gone?.originError?.status == 404)
            // The whole server gone: a transport error, and stale still stands in.
            try await f.origin.shutdown()
            #expect(try await f.pipeline.image(for: f.url("/e.jpg")).source == .stale(.originFailed(.transport)))
        }
    }

    /// stale-while-revalidate: served at once, one background revalidation.
    @Test func staleWhileRevalidateServesAtOnceAndRevalidatesOnce() async throws {
        try await PipelineFixture.with { f in
            let bytes = try jpeg()
            f.origin.set(
                "/w.jpg", OriginResource(body: bytes, etag: "\"w\"", cacheControl: "max-age=60, stale-while-revalidate=600"))
            let url = f.url("/w.jpg")
            _ = try await f.pipeline.image(for: url)
            f.memory.removeAll()
            f.clock.advance(120)
            f.origin.set(
                "/w.jpg",
                f.resource(
                    bytes, etag: "\"w\"", cacheControl: "max-age=60, stale-while-revalidate=600", headDelay: .milliseconds(300)))
            for _ in 0..<5 {
                #expect(try await f.pipeline.image(for: url).source == .stale(.revalidating))
            }
            #expect(await f.origin.wait(upTo: .seconds(30)) { $0.requests >= 2 })
            // The revalidation ends when its 304 has refreshed the store, which on a loaded
            // machine can take well past the origin's delay. Until then each call is served stale
            // and joins the revalidation in flight; none sends a request of its own.
            let deadline = ContinuousClock.now + .seconds(30)
            var source = try await f.pipeline.image(for: url).source
            while source == .stale(.revalidating), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
                source = try await f.pipeline.image(for: url).source
            }
            #expect(source != .stale(.revalidating))
            #expect(f.origin.requestCount(for: "/w.jpg") == 2, "one background revalidation")
        }
    }

    /// no-cache: stored, and revalidated before every use.
    @Test func noCacheIsStoredAndRevalidatedOnEveryUse() async throws {
        try await PipelineFixture.with { f in
            f.origin.set("/n.jpg", OriginResource(body: try jpeg(), etag: "\"n\"", cacheControl: "no-cache"))
            let url = f.url("/n.jpg")
            #expect(try await f.pipeline.image(for: url).source == .network)
            #expect(try await f.pipeline.image(for: url).source == .revalidated)
            #expect(try await f.pipeline.image(for: url).source == .revalidated)
            #expect(f.origin.requestCount(for: "/n.jpg") == 3)
            // A variant of it is made once, then served after each revalidation of its original.
            #expect(try await f.pipeline.image(for: url, variant: thumb).madeVariant)
            let again = try await f.pipeline.image(for: url, variant: thumb)
            #expect(again.source == .revalidated)
            #expect(!again.madeVariant)
            #expect(f.pipeline.statistics.variantsMade == 1)
        }
    }

    /// no-store and Vary: * are never stored, nor is any variant made from them.
    @Test(arguments: [false, true])
    func unstorableResponsesAreServedButNeverStored(varyAny: Bool) async throws {
        try await PipelineFixture.with { f in
            let resource =
                varyAny
                ? OriginResource(body: try jpeg(), cacheControl: "max-age=60", headers: [("Vary", "*")])
                : OriginResource(body: try jpeg(), cacheControl: "no-store")
            f.origin.set("/u.jpg", resource)
            let url = f.url("/u.jpg")
            let original = try await f.pipeline.image(for: url)
            #expect(original.info == nil)
            let variant = try await f.pipeline.image(for: url, variant: thumb)
            #expect(variant.info == nil)
            #expect(variant.format == .webp)
            #expect(try f.store.entries(url: url).isEmpty)
            #expect(f.memory.entry(for: CacheKey(url: url)) == nil)
            #expect(try await f.pipeline.image(for: url).source == .network)
        }
    }

    /// Each failure gives its typed error and stores nothing.
    @Test func failuresAreTypedAndStoreNothing() async throws {
        // A request timeout a loaded machine (or ThreadSanitizer) cannot reach by accident; the
        // slow resource waits far longer.
        let limits = OriginLimits(connectTimeout: .seconds(2), requestTimeout: .seconds(3), maximumBodySize: 100_000)
        try await PipelineFixture.with(limits: limits) { f in
            let bytes = try jpeg()
            f.origin.set("/404.jpg", .failure(status: 404))
            f.origin.set("/cut.jpg", OriginResource(body: bytes, behaviour: .truncate(afterBytes: 500)))
            f.origin.set("/text.jpg", OriginResource(body: Array("hello, not an image".utf8)))
            f.origin.set("/big.jpg", OriginResource(body: bytes, repetitions: 100))
            f.origin.set("/slow.jpg", OriginResource(body: bytes, headDelay: .seconds(30)))
            f.origin.set("/lie.jpg", OriginResource(body: bytes, behaviour: .declareLength(bytes.count + 100)))
            let expected: [(String, OriginError.Code)] = [
                ("/404.jpg", .status), ("/cut.jpg", .truncated), ("/text.jpg", .notAnImage), ("/big.jpg", .tooLarge),
                ("/slow.jpg", .timeout), ("/lie.jpg", .truncated),
            ]
            for (path, code) in expected {
                let error = await #expect(throws: PipelineError.self, "\(path)") {
                    try await f.pipeline.image(for: f.url(path), variant: thumb)
                }
                #expect(error?.code == .origin, "\(path)")
                #expect(error?.originError?.code == code, "\(path): \(String(describing: error))")
                #expect(try f.store.entries(url: f.url(path)).isEmpty, "\(path)")
            }
            #expect(try f.store.statistics().entries == 0)
        }
    }

    /// An original the codec cannot decode is kept, but no variant is made or stored.
    @Test func anUndecodableOriginalGivesACodecError() async throws {
        try await PipelineFixture.with { f in
            var broken = try jpeg()
            for i in 400..<broken.count - 2 { broken[i] = 0 }
            f.origin.set("/b.jpg", OriginResource(body: broken, cacheControl: "max-age=60"))
            let url = f.url("/b.jpg")
            let error = await #expect(throws: PipelineError.self) { try await f.pipeline.image(for: url, variant: thumb) }
            #expect(error?.code == .codec)
            #expect(try f.store.entries(url: url).map(\.key.variant) == [""])
        }
    }

    /// Memory never serves what the store removed or replaced.
    @Test func memoryNeverServesAValueTheStoreRemoved() async throws {
        try await PipelineFixture.with { f in
            let bytes = try jpeg()
            f.origin.set("/g.jpg", OriginResource(body: bytes, cacheControl: "max-age=600"))
            let url = f.url("/g.jpg")
            _ = try await f.pipeline.image(for: url)
            #expect(try await f.pipeline.image(for: url).source == .memory)
            try f.store.remove(CacheKey(url: url))
            #expect(try await f.pipeline.image(for: url).source == .network)
            let other = try jpeg(seed: 5)
            try f.store.put(Data(other), for: CacheKey(url: url))
            let served = try await f.pipeline.image(for: url)
            #expect(served.source == .disk)
            #expect(served.data == Data(other))
            _ = try f.store.removeAll(url: url)
            #expect(f.memory.entry(for: CacheKey(url: url)) == nil)
        }
    }

    /// Redirects are followed and the result is stored under the requested URL.
    @Test func aRedirectIsStoredUnderTheRequestedURL() async throws {
        try await PipelineFixture.with { f in
            let bytes = try jpeg()
            f.origin.set("/old.jpg", .redirect(to: "/new.jpg", status: 301))
            f.origin.set("/new.jpg", OriginResource(body: bytes, cacheControl: "max-age=60"))
            let response = try await f.pipeline.image(for: f.url("/old.jpg"))
            #expect(response.data == Data(bytes))
            #expect(try f.store.info(for: CacheKey(url: f.url("/old.jpg"))) != nil)
            #expect(try f.store.info(for: CacheKey(url: f.url("/new.jpg"))) == nil)
        }
    }
}
