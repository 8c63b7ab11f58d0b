import Foundation
import Trove
import TroveCore
import TroveStore

/// The memory tier's rows of ``BenchmarkSuite`` (Docs/Benchmarks.md § Memory tier):
///
/// - **memory hit 4KiB** (and **, 2 thr**): `MemoryCache` against Foundation's `NSCache`
///   holding the same `Data` (10 000 values of 4 KiB, the same keys, the same random order of
///   hits), on one thread and on two at once. A hit takes well under a microsecond, near the
///   clock's own cost, so hits are timed in batches of ``batch`` and each batch's time divided
///   by its size: p50 and p99 are of those per-batch means, not of single hits. The two caches
///   take turns (``rounds``), so load from other processes falls on both.
/// - **hit ratio Zipf 0.9**, **hit ratio Zipf + scan** and **hit ratio, scan window**: the hit
///   ratio of `MemoryCache` (16 shards, and one) and of a plain ``LRUCache`` of the same byte
///   capacity, replaying one Zipf-0.9 trace where a miss inserts the item, as a cache in front
///   of a store does; then the same trace with a one-time scan of cold keys mixed in, over the
///   whole trace and over the window of the scan alone.
///
/// Every lookup's result is checked: hits must find every key and return its own bytes.
enum MemoryTierBenchmark {
    /// Values in the hit workload.
    static let itemCount = 10_000
    /// Their size.
    static let valueSize = 4 << 10
    /// Hits per timed batch.
    static let batch = 1_000
    /// Turns the caches of the hit workload take.
    static let rounds = 4

    /// Runs every memory-tier workload. `directory` holds a small store, read once for an
    /// entry's info (entries come from a store; the workloads then vary its bytes and key).
    static func run(
        plan: BenchmarkPlan, pool: ContentPool, directory: String, progress: (String) -> Void
    ) throws -> [BenchmarkResult] {
        let template = try templateEntry(directory: directory, pool: pool)
        var rows = try hits(plan: plan, pool: pool, template: template, progress: progress)
        rows += try hitRatios(plan: plan, template: template, progress: progress)
        return rows
    }

    /// DESIGN.md's memory-tier targets, checked against `results`.
    static func targets(_ results: [BenchmarkResult]) -> [TargetCheck] {
        func find(_ workload: String, _ engine: String) -> BenchmarkResult? {
            results.first { $0.workload == workload && $0.engine == engine }
        }
        var checks: [TargetCheck] = []
        if let memory = find("memory hit 4KiB", "Trove MemoryCache") {
            checks.append(
                TargetCheck(
                    target: "memory hit 4KiB p50 (batches of \(batch))", measured: memory.p50Microseconds,
                    required: "< 1 µs", met: memory.p50Microseconds < 1))
            // Throughput, like every other ratio of the suite, and the per-hit p50 (the typical
            // batch; throughput also counts the slow batches, where NSCache has the heavier tail).
            if let cache = find("memory hit 4KiB", "NSCache") {
                let throughput = memory.opsPerSecond / cache.opsPerSecond
                checks.append(
                    TargetCheck(
                        target: "memory hit 4KiB: MemoryCache vs NSCache, ops/s", measured: throughput, required: "≥ 2×",
                        met: throughput >= 2))
                let typical = cache.p50Microseconds / max(memory.p50Microseconds, 1e-9)
                checks.append(
                    TargetCheck(
                        target: "memory hit 4KiB: MemoryCache vs NSCache, p50 per hit", measured: typical, required: "≥ 2×",
                        met: typical >= 2))
            }
        }
        for workload in ["hit ratio Zipf 0.9", "hit ratio Zipf + scan", "hit ratio, scan window"] {
            guard let memory = find(workload, "Trove MemoryCache")?.metric, let lru = find(workload, "LRU")?.metric else {
                continue
            }
            let r = memory / max(lru, 1e-9)
            checks.append(
                TargetCheck(target: "\(workload): MemoryCache vs LRU hit ratio", measured: r, required: "≥ 1×", met: r >= 1))
        }
        return checks
    }

    // MARK: Hits

    /// `NSCache` needs objects: the value as a user would box it.
    private final class Box: Sendable {
        let data: Data
        init(_ data: Data) { self.data = data }
    }

