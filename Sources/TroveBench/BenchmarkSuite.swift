import Foundation
@_spi(Testing) import TroveStore
import TroveCore

#if canImport(Glibc)
    import Glibc
#endif

/// How much work a benchmark run does.
public struct BenchmarkPlan: Codable, Sendable {
    /// Small entries each engine holds before the workloads run (DESIGN.md: measure populated
    /// stores — an empty tree flatters one file per entry and an empty index flatters SQLite).
    public var population: Int
    /// Entries of the large store in the open-time / p99 scaling workload (compared with 10 000).
    public var scaleEntries: Int
    /// Multiplies the operation counts of the workloads.
    public var operationScale: Double
    /// Where the engines' directories go (a new temporary directory when nil).
    public var directory: String?
    /// The groups of workloads to run (all by default).
    public var sections: [BenchmarkSection] = BenchmarkSection.allCases
    /// This program, run again as `bench-worker` for the workloads that need a fresh process
    /// (``FirstReadBenchmark``); nil skips them.
    public var workerExecutable: String?

    /// A few minutes on a 2-core machine (the engines group alone: 1.5–2 min).
    public static let standard = BenchmarkPlan(population: 100_000, scaleEntries: 100_000, operationScale: 1, directory: nil)
    /// Seconds: a smoke run.
    public static let quick = BenchmarkPlan(population: 5_000, scaleEntries: 20_000, operationScale: 0.1, directory: nil)

    public init(population: Int, scaleEntries: Int, operationScale: Double, directory: String?) {
        self.population = population
        self.scaleEntries = scaleEntries
        self.operationScale = operationScale
        self.directory = directory
    }

    func operations(_ n: Int) -> Int { max(20, Int(Double(n) * operationScale)) }
}

/// A group of workloads, run on its own with `trove bench --only`.
public enum BenchmarkSection: String, Codable, CaseIterable, Sendable {
    /// Trove against one file per entry and SQLite: puts, gets, mixed, dedup, disk, compaction, scaling.
    case engines
    /// The memory tier against NSCache and an LRU.
    case memory
    /// The image pipeline: disk hits against `Store.data`, cold fetches against bare HTTP GETs.
    case pipeline
    /// Each engine in a fresh process: the first read of every key, then Zipf gets, and the
    /// process's peak memory (``FirstReadBenchmark``).
    case firstReads = "first-reads"
}

/// One workload run against one engine.
public struct BenchmarkResult: Codable, Sendable {
    /// The workload's name, e.g. `put 64KiB`.
    public var workload: String
    /// The engine's name, e.g. `Trove`, `FilePerEntry fsync`.
    public var engine: String
    /// Operations timed.
    public var operations: Int
    /// Wall time of the timed loop, seconds.
    public var seconds: Double
    /// Operations per second.
    public var opsPerSecond: Double
    /// Median latency, microseconds.
    public var p50Microseconds: Double
    /// 99th-percentile latency, microseconds.
    public var p99Microseconds: Double
    /// A workload-specific figure (disk bytes per payload byte, open seconds), with its meaning.
    public var metric: Double?
    public var metricName: String?
    /// The process's peak resident memory while the workload ran, in MiB (Linux's `VmHWM`, reset
    /// before the timed loop), when measured. Rows from child processes (the first-read
    /// workload) give that process's peak, which is the engine's alone.
    public var peakResidentMiB: Double?
    /// Untimed: how long the first synced write of the file system's settling before the loop
    /// took, in milliseconds — the work earlier workloads had left, which the loop no longer
    /// pays (Docs/Benchmarks.md, "a settled file system before every row"). Nil when the loop
    /// was not settled or the probe could not be written.
    public var settleMilliseconds: Double?
    /// What the machine read from its disks while the timed loop ran, in KiB: Linux's `pgpgin`,
    /// every process's reads, when known. Reads a row means to serve from the page cache that
    /// went to the disk show here; their latencies are the disk's (Docs/Benchmarks.md, "pages
    /// the machine takes back").
    public var diskReadKiB: Int?
    /// For a row that is the median of several fresh processes (the first reads), each
    /// process's operations per second, in the order run; nil for a row timed once.
    public var processesPerSecond: [Double]?
}

