import Foundation
import Testing
import TroveCodec
import TroveCore
import TroveHTTP
import TroveOrigin
import TroveStoreTestSupport
import TroveTestSupport

@testable import Trove

/// An outside review of issue 10: the pipeline, the memory tier, the HTTP layer and the
/// engine's cache-policy field attacked the way a hostile origin, a broken network and a
/// careless caller would. Tests marked `.disabled("defect: …")` expose a defect and fail today.
@Suite struct AttackTests {
    let thumb = Variant(width: 64, height: 64)

    // MARK: Wrong bytes

    /// A 304 arrives for bytes the store no longer holds: another writer replaced the entry
    /// while the conditional request was in flight. The refresh applies the 304's validators
    /// and policy to the *new* bytes (updateMetadata keeps whatever blob the key has now) and
    /// then puts the *old* bytes in memory with an insertion token taken after the fetch — so
    /// its own updateMetadata is the only invalidation it sees and the insert is accepted.
    /// Memory then serves bytes the store does not hold.
    @Test
    func aRevalidationRacingAPutNeverLeavesOldBytesInMemory() async throws {
        try await PipelineFixture.with { f in
            let old = try jpeg(seed: 1)
            let new = try jpeg(seed: 2)
            let url = f.url("/race.jpg")
            let key = CacheKey(url: url)
            f.origin.set("/race.jpg", f.resource(old, etag: "\"v1\"", cacheControl: "max-age=60"))
            _ = try await f.pipeline.image(for: url)
            f.memory.removeAll()
            f.clock.advance(120)
            f.origin.set(
                "/race.jpg", f.resource(old, etag: "\"v1\"", cacheControl: "max-age=60", headDelay: .milliseconds(500)))
            let revalidating = Task { try await f.pipeline.image(for: url) }
            #expect(await f.origin.wait { $0.requests >= 2 })
            // Another writer on the same store (an ImageCache, `pipeline.store.put`, a second
            // pipeline) replaces the value while the 304 is on its way.
            try f.store.put(Data(new), for: key)
            let answer = try await revalidating.value
            // The newer write stands: the 304 (about the old bytes) is not applied to it.
            let stored = try #require(try f.store.entry(for: key))
            #expect(stored.data == Data(new))
            #expect(answer.data == stored.data)
            if let cached = f.memory.entry(for: key) {
                #expect(cached.data == stored.data, "memory holds bytes the store does not")
            }
            let served = try await f.pipeline.image(for: url)
            #expect(served.data == stored.data, "served from \(served.source): not the store's bytes")
            // The 304 validated the old response, not these bytes.
            #expect(stored.etag != "\"v1\"", "the new bytes were given the old response's ETag")
        }
    }

    /// The same race through the public API a second pipeline offers: two pipelines over one
    /// store and one memory tier (nothing forbids it; each has its own coalescers). One
    /// revalidates the old bytes while the other fetches the changed content.
    @Test
    func twoPipelinesOnOneStoreNeverServeDifferentBytes() async throws {
        try await PipelineFixture.with { f in
            let old = try jpeg(seed: 3)
            let new = try jpeg(seed: 4)
            let url = f.url("/two.jpg")
            let key = CacheKey(url: url)
            f.origin.set("/two.jpg", f.resource(old, etag: "\"o\"", cacheControl: "max-age=60"))
            _ = try await f.pipeline.image(for: url)
            f.memory.removeAll()
            f.clock.advance(120)
            var configuration = ImagePipeline.Configuration()
            configuration.clock = f.clock.reading
            let second = ImagePipeline(store: f.store, memory: f.memory, origin: f.http, configuration: configuration)
            // The first pipeline's conditional request gets a slow 304 …
            f.origin.set("/two.jpg", f.resource(old, etag: "\"o\"", cacheControl: "max-age=60", headDelay: .milliseconds(600)))
            let first = Task { try await f.pipeline.image(for: url) }
            #expect(await f.origin.wait { $0.requests >= 2 })
            // … meanwhile the content changes and the second pipeline fetches it.
            f.origin.set("/two.jpg", f.resource(new, etag: "\"n\"", cacheControl: "max-age=60"))
            let fetched = try await second.image(for: url)
            #expect(fetched.data == Data(new))
            _ = try await first.value
            let stored = try #require(try f.store.entry(for: key))
            let one = try await f.pipeline.image(for: url)
            let two = try await second.image(for: url)
            #expect(one.data == stored.data, "first pipeline served \(one.source) bytes the store does not hold")
            #expect(two.data == stored.data, "second pipeline served \(two.source) bytes the store does not hold")
            try await second.shutdown()
        }
    }

