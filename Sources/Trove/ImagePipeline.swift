public import CoreMetrics
public import Foundation
public import TroveCodec
public import TroveCore
public import TroveHTTP
public import TroveStore

/// Images by URL, the way an app or a server wants them: memory, then disk, then the origin —
/// fresh per HTTP's rules, revalidated when stale, each piece of work done once however many
/// callers ask for it at the same time.
///
/// ```swift
/// let pipeline = try ImagePipeline.open(directory: "/var/cache/myapp/images")
/// let thumb = try await pipeline.image(for: url, variant: Variant(width: 256, height: 256))
/// print(thumb.source)   // memory, disk, revalidated, network, or stale with its reason
/// try await pipeline.shutdown()
/// ```
///
/// The path of ``image(for:variant:)`` (Docs/Pipeline.md):
/// 1. the memory tier (``MemoryCache``), when the copy there is fresh;
/// 2. the stored entry (an original or a variant), when fresh; when stale, served at once
///    within `stale-while-revalidate` while one background revalidation runs, else revalidated
///    first (`If-None-Match` / `If-Modified-Since`; a 304 refreshes the entry's freshness by a
///    metadata-only update of the original and its variants, no bytes rewritten);
/// 3. the origin, whose 200 is stored under the requested URL (a changed original drops every
///    stored variant of it);
/// 4. for a variant: the original decoded with shrink-on-load, oriented, resampled and encoded
///    as WebP, then stored.
///
/// Identical concurrent requests share one task at every stage (the fetch of an original, the
/// making of a variant). A caller whose task is cancelled stops waiting at once; when the last
/// waiter of a stage has gone, the stage is cancelled (a download's connection is closed).
///
/// Threads: reads of the store run inline (a page-cache read costs microseconds). Work that
/// can block — store writes (an `fdatasync` under `full` durability, back-pressure), decoding
/// and encoding — runs on a fixed pool of threads (``Configuration/blockingThreads``), never
/// on Swift's cooperative threads, so it cannot delay other requests' memory hits.
public final class ImagePipeline: Sendable {
    /// Settings of a pipeline.
    public struct Configuration: Sendable {
        /// HTTP freshness: heuristic, defaults, stale windows and how long a stale entry is kept
        /// for revalidation (Docs/Freshness.md).
        public var freshness = FreshnessSettings()
        /// Limits every decode is checked against.
        public var decodeLimits = DecodeLimits()
        /// Threads for work that can block (store writes, decoding, encoding). Default: the
        /// number of cores, at least 2.
        public var blockingThreads = max(2, ProcessInfo.processInfo.activeProcessorCount)
        /// The prefix of the pipeline's swift-metrics labels.
        public var metricsPrefix = "trove_pipeline"
        /// The metrics backend; nil for the one bootstrapped globally (`MetricsSystem`).
        public var metricsFactory: (any MetricsFactory)?
        /// The clock freshness is judged by.
        public var clock: @Sendable () -> Date = { Date() }

        /// The defaults.
        public init() {}
    }

    /// The store holding originals and variants.
    public let store: Store
    /// The memory tier in front of the store, if any. It must be attached to the store's
    /// configuration (``MemoryCache/attach(to:)``) — ``open(directory:storeConfiguration:memory:origin:configuration:)``
    /// does that — so that no write, removal, expiry or repair leaves a stale copy in memory.
    public let memory: MemoryCache?
    /// Where originals come from.
    public let origin: any OriginFetching
    /// The pipeline's settings.
    public let configuration: Configuration

    let pool: BlockingPool
    /// Keyed by the original's key, not its URL string: a key is its UTF-8 bytes, while
    /// `String`'s `==` would join a download of one spelling of a URL to another, canonically
    /// equivalent one, and serve it the other URL's bytes.
    let originals = TaskCoalescer<CacheKey, ImageResponse>()
    let variants = TaskCoalescer<CacheKey, ImageResponse>()
    let counters = Locked(Statistics())
    let metrics: PipelineMetrics
    private let owned: Owned?