/// A target of DESIGN.md § Targets checked against this run.
public struct TargetCheck: Codable, Sendable {
    public var target: String
    public var measured: Double
    public var required: String
    public var met: Bool
}

/// The results of a run.
public struct BenchmarkReport: Codable, Sendable {
    public var plan: BenchmarkPlan
    public var results: [BenchmarkResult]
    public var targets: [TargetCheck]
}

/// Runs Trove, one-file-per-entry and SQLite-as-blob-store through the same workloads on the
/// same generated data, in one process, and checks DESIGN.md's targets as ratios.
///
/// Every workload verifies the work it names: written values are read back and compared byte
/// for byte (all of them for gets, a sample after puts), counts are checked.
public final class BenchmarkSuite {
    let plan: BenchmarkPlan
    let progress: (String) -> Void
    let pool = ContentPool()
    var results: [BenchmarkResult] = []
    let root: String
    private let ownsRoot: Bool

    /// Prepares a run; `progress` receives one line per step.
    public init(plan: BenchmarkPlan, progress: @escaping (String) -> Void = { _ in }) throws {
        self.plan = plan
        self.progress = progress
        if let directory = plan.directory {
            root = directory
            ownsRoot = false
        } else {
            root = FileManager.default.temporaryDirectory.path + "/trove-bench-\(UUID().uuidString.prefix(8))"
            ownsRoot = true
        }
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    }

    deinit {
        if ownsRoot { try? FileManager.default.removeItem(atPath: root) }
    }

    /// Runs every workload and returns the results with the targets checked.
    public func run() throws -> BenchmarkReport {
        // Last, after every timed row (or a failed one): the engines an earlier run left, set
        // aside by the fixture.
        defer { EngineFixture.removeSetAside(in: root + "/engines") }
        if plan.sections.contains(.engines) { try runEngines() }
        if plan.sections.contains(.firstReads), let executable = plan.workerExecutable {
            results += try FirstReadBenchmark.run(
                plan: plan, pool: pool, directory: root + "/first-reads", executable: executable, progress: progress)
        }
        if plan.sections.contains(.memory) {
            results += try MemoryTierBenchmark.run(plan: plan, pool: pool, directory: root + "/memory-tier", progress: progress)
        }
        if plan.sections.contains(.pipeline) {
            let lines = Locked<[String]>([])
            results += try PipelineBenchmark.run(plan: plan, pool: pool, directory: root + "/pipeline") { line in
                lines.withLock { $0.append(line) }
            }
            for line in lines.withLock({ $0 }) { progress(line) }
        }
        return BenchmarkReport(plan: plan, results: results, targets: checkTargets())
    }

    /// The engine workloads: Trove against one file per entry and SQLite.
    private func runEngines() throws {
        // First: before other workloads leave freed memory in the heap that would absorb growth.
        try memoryBudget()
        progress("populating each engine with \(plan.population) entries of 4 KiB")
        let clock = ContinuousClock()
        let start = clock.now
        let fixture = try EngineFixture(directory: root + "/engines", population: plan.population)
        defer { fixture.close() }
        progress("populated in \(clock.now - start)")
        for engine in fixture.engines {
            try verifySample(engine, count: plan.population) { i in
                (EngineFixture.populationKey(i), EngineFixture.populationValue(pool, i))
            }
        }
        let (trove, files, sqlite) = (fixture.trove, fixture.files, fixture.sqlite)
        // The floor of the put and warm-get rows (KnownPlaceEngine), holding the same population.
        // Empty at every run: it appends, and a reused --directory would grow it.
        try? FileManager.default.removeItem(atPath: root + "/engines/floor")
        let floor = try KnownPlaceEngine(directory: root + "/engines/floor", verifies: true)
        defer { try? floor.close() }
        try EngineFixture.populate(floor, population: plan.population, pool: pool)
        for (size, count) in [(4 << 10, 5_000), (64 << 10, 2_000), (1 << 20, 200)] {
            try putAndGet(size: size, count: plan.operations(count), trove: trove, files: files, sqlite: sqlite, floor: floor)
        }
        try concurrentWriters(trove: trove, files: files, sqlite: sqlite)
        for engine in fixture.engines { try mixedZipf(engine) }
        for engine in fixture.engines { try dedupHeavyPut(engine) }
        // The floors of the dedup-heavy and disk rows sync like `batched` (Trove's default
        // level in both); the dedup row's finds repeats by content and compares their bytes.
        floor.syncsLikeBatched = true
        floor.deduplicates = true
        try dedupHeavyPut(floor)
        floor.deduplicates = false
        for engine in fixture.engines { try diskPerPayload(engine) }
        try diskPerPayload(floor)
        floor.syncsLikeBatched = false
        try compactionUnderReads()
        try scaling()
    }