    /// The `NSCache` and its keys, shared by the threads of the two-thread row.
    ///
    /// `@unchecked Sendable`: `NSCache` is documented thread-safe (it locks inside), the keys
    /// are immutable `NSString`s made before the threads start, and nothing mutates the array.
    private final class SharedNSCache: @unchecked Sendable {
        let cache = NSCache<NSString, Box>()
        let names: [NSString]
        init(names: [NSString]) { self.names = names }
    }

    private static func hits(
        plan: BenchmarkPlan, pool: ContentPool, template: Entry, progress: (String) -> Void
    ) throws -> [BenchmarkResult] {
        let keys = (0..<itemCount).map { CacheKey(url: "https://images.example.com/memory/\($0).jpg") }
        let values = (0..<itemCount).map { pool.value(id: UInt64(20_000_000 + $0), size: valueSize) }
        // Limits above the data set (shards fill unevenly), so every lookup is a hit.
        let memory = MemoryCache(costLimit: 2 * itemCount * (valueSize + MemoryCache.itemOverhead), countLimit: 2 * itemCount)
        for i in 0..<itemCount {
            guard memory.insert(entry(template, keys[i], values[i]), for: keys[i]) else {
                throw BenchmarkError("memory tier: the cache refused \(keys[i])")
            }
        }
        let shared = SharedNSCache(names: keys.map { NSString(string: $0.url) })
        let (cache, names) = (shared.cache, shared.names)
        for i in 0..<itemCount { cache.setObject(Box(values[i]), forKey: names[i], cost: values[i].count) }

        let lookups = max(batch, plan.operations(1_000_000) / batch * batch)
        var generator = SplitMix(state: 11)
        let order = (0..<lookups).map { _ in Int.random(in: 0..<itemCount, using: &generator) }
        // The bytes every hit must see in total, and a sample compared byte for byte.
        let expectedBytes = lookups * valueSize
        func verify(_ name: String, _ lookup: (Int) -> Data?) throws {
            for i in stride(from: 0, to: itemCount, by: 97) where lookup(i) != values[i] {
                throw BenchmarkError("memory tier: \(name) returned wrong bytes for \(keys[i])")
            }
        }
        try verify("MemoryCache") { memory.data(for: keys[$0]) }
        try verify("NSCache") { cache.object(forKey: names[$0])?.data }

        var rows: [BenchmarkResult] = []
        for threads in [1, 2] {
            let workload = threads == 1 ? "memory hit 4KiB" : "memory hit 4KiB, 2 thr"
            progress("\(workload) × \(lookups * threads) each: MemoryCache, NSCache")
            let times = try timeHits(
                threads: threads, order: order, expectedBytes: expectedBytes,
                [
                    { i in memory.entry(for: keys[i])?.data },
                    { i in shared.cache.object(forKey: shared.names[i])?.data },
                ])
            rows.append(row(workload, "Trove MemoryCache", times[0]))
            rows.append(row(workload, "NSCache", times[1]))
        }
        return rows
    }

    /// Per-batch mean nanoseconds per hit, and the time of the timed batches.
    private struct BatchTimes {
        var perHit: [Double] = []
        /// The longest thread's sum of batch times (the threads run at once).
        var seconds = 0.0
        var operations = 0
    }