    /// What ``open(directory:storeConfiguration:memory:origin:configuration:)`` made and
    /// ``shutdown()`` therefore closes.
    private struct Owned: Sendable {
        var store: Bool
        var httpOrigin: HTTPOrigin?
    }

    /// Makes a pipeline over an open store.
    ///
    /// - Parameters:
    ///   - store: The store; it stays open after ``shutdown()``.
    ///   - memory: The memory tier, already attached to `store`'s configuration; nil for none.
    ///   - origin: Where originals come from (for example ``OriginRouter`` over ``HTTPOrigin``
    ///     and ``FileOrigin``). The caller shuts it down.
    ///   - configuration: Settings.
    public convenience init(
        store: Store, memory: MemoryCache? = nil, origin: any OriginFetching, configuration: Configuration = Configuration()
    ) {
        self.init(store: store, memory: memory, origin: origin, configuration: configuration, owned: nil)
    }

    private init(
        store: Store, memory: MemoryCache?, origin: any OriginFetching, configuration: Configuration, owned: Owned?
    ) {
        self.store = store
        self.memory = memory
        self.origin = origin
        self.configuration = configuration
        self.owned = owned
        pool = BlockingPool(threads: configuration.blockingThreads, name: "trove-pipe")
        metrics = PipelineMetrics(prefix: configuration.metricsPrefix, factory: configuration.metricsFactory)
    }

    /// Opens (or creates) the store at `directory` with `memory` attached, and a pipeline on it
    /// fetching `http`, `https` and `file` URLs. ``shutdown()`` closes what this made.
    ///
    /// - Parameters:
    ///   - directory: The store directory (default: ``Store/defaultDirectory``).
    ///   - storeConfiguration: The store's settings.
    ///   - memory: The memory tier (default: a ``MemoryCache`` with its default limits); nil
    ///     for none.
    ///   - origin: Where originals come from; nil for HTTP(S) with default ``OriginLimits`` and
    ///     file URLs.
    ///   - configuration: The pipeline's settings.
    /// - Throws: ``StoreError`` when the store cannot be opened.
    public static func open(
        directory: String = Store.defaultDirectory, storeConfiguration: Store.Configuration = Store.Configuration(),
        memory: MemoryCache? = MemoryCache(), origin: (any OriginFetching)? = nil,
        configuration: Configuration = Configuration()
    ) throws(StoreError) -> ImagePipeline {
        var storeConfiguration = storeConfiguration
        memory?.attach(to: &storeConfiguration)
        let store = try Store(directory: directory, configuration: storeConfiguration)
        var httpOrigin: HTTPOrigin?
        let fetcher: any OriginFetching
        if let origin {
            fetcher = origin
        } else {
            let http = HTTPOrigin()
            httpOrigin = http
            fetcher = OriginRouter(http: http, file: FileOrigin())
        }
        return ImagePipeline(
            store: store, memory: memory, origin: fetcher, configuration: configuration,
            owned: Owned(store: true, httpOrigin: httpOrigin))
    }

    /// Stops the pipeline's threads and closes what ``open(directory:storeConfiguration:memory:origin:configuration:)``
    /// made (the HTTP client, the store). Requests still running fail.
    public func shutdown() async throws {
        pool.shutdown()
        if let http = owned?.httpOrigin { try await http.shutdown() }
        if owned?.store == true { try store.close() }
    }

    deinit {
        pool.shutdown()
    }

    // MARK: Images

    /// The image at `url` — its original bytes, or its `variant` (a downsampled WebP) — from
    /// the nearest tier that may serve it.
    ///
    /// - Throws: ``PipelineError`` (``PipelineError/Code/origin`` when the origin failed and no
    ///   stale copy may stand in, ``PipelineError/Code/codec`` when a variant cannot be made,
    ///   ``PipelineError/Code/store``); `CancellationError` at once when the calling task is
    ///   cancelled.
    public func image(for url: URL, variant: Variant? = nil) async throws -> ImageResponse {
        try await image(for: url.absoluteString, variant: variant)
    }