    /// The store's memory budget (issue 11; Docs/Architecture.md, "Memory").
    private func memoryBudget() throws {
        let entries = 50_000  // in quick runs too: fewer would drown in allocator noise
        progress("memory budget: \(entries) entries read once, one 32 MiB get")
        let figures = try MemoryBudget.measure(directory: root + "/budget", entries: entries, pool: pool)
        record(
            "memory: RSS per entry read (map slot, index pages)", name: "Trove", figures.reads,
            metric: figures.bytesPerMapEntry, metricName: "bytes")
        record(
            "memory: peak RSS of a 32 MiB get ÷ size", name: "Trove", figures.largeRead, metric: figures.peakPerValueByte,
            metricName: "ratio")
    }

    // MARK: Workloads

    /// Puts `count` new values of `size` bytes with each durability-matched engine setting,
    /// then reads them all back warm; `floor` (``KnownPlaceEngine``) does the same last, as the
    /// rows' floor.
    private func putAndGet(
        size: Int, count: Int, trove: TroveEngine, files: FilePerEntryEngine, sqlite: SQLiteBlobEngine,
        floor: KnownPlaceEngine
    ) throws {
        let label = size >= 1 << 20 ? "\(size >> 20)MiB" : "\(size >> 10)KiB"
        let values = Self.putValues(pool, size: size, count: count, tag: "main")
        func put(_ engine: any BlobStoring & Sendable, tag: String, count: Int) throws {
            // Bytes no row has stored before: an engine that deduplicates (Trove) would
            // otherwise time its repeated-content path in every row after the first.
            let values = tag == "main" ? values : Self.putValues(pool, size: size, count: count, tag: tag)
            progress("put \(label) × \(count): \(engine.name)")
            let m = try measure(count, settling: root, finish: engine.flush) { i in
                try engine.put(values[i], key: "put-\(label)-\(tag)-\(i)", etag: "e\(i)")
            }
            record("put \(label)", engine, m)
            try verifySample(engine, count: count) { ("put-\(label)-\(tag)-\($0)", values[$0]) }
        }
        try atEveryLevel(
            trove: trove, files: files, sqlite: sqlite, count: count, durableCount: max(20, count / 4), put)
        try put(floor, tag: "main", count: count)
        // The floor of the `batched` row: the same appends, synced as `batched` promises.
        floor.syncsLikeBatched = true
        try put(floor, tag: "batched", count: count)
        floor.syncsLikeBatched = false

        // Warm gets of what each engine just stored: one untimed pass, then timed passes in a
        // shuffled order, every value compared.
        let gets = plan.operations(size >= 1 << 20 ? 1_000 : 20_000)
        var generator = SplitMix(state: UInt64(size))
        let order = (0..<gets).map { _ in Int.random(in: 0..<count, using: &generator) }
        func get(_ engine: any BlobStoring) throws {
            progress("warm get \(label) × \(gets): \(engine.name)")
            for i in 0..<count { _ = try engine.get("put-\(label)-main-\(i)") }
            let m = try measure(gets, settling: root) { j in
                try engine.get("put-\(label)-main-\(order[j])")
            } check: { j, data in
                guard data == values[order[j]] else {
                    throw BenchmarkError("\(engine.name): get \(label) returned wrong bytes for key \(order[j])")
                }
            }
            record("warm get \(label)", engine, m)
        }
        try get(trove)
        try get(files)
        try get(sqlite)
        sqlite.updatesAccessTime = false
        try get(sqlite)
        sqlite.updatesAccessTime = true
        try get(floor)
    }

