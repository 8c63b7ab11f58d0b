public import Foundation
@_spi(Testing) import TroveStore

/// An image cache's day, each engine in a fresh process of its own: a catalog of image-sized
/// entries (80 % 5–50 KB, 17 % 100–500 KB, 3 % 1–4 MB) written by this process, then a new
/// process opens the engine, reads every key once (the **first read**: nothing of the engine is
/// in that process yet, the files are in the page cache), then runs a Zipf-popular stream of
/// 90 % gets and 10 % puts of new versions. The child reports its latencies and its peak resident memory, which is then the
/// engine's alone (nothing else runs in it, there is no memory tier). Two more children run the
/// same on ``KnownPlaceEngine``, the floor of a read that copies its bytes (and checks them).
/// The first reads are timed in several fresh processes an engine (``firstReadRounds(_:)``),
/// the first-read row being the median one; the Zipf stream runs in the last.
///
/// The child is this program run again with `bench-worker` (``worker(arguments:)``); the
/// workload runs only when ``BenchmarkPlan/workerExecutable`` names the program.
public enum FirstReadBenchmark {
    /// What a child reports.
    public struct WorkerReport: Codable, Sendable {
        /// Nanoseconds of each first read, in the order read.
        public var firstReads: [UInt64]
        public var firstReadSeconds: Double
        /// Nanoseconds of each operation of the Zipf stream (90 % gets, 10 % puts).
        public var zipfGets: [UInt64]
        public var zipfSeconds: Double
        /// Resident memory after opening the engine, and the peak over the whole child, bytes.
        public var residentAfterOpen: Int?
        public var peakResident: Int?
        /// Trove: how many of the first reads went through the entry digest table's places
        /// (one `pread`, no SQLite); nil for the other engines.
        public var firstReadsThroughPlaces: Int?
        /// What the machine read from disk during the first reads and during the Zipf stream,
        /// KiB (``DiskReads``), when known.
        public var firstReadDiskKiB: Int?
        public var zipfDiskKiB: Int?
    }

    /// The engines, by the name the child is given: the three compared, and the floor
    /// (``KnownPlaceEngine``) with and without the checksum Trove verifies.
    static let engines = ["trove", "files", "sqlite", "floor", "floor-xxh3"]

    /// The name a child's rows carry.
    static let names = [
        "trove": "Trove", "files": "FilePerEntry", "sqlite": "SQLiteBlob", "floor": "Floor",
        "floor-xxh3": "Floor+XXH3",
    ]

    /// The catalog's entry sizes (the same every run).
    static func sizes(items: Int) -> [Int] {
        var generator = SplitMix(state: 11)
        return imageSizes(count: items, using: &generator)
    }

    /// How many fresh processes read each engine's catalog: five in a full run, one with
    /// `--quick`.
    static func firstReadRounds(_ plan: BenchmarkPlan) -> Int { plan.operationScale >= 1 ? 5 : 1 }

    /// The index of the median of `values` (the lower of the two middle ones for an even count).
    static func medianIndex(_ values: [Double]) -> Int {
        let order = values.indices.sorted { values[$0] < values[$1] }
        return order[(order.count - 1) / 2]
    }

    static func key(_ item: Int) -> String { "https://img.example/catalog/\(item).jpg" }
    static func valueID(_ item: Int) -> UInt64 { 70_000_000 + UInt64(item) }