    /// The image at `url`, given as text (the store's key is this text, exactly).
    ///
    /// - Throws: as ``image(for:variant:)-(URL,_)``.
    public func image(for url: String, variant: Variant? = nil) async throws -> ImageResponse {
        do {
            let response = try await serve(url: url, variant: variant)
            record(response)
            return response
        } catch {
            if error is CancellationError {
                count { $0.cancellations += 1 }
                metrics.cancellations.increment()
            } else {
                count { $0.failures += 1 }
                metrics.failures.increment()
            }
            throw error
        }
    }

    /// Loads the image at `url` (and makes its `variant`) into the store and memory ahead of
    /// need, at low priority. Cancel the returned task to stop it: when no other request waits
    /// for the same work, the download stops.
    @discardableResult
    public func prefetch(_ url: String, variant: Variant? = nil) -> Task<Void, Never> {
        Task(priority: .low) {
            _ = try? await self.image(for: url, variant: variant)
        }
    }

    /// Loads the image at `url` ahead of need (see ``prefetch(_:variant:)-(String,_)``).
    @discardableResult
    public func prefetch(_ url: URL, variant: Variant? = nil) -> Task<Void, Never> {
        prefetch(url.absoluteString, variant: variant)
    }

    private func serve(url: String, variant: Variant?) async throws -> ImageResponse {
        try Task.checkCancellation()
        guard !pool.isShutDown else { throw PipelineError.shutDown(url: url) }
        let key = CacheKey(url: url, variant: variant?.description ?? "")
        if let variant, !variant.isValid {
            throw PipelineError.codec(CodecError(.unsupported, "variant \(variant) is out of range"), url: url)
        }
        if let found = memory?.entry(for: key), decision(for: found.info).isFresh {
            return ImageResponse(data: found.data, info: found.info, source: .memory)
        }
        let token = memory?.insertionToken(for: key)
        if let stored = try read(key) {
            switch decision(for: stored.info) {
            case .fresh:
                if let token { memory?.insert(stored, for: key, ifUnchangedSince: token) }
                return ImageResponse(data: stored.data, info: stored.info, source: .disk)
            case .stale(let use):
                if use.servableWhileRevalidating {
                    revalidateInBackground(url)
                    return ImageResponse(data: stored.data, info: stored.info, source: .stale(.revalidating))
                }
                if variant == nil { return try await original(url) }
                // A variant is as fresh as its original: revalidate that, then look again.
                let original: ImageResponse
                do {
                    original = try await self.original(url)
                } catch let error as PipelineError where error.code == .origin {
                    guard let failure = error.originError, allowsStaleOnError(stored.info, failure) else { throw error }
                    return ImageResponse(data: stored.data, info: stored.info, source: .stale(.originFailed(failure.code)))
                }
                if case .stale = original.source {
                    return ImageResponse(data: stored.data, info: stored.info, source: original.source)
                }
                // The original is validated now. A changed original took its variants with it;
                // a variant still stored was made from the validated bytes (even when `no-cache`
                // makes it stale again at once), so it is served, not made again.
                if let refreshed = try read(key) {
                    return ImageResponse(
                        data: refreshed.data, info: refreshed.info, source: original.source, status: original.status)
                }
            }
        }
        guard let variant else { return try await original(url) }
        let outcome = try await variants.value(for: key, priority: Task.currentPriority) {
            try await self.makeVariant(variant, key: key)
        }
        if outcome.joined { countCoalesced() }
        return outcome.value
    }

    // MARK: Originals

    /// The original of `url`, fresh, through the stage shared by every caller of the URL.
    func original(_ url: String) async throws -> ImageResponse {
        let outcome = try await originals.value(for: CacheKey(url: url), priority: Task.currentPriority) {
            try await self.loadOriginal(url)
        }
        if outcome.joined { countCoalesced() }
        return outcome.value
    }

