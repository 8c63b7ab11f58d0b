// Named workloads of TroveBench against Trove, one file per entry and SQLite as a blob store.
//
// Each engine is populated with the same entries (EngineFixture: deterministic content), once
// per benchmark process; each benchmark then runs one workload on one engine. Values are
// checked against what was written, so a benchmark that returned wrong bytes fails.

import Benchmark
import Foundation
import Trove
import TroveBench
import TroveCodec
import TroveCore

/// The populated engines of this process. ordo-one runs the benchmarks of a process one at a
/// time, so the engines are never used concurrently.
final class Shared: @unchecked Sendable {
    static let instance = Shared()
    let population = Int(ProcessInfo.processInfo.environment["TROVE_BENCH_POPULATION"] ?? "") ?? 20_000
    private var fixture: EngineFixture?
    private var written: [String: Int] = [:]

    func engines() throws -> EngineFixture {
        if let fixture { return fixture }
        let directory = FileManager.default.temporaryDirectory.path + "/trove-ordo-\(getpid())"
        let made = try EngineFixture(directory: directory, population: population)
        fixture = made
        return made
    }

    /// A key not used before in this process, for puts.
    func nextKey(_ prefix: String) -> String {
        written[prefix, default: 0] += 1
        return "\(prefix)-\(written[prefix]!)"
    }

    deinit {
        fixture?.close()
        if let fixture { try? FileManager.default.removeItem(atPath: fixture.directory) }
    }
}

/// The index-apply benchmarks' probes, each store filled once per process and kept (ordo calls a
/// benchmark's closure once per sample); removed when the process exits normally.
enum ApplyFixture {
    nonisolated(unsafe) private static var probes: [Int: IndexApplyProbe] = [:]

    static func probe(entries: Int) throws -> IndexApplyProbe {
        if let made = probes[entries] { return made }
        let directory = FileManager.default.temporaryDirectory.path + "/trove-ordo-apply-\(entries)-\(getpid())"
        let probe = try IndexApplyProbe(directory: directory, pool: ContentPool())
        try probe.fill(entries: entries)
        if probes.isEmpty {
            atexit {
                for (_, probe) in ApplyFixture.probes {
                    try? probe.store.close()
                    try? FileManager.default.removeItem(atPath: probe.store.directory)
                }
            }
        }
        probes[entries] = probe
        return probe
    }
}

/// A benchmark that did not do the work it names fails with this.
struct WorkNotDone: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

func engine(_ name: String) throws -> any BlobStoring {
    let fixture = try Shared.instance.engines()
    switch name {
    case "Trove": return fixture.trove
    case "FilePerEntry": return fixture.files
    default: return fixture.sqlite
    }
}

/// The memory tier's fixture: 10 000 values of 4 KiB in a `MemoryCache` and, as the same
/// `Data`, in an `NSCache` (the values boxed, as a user would), under the same keys.
///
/// `@unchecked Sendable`: everything is set in `init` and only read after, `MemoryCache` is
/// `Sendable` and `NSCache` locks inside (documented thread-safe).
final class MemoryTierFixture: @unchecked Sendable {
    /// A value as `NSCache` needs it: an object.
    final class Box {
        let data: Data
        init(_ data: Data) { self.data = data }
    }

    static let count = 10_000
    static let valueSize = 4 << 10
    static let instance = Result { try MemoryTierFixture() }

    let keys: [CacheKey]
    let names: [NSString]
    let memory: MemoryCache
    let cache = NSCache<NSString, Box>()