    /// Writes the catalog into each engine, then runs one child per engine; two rows per engine.
    static func run(
        plan: BenchmarkPlan, pool: ContentPool, directory: String, executable: String, progress: (String) -> Void
    ) throws -> [BenchmarkResult] {
        let items = plan.operations(3_000)
        let operations = plan.operations(20_000)
        let sizes = sizes(items: items)
        let megabytes = Double(sizes.reduce(0, +)) / 1e6
        var rows: [BenchmarkResult] = []
        for engine in engines {
            let path = directory + "/" + engine
            progress("first reads: writing \(items) entries (\(Int(megabytes)) MB) into \(engine)")
            // The floor appends: a reused --directory would grow it.
            if engine.hasPrefix("floor") { try? FileManager.default.removeItem(atPath: path) }
            let store = try open(engine, directory: path)
            for item in 0..<items {
                try store.put(pool.value(id: valueID(item), size: sizes[item]), key: key(item), etag: "e")
            }
            try store.flush()
            try store.close()
        }
        // The first read of 3 000 keys takes a tenth of a second, a loop one hiccup of this
        // shared machine can move by half (Docs/Benchmarks.md, "first reads in five fresh
        // processes"): each engine's catalog is read by `rounds` fresh processes, the engines
        // taking turns in an order that rotates each round, and the row is the median process.
        // Only the last round runs the Zipf stream (its puts change the catalog), so every
        // first read reads the catalog as written.
        let rounds = firstReadRounds(plan)
        var firstReads: [String: [WorkerReport]] = [:]
        var settles: [String: [Duration?]] = [:]
        var last: [String: WorkerReport] = [:]
        for round in 0..<rounds {
            let isLast = round == rounds - 1
            for turn in 0..<engines.count {
                let engine = engines[(turn + round) % engines.count]
                // Each child starts on a settled file system: nothing left to write back (the
                // catalogs, the previous child's puts), which would otherwise load the later
                // children's cores, and no journal work for its first sync (Trove's child syncs).
                let settleWait = settle(directory)
                // …and its files are in the page cache, as the workload says: written minutes
                // before, the first catalogs lost pages to this machine's reclaim and their child
                // read them from disk (Docs/Benchmarks.md, "pages the machine takes back"). The
                // engine is closed: reading its files here drops no lock of a store of this process.
                try readIntoPageCache(directory + "/" + engine)
                progress("first reads: a fresh process reads \(engine) (\(round + 1) of \(rounds))")
                let report = try runChild(
                    executable,
                    ["bench-worker", engine, directory + "/" + engine, String(items), String(isLast ? operations : 0)])
                firstReads[engine, default: []].append(report)
                settles[engine, default: []].append(settleWait)
                if isLast { last[engine] = report }
            }
        }
        for engine in engines {
            let name = names[engine]!
            let reports = firstReads[engine]!
            let median = medianIndex(reports.map(\.firstReadSeconds))
            let chosen = reports[median]
            if let placed = chosen.firstReadsThroughPlaces {
                progress("first reads: \(name) served \(placed) of \(items) through places, without SQLite")
            }
            let zipfReport = last[engine]!
            let peak = zipfReport.peakResident.map { Double($0) / 1_048_576 }
            var first = Measurement()
            first.latencies = chosen.firstReads
            first.total = .nanoseconds(Int64(chosen.firstReadSeconds * 1e9))
            var zipf = Measurement()
            zipf.latencies = zipfReport.zipfGets
            zipf.total = .nanoseconds(Int64(zipfReport.zipfSeconds * 1e9))
            for (workload, m, diskReads, settleWait, processes) in [
                (
                    "first read (fresh process)", first, chosen.firstReadDiskKiB, settles[engine]![median],
                    reports.map { Double(items) / max($0.firstReadSeconds, 1e-9) }
                ),
                ("Zipf 90/10 after first reads", zipf, zipfReport.zipfDiskKiB, settles[engine]!.last!, nil),
            ] {
                var row = BenchmarkResult(
                    workload: workload, engine: name, operations: m.latencies.count, seconds: m.seconds,
                    opsPerSecond: Double(m.latencies.count) / max(m.seconds, 1e-9), p50Microseconds: m.percentile(50),
                    p99Microseconds: m.percentile(99), metric: peak, metricName: "child's peak RSS MiB")
                row.peakResidentMiB = peak
                row.settleMilliseconds = settleWait.map { Double(nanoseconds($0)) / 1e6 }
                row.diskReadKiB = diskReads
                row.processesPerSecond = processes
                rows.append(row)
            }
        }
        return rows
    }