    private func countCoalesced() {
        count { $0.coalescedWaiters += 1 }
        metrics.coalescedWaiters.increment()
    }

    /// One background revalidation per URL: it joins a revalidation already running.
    private func revalidateInBackground(_ url: String) {
        count { $0.backgroundRevalidations += 1 }
        Task(priority: .utility) {
            // The stage looks at the stored original again: still stale, it revalidates; made
            // fresh meanwhile by another caller, it is done.
            _ = try? await self.originals.value(for: CacheKey(url: url)) { try await self.loadOriginal(url) }
        }
    }

    /// The stage: the stored original when fresh, else the origin's answer (a 304 refreshing
    /// the stored one, or a 200 replacing it).
    private func loadOriginal(_ url: String) async throws -> ImageResponse {
        let key = CacheKey(url: url)
        let token = memory?.insertionToken(for: key)
        let stored = try read(key)
        if let stored, decision(for: stored.info).isFresh {
            if let token { memory?.insert(stored, for: key, ifUnchangedSince: token) }
            return ImageResponse(data: stored.data, info: stored.info, source: .disk)
        }
        let validators = stored.map { Validators(entityTag: $0.etag, lastModified: $0.lastModified) } ?? Validators()
        if !validators.isEmpty {
            count { $0.revalidations += 1 }
            metrics.revalidations.increment()
        }
        let response: OriginResponse
        do throws(OriginError) {
            response = try await fetch(OriginRequest(url: url, validators: validators))
        } catch {
            if error.code == .cancelled { throw CancellationError() }
            if let stored, allowsStaleOnError(stored.info, error) {
                return ImageResponse(data: stored.data, info: stored.info, source: .stale(.originFailed(error.code)))
            }
            throw PipelineError.origin(error, url: url)
        }
        if response.isNotModified {
            count { $0.notModified += 1 }
            metrics.notModified.increment()
            if let stored, let refreshed = try await refresh(stored, with: response, token: token) { return refreshed }
            // A 304 that is not for the stored copy (or answers no condition), or a stored copy
            // replaced meanwhile: fetch it whole.
            let whole: OriginResponse
            do throws(OriginError) {
                whole = try await fetch(OriginRequest(url: url))
            } catch {
                if error.code == .cancelled { throw CancellationError() }
                if let stored, allowsStaleOnError(stored.info, error) {
                    return ImageResponse(data: stored.data, info: stored.info, source: .stale(.originFailed(error.code)))
                }
                throw PipelineError.origin(error, url: url)
            }
            guard !whole.isNotModified else {
                throw PipelineError.origin(
                    OriginError(
                        code: .status, message: "\(url): 304 Not Modified to an unconditional request", url: url, status: 304),
                    url: url)
            }
            return try await storeFetched(whole, for: url, replacing: stored)
        }
        return try await storeFetched(response, for: url, replacing: stored)
    }

    /// Fetches `request`, with its request and response times read from the pipeline's clock
    /// (every freshness decision uses that one clock; the response time then includes the
    /// body's transfer, which can only make the computed age larger, never the entry fresher).
    private func fetch(_ request: OriginRequest) async throws(OriginError) -> OriginResponse {
        let requestTime = configuration.clock()
        var response = try await origin.fetch(request)
        response.requestTime = requestTime
        response.responseTime = max(requestTime, configuration.clock())
        return response
    }