    /// The values a put row writes: `count` values of `size` bytes, different for every `tag`
    /// (a row's tag: `main`, `none`, `full`, `fsync`, `batched`), so that every row puts bytes
    /// no earlier row stored. Until 2026-11-28 every row of a workload put the same values, and
    /// Trove's rows after the first (`none`, `full`) timed its deduplication instead of new
    /// puts.
    static func putValues(_ pool: ContentPool, size: Int, count: Int, tag: String, base: Int? = nil) -> [Data] {
        let salt: UInt64 =
            switch tag {
            case "main": 0
            case "none": 1
            case "full": 2
            case "fsync": 3
            case "batched": 4
            default: 5
            }
        let first = UInt64(base ?? size * 10)
        return (0..<count).map { pool.value(id: (first + UInt64($0)) | salt << 40, size: size) }
    }

    /// Runs `put` with each engine at each durability level, like with like: the page-cache
    /// levels first (Trove `batched` and `none`, FilePerEntry, SQLite NORMAL; `count` puts),
    /// then the fsync-per-write ones (Trove `full`, FilePerEntry fsync, SQLite FULL;
    /// `durableCount`), leaving every engine at its default level.
    private func atEveryLevel(
        trove: TroveEngine, files: FilePerEntryEngine, sqlite: SQLiteBlobEngine, count: Int, durableCount: Int,
        _ put: (_ engine: any BlobStoring & Sendable, _ tag: String, _ count: Int) throws -> Void
    ) throws {
        try put(trove, "main", count)
        try trove.reopen(durability: .none)
        try put(trove, "none", count)
        try trove.reopen(durability: .batched)
        try put(files, "main", count)
        try put(sqlite, "main", count)
        try trove.reopen(durability: .full)
        try put(trove, "full", durableCount)
        try trove.reopen(durability: .batched)
        files.fsyncWrites = true
        try put(files, "fsync", durableCount)
        files.fsyncWrites = false
        try sqlite.setSynchronousFull(true)
        try put(sqlite, "full", durableCount)
        try sqlite.setSynchronousFull(false)
    }

    /// Eight threads putting distinct 20 KB values at once — image downloads finishing
    /// together — with each engine at each durability level. This is where group commit pays:
    /// Trove `full` shares one `fdatasync` among the writers waiting at the same moment, one
    /// file per entry fsyncs every file, SQLite FULL runs one write transaction at a time.
    private func concurrentWriters(trove: TroveEngine, files: FilePerEntryEngine, sqlite: SQLiteBlobEngine) throws {
        let writers = 8
        let size = 20_000
        let count = plan.operations(4_000)
        let durableCount = max(writers * 4, count / 4)
        let workload = "\(writers) writers put 20KB"
        func put(_ engine: any BlobStoring & Sendable, tag: String, count: Int) throws {
            // New bytes for every row (as in `putAndGet`): no row times deduplication.
            let values = Self.putValues(pool, size: size, count: count, tag: tag, base: 9_000_000)
            progress("\(workload) × \(count): \(engine.name)")
            let m = try measureConcurrently(count, threads: writers, settling: root, finish: engine.flush) { i in
                try engine.put(values[i], key: "writers-\(tag)-\(i)", etag: "e\(i)")
            }
            record(workload, engine, m)
            try verifySample(engine, count: count) { ("writers-\(tag)-\($0)", values[$0]) }
        }
        try atEveryLevel(trove: trove, files: files, sqlite: sqlite, count: count, durableCount: durableCount, put)
    }