    /// The child: `engine directory items operations`. Prints a ``WorkerReport`` as JSON.
    public static func worker(arguments: [String]) throws -> WorkerReport {
        guard arguments.count == 4, engines.contains(arguments[0]), let items = Int(arguments[2]),
            let operations = Int(arguments[3]), items > 0, operations >= 0
        else {
            throw BenchmarkError("bench-worker: expected ENGINE DIRECTORY ITEMS OPERATIONS, got \(arguments)")
        }
        let sizes = sizes(items: items)
        let store = try open(arguments[0], directory: arguments[1])
        defer { try? store.close() }
        let residentAfterOpen = ResidentMemory.currentBytes()
        var generator = SplitMix(state: 5)
        let order = (0..<items).shuffled(using: &generator)
        func check(_ item: Int, _ data: Data?) throws {
            guard let data, data.count == sizes[item], ContentPool.id(of: data) == valueID(item) else {
                throw BenchmarkError("bench-worker \(arguments[0]): \(key(item)) read back wrong")
            }
        }
        let first = try measure(items, settling: nil, { try store.get(key(order[$0])) }, check: { try check(order[$0], $1) })
        let throughPlaces = (store as? TroveEngine)?.store.readsThroughPlaces
        // Then the cache's day: Zipf-popular keys, one operation in ten a new version of the
        // value (a put), as a cache replacing what changed at its origin. Each put's value is
        // made just before its operation, outside the timing, and dropped after it, so the
        // values never add up in memory (from a pool every engine's child holds alike).
        let zipfSampler = ZipfSampler(count: items, exponent: 0.9)
        let pool = ContentPool()
        var version = [UInt64](repeating: 0, count: items)
        var expected = (0..<items).map(valueID)
        let stream: [(item: Int, put: Bool)] = (0..<operations).map { _ in
            (zipfSampler.next(using: &generator), Int.random(in: 0..<10, using: &generator) == 0)
        }
        var zipf = Measurement()
        zipf.latencies.reserveCapacity(operations)
        let zipfDiskReads = DiskReads.kibibytes()
        let clock = ContinuousClock()
        for (item, isPut) in stream {
            if isPut {
                version[item] += 1
                let value = pool.value(id: valueID(item) + version[item] << 32, size: sizes[item])
                let t0 = clock.now
                try store.put(value, key: key(item), etag: "v")
                zipf.add(clock.now - t0)
                expected[item] = ContentPool.id(of: value)!
            } else {
                let t0 = clock.now
                let data = try store.get(key(item))
                zipf.add(clock.now - t0)
                guard let data, data.count == sizes[item], ContentPool.id(of: data) == expected[item] else {
                    throw BenchmarkError("bench-worker \(arguments[0]): \(key(item)) read back wrong")
                }
            }
        }
        let t0 = clock.now
        try store.flush()
        zipf.total += clock.now - t0
        return WorkerReport(
            firstReads: first.latencies, firstReadSeconds: first.seconds, zipfGets: zipf.latencies, zipfSeconds: zipf.seconds,
            residentAfterOpen: residentAfterOpen, peakResident: ResidentMemory.peakBytes(),
            firstReadsThroughPlaces: throughPlaces, firstReadDiskKiB: first.diskReadKiB,
            zipfDiskKiB: DiskReads.since(zipfDiskReads))
    }

    private static func open(_ engine: String, directory: String) throws -> any BlobStoring {
        switch engine {
        case "trove": return try TroveEngine(directory: directory)
        case "files": return try FilePerEntryEngine(directory: directory)
        case "floor": return try KnownPlaceEngine(directory: directory, verifies: false)
        case "floor-xxh3": return try KnownPlaceEngine(directory: directory, verifies: true)
        default: return try SQLiteBlobEngine(directory: directory)
        }
    }

    private static func runChild(_ executable: String, _ arguments: [String]) throws -> WorkerReport {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        // Read before waiting: a child whose output fills the pipe would never exit.
        let data = output.fileHandleForReading.readDataToEndOfFile()
        let messages = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw BenchmarkError(
                "bench-worker \(arguments.dropFirst().first ?? "") exited with \(process.terminationStatus): "
                    + String(decoding: messages, as: UTF8.self))
        }
        return try JSONDecoder().decode(WorkerReport.self, from: data)
    }
}