    /// A 304 for `stored`: new freshness and validators for the original and every variant of
    /// it, by metadata-only updates. nil when the 304 does not identify the stored response.
    ///
    /// The update is made only while the entry still holds `stored`'s bytes, and memory is
    /// filled only if nothing but this update changed the key since `token` — taken before
    /// `stored` was read — so a put racing the revalidation never leaves these bytes in memory
    /// or these validators on other bytes.
    private func refresh(
        _ stored: Entry, with response: OriginResponse, token: MemoryCache.InsertionToken?
    ) async throws -> ImageResponse? {
        let url = stored.key.url
        let policy = stored.info.cachePolicy.flatMap { CachePolicy(encoded: $0) }
        let storedValidators = Validators(entityTag: stored.etag, lastModified: stored.lastModified)
        let freshness: ResponseFreshness?
        if let policy {
            freshness = policy.freshened(
                byNotModified: response.headers, storedValidators: storedValidators, requestTime: response.requestTime,
                responseTime: response.responseTime, settings: configuration.freshness)
        } else {
            // Stored without a policy (not by a pipeline): the 304's own fields decide.
            freshness = ResponseFreshness(
                status: 200, headers: response.headers, requestTime: response.requestTime, responseTime: response.responseTime,
                settings: configuration.freshness)
        }
        guard let freshness else { return nil }
        guard freshness.isStorable else {
            // The 304 brought no-store or Vary: *: serve this once, keep nothing.
            try await write(url) { store in _ = try store.removeAll(url: url) }
            return ImageResponse(data: stored.data, info: nil, source: .revalidated, status: 304)
        }
        let metadata = metadata(of: freshness)
        let key = stored.key
        let contentHash = stored.info.contentHash
        let updated = try await write(url) { store -> Bool in
            guard try store.updateMetadata(metadata, for: key, ifContentHash: contentHash) else { return false }
            for variant in try store.entries(url: url) where !variant.key.variant.isEmpty {
                try store.updateMetadata(metadata, for: variant.key)
            }
            return true
        }
        guard updated else {
            // Another writer replaced the bytes while the 304 was on its way: the newer write
            // stands, and this 304 (about the old bytes) is not applied to it.
            if let current = try read(key), current.info.contentHash != contentHash {
                return ImageResponse(data: current.data, info: current.info, source: .disk)
            }
            return nil
        }
        let now = configuration.clock()
        let info = EntryInfo(
            key: key, metadata: metadata, createdAt: now, accessedAt: now, cost: stored.info.cost,
            contentHash: stored.info.contentHash)
        let entry = Entry(data: stored.data, info: info)
        if let token { memory?.insert(entry, for: key, afterWriteSince: token) }
        return ImageResponse(data: stored.data, info: info, source: .revalidated, status: 304)
    }

    /// A 200: stored under the requested URL unless the response forbids it; a changed
    /// original drops every stored variant.
    ///
    /// Stored under `url`, the URL this pipeline asked for, whatever the transport reports.
    private func storeFetched(
        _ response: OriginResponse, for url: String, replacing stored: Entry?
    ) async throws -> ImageResponse {
        count {
            $0.fetches += 1
            $0.bytesFetched += response.bytesReceived
        }
        metrics.fetches.increment()
        metrics.bytesFetched.increment(by: response.bytesReceived)
        let freshness = ResponseFreshness(
            status: response.status, headers: response.headers, requestTime: response.requestTime,
            responseTime: response.responseTime, settings: configuration.freshness)
        guard freshness.isStorable else {
            // Never stored, and nothing made from it will be; what was stored is outdated.
            try await write(url) { store in _ = try store.removeAll(url: url) }
            return ImageResponse(data: response.body, info: nil, source: .network, status: response.status)
        }
        let metadata = metadata(of: freshness)
        let key = CacheKey(url: url)
        let token = memory?.insertionToken(for: key)
        let body = response.body
        let hash: ContentHash
        do {
            if stored == nil, let written = try writeInline(body, for: key, metadata: metadata) {
                hash = written
            } else {
                let computed = ContentHash(hashing: [UInt8](body))
                let changed = stored.map { $0.info.contentHash != computed || $0.info.cost != body.count } ?? true
                try await write(url) { store in
                    if changed {
                        // Variants were made from other bytes (or the original is unknown).
                        _ = try store.removeAll(url: url)
                    } else {
                        for variant in try store.entries(url: url) where !variant.key.variant.isEmpty {
                            try store.updateMetadata(metadata, for: variant.key)
                        }
                    }
                    try store.put(body, for: key, metadata: metadata)
                }
                hash = computed
            }
        } catch let error as PipelineError where error.code == .store {
            // The store could not keep it (a full or failing disk, a failed sync): the body is
            // whole and checked, so the caller gets it, unstored — and so does every variant
            // made from it (an original without `info` makes unstored variants).
            storeWriteFailed()
            return ImageResponse(data: body, info: nil, source: .network, status: response.status)
        }
        let now = configuration.clock()
        let info = EntryInfo(
            key: key, metadata: metadata, createdAt: now, accessedAt: now, cost: body.count, contentHash: hash)
        if let token { memory?.insert(Entry(data: body, info: info), for: key, afterWriteSince: token) }
        return ImageResponse(data: body, info: info, source: .network, status: response.status)
    }