    /// 90 % gets, 10 % puts over a Zipf-popular catalog of image-like sizes; a miss is fetched
    /// (put) as a cache would.
    private func mixedZipf(_ engine: any BlobStoring) throws {
        let items = plan.operations(3_000)
        let operations = plan.operations(20_000)
        var generator = SplitMix(state: 7)
        let sizes = imageSizes(count: items, using: &generator)
        let zipf = ZipfSampler(count: items)
        var version = [Int](repeating: 0, count: items)
        var expected = [UInt64?](repeating: nil, count: items)
        // Plan every operation and make every value before the clock starts.
        var plan: [(item: Int, put: Data?)] = []
        var simulated = [Bool](repeating: false, count: items)
        for _ in 0..<operations {
            let item = zipf.next(using: &generator)
            let isPut = Int.random(in: 0..<10, using: &generator) == 0 || !simulated[item]
            if isPut {
                version[item] += 1
                simulated[item] = true
                plan.append((item, pool.value(id: UInt64(item) << 20 | UInt64(version[item]), size: sizes[item])))
            } else {
                plan.append((item, nil))
            }
        }
        progress("mixed 90/10 Zipf × \(operations): \(engine.name)")
        var misses = 0
        var wrong = 0
        let m = try measure(operations, settling: root, finish: engine.flush) { i -> Data? in
            let (item, value) = plan[i]
            if let value {
                try engine.put(value, key: "zipf-\(item)", etag: "v")
                return nil
            }
            return try engine.get("zipf-\(item)")
        } check: { i, data in
            let (item, value) = plan[i]
            if let value {
                expected[item] = ContentPool.id(of: value)
            } else if let data {
                if ContentPool.id(of: data) != expected[item] || data.count != sizes[item] { wrong += 1 }
            } else {
                misses += 1
            }
        }
        guard wrong == 0, misses == 0 else {
            throw BenchmarkError("\(engine.name): mixed workload read \(wrong) wrong values and missed \(misses)")
        }
        record("mixed 90/10 Zipf", engine, m)
    }

    /// 20 KiB puts where one in five repeats an earlier value under a new key.
    private func dedupHeavyPut(_ engine: any BlobStoring) throws {
        let count = plan.operations(4_000)
        var generator = SplitMix(state: 99)
        let ids: [UInt64] = (0..<count).map { i in
            i > 10 && Int.random(in: 0..<5, using: &generator) == 0
                ? UInt64(Int.random(in: 0..<(i / 2), using: &generator)) : UInt64(i)
        }
        let values = ids.map { pool.value(id: 5_000_000 + $0, size: 20 << 10) }
        progress("dedup-heavy put 20KiB × \(count): \(engine.name)")
        let before = try engine.allocatedBytes()
        let trove = engine as? TroveEngine
        let statistics = try trove?.store.statistics()
        let m = try measure(count, settling: root, finish: engine.flush) { i in
            try engine.put(values[i], key: "dedup-\(i)", etag: "d")
        }
        let grown = try engine.allocatedBytes() - before
        if let trove, let statistics {
            // What the growth is made of: the workload measures dedup only if each value is kept once.
            let after = try trove.store.statistics()
            progress(
                "dedup-heavy: Trove kept \(after.blobs - statistics.blobs) blobs for \(Set(ids).count) distinct values; "
                    + "packs +\(after.packBytes - statistics.packBytes) B, index +\(after.indexBytes - statistics.indexBytes) B")
        }
        if let floor = engine as? KnownPlaceEngine, floor.deduplicatedPuts != count - Set(ids).count {
            throw BenchmarkError(
                "dedup-heavy: the floor stored \(count - floor.deduplicatedPuts) values for \(Set(ids).count) distinct ones")
        }
        try verifySample(engine, count: count) { ("dedup-\($0)", values[$0]) }
        record("dedup-heavy put 20KiB", engine, m, metric: Double(grown) / Double(count * (20 << 10)), metricName: "disk/payload")
    }

    /// Disk bytes used per payload byte for unique 20 KiB values (20 000 bytes, so block
    /// rounding shows).
    private func diskPerPayload(_ engine: any BlobStoring) throws {
        let count = plan.operations(4_000)
        progress("disk per payload 20KB × \(count): \(engine.name)")
        let values = (0..<count).map { pool.value(id: UInt64(7_000_000 + $0), size: 20_000) }
        let before = try engine.allocatedBytes()
        let logBefore = FileTree.allocatedBytes(under: engine.directory, suffix: "-wal")
        let m = try measure(count, settling: root, finish: engine.flush) { i in
            try engine.put(values[i], key: "disk-\(i)", etag: "")
        }
        let grown = try engine.allocatedBytes() - before
        // Part of the growth can be an SQLite log reaching its high-water mark (it is never
        // truncated): a fixed cost, not one per payload byte. Shown apart, not taken out.
        let logGrown = FileTree.allocatedBytes(under: engine.directory, suffix: "-wal") - logBefore
        let perPayload = { (bytes: Int64) in String(format: "%.4f", Double(bytes) / Double(count * 20_000)) }
        progress(
            "disk per payload: \(engine.name) grew \(perPayload(grown))× the payload, "
                + "of which SQLite logs (-wal) \(perPayload(logGrown))×")
        try verifySample(engine, count: count) { ("disk-\($0)", values[$0]) }
        record("disk per payload 20KB", engine, m, metric: Double(grown) / Double(count * 20_000), metricName: "disk/payload")
    }