    /// A variant is never served made from an original older than the stored one, however
    /// the original changes while variants are being made (many rounds of change + variant
    /// requests in flight).
    @Test func aVariantIsNeverOfAnOlderOriginal() async throws {
        try await PipelineFixture.with { f in
            let url = f.url("/churn.jpg")
            let variant = thumb
            var originals: [[UInt8]] = []
            for seed in 0..<4 { originals.append(try jpeg(256, 192, seed: UInt8(seed * 50))) }
            var variantsOf: [Data: Data] = [:]
            for original in originals {
                let made = try ImageDecoder.thumbnail(original, variant: variant, limits: DecodeLimits())
                variantsOf[Data(original)] = Data(made.data)
            }
            for round in 0..<12 {
                let bytes = originals[round % originals.count]
                f.clock.advance(120)
                f.origin.set("/churn.jpg", f.resource(bytes, etag: "\"e\(round)\"", cacheControl: "max-age=60"))
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for i in 0..<12 {
                        group.addTask {
                            if i % 3 == 0 {
                                _ = try await f.pipeline.image(for: url)
                            } else {
                                _ = try await f.pipeline.image(for: url, variant: variant)
                            }
                        }
                    }
                    try await group.waitForAll()
                }
                let original = try #require(try f.store.data(for: CacheKey(url: url)))
                let vkey = CacheKey(url: url, variant: variant.description)
                if let storedVariant = try f.store.data(for: vkey) {
                    #expect(storedVariant == variantsOf[original], "round \(round): stored variant of another original")
                }
                if let cached = f.memory.entry(for: vkey) {
                    #expect(cached.data == variantsOf[original], "round \(round): memory variant of another original")
                }
            }
        }
    }

    // MARK: Coalescing and cancellation

    /// 100 waiters, a random third of them cancelled at random instants while the head is
    /// delayed: every cancelled await ends at once with CancellationError, every other caller
    /// gets the whole bytes, one origin request, and nothing hangs.
    @Test func aHundredWaitersWithRandomCancellation() async throws {
        try await PipelineFixture.with { f in
            let bytes = try jpeg(400, 300)
            let url = f.url("/h.jpg")
            f.origin.set("/h.jpg", OriginResource(body: bytes, cacheControl: "max-age=600", headDelay: .milliseconds(300)))
            var generator = SystemRandomNumberGenerator()
            let tasks = (0..<100).map { i in
                Task { try await f.pipeline.image(for: url, variant: i % 2 == 0 ? nil : thumb) }
            }
            var cancelled = Set<Int>()
            for i in 0..<100 where Int.random(in: 0..<3, using: &generator) == 0 {
                try await Task.sleep(for: .milliseconds(Int.random(in: 0..<8, using: &generator)))
                tasks[i].cancel()
                cancelled.insert(i)
            }
            let results = try await within(.seconds(10)) { () -> [Result<ImageResponse, any Error>] in
                var results: [Result<ImageResponse, any Error>] = []
                for task in tasks { results.append(await task.result) }
                return results
            }
            for (i, result) in results.enumerated() {
                switch result {
                case .success(let response):
                    if i % 2 == 0 { #expect(response.data == Data(bytes)) } else { #expect(response.format == .webp) }
                case .failure(let error):
                    #expect(cancelled.contains(i) && error is CancellationError, "\(i): \(error)")
                }
            }
            #expect(f.origin.requestCount(for: "/h.jpg") == 1)
            #expect(f.pipeline.statistics.variantsMade == 1)
            #expect(f.pipeline.originals.inFlight == 0)
            #expect(f.pipeline.variants.inFlight == 0)
        }
    }

    /// Every waiter of a variant cancelled at one of many instants — before the request, while
    /// the head is delayed, mid-body, during the decode, during the store writes. Afterwards:
    /// no stage left behind, no variant without its original, no partial original, and the
    /// next request is served whole.
    @Test func cancellingEverythingAtEveryInstantLeavesTheStoreWhole() async throws {
        try await PipelineFixture.with { f in
            let bytes = try jpeg(1200, 900)
            for (round, delay) in [0, 1, 3, 10, 30, 60, 100, 150, 200, 260, 330, 420].enumerated() {
                let path = "/every\(round).jpg"
                let url = f.url(path)
                f.origin.set(path, OriginResource(body: bytes, cacheControl: "max-age=600", headDelay: .milliseconds(100)))
                let tasks = (0..<4).map { _ in Task { try await f.pipeline.image(for: url, variant: thumb) } }
                try await Task.sleep(for: .milliseconds(delay))
                let started = ContinuousClock.now
                for task in tasks { task.cancel() }
                for task in tasks { _ = await task.result }
                // Generous for a loaded machine: it catches a wait that never ends.
                #expect(ContinuousClock.now - started < .seconds(10), "round \(round): the awaits end at once")
                // Let any work that runs on (a started write, a decode) finish.
                try await Task.sleep(for: .milliseconds(300))
                let entries = try f.store.entries(url: url)
                if entries.contains(where: { !$0.key.variant.isEmpty }) {
                    #expect(entries.contains { $0.key.variant.isEmpty }, "round \(round): a variant without its original")
                }
                if let original = try f.store.data(for: CacheKey(url: url)) {
                    #expect(original == Data(bytes), "round \(round): a partial original")
                }
                #expect(f.pipeline.originals.inFlight == 0, "round \(round)")
                #expect(f.pipeline.variants.inFlight == 0, "round \(round)")
                let again = try await within(.seconds(10)) { try await f.pipeline.image(for: url, variant: thumb) }
                #expect(again.format == .webp)
            }
        }
    }

    /// A stage that throws leaves nothing behind: the next request starts afresh and succeeds.
    @Test func aFailedStageDoesNotPoisonTheNextRequest() async throws {
        try await PipelineFixture.with { f in
            let url = f.url("/flaky.jpg")
            f.origin.set("/flaky.jpg", .failure(status: 503))
            for _ in 0..<3 {
                let error = await #expect(throws: PipelineError.self) { try await f.pipeline.image(for: url, variant: thumb) }
                #expect(error?.originError?.status == 503)
            }
            #expect(f.pipeline.originals.inFlight == 0)
            #expect(f.pipeline.variants.inFlight == 0)
            f.origin.set("/flaky.jpg", OriginResource(body: try jpeg(), cacheControl: "max-age=60"))
            #expect(try await f.pipeline.image(for: url, variant: thumb).format == .webp)
        }
    }

    /// Coalesced waiters of a variant's stage are counted: the metric says "callers that
    /// joined a stage (an original's or a variant's) already running" (Docs/Pipeline.md).
    @Test
    func waitersJoiningAVariantStageAreCounted() async throws {
        try await PipelineFixture.with { f in
            f.origin.set(
                "/cw.jpg", OriginResource(body: try jpeg(640, 480), cacheControl: "max-age=600", headDelay: .milliseconds(500)))
            let url = f.url("/cw.jpg")
            let variant = thumb
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<20 { group.addTask { _ = try await f.pipeline.image(for: url, variant: variant) } }
                try await group.waitForAll()
            }
            #expect(f.origin.requestCount(for: "/cw.jpg") == 1)
            #expect(f.pipeline.statistics.variantsMade == 1)
            #expect(f.pipeline.statistics.coalescedWaiters >= 10, "\(f.pipeline.statistics)")
        }
    }

    /// After shutdown a request that needs a pool thread fails with `PipelineError.shutDown`
    /// (the code exists and is documented as "the pipeline was shut down"), not with a
    /// CancellationError its caller never asked for.
    @Test
    func aRequestAfterShutdownIsAShutDownError() async throws {
        try await PipelineFixture.with { f in
            f.origin.set("/late.jpg", OriginResource(body: try jpeg(), cacheControl: "max-age=60"))
            try await f.pipeline.shutdown()
            do {
                let response = try await f.pipeline.image(for: f.url("/late.jpg"))
                Issue.record("served after shutdown from \(response.source)")
            } catch let error as PipelineError {
                #expect(error.code == .shutDown)
            } catch {
                Issue.record("a caller that never cancelled got \(type(of: error)): \(error)")
            }
            #expect(f.pipeline.statistics.cancellations == 0)
        }
    }

    // MARK: Hostile HTTP

    /// A body that stalls mid-way (a slow-loris origin) is cut at the whole-request timeout,
    /// the connection is closed, and nothing is stored.
    @Test func aStalledBodyIsCutAtTheWholeRequestTimeout() async throws {
        let limits = OriginLimits(connectTimeout: .seconds(2), requestTimeout: .seconds(1))
        try await PipelineFixture.with(limits: limits) { f in
            let bytes = try jpeg(800, 600)
            f.origin.set("/loris.jpg", OriginResource(body: bytes, behaviour: .stall(afterBytes: 1000)))
            let url = f.url("/loris.jpg")
            let started = ContinuousClock.now
            let error = await #expect(throws: PipelineError.self) {
                try await within(.seconds(10)) { try await f.pipeline.image(for: url, variant: thumb) }
            }
            #expect(error?.originError?.code == .timeout)
            // Loose: a loaded machine (or this suite's own CPU-bound tests) can hold back the timer
            // task on the cooperative pool; the stalled origin itself would never end the wait.
            #expect(ContinuousClock.now - started < .seconds(10))
            #expect(await f.origin.wait { $0.connectionsClosedByClient >= 1 })
            #expect(try f.store.entries(url: url).isEmpty)
        }
    }

    /// A body without a length (chunked, and close-delimited) over the size limit is stopped
    /// at the limit: typed, nothing stored.
    @Test(arguments: [false, true])
    func anUndeclaredHugeBodyIsStoppedAtTheLimit(closeDelimited: Bool) async throws {
        let limits = OriginLimits(connectTimeout: .seconds(2), requestTimeout: .seconds(10), maximumBodySize: 1 << 20)
        try await PipelineFixture.with(limits: limits) { f in
            let block = try jpeg(320, 240)
            let behaviour: OriginResource.Behaviour =
                closeDelimited ? .closeDelimited(afterBytes: Int.max) : .chunked(chunkSize: 16_384)
            f.origin.set("/huge.jpg", OriginResource(body: block, repetitions: 4096, behaviour: behaviour))
            let url = f.url("/huge.jpg")
            let error = await #expect(throws: PipelineError.self) {
                try await within(.seconds(10)) { try await f.pipeline.image(for: url) }
            }
            #expect(error?.originError?.code == .tooLarge)
            #expect(f.origin.statistics.bodyBytesSent < 64 << 20, "stopped early: \(f.origin.statistics.bodyBytesSent)")
            #expect(try f.store.entries(url: url).isEmpty)
        }
    }

    /// Endless redirects, a redirect to file: and one to another scheme: typed errors,
    /// nothing stored, no local file read.
    @Test func hostileRedirectsAreRefused() async throws {
        try await PipelineFixture.with { f in
            try f.store.flush()
            f.origin.set("/loop.jpg", .redirect(to: "/loop.jpg", status: 302))
            f.origin.set("/ping.jpg", .redirect(to: "/pong.jpg", status: 307))
            f.origin.set("/pong.jpg", .redirect(to: "/ping.jpg", status: 308))
            f.origin.set("/file.jpg", .redirect(to: "file:///etc/passwd", status: 301))
            f.origin.set("/ftp.jpg", .redirect(to: "ftp://127.0.0.1/a.jpg", status: 301))
            f.origin.set("/none.jpg", OriginResource(status: 302))
            let expected: [(String, OriginError.Code)] = [
                ("/loop.jpg", .tooManyRedirects), ("/ping.jpg", .tooManyRedirects), ("/file.jpg", .invalidRedirect),
                ("/ftp.jpg", .invalidRedirect), ("/none.jpg", .invalidRedirect),
            ]
            for (path, code) in expected {
                let error = await #expect(throws: PipelineError.self, "\(path)") {
                    try await within(.seconds(10)) { try await f.pipeline.image(for: f.url(path), variant: thumb) }
                }
                #expect(error?.originError?.code == code, "\(path): \(String(describing: error))")
                #expect(try f.store.entries(url: f.url(path)).isEmpty)
            }
            #expect(f.origin.requestCount(for: "/loop.jpg") == 6, "the first request and five redirects")
        }
    }

    /// An ETag or Last-Modified the store cannot keep (NUL), or one 10 KB long: the image is
    /// still served, and what is stored is exactly what the origin sent (or nothing).
    @Test func unusualValidatorsNeverFailOrCorruptTheEntry() async throws {
        try await PipelineFixture.with { f in
            let bytes = try jpeg()
            let long = "\"" + String(repeating: "x", count: 10_000) + "\""
            f.origin.set("/long.jpg", f.resource(bytes, etag: long, cacheControl: "max-age=60"))
            let url = f.url("/long.jpg")
            #expect(try await f.pipeline.image(for: url).data == Data(bytes))
            #expect(try f.store.info(for: CacheKey(url: url))?.etag == long)
            f.clock.advance(120)
            f.origin.set("/long.jpg", f.resource(bytes, etag: long, cacheControl: "max-age=60"))
            let again = try await f.pipeline.image(for: url)
            #expect(again.source == .revalidated)
            #expect(f.origin.requests(for: "/long.jpg").last?.header("If-None-Match") == long)
        }
    }

    /// An origin that sends a NUL inside its ETag. Either the HTTP client refuses the response
    /// (a typed origin error) or the pipeline serves the image; it must never fail with a
    /// *store* error for a response that is a perfectly good image.
    @Test func aNULInAValidatorIsNotAStoreFailure() async throws {
        try await PipelineFixture.with { f in
            let bytes = try jpeg()
            f.origin.set("/nul.jpg", f.resource(bytes, etag: "\"a\u{0}b\"", cacheControl: "max-age=60"))
            f.origin.set(
                "/nullm.jpg", f.resource(bytes, lastModified: "Mon, 01 Jan 2024 00:00:00 GMT\u{0}x", cacheControl: "max-age=60"))
            for path in ["/nul.jpg", "/nullm.jpg"] {
                let url = f.url(path)
                do {
                    let response = try await f.pipeline.image(for: url)
                    #expect(response.data == Data(bytes))
                } catch let error as PipelineError {
                    #expect(error.code == .origin, "\(path): \(error.code): \(error)")
                }
                for info in try f.store.entries(url: url) {
                    #expect(!(info.etag ?? "").utf8.contains(0))
                    #expect(!(info.lastModified ?? "").utf8.contains(0))
                }
            }
        }
    }

    /// Malformed, huge, negative and garbage freshness fields: every response is still served,
    /// stored with a policy that decodes and fits the engine's 512 bytes, and nothing crashes.
    @Test func garbageFreshnessFieldsAreHarmless() async throws {
        try await PipelineFixture.with { f in
            let bytes = try jpeg(64, 48)
            let cases: [[(name: String, value: String)]] = [
                [("Cache-Control", "max-age=99999999999999999999999999999")],
                [("Cache-Control", "max-age=-5")],
                [("Cache-Control", "max-age=\"10\", max-age=20, s-maxage=abc, stale-while-revalidate=-1")],
                [("Cache-Control", "no-cache=\"Set-Cookie, , ,\", must-revalidate=1, stale-if-error=99999999999999999")],
                [("Cache-Control", String(repeating: "x", count: 4000))],
                [("Cache-Control", "max-age=60"), ("Age", "-1")],
                [("Cache-Control", "max-age=60"), ("Age", "99999999999999999999999")],
                [("Cache-Control", "max-age=60"), ("Age", "1e9")],
                [("Expires", "0")],
                [("Expires", "Mon, 01 Jan 0001 00:00:00 GMT")],
                [("Expires", "Fri, 31 Dec 9999 23:59:59 GMT")],
                [("Expires", "Thu, 01 Jan 1970 00:00:00 GMT"), ("Date", "Fri, 31 Dec 9999 23:59:59 GMT")],
                [("Date", "Fri, 31 Dec 9999 23:59:59 GMT"), ("Last-Modified", "Mon, 01 Jan 0001 00:00:00 GMT")],
                [("Date", "garbage"), ("Last-Modified", "Sunday, 06-Nov-94 08:49:37 GMT")],
                [("Last-Modified", "Fri, 31 Dec 9999 23:59:59 GMT")],
                [("Vary", "Accept, *")],
            ]
            for (i, headers) in cases.enumerated() {
                let path = "/g\(i).jpg"
                f.origin.set(path, OriginResource(body: bytes, etag: "\"g\(i)\"", headers: headers))
                let url = f.url(path)
                let response = try await f.pipeline.image(for: url)
                #expect(response.data == Data(bytes), "\(headers)")
                if let info = try f.store.info(for: CacheKey(url: url)) {
                    let policy = try #require(info.cachePolicy, "\(headers)")
                    #expect(policy.utf8.count <= EntryMetadata.maximumCachePolicyLength)
                    #expect(CachePolicy(encoded: policy) != nil, "\(headers): \(policy)")
                }
                _ = try await f.pipeline.image(for: url)
            }
            // Vary: * (in a list) is never stored.
            #expect(try f.store.entries(url: f.url("/g\(cases.count - 1).jpg")).isEmpty)
        }
    }

    /// A 304 that brings `no-store` (or `Vary: *`): the stored bytes are served once, then
    /// the original and its variants are gone from store and memory.
    @Test(arguments: [false, true])
    func aNotModifiedWithNoStoreRemovesTheEntry(varyAny: Bool) async throws {
        try await PipelineFixture.with { f in
            let bytes = try jpeg()
            let url = f.url("/ns.jpg")
            f.origin.set("/ns.jpg", f.resource(bytes, etag: "\"n\"", cacheControl: "max-age=60"))
            _ = try await f.pipeline.image(for: url)
            _ = try await f.pipeline.image(for: url, variant: thumb)
            f.clock.advance(120)
            var resource =
                varyAny
                ? f.resource(bytes, etag: "\"n\"", cacheControl: "max-age=60")
                : f.resource(bytes, etag: "\"n\"", cacheControl: "no-store")
            if varyAny { resource.headers.append(("Vary", "*")) }
            f.origin.set("/ns.jpg", resource)
            let once = try await f.pipeline.image(for: url)
            #expect(once.status == 304)
            #expect(once.data == Data(bytes))
            #expect(once.info == nil)
            #expect(try f.store.entries(url: url).isEmpty)
            #expect(f.memory.entry(for: CacheKey(url: url)) == nil)
            #expect(f.memory.entry(for: CacheKey(url: url, variant: thumb.description)) == nil)
        }
    }

    /// A transport that answers from a script, recording the requests it got.
    final class ScriptedOrigin: OriginFetching {
        let requests = Locked<[OriginRequest]>([])
        let answer: @Sendable (OriginRequest, Int) -> Result<OriginResponse, OriginError>

        init(_ answer: @escaping @Sendable (OriginRequest, Int) -> Result<OriginResponse, OriginError>) {
            self.answer = answer
        }

        func fetch(_ request: OriginRequest) async throws(OriginError) -> OriginResponse {
            let index = requests.withLock { list -> Int in
                list.append(request)
                return list.count - 1
            }
            return try answer(request, index).get()
        }
    }

    /// A pipeline over a real store, fetching from `origin`.
    func withScriptedPipeline(
        _ origin: ScriptedOrigin, _ body: (ImagePipeline, Store, MemoryCache, PipelineClock) async throws -> Void
    ) async throws {
        try await withTemporaryDirectory { dir in
            let memory = MemoryCache()
            let clock = PipelineClock()
            var storeConfiguration = Store.Configuration()
            storeConfiguration.compactionInterval = nil
            memory.attach(to: &storeConfiguration)
            let store = try Store(directory: dir + "/store", configuration: storeConfiguration)
            var configuration = ImagePipeline.Configuration()
            configuration.clock = clock.reading
            let pipeline = ImagePipeline(store: store, memory: memory, origin: origin, configuration: configuration)
            do {
                try await body(pipeline, store, memory, clock)
            } catch {
                try? await pipeline.shutdown()
                try? store.close()
                throw error
            }
            try await pipeline.shutdown()
            try store.close()
        }
    }

    static func response(
        _ status: Int, _ request: OriginRequest, body: [UInt8] = [], headers: OriginHeaders, requestedURL: String? = nil
    ) -> OriginResponse {
        OriginResponse(
            status: status, headers: headers, body: Data(body), requestedURL: requestedURL ?? request.url,
            format: ImageFormat.sniff(body), requestTime: Date(), responseTime: Date())
    }

    /// A 304 naming another strong ETag does not freshen the stored bytes: one unconditional
    /// request follows, and its new bytes replace the original and drop its variants.
    @Test func aNotModifiedForAnotherETagFetchesTheWholeImage() async throws {
        let old = try jpeg(seed: 30)
        let new = try jpeg(seed: 60)
        let origin = ScriptedOrigin { request, index in
            switch index {
            case 0:
                .success(Self.response(200, request, body: old, headers: [("ETag", "\"a\""), ("Cache-Control", "max-age=60")]))
            case 1: .success(Self.response(304, request, headers: [("ETag", "\"b\""), ("Cache-Control", "max-age=60")]))
            default:
                .success(Self.response(200, request, body: new, headers: [("ETag", "\"b\""), ("Cache-Control", "max-age=60")]))
            }
        }
        try await withScriptedPipeline(origin) { pipeline, store, memory, clock in
            let url = "https://scripted.example/a.jpg"
            _ = try await pipeline.image(for: url, variant: thumb)
            clock.advance(120)
            let response = try await pipeline.image(for: url)
            #expect(response.source == .network)
            #expect(response.data == Data(new))
            let sent = origin.requests.withLock { $0 }
            #expect(sent.count == 3)
            #expect(sent[1].validators.entityTag == "\"a\"")
            #expect(sent[2].validators.isEmpty)
            #expect(try store.entries(url: url).map(\.key.variant) == [""])
            #expect(try store.info(for: CacheKey(url: url))?.etag == "\"b\"")
            #expect(memory.entry(for: CacheKey(url: url, variant: thumb.description)) == nil)
        }
    }

    /// Entity tags with bytes that are not UTF-8 arrive decoded with U+FFFD in their place
    /// (SwiftNIO), so `"\xE9"` and `"\xE8"` read the same: a 304 carrying one must not freshen
    /// a response stored under the other (found by an outside attack: the old bytes were served
    /// as fresh for an hour).
    @Test func aNotModifiedWithAnUnreadableETagFetchesTheWholeImage() async throws {
        let old = try jpeg(seed: 31)
        let new = try jpeg(seed: 61)
        let lossy = "\"\u{FFFD}\""
        let origin = ScriptedOrigin { request, index in
            switch index {
            case 0: .success(Self.response(200, request, body: old, headers: [("ETag", lossy), ("Cache-Control", "no-cache")]))
            case 1: .success(Self.response(304, request, headers: [("ETag", lossy), ("Cache-Control", "max-age=3600")]))
            default:
                .success(Self.response(200, request, body: new, headers: [("ETag", "\"b\""), ("Cache-Control", "max-age=60")]))
            }
        }
        try await withScriptedPipeline(origin) { pipeline, store, _, clock in
            let url = "https://scripted.example/lossy.jpg"
            _ = try await pipeline.image(for: url)
            clock.advance(1)
            let response = try await pipeline.image(for: url)
            #expect(response.source == .network)
            #expect(response.data == Data(new))
            #expect(origin.requests.withLock { $0 }.count == 3)
            #expect(try store.info(for: CacheKey(url: url))?.etag == "\"b\"")
        }
    }

    /// A transport that reports another `requestedURL` than the one asked for (a custom
    /// transport mapping URLs to a CDN, say). The pipeline knows which URL it asked for; it
    /// must never store one URL's bytes under another URL's key.
    @Test
    func oneURLsBytesAreNeverStoredUnderAnother() async throws {
        let a = try jpeg(seed: 1)
        let b = try jpeg(seed: 2)
        let origin = ScriptedOrigin { request, _ in
            let body = request.url.hasSuffix("a.jpg") ? a : b
            return .success(
                Self.response(
                    200, request, body: body, headers: [("Cache-Control", "max-age=60")],
                    requestedURL: "https://cdn.example/shared.jpg"))
        }
        try await withScriptedPipeline(origin) { pipeline, store, _, _ in
            let first = try await pipeline.image(for: "https://scripted.example/a.jpg")
            let second = try await pipeline.image(for: "https://scripted.example/b.jpg")
            #expect(first.data == Data(a))
            #expect(second.data == Data(b))
            #expect(try store.data(for: CacheKey(url: "https://scripted.example/a.jpg")) == Data(a))
            #expect(try store.data(for: CacheKey(url: "https://scripted.example/b.jpg")) == Data(b))
            #expect(try store.info(for: CacheKey(url: "https://cdn.example/shared.jpg")) == nil)
        }
    }

    // MARK: Freshness

    /// Within stale-while-revalidate, 50 concurrent stale requests start one background
    /// revalidation, not fifty.
    @Test func aBurstOfStaleRequestsRevalidatesOnce() async throws {
        try await PipelineFixture.with { f in
            let bytes = try jpeg()
            let url = f.url("/swr.jpg")
            let control = "max-age=60, stale-while-revalidate=600"
            f.origin.set("/swr.jpg", f.resource(bytes, etag: "\"s\"", cacheControl: control))
            _ = try await f.pipeline.image(for: url)
            f.clock.advance(120)
            f.origin.set("/swr.jpg", f.resource(bytes, etag: "\"s\"", cacheControl: control, headDelay: .milliseconds(400)))
            let sources = try await withThrowingTaskGroup(of: ImageResponse.Source.self) { group in
                for i in 0..<50 {
                    group.addTask { try await f.pipeline.image(for: url, variant: i % 2 == 0 ? nil : thumb).source }
                }
                return try await group.reduce(into: [ImageResponse.Source]()) { $0.append($1) }
            }
            #expect(sources.filter { $0 == .stale(.revalidating) }.count >= 25)
            // Wait for the revalidation to send its request and to refresh the store (a loaded
            // machine can take far longer than the origin's delay), then count the requests.
            #expect(await f.origin.wait(upTo: .seconds(30)) { $0.requests >= 2 })
            let deadline = ContinuousClock.now + .seconds(30)
            while try await f.pipeline.image(for: url).source == .stale(.revalidating), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(f.origin.requestCount(for: "/swr.jpg") == 2, "one background revalidation")
        }
    }

    /// must-revalidate beats stale-while-revalidate and stale-if-error: a stale entry is never
    /// served without a successful revalidation.
    @Test func mustRevalidateBeatsTheStaleWindows() async throws {
        try await PipelineFixture.with { f in
            let bytes = try jpeg()
            let url = f.url("/mr.jpg")
            let control = "max-age=60, must-revalidate, stale-while-revalidate=600, stale-if-error=600"
            f.origin.set("/mr.jpg", f.resource(bytes, etag: "\"m\"", cacheControl: control))
            _ = try await f.pipeline.image(for: url)
            _ = try await f.pipeline.image(for: url, variant: thumb)
            f.clock.advance(120)
            f.origin.set("/mr.jpg", f.resource(bytes, etag: "\"m\"", cacheControl: control))
            #expect(try await f.pipeline.image(for: url).source == .revalidated)
            f.clock.advance(120)
            f.origin.set("/mr.jpg", .failure(status: 503))
            for variant in [nil, thumb] {
                let error = await #expect(throws: PipelineError.self) { try await f.pipeline.image(for: url, variant: variant) }
                #expect(error?.originError?.status == 503)
            }
        }
    }

    /// An origin whose clock is behind (its Date two weeks old) sends a response that is stale
    /// on arrival. It has an ETag, so RFC 9111 §4.3.1 would revalidate it on the next use;
    /// the pipeline stores it with a hard expiry already in the past, so the store never shows
    /// it again: every request is a full download and a new link record.
    @Test func aResponseStaleOnArrivalIsRevalidatedNotRedownloaded() async throws {
        try await PipelineFixture.with { f in
            let bytes = try jpeg()
            let url = f.url("/old-clock.jpg")
            let date = HTTPDate(f.clock.date.addingTimeInterval(-14 * 86_400)).description
            f.origin.set(
                "/old-clock.jpg",
                OriginResource(body: bytes, etag: "\"oc\"", cacheControl: "max-age=3600", headers: [("Date", date)]))
            #expect(try await f.pipeline.image(for: url).source == .network)
            let second = try await f.pipeline.image(for: url)
            #expect(second.source == .revalidated, "got \(second.source)")
            #expect(f.origin.requests(for: "/old-clock.jpg").last?.header("If-None-Match") == "\"oc\"")
        }
    }

    /// The pipeline's clock stepping back a day never crashes or serves another URL's bytes;
    /// an entry simply stays fresh longer.
    @Test func aClockSteppingBackIsHarmless() async throws {
        try await PipelineFixture.with { f in
            let a = try jpeg(seed: 10)
            let b = try jpeg(seed: 20)
            f.origin.set("/ca.jpg", f.resource(a, etag: "\"a\"", cacheControl: "max-age=60"))
            f.origin.set("/cb.jpg", f.resource(b, etag: "\"b\"", cacheControl: "no-cache"))
            _ = try await f.pipeline.image(for: f.url("/ca.jpg"))
            _ = try await f.pipeline.image(for: f.url("/cb.jpg"))
            f.clock.advance(-86_400)
            #expect(try await f.pipeline.image(for: f.url("/ca.jpg")).data == Data(a))
            #expect(try await f.pipeline.image(for: f.url("/cb.jpg")).data == Data(b))
            #expect(try await f.pipeline.image(for: f.url("/cb.jpg")).source == .revalidated)
        }
    }

    // MARK: Codec

    /// A decode bomb through the pipeline — a small JPEG whose header claims 60 000 × 60 000:
    /// a typed codec error at once, the original kept, no variant stored or in memory.
    @Test func aDecodeBombIsATypedErrorAndStoresNoVariant() async throws {
        try await PipelineFixture.with { f in
            var bomb = try jpeg(64, 48)
            // Rewrite the frame header's height and width (SOF0: FF C0, length, precision, H, W).
            let sof = try #require((0..<bomb.count - 9).first { bomb[$0] == 0xFF && bomb[$0 + 1] == 0xC0 })
            for offset in [sof + 5, sof + 7] {
                bomb[offset] = UInt8(60_000 >> 8)
                bomb[offset + 1] = UInt8(60_000 & 0xFF)
            }
            f.origin.set("/bomb.jpg", OriginResource(body: bomb, cacheControl: "max-age=60"))
            let url = f.url("/bomb.jpg")
            let started = ContinuousClock.now
            let error = await #expect(throws: PipelineError.self) {
                try await within(.seconds(10)) { try await f.pipeline.image(for: url, variant: thumb) }
            }
            #expect(error?.code == .codec)
            #expect(error?.codecError?.code == .tooLarge, "\(String(describing: error))")
            #expect(try f.store.entries(url: url).map(\.key.variant) == [""])
            #expect(f.memory.entry(for: CacheKey(url: url, variant: thumb.description)) == nil)
        }
    }

    // MARK: Resources

    /// 300 distinct URLs at once: every one served, the per-host limit holds at the origin,
    /// no stage left behind, and no file descriptors leak once it is over.
    @Test func aFloodOfDistinctURLsStaysWithinLimits() async throws {
        func openDescriptors() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0 }
        try await PipelineFixture.with { f in
            let bytes = try jpeg(160, 120)
            for i in 0..<300 { f.origin.set("/f\(i).jpg", OriginResource(body: bytes, cacheControl: "max-age=600")) }
            _ = try await f.pipeline.image(for: f.url("/f0.jpg"))
            let before = openDescriptors()
            try await within(.seconds(60)) {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for i in 1..<300 {
                        group.addTask {
                            let response = try await f.pipeline.image(for: f.url("/f\(i).jpg"), variant: i % 3 == 0 ? thumb : nil)
                            #expect(response.data.count > 0)
                        }
                    }
                    try await group.waitForAll()
                }
            }
            #expect(f.origin.statistics.peakInFlightRequests <= 8)
            #expect(f.pipeline.originals.inFlight == 0)
            #expect(f.pipeline.variants.inFlight == 0)
            #expect(openDescriptors() <= before + 16, "descriptors: \(before) → \(openDescriptors())")
        }
    }

    /// The memory tier's limits hold under concurrent inserts of many sizes from many tasks,
    /// with removals and trims mixed in.
    @Test func memoryLimitsHoldUnderConcurrentInserts() async throws {
        let memory = MemoryCache(costLimit: 1 << 20, countLimit: 200)
        let big = Data(repeating: 7, count: 70_000)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<4 {
                group.addTask {
                    var generator = SystemRandomNumberGenerator()
                    for i in 0..<2_000 {
                        if i % 100 == 0 { await Task.yield() }
                        let key = CacheKey(
                            url: "https://m.example/\(Int.random(in: 0..<600, using: &generator))", variant: i % 4 == 0 ? "v" : ""
                        )
                        let size = Int.random(in: 0..<70_000, using: &generator)
                        let data = big.prefix(size)
                        let info = EntryInfo(
                            key: key, metadata: EntryMetadata(), createdAt: Date(), accessedAt: Date(), cost: size,
                            contentHash: ContentHash(hashing: [UInt8](data)))
                        let token = memory.insertionToken(for: key)
                        memory.insert(Entry(data: Data(data), info: info), for: key, ifUnchangedSince: token)
                        if let hit = memory.entry(for: key) { #expect(hit.key == key) }
                        if i % 97 == worker { memory.removeAll(url: key.url) }
                        if i % 1_001 == 0 { memory.trim(toCost: 512 << 10) }
                        #expect(memory.totalCost <= 1 << 20)
                        #expect(memory.count <= 200)
                    }
                }
            }
            try await group.waitForAll()
        }
        var problems: [String] = []
        memory.forEachShard { problems += $0.checkInvariants() }
        #expect(problems.isEmpty, "\(problems)")
    }

    /// How many places the ghost queue's array holds (members and stale places alike).
    static func ghostPlaces(_ ghost: GhostFIFO) -> Int {
        let mirror = Mirror(reflecting: ghost)
        let order = mirror.children.first { $0.label == "order" }?.value
        let front = mirror.children.first { $0.label == "front" }?.value as? Int ?? 0
        return (order.map { Mirror(reflecting: $0).children.count } ?? 0) - front
    }

    /// S3-FIFO's ghost queue is bounded by its member count, but the array of places behind it
    /// is trimmed only when the oldest member is dropped. One key evicted once and never seen
    /// again pins the front; every later key that is evicted and comes back (a ghost hit removes
    /// it from `members`, not from `order`) adds a place that is never reclaimed while the
    /// members stay under the limit. The ghost grows without bound: 16 bytes per cycle.
    @Test
    func theGhostQueueStaysBounded() {
        var ghost = GhostFIFO()
        ghost.append(-1, limit: 16)  // evicted once, never inserted again
        for i in 0..<100_000 {
            ghost.append(i, limit: 16)  // evicted from the small queue …
            _ = ghost.remove(i)  // … and inserted again soon (a ghost hit)
        }
        #expect(ghost.count == 1)
        #expect(Self.ghostPlaces(ghost) <= 1_000, "one member, \(Self.ghostPlaces(ghost)) places")
    }

    /// The same through MemoryCache's public API: a working set a little larger than a shard,
    /// read in a cycle (every read a miss, then an insert, as the pipeline does). The ghost
    /// queue's array grows with the number of reads, not with the cache's size.
    @Test
    func aCyclicWorkloadDoesNotGrowTheMemoryTier() {
        var configuration = MemoryCache.Configuration(costLimit: 64 << 20, countLimit: 20)
        configuration.shardCount = 1
        let memory = MemoryCache(configuration: configuration)
        func entry(_ key: CacheKey) -> Entry {
            let data = Data([1, 2, 3])
            let info = EntryInfo(
                key: key, metadata: EntryMetadata(), createdAt: Date(), accessedAt: Date(), cost: data.count,
                contentHash: ContentHash(hashing: [UInt8](data)))
            return Entry(data: data, info: info)
        }
        func access(_ key: CacheKey) {
            if memory.entry(for: key) == nil { memory.insert(entry(key), for: key) }
        }
        func places() -> Int {
            var total = 0
            memory.forEachShard { shard in
                if let ghost = Mirror(reflecting: shard).children.first(where: { $0.label == "ghost" })?.value as? GhostFIFO {
                    total += Self.ghostPlaces(ghost)
                }
            }
            return total
        }
        access(CacheKey(url: "https://cycle.example/once"))
        for i in 0..<40 { access(CacheKey(url: "https://cycle.example/warm\(i)")) }
        let keys = (0..<22).map { CacheKey(url: "https://cycle.example/k\($0)") }
        for _ in 0..<200 { for key in keys { access(key) } }
        let before = places()
        for _ in 0..<5_000 { for key in keys { access(key) } }
        let after = places()
        #expect(memory.count <= 20)
        #expect(after <= 1_000, "a 20-entry cache's ghost went from \(before) to \(after) places over 110 000 reads")
    }

    // MARK: The engine's cache-policy field

    /// A policy of exactly 512 bytes (multi-byte characters at the edge), an empty one and
    /// none survive reopening, a rebuild of the index from the packs, compaction and fsck;
    /// 513 bytes and a NUL are refused and leave nothing behind.
    @Test func cachePolicyAtTheLimitSurvivesReopenRebuildAndFsck() async throws {
        try await withTemporaryDirectory { dir in
            let exact = String(repeating: "p", count: 510) + "é"  // 510 + 2 bytes
            #expect(exact.utf8.count == 512)
            let policies: [(CacheKey, String?)] = [
                (CacheKey(url: "https://p.example/exact"), exact),
                (CacheKey(url: "https://p.example/empty"), ""),
                (CacheKey(url: "https://p.example/none"), nil),
                (CacheKey(url: "https://p.example/exact", variant: "w1-h1-inside-q80"), exact),
            ]
            func check(_ store: Store, _ context: String) throws {
                for (key, policy) in policies {
                    let info = try #require(try store.info(for: key), "\(context): \(key)")
                    #expect(info.cachePolicy == policy, "\(context): \(key)")
                    #expect(try store.data(for: key) == Data(key.description.utf8), "\(context): \(key)")
                }
                #expect(try store.info(for: CacheKey(url: "https://p.example/over")) == nil, "\(context)")
            }
            var store = try openStore(dir)
            for (key, policy) in policies {
                try store.put(Data(key.description.utf8), for: key, metadata: EntryMetadata(etag: "\"e\"", cachePolicy: policy))
            }
            let over = exact + "x"
            #expect(throws: StoreError.self) {
                try store.put(
                    Data("over".utf8), for: CacheKey(url: "https://p.example/over"), metadata: EntryMetadata(cachePolicy: over))
            }
            #expect(throws: StoreError.self) {
                try store.updateMetadata(EntryMetadata(cachePolicy: over), for: policies[0].0)
            }
            #expect(throws: StoreError.self) {
                try store.updateMetadata(EntryMetadata(cachePolicy: "a\u{0}b"), for: policies[0].0)
            }
            // A metadata-only update to the same 512 bytes.
            #expect(try store.updateMetadata(EntryMetadata(etag: "\"e\"", cachePolicy: exact), for: policies[0].0))
            try check(store, "written")
            try store.close()
            store = try openStore(dir)
            try check(store, "reopened")
            #expect(try store.fsck().isClean)
            try store.close()
            let report = try Store.rebuildIndex(directory: dir + "/store")
            #expect(report.entriesLost == 0, "\(report.findings)")
            store = try openStore(dir)
            try check(store, "rebuilt")
            #expect(try store.fsck().isClean)
            _ = try store.compact()
            try check(store, "compacted")
            #expect(try store.fsck().isClean)
            try store.close()
            store = try openStore(dir)
            try check(store, "reopened after compaction")
            try store.close()
        }
    }
}