    // MARK: Variants

    /// The stage of one variant: the original (through its own stage), decoded, resampled and
    /// encoded on the blocking pool, then stored with the original's metadata.
    private func makeVariant(_ variant: Variant, key: CacheKey) async throws -> ImageResponse {
        let url = key.url
        let original = try await self.original(url)
        let limits = configuration.decodeLimits
        let source = [UInt8](original.data)
        let thumbnail: Thumbnail
        do {
            thumbnail = try await pool.run { () throws -> Thumbnail in
                try ImageDecoder.thumbnail(source, variant: variant, limits: limits)
            }
        } catch let error as CodecError {
            throw PipelineError.codec(error, url: url)
        } catch is BlockingPool.ShutDown {
            throw PipelineError.shutDown(url: url)
        }
        count { $0.variantsMade += 1 }
        metrics.variantsMade.increment()
        let data = Data(thumbnail.data)
        guard let originalInfo = original.info else {
            // The original may not be stored (no-store): neither may anything made from it.
            return ImageResponse(data: data, info: nil, source: original.source, status: original.status, madeVariant: true)
        }
        let metadata = originalInfo.metadata
        let token = memory?.insertionToken(for: key)
        do {
            try await write(url) { store in
                try store.put(data, for: key, metadata: metadata)
                // The original changed while the variant was made: the variant is of old bytes.
                if try store.info(for: CacheKey(url: url))?.contentHash != originalInfo.contentHash {
                    try store.remove(key)
                }
            }
        } catch let error as PipelineError where error.code == .store {
            // As for an original the store could not keep: served, unstored.
            storeWriteFailed()
            return ImageResponse(data: data, info: nil, source: original.source, status: original.status, madeVariant: true)
        }
        let now = configuration.clock()
        let info = EntryInfo(
            key: key, metadata: metadata, createdAt: now, accessedAt: now, cost: data.count,
            contentHash: ContentHash(hashing: thumbnail.data))
        if let token { memory?.insert(Entry(data: data, info: info), for: key, afterWriteSince: token) }
        return ImageResponse(data: data, info: info, source: original.source, status: original.status, madeVariant: true)
    }

    // MARK: Freshness

    /// What may be done with a stored entry now. An entry without a policy was stored by
    /// something other than a pipeline (`trove put`, ``ImageCache``): the store's hard expiry
    /// is its only rule, so it is fresh. A policy that cannot be read must be revalidated.
    func decision(for info: EntryInfo) -> FreshnessDecision {
        guard let text = info.cachePolicy else { return .fresh }
        guard let policy = CachePolicy(encoded: text) else { return .stale(.mustRevalidate) }
        return policy.decision(at: configuration.clock(), settings: configuration.freshness)
    }

    /// Whether a stale entry may stand in for an origin that failed with `error` (RFC 5861 §4:
    /// the origin could not be reached — a transport error, a timeout, a cut body — or answered
    /// 500, 502, 503 or 504).
    private func allowsStaleOnError(_ info: EntryInfo, _ error: OriginError) -> Bool {
        switch error.code {
        case .transport, .timeout, .truncated, .lengthMismatch: break
        case .status where [500, 502, 503, 504].contains(error.status ?? 0): break
        default: return false
        }
        return decision(for: info).staleUse?.servableOnError ?? false
    }