    /// Trove only: a store of 20 KiB values in 4 MiB segments with every other entry removed,
    /// compacted while one thread reads live entries. Reports the rewrite rate (MB/s of live
    /// records copied forward) and get latency during the pass against the same gets idle.
    private func compactionUnderReads() throws {
        let count = plan.operations(20_000)
        let directory = root + "/compaction"
        var configuration = Store.Configuration()
        configuration.segmentSize = 4 << 20
        configuration.compactionInterval = nil
        let store = try Store(directory: directory, configuration: configuration)
        defer { try? store.close() }
        progress("compaction: \(count) entries of 20 KiB, every other one removed")
        let values = (0..<count).map { pool.value(id: UInt64(9_000_000 + $0), size: 20 << 10) }
        for i in 0..<count { try store.put(values[i], for: CacheKey(url: "c-\(i)")) }
        for i in stride(from: 0, to: count, by: 2) { try store.remove(CacheKey(url: "c-\(i)")) }
        try store.flush()
        var generator = SplitMix(state: 5)
        let live = (0..<4_000).map { _ in Int.random(in: 0..<(count / 2), using: &generator) * 2 + 1 }
        func get(_ j: Int) throws -> Data? { try store.data(for: CacheKey(url: "c-\(live[j % live.count])")) }
        func check(_ j: Int, _ data: Data?) throws {
            guard data == values[live[j % live.count]] else {
                throw BenchmarkError("compaction: wrong bytes for c-\(live[j % live.count])")
            }
        }
        let idle = try measure(live.count, settling: root, get, check: check)
        record("get, idle", name: "Trove", idle)

        // The pass on another thread; gets on this one until it is done.
        let outcome = Locked<Result<(CompactionReport, Duration), any Error>?>(nil)
        let started = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            started.signal()
            let clock = ContinuousClock()
            let start = clock.now
            let result = Result { try store.compact() }.map { ($0, clock.now - start) }
            outcome.withLock { $0 = result }
        }
        started.wait()
        var during = Measurement()
        var j = 0
        while outcome.withLock({ $0 == nil }) || during.latencies.count < 1_000 {
            let m = try measure(200, settling: nil, { try get(j + $0) }, check: { try check(j + $0, $1) })
            during.latencies += m.latencies
            during.total += m.total
            j += 200
        }
        guard let result = outcome.withLock({ $0 }) else { return }
        let (report, elapsed) = try result.get()
        guard report.segmentsDeleted > 0 else { throw BenchmarkError("compaction: the pass reclaimed no segment") }
        record("get, during compaction", name: "Trove", during)
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        var pass = Measurement()
        pass.latencies = [UInt64(seconds * 1e9)]
        pass.total = elapsed
        record(
            "compaction pass", name: "Trove", pass, metric: Double(report.bytesCopied) / 1e6 / seconds,
            metricName: "MB/s copied")
    }

    /// The fill's speed, open time and cold get p99 of Trove at 10 000 entries and at
    /// `scaleEntries`.
    private func scaling() throws {
        for entries in [10_000, plan.scaleEntries] {
            let directory = root + "/scale-\(entries)"
            progress("scaling: filling a store with \(entries) entries of 1 KiB")
            do {
                // Each put timed: past `locationCacheLimit` distinct keys the location map evicts
                // at every cycle, and a fill of a million stalled for minutes when its eviction
                // left the table's buckets lopsided (Docs/Benchmarks.md, "a location map at its
                // limit slows down with churn").
                let engine = try TroveEngine(directory: directory, durability: .none)
                var fill = Measurement()
                let clock = ContinuousClock()
                for i in 0..<entries {
                    let value = pool.value(id: UInt64(i), size: 1024)
                    let t0 = clock.now
                    try engine.put(value, key: "s-\(i)", etag: "")
                    fill.add(clock.now - t0)
                }
                try engine.close()
                let small = entries == 10_000 ? nil : result("fill 1KiB to 10000 entries", "Trove none")
                let rate = Double(fill.latencies.count) / max(fill.seconds, 1e-9)
                record(
                    "fill 1KiB to \(entries) entries", name: "Trove none", fill,
                    metric: small.map { rate / $0.opsPerSecond }, metricName: small.map { _ in "× the 10000 fill" })
            }
            // Best of three opens (the first also warms the page cache).
            var openSeconds = Double.infinity
            for _ in 0..<3 {
                let start = ContinuousClock.now
                let store = try Store(directory: directory)
                let elapsed = ContinuousClock.now - start
                openSeconds = min(openSeconds, Double(elapsed.components.attoseconds) / 1e18 + Double(elapsed.components.seconds))
                try store.close()
            }
            // Cold gets at both sizes: a fresh open, then distinct keys, so every get misses the
            // location map and pays for the index lookup — the part that grows with the store —
            // or reads through its row's place, once the places have loaded (after opening, on a
            // thread of the store's: waited for, so both sizes are measured alike).
            let store = try Store(directory: directory)
            store.waitForLoads()
            // The packs' pages read in first, untimed, at both sizes: the row measures what the
            // index costs as a store grows, and at a million entries (a GiB of packs) the
            // machine may have paged some of them out since the fill, which the 10 000-entry
            // store's 10 MiB never are (Docs/Benchmarks.md, "pages the machine takes back").
            // The row's `diskReadKiB` shows whether any loop still read from disk.
            try readIntoPageCache(directory + "/packs")
            let gets = min(entries, plan.operations(10_000))
            var generator = SplitMix(state: UInt64(entries))
            var chosen = Set<Int>()
            while chosen.count < gets { chosen.insert(Int.random(in: 0..<entries, using: &generator)) }
            let keys = Array(chosen).shuffled(using: &generator)
            var wrong = 0
            let m = try measure(gets, settling: root) { j in
                try store.data(for: CacheKey(url: "s-\(keys[j])"))
            } check: { j, data in
                if data.flatMap(ContentPool.id(of:)) != UInt64(keys[j]) { wrong += 1 }
            }
            try store.close()
            guard wrong == 0 else { throw BenchmarkError("scaling: \(wrong) wrong values at \(entries) entries") }
            record("cold get at \(entries) entries", name: "Trove", m, metric: openSeconds, metricName: "open s")
            try indexApply(directory: directory, entries: entries)
        }
    }

    /// The committer's cost of applying puts to the index of a store of `entries` entries
    /// (issue 11): batches of 256 new 4 KiB values are put with nothing committing in the
    /// background (`none`, no timer, no batch wake-up), then one commit cycle — the index
    /// transaction that applies them, no fsync — is timed. Each row's latency is a cycle's time
    /// ÷ 256; the metric is the mean over every cycle.
    private func indexApply(directory: String, entries: Int) throws {
        let probe = try IndexApplyProbe(directory: directory, pool: pool)
        defer { try? probe.store.close() }
        let batch = IndexApplyProbe.batch
        let rounds = max(20, plan.operations(100))
        progress("index apply: \(rounds) cycles of \(batch) puts at \(entries) entries")
        var m = Measurement()
        let clock = ContinuousClock()
        for _ in 0..<rounds {
            try probe.prepare()
            let t0 = clock.now
            try probe.commit()
            let perPut = (clock.now - t0) / batch
            for _ in 0..<batch { m.add(perPut) }
            try probe.verify()
        }
        let mean = m.seconds / Double(m.latencies.count) * 1e6
        record("index apply per put at \(entries) entries", name: "Trove committer", m, metric: mean, metricName: "µs per put")
    }

    // MARK: Helpers

    private func verifySample(_ engine: any BlobStoring, count: Int, _ expected: (Int) -> (String, Data)) throws {
        var generator = SplitMix(state: UInt64(count))
        for _ in 0..<min(count, 50) {
            let (key, value) = expected(Int.random(in: 0..<count, using: &generator))
            guard try engine.get(key) == value else {
                throw BenchmarkError("\(engine.name): \(key) did not read back as written")
            }
        }
    }

    private func record(
        _ workload: String, _ engine: any BlobStoring, _ m: Measurement, metric: Double? = nil, metricName: String? = nil
    ) {
        record(workload, name: engine.name, m, metric: metric, metricName: metricName)
    }

    private func record(_ workload: String, name: String, _ m: Measurement, metric: Double? = nil, metricName: String? = nil) {
        var result = BenchmarkResult(
            workload: workload, engine: name, operations: m.latencies.count, seconds: m.seconds,
            opsPerSecond: Double(m.latencies.count) / max(m.seconds, 1e-9), p50Microseconds: m.percentile(50),
            p99Microseconds: m.percentile(99), metric: metric, metricName: metricName)
        result.peakResidentMiB = m.peakResidentBytes.map { Double($0) / 1_048_576 }
        result.settleMilliseconds = m.settleWait.map { Double(nanoseconds($0)) / 1e6 }
        result.diskReadKiB = m.diskReadKiB
        results.append(result)
    }

    func result(_ workload: String, _ engine: String) -> BenchmarkResult? {
        results.first { $0.workload == workload && $0.engine == engine }
    }

    private func checkTargets() -> [TargetCheck] {
        var checks: [TargetCheck] = []
        func ratio(_ workload: String, _ trove: String, _ baseline: String, atLeast: Double) {
            guard let t = result(workload, trove), let b = result(workload, baseline) else { return }
            let r = t.opsPerSecond / b.opsPerSecond
            checks.append(
                TargetCheck(
                    target: "\(workload): \(trove) vs \(baseline)", measured: r, required: "≥ \(atLeast)×", met: r >= atLeast))
        }
        // Like with like (Docs/Benchmarks.md): the page-cache baselines against both Trove levels
        // that return before an fsync, the fsync-per-write baselines against `full`.
        ratio("8 writers put 20KB", "Trove full", "FilePerEntry fsync", atLeast: 3)
        ratio("8 writers put 20KB", "Trove full", "SQLiteBlob FULL", atLeast: 3)
        for trove in ["Trove none", "Trove"] {
            ratio("put 64KiB", trove, "FilePerEntry", atLeast: 5)
            ratio("put 64KiB", trove, "SQLiteBlob", atLeast: 2)
        }
        ratio("put 64KiB", "Trove full", "FilePerEntry fsync", atLeast: 5)
        ratio("put 64KiB", "Trove full", "SQLiteBlob FULL", atLeast: 2)
        for size in ["4KiB", "64KiB"] {
            ratio("warm get \(size)", "Trove", "FilePerEntry", atLeast: 2)
            ratio("warm get \(size)", "Trove", "SQLiteBlob", atLeast: 1.5)
        }
        if let idle = result("get, idle", "Trove"), let busy = result("get, during compaction", "Trove") {
            let r = busy.p99Microseconds / max(idle.p99Microseconds, 1e-9)
            checks.append(TargetCheck(target: "get p99 during compaction vs idle", measured: r, required: "≤ 3×", met: r <= 3))
        }
        if let disk = result("disk per payload 20KB", "Trove"), let value = disk.metric {
            checks.append(
                TargetCheck(
                    target: "disk bytes per payload byte, 20 KB values", measured: value, required: "≤ 1.02", met: value <= 1.02))
        }
        if let small = result("cold get at 10000 entries", "Trove"),
            let large = results.last(where: { $0.workload.hasPrefix("cold get at ") && $0.workload != small.workload })
        {
            let r = large.p99Microseconds / max(small.p99Microseconds, 1e-9)
            checks.append(TargetCheck(target: "get p99, \(large.workload) vs 10000", measured: r, required: "≤ 2×", met: r <= 2))
            if let open = large.metric {
                checks.append(
                    TargetCheck(
                        target: "open time, \(large.workload.dropFirst(12))", measured: open, required: "< 1 s", met: open < 1))
            }
        }
        ratio("first read (fresh process)", "Trove", "FilePerEntry", atLeast: 1.5)
        if let trove = result("Zipf 90/10 after first reads", "Trove")?.peakResidentMiB,
            let files = result("Zipf 90/10 after first reads", "FilePerEntry")?.peakResidentMiB
        {
            checks.append(
                TargetCheck(
                    target: "peak RSS of a fresh process (first reads, Zipf 90/10): Trove − FilePerEntry, MiB",
                    measured: trove - files, required: "≤ 16", met: trove - files <= 16))
        }
        checks += MemoryTierBenchmark.targets(results)
        checks += PipelineBenchmark.targets(results)
        return checks
    }
}