    private init() throws {
        // An entry's info comes from a store: read one back, then vary its key and bytes.
        let directory = FileManager.default.temporaryDirectory.path + "/trove-ordo-memory-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try Store(directory: directory)
        let pool = ContentPool()
        let templateKey = CacheKey(url: "https://images.example.com/template.jpg")
        try store.put(pool.value(id: 1, size: Self.valueSize), for: templateKey)
        guard let template = try store.entry(for: templateKey) else { throw WorkNotDone("no template entry") }
        try store.close()
        keys = (0..<Self.count).map { CacheKey(url: "https://images.example.com/memory/\($0).jpg") }
        names = keys.map { NSString(string: $0.url) }
        memory = MemoryCache(costLimit: 2 * Self.count * (Self.valueSize + MemoryCache.itemOverhead), countLimit: 2 * Self.count)
        for i in 0..<Self.count {
            var entry = template
            entry.data = pool.value(id: UInt64(20_000_000 + i), size: Self.valueSize)
            entry.info.key = keys[i]
            guard memory.insert(entry, for: keys[i]) else { throw WorkNotDone("MemoryCache refused \(keys[i])") }
            cache.setObject(Box(entry.data), forKey: names[i], cost: entry.data.count)
        }
    }
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .cpuTotal, .syscalls],
        maxDuration: .seconds(3),
        maxIterations: 20_000
    )

    for name in ["Trove", "FilePerEntry", "SQLiteBlob"] {
        for size in [4 << 10, 64 << 10] {
            let label = "\(size >> 10)KiB"
            Benchmark("put \(label) / \(name)") { benchmark in
                let store = try engine(name)
                let pool = try Shared.instance.engines().pool
                for i in benchmark.scaledIterations {
                    let value = pool.value(id: UInt64(size + i), size: size)
                    let key = Shared.instance.nextKey("put-\(label)")
                    benchmark.startMeasurement()
                    try store.put(value, key: key, etag: "e")
                    benchmark.stopMeasurement()
                }
                try store.flush()
            }
        }

        Benchmark("warm get 4KiB / \(name)") { benchmark in
            let store = try engine(name)
            let pool = try Shared.instance.engines().pool
            let population = Shared.instance.population
            for i in benchmark.scaledIterations {
                let n = (i &* 7919) % population
                benchmark.startMeasurement()
                let data = try store.get(EngineFixture.populationKey(n))
                benchmark.stopMeasurement()
                guard data == EngineFixture.populationValue(pool, n) else {
                    throw WorkNotDone("\(name) returned wrong bytes for \(EngineFixture.populationKey(n))")
                }
            }
        }
    }

    // Compaction: each iteration writes 100 values of 20 KiB into a store with 1 MiB segments,
    // removes half, and measures one compaction pass (the rewrite of the sparse segments).
    Benchmark(
        "compaction pass, 100 × 20 KiB half dead / Trove",
        configuration: .init(metrics: [.wallClock, .throughput], maxDuration: .seconds(5), maxIterations: 200)
    ) { benchmark in
        let directory = FileManager.default.temporaryDirectory.path + "/trove-ordo-compaction-\(getpid())"
        var configuration = Store.Configuration()
        configuration.segmentSize = 1 << 20
        configuration.compactionInterval = nil
        let store = try Store(directory: directory, configuration: configuration)
        defer {
            try? store.close()
            try? FileManager.default.removeItem(atPath: directory)
        }
        let pool = ContentPool()
        var round = 0
        for _ in benchmark.scaledIterations {
            round += 1
            for i in 0..<100 {
                try store.put(pool.value(id: UInt64(round * 1000 + i), size: 20 << 10), for: CacheKey(url: "c-\(round)-\(i)"))
            }
            for i in stride(from: 0, to: 100, by: 2) { try store.remove(CacheKey(url: "c-\(round)-\(i)")) }
            try store.flush()
            benchmark.startMeasurement()
            let report = try store.compact()
            benchmark.stopMeasurement()
            guard report.segmentsDeleted > 0 || round == 1 else { throw WorkNotDone("the compaction pass reclaimed nothing") }
        }
    }

    // The committer's cost of applying puts to the index (issue 11): a store of N entries of
    // 1 KiB, then per iteration 256 new 4 KiB values put with nothing committing in the
    // background, and the one commit cycle that applies them (no fsync) measured. N = 100 000;
    // 1 000 000 too with TROVE_BENCH_APPLY_MILLION=1 (filling it takes minutes). `trove bench`
    // shows the same per put, at 10 000 and --scale-entries N, in its scaling rows.
    let million = ProcessInfo.processInfo.environment["TROVE_BENCH_APPLY_MILLION"] == "1"
    let applySizes = [100_000] + (million ? [1_000_000] : [])
    for entries in applySizes {
        Benchmark(
            "index apply, 256 puts of 4 KiB at \(entries) entries / Trove",
            configuration: .init(metrics: [.wallClock, .throughput], maxDuration: .seconds(10), maxIterations: 200)
        ) { benchmark in
            // Filled once per process: ordo calls this closure for every sample.
            let probe = try ApplyFixture.probe(entries: entries)
            for _ in benchmark.scaledIterations {
                try probe.prepare()
                benchmark.startMeasurement()
                try probe.commit()
                benchmark.stopMeasurement()
                try probe.verify()
            }
        }
    }

    // The memory tier: a hit, in random order over 10 000 values of 4 KiB, in MemoryCache and in
    // NSCache holding the same Data. The side-by-side table is `trove bench` (Docs/Benchmarks.md).
    for name in ["MemoryCache", "NSCache"] {
        Benchmark(
            "memory hit 4KiB / \(name)",
            configuration: .init(metrics: [.wallClock, .throughput], scalingFactor: .kilo, maxDuration: .seconds(2))
        ) { benchmark in
            let fixture = try MemoryTierFixture.instance.get()
            var generator = SystemRandomNumberGenerator()
            let order = (0..<1024).map { _ in Int.random(in: 0..<MemoryTierFixture.count, using: &generator) }
            var found = 0
            benchmark.startMeasurement()
            for i in benchmark.scaledIterations {
                let n = order[i & 1023]
                let data: Data?
                if name == "MemoryCache" {
                    data = fixture.memory.entry(for: fixture.keys[n])?.data
                } else {
                    data = fixture.cache.object(forKey: fixture.names[n])?.data
                }
                if let data { found &+= data.count }
                blackHole(data)
            }
            benchmark.stopMeasurement()
            guard found == benchmark.scaledIterations.count * MemoryTierFixture.valueSize else {
                throw WorkNotDone("\(name) missed")
            }
        }
    }

    // XXH3-128 of 64 KiB (a put's content hash; a get's checksum is XXH3-64 over the same
    // bytes) by each build CXXHash carries: the baseline (SSE2) and, where the CPU has it, AVX2.
    for build in XXH3.supportedBuilds {
        Benchmark(
            "XXH3-128 64KiB / \(build.rawValue)",
            configuration: .init(metrics: [.wallClock, .throughput], scalingFactor: .kilo, maxDuration: .seconds(2), maxIterations: 1_000)
        ) { benchmark in
            let bytes = ContentPool().value(id: 64, size: 64 << 10)
            let expected = bytes.withUnsafeBytes { XXH3.hash128($0) }
            var last = ContentHash(high: 0, low: 0)
            benchmark.startMeasurement()
            bytes.withUnsafeBytes { raw in
                for _ in benchmark.scaledIterations { last = XXH3.hash128(raw, build: build) }
            }
            benchmark.stopMeasurement()
            guard last == expected else { throw WorkNotDone("\(build) gave a different hash") }
        }
    }

    // A 12 MP JPEG to a 256 px WebP variant (shrink-on-load, orientation, Lanczos-3, encode).
    // The side-by-side comparison with vipsthumbnail and Pillow is `trove bench --thumbnails`.
    Benchmark(
        "thumbnail, 12 MP JPEG to 256 px WebP / Trove",
        configuration: .init(metrics: [.wallClock, .throughput], maxDuration: .seconds(5), maxIterations: 100)
    ) { benchmark in
        let jpeg = try ImageEncoder.jpeg(ThumbnailBenchmark.photoLike(4000, 3000, seed: 1), quality: 90)
        let variant = Variant(width: 256, height: 256)
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            let thumbnail = try ImageDecoder.thumbnail(jpeg, variant: variant)
            guard thumbnail.width == 256 && thumbnail.height == 192 else { throw WorkNotDone("wrong thumbnail size") }
        }
        benchmark.stopMeasurement()
    }
}