    /// The metadata a response's freshness gives an entry: its validators, its policy, and the
    /// store's hard expiry (freshness plus the stale retention).
    ///
    /// A response already stale when it arrives (an origin clock far behind, a huge `Age`)
    /// still gets the retention from now: it is kept for revalidation, not stored expired.
    private func metadata(of freshness: ResponseFreshness) -> EntryMetadata {
        var expiresAt = freshness.policy.hardExpiry(settings: configuration.freshness)
        if let hard = expiresAt, let retention = configuration.freshness.staleRetention {
            let floor = configuration.clock().addingTimeInterval(
                Double(retention.components.seconds) + Double(retention.components.attoseconds) / 1e18)
            expiresAt = max(hard, floor)
        }
        return EntryMetadata(
            etag: freshness.validators.entityTag, lastModified: freshness.validators.lastModified, expiresAt: expiresAt,
            cachePolicy: freshness.policy.encoded)
    }

    // MARK: Store access

    /// Reads `key` inline: a page-cache read costs microseconds, less than a thread hop.
    private func read(_ key: CacheKey) throws(PipelineError) -> Entry? {
        do { return try store.entry(for: key) } catch { throw PipelineError.store(error, url: key.url) }
    }

    /// Stores a new original inline when that cannot block: nil — nothing written — when the
    /// store has any entry of the URL (its variants must go first), the put would wait (`full`
    /// durability, back-pressure), or the body is over ``inlineWriteLimit``. The caller then
    /// writes on the pool. This saves the two thread hops of a pool write on every cold fetch.
    private func writeInline(_ body: Data, for key: CacheKey, metadata: EntryMetadata) throws(PipelineError)
        -> ContentHash?
    {
        guard body.count <= Self.inlineWriteLimit else { return nil }
        // A pipeline shut down writes nothing more, inline or on the pool.
        guard !pool.isShutDown else { throw PipelineError.shutDown(url: key.url) }
        do {
            guard try store.keys(url: key.url).isEmpty else { return nil }
            return try store.putWithoutWaiting(body, for: key, metadata: metadata)
        } catch {
            throw PipelineError.store(error, url: key.url)
        }
    }

    /// The largest body written inline (``writeInline(_:for:metadata:)``): appending it to the
    /// page cache takes tens of microseconds, less than a hop to the pool and back.
    static let inlineWriteLimit = 256 << 10

    /// Runs store writes for `url` on the blocking pool.
    private func write<T: Sendable>(_ url: String, _ body: @escaping @Sendable (Store) throws -> T) async throws -> T {
        let store = self.store
        do {
            return try await pool.run { () throws -> T in try body(store) }
        } catch let error as StoreError {
            throw PipelineError.store(error, url: url)
        } catch is BlockingPool.ShutDown {
            throw PipelineError.shutDown(url: url)
        }
    }

    // MARK: Counting

    func count(_ change: (inout Statistics) -> Void) {
        counters.withLock(change)
    }

    /// A response the store could not keep, served unstored.
    private func storeWriteFailed() {
        count { $0.unstoredResponses += 1 }
        metrics.unstoredResponses.increment()
    }

    private func record(_ response: ImageResponse) {
        switch response.source {
        case .memory:
            count { $0.memoryHits += 1 }
            metrics.memoryHits.increment()
        case .disk:
            count { $0.diskHits += 1 }
            metrics.diskHits.increment()
        case .revalidated:
            count { $0.revalidatedHits += 1 }
            metrics.revalidatedHits.increment()
        case .network:
            count { $0.networkResponses += 1 }
            metrics.networkResponses.increment()
        case .stale:
            count { $0.staleResponses += 1 }
            metrics.staleResponses.increment()
        }
    }
}