    /// Runs `order`'s lookups with each of `caches` on each of `threads` threads, after one
    /// untimed pass each, timing batches of ``batch``. The caches take turns in ``rounds``
    /// rounds (each runs a share of its batches back to back, as a hot loop would), so a change
    /// in the machine's load (other processes) falls on all of them alike.
    ///
    /// A lookup hands over the bytes it found (nil: a miss), which the loop keeps until the
    /// next one, as a caller would use them: every cache must give out an owned `Data`. Any
    /// miss, or a total other than `expectedBytes` per thread and cache, fails the run.
    private static func timeHits(
        threads: Int, order: [Int], expectedBytes: Int, _ caches: [@Sendable (Int) -> Data?]
    ) throws -> [BatchTimes] {
        let results = Locked<[[(perHit: [Double], seconds: Double, bytes: Int, misses: Int)]]>([])
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            let clock = ContinuousClock()
            var perHit = [[Double]](repeating: [], count: caches.count)
            var totals = [Duration](repeating: .zero, count: caches.count)
            var bytes = [Int](repeating: 0, count: caches.count)
            var misses = [Int](repeating: 0, count: caches.count)
            var kept: Data?
            for (c, lookup) in caches.enumerated() {
                for i in order where lookup(i) == nil { misses[c] += 1 }  // warm, untimed
            }
            // Rounds: each cache runs a quarter of the lookups, batch after batch, then the next
            // cache does; four rounds.
            let batches = order.count / batch
            for round in 0..<rounds {
                let range = (batches * round / rounds)..<(batches * (round + 1) / rounds)
                for (c, lookup) in caches.enumerated() {
                    for b in range {
                        var found = 0
                        let t0 = clock.now
                        for i in order[(b * batch)..<((b + 1) * batch)] {
                            kept = lookup(i)
                            if let data = kept { found &+= data.count } else { misses[c] += 1 }
                        }
                        let elapsed = clock.now - t0
                        totals[c] += elapsed
                        bytes[c] &+= found
                        perHit[c].append(nanoseconds(elapsed) / Double(batch))
                    }
                }
            }
            _ = kept
            let mine = (0..<caches.count).map { c in (perHit[c], nanoseconds(totals[c]) / 1e9, bytes[c], misses[c]) }
            results.withLock { $0.append(mine) }
        }
        var times = [BatchTimes](repeating: BatchTimes(), count: caches.count)
        for thread in results.withLock({ $0 }) {
            for (c, result) in thread.enumerated() {
                guard result.misses == 0, result.bytes == expectedBytes else {
                    throw BenchmarkError(
                        "memory tier: cache \(c) had \(result.misses) misses, \(result.bytes) bytes instead of \(expectedBytes)")
                }
                times[c].perHit += result.perHit
                times[c].seconds = max(times[c].seconds, result.seconds)
                times[c].operations += order.count
            }
        }
        return times
    }

    private static func row(_ workload: String, _ engine: String, _ times: BatchTimes) -> BenchmarkResult {
        let sorted = times.perHit.sorted()
        func percentile(_ p: Double) -> Double {
            let rank = min(sorted.count - 1, max(0, Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1))
            return sorted[rank] / 1000
        }
        return BenchmarkResult(
            workload: workload, engine: engine, operations: times.operations, seconds: times.seconds,
            opsPerSecond: Double(times.operations) / max(times.seconds, 1e-9), p50Microseconds: percentile(50),
            p99Microseconds: percentile(99), metric: nil, metricName: nil)
    }

    // MARK: Hit ratio

    private static func hitRatios(plan: BenchmarkPlan, template: Entry, progress: (String) -> Void) throws -> [BenchmarkResult] {
        let catalog = max(1_000, plan.operations(100_000))
        let requests = max(10 * catalog, plan.operations(2_000_000))
        var generator = SplitMix(state: 21)
        // Image-like sizes, 2–16 KiB; the caches hold 10 % of the catalog's bytes.
        let sizes = (0..<catalog).map { _ in Int.random(in: (2 << 10)...(16 << 10), using: &generator) }
        let capacity = sizes.reduce(0) { $0 + $1 + MemoryCache.itemOverhead } / 10
        let zipf = ZipfSampler(count: catalog, exponent: 0.9)
        // Ranks are spread over ids at random, so popularity is not ordered by key.
        let idOfRank = Array(0..<catalog).shuffled(using: &generator)
        let trace = (0..<requests).map { _ in Int32(idOfRank[zipf.next(using: &generator)]) }
        // The scan: twice as many cold keys as the catalog holds (20 × what the caches hold),
        // each read once, two after each of `catalog` requests of the trace from its first
        // quarter on — for that window, two thirds of the traffic.
        let scanStart = requests / 4
        var scanned: [Int32] = []
        scanned.reserveCapacity(requests + 2 * catalog)
        var window = 0..<0
        for (i, item) in trace.enumerated() {
            if i == scanStart { window = scanned.count..<scanned.count }
            scanned.append(item)
            let s = i - scanStart
            if s >= 0 && s < catalog {
                scanned.append(Int32(catalog + 2 * s))
                scanned.append(Int32(catalog + 2 * s + 1))
                window = window.lowerBound..<scanned.count
            }
        }

        let blob = Data(count: 16 << 10)
        func size(_ item: Int) -> Int { sizes[item % catalog] }
        let keys = (0..<(3 * catalog)).map { CacheKey(url: "https://images.example.com/zipf/\($0).jpg") }
        let entries = (0..<(3 * catalog)).map { entry(template, keys[$0], blob.prefix(size($0))) }

        var rows: [BenchmarkResult] = []
        var windowRows: [BenchmarkResult] = []
        for (workload, requests) in [("hit ratio Zipf 0.9", trace), ("hit ratio Zipf + scan", scanned)] {
            // The first tenth warms the caches; hits are counted on the trace's own requests
            // (scan keys can only miss, in any policy).
            let warm = requests.count / 10
            let window = workload.hasSuffix("scan") ? window : 0..<0
            var replays: [(String, (Int) -> Bool?)] = []
            for shards in [16, 1] {
                var configuration = MemoryCache.Configuration(costLimit: capacity, countLimit: .max)
                configuration.shardCount = shards
                let memory = MemoryCache(configuration: configuration)
                replays.append(
                    (
                        shards == 16 ? "Trove MemoryCache" : "Trove, 1 shard",
                        { item in
                            if let entry = memory.entry(for: keys[item]) { return entry.data.count == size(item) ? true : nil }
                            memory.insert(entries[item], for: keys[item])
                            guard memory.totalCost <= capacity else { return nil }
                            return false
                        }
                    ))
            }
            var lru = LRUCache(capacity: capacity, itemOverhead: MemoryCache.itemOverhead)
            replays.append(
                (
                    "LRU",
                    { item in
                        if let data = lru.data(for: keys[item]) { return data.count == size(item) ? true : nil }
                        lru.insert(entries[item].data, for: keys[item])
                        return false
                    }
                ))
            for (engine, access) in replays {
                progress("\(workload) × \(requests.count): \(engine)")
                let simulation = try simulate(requests, warm: warm, window: window, catalog: catalog, access)
                rows.append(ratioRow(workload, engine, simulation, hits: simulation.hits, counted: simulation.counted))
                if !window.isEmpty {
                    windowRows.append(
                        ratioRow(
                            "hit ratio, scan window", engine, simulation, hits: simulation.windowHits,
                            counted: simulation.windowCounted))
                }
            }
        }
        return rows + windowRows
    }

    private struct Simulation {
        var hits = 0
        var counted = 0
        var windowHits = 0
        var windowCounted = 0
        var seconds = 0.0
        var requests = 0
    }

    /// Replays `requests`; `access` says whether an item hit (nil: it returned wrong bytes or
    /// broke a limit). Hits of catalog items are counted after `warm` requests, and apart for
    /// the requests in `window`.
    private static func simulate(
        _ requests: [Int32], warm: Int, window: Range<Int>, catalog: Int, _ access: (Int) -> Bool?
    ) throws -> Simulation {
        var simulation = Simulation()
        let clock = ContinuousClock()
        let start = clock.now
        for (i, request) in requests.enumerated() {
            let item = Int(request)
            guard let hit = access(item) else { throw BenchmarkError("memory tier: wrong bytes or over capacity, item \(item)") }
            guard item < catalog else { continue }
            if i >= warm {
                simulation.counted += 1
                if hit { simulation.hits += 1 }
            }
            if window.contains(i) {
                simulation.windowCounted += 1
                if hit { simulation.windowHits += 1 }
            }
        }
        simulation.seconds = nanoseconds(clock.now - start) / 1e9
        simulation.requests = requests.count
        return simulation
    }

    private static func ratioRow(
        _ workload: String, _ engine: String, _ simulation: Simulation, hits: Int, counted: Int
    ) -> BenchmarkResult {
        BenchmarkResult(
            workload: workload, engine: engine, operations: simulation.requests, seconds: simulation.seconds,
            opsPerSecond: Double(simulation.requests) / max(simulation.seconds, 1e-9), p50Microseconds: 0, p99Microseconds: 0,
            metric: Double(hits) / Double(max(1, counted)), metricName: "hit ratio")
    }

    // MARK: Entries

    /// An entry read from a real store, whose info the workloads reuse.
    private static func templateEntry(directory: String, pool: ContentPool) throws -> Entry {
        var configuration = Store.Configuration(durability: .none)
        configuration.compactionInterval = nil
        let store = try Store(directory: directory, configuration: configuration)
        defer { try? store.close() }
        let key = CacheKey(url: "https://images.example.com/template.jpg")
        try store.put(pool.value(id: 1, size: valueSize), for: key)
        guard let entry = try store.entry(for: key) else { throw BenchmarkError("memory tier: the template entry is missing") }
        return entry
    }

    /// `template` with `data` under `key`.
    private static func entry(_ template: Entry, _ key: CacheKey, _ data: Data) -> Entry {
        var entry = template
        entry.data = data
        entry.info.key = key
        entry.info.cost = data.count
        return entry
    }

    private static func nanoseconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) * 1e9 + Double(duration.components.attoseconds) / 1e9
    }
}
