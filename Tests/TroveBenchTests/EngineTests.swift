import Foundation

#if canImport(Glibc)
    import Glibc
#endif
import Testing
import TroveStore
import TroveTestSupport

@testable import TroveBench

/// The benchmark engines must store and return exactly what they are given, or their numbers
/// mean nothing.
@Suite struct EngineTests {
    static func engines(_ dir: String) throws -> [any BlobStoring] {
        [
            try TroveEngine(directory: dir + "/trove"), try FilePerEntryEngine(directory: dir + "/files"),
            try FilePerEntryEngine(directory: dir + "/files-fsync", fsyncWrites: true),
            try SQLiteBlobEngine(directory: dir + "/sqlite"),
            try SQLiteBlobEngine(directory: dir + "/sqlite-full", synchronousFull: true, updatesAccessTime: false),
        ]
    }

    @Test func everyEngineRoundTrips() async throws {
        try await withTemporaryDirectory { dir in
            for engine in try Self.engines(dir) {
                for (i, size) in [0, 1, 4096, 70_000, 1 << 20].enumerated() {
                    try engine.put(Data(testBytes(seed: UInt64(i), count: size)), key: "k\(i)", etag: "e\(i)")
                }
                try engine.put(Data("new".utf8), key: "k1", etag: "e")
                try engine.flush()
                #expect(try engine.get("k0") == Data(), "\(engine.name)")
                #expect(try engine.get("k1") == Data("new".utf8), "\(engine.name)")
                #expect(try engine.get("k4") == Data(testBytes(seed: 4, count: 1 << 20)), "\(engine.name)")
                #expect(try engine.get("missing") == nil, "\(engine.name)")
                #expect(try engine.allocatedBytes() >= 1 << 20, "\(engine.name)")
                try engine.close()
            }
        }
    }

    /// The floor: values read back after a reopen (the places load from their side file), and a
    /// byte flipped on disk refused by the verifying engine with its checksum error, returned
    /// flipped by the other (it checks nothing: that is what its row measures).
    @Test func knownPlaceEngineRoundTripsAndVerifies() async throws {
        try await withTemporaryDirectory { dir in
            let sizes = [0, 1, 4096, 70_000, 1 << 20]
            for verifies in [false, true] {
                let path = dir + "/floor-\(verifies)"
                let engine = try KnownPlaceEngine(directory: path, verifies: verifies)
                for (i, size) in sizes.enumerated() {
                    try engine.put(Data(testBytes(seed: UInt64(i), count: size)), key: "k\(i)", etag: "e")
                }
                try engine.put(Data("new".utf8), key: "k1", etag: "e")
                try engine.close()
                let reopened = try KnownPlaceEngine(directory: path, verifies: verifies)
                #expect(try reopened.get("k0") == Data())
                #expect(try reopened.get("k1") == Data("new".utf8))
                #expect(try reopened.get("k2") == Data(testBytes(seed: 2, count: 4096)))
                #expect(try reopened.get("k3") == Data(testBytes(seed: 3, count: 70_000)))
                #expect(try reopened.get("k4") == Data(testBytes(seed: 4, count: 1 << 20)))
                #expect(try reopened.get("missing") == nil)
                // Flip byte 100 of k3's value (it starts after k0, k1 and k2's).
                var flipped = testBytes(seed: 3, count: 70_000)
                flipped[100] = ~flipped[100]
                let handle = try #require(FileHandle(forUpdatingAtPath: path + "/values"))
                try handle.seek(toOffset: UInt64(0 + 1 + 4096 + 100))
                try handle.write(contentsOf: Data([flipped[100]]))
                try handle.close()
                if verifies {
                    let error = #expect(throws: BenchmarkError.self) { try reopened.get("k3") }
                    #expect(error?.description.contains("fails its checksum") == true, "\(String(describing: error))")
                } else {
                    #expect(try reopened.get("k3") == Data(flipped))
                }
                #expect(try reopened.get("k2") == Data(testBytes(seed: 2, count: 4096)))
            }
        }
    }

    /// The floor of the `batched` rows: every value reads back, no put returns with more than
    /// 8 × 128 puts unsynced (Trove's 8 × 256 records), a flush leaves none, and the sync thread
    /// ends when it is turned off.
    @Test func knownPlaceEngineSyncsLikeBatched() async throws {
        try await withTemporaryDirectory { dir in
            let engine = try KnownPlaceEngine(directory: dir + "/floor", verifies: true)
            engine.syncsLikeBatched = true
            #expect(engine.name == "Floor+XXH3 batched")
            var most = 0
            for i in 0..<6_000 {
                try engine.put(Data(testBytes(seed: UInt64(i), count: 512)), key: "k\(i)", etag: "")
                most = max(most, engine.unsyncedPuts)
            }
            #expect(most <= 8 * 128)
            try engine.flush()
            #expect(engine.unsyncedPuts == 0)
            for i in stride(from: 0, to: 6_000, by: 397) {
                #expect(try engine.get("k\(i)") == Data(testBytes(seed: UInt64(i), count: 512)))
            }
            try engine.put(Data([1, 2, 3]), key: "last", etag: "")
            engine.syncsLikeBatched = false
            #expect(engine.name == "Floor+XXH3")
            #expect(engine.unsyncedPuts == 0)
            #expect(try engine.get("last") == Data([1, 2, 3]))
            try engine.close()
        }
    }

    /// The floor of the dedup-heavy row: a value put again under a new key is stored once and
    /// read back under both; a stored value whose bytes changed on disk no longer matches the
    /// repeat (it is compared, not trusted by its hash), so the repeat is written anew; turning
    /// the mode off and on again forgets the candidates and the count.
    @Test func knownPlaceEngineDeduplicatesAfterComparingBytes() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir + "/floor"
            let engine = try KnownPlaceEngine(directory: path, verifies: true)
            engine.deduplicates = true
            func size() -> Int? {
                (try? FileManager.default.attributesOfItem(atPath: path + "/values"))?[.size] as? Int
            }
            let a = Data(testBytes(seed: 1, count: 20 << 10))
            let b = Data(testBytes(seed: 2, count: 20 << 10))
            try engine.put(a, key: "a1", etag: "")
            try engine.put(Data(), key: "empty1", etag: "")
            try engine.put(a, key: "a2", etag: "")
            try engine.put(Data(), key: "empty2", etag: "")
            try engine.put(b, key: "b1", etag: "")
            #expect(size() == 40 << 10)
            #expect(engine.deduplicatedPuts == 2)
            #expect(try engine.get("a1") == a)
            #expect(try engine.get("a2") == a)
            #expect(try engine.get("empty2") == Data())
            #expect(try engine.get("b1") == b)

            // b's stored bytes changed on disk: the repeat of b compares unequal and is written.
            let handle = try #require(FileHandle(forUpdatingAtPath: path + "/values"))
            try handle.seek(toOffset: UInt64(20 << 10) + 7)
            try handle.write(contentsOf: Data([~b[7]]))
            try handle.close()
            try engine.put(b, key: "b2", etag: "")
            #expect(size() == 60 << 10)
            #expect(engine.deduplicatedPuts == 2)
            #expect(try engine.get("b2") == b)

            engine.deduplicates = false
            try engine.put(a, key: "a3", etag: "")
            #expect(size() == 80 << 10)
            #expect(try engine.get("a3") == a)

            // On again: only values put from now on are candidates, and the count starts over.
            engine.deduplicates = true
            #expect(engine.deduplicatedPuts == 0)
            try engine.put(a, key: "a4", etag: "")
            #expect(size() == 100 << 10)
            try engine.put(a, key: "a5", etag: "")
            #expect(size() == 100 << 10)
            #expect(engine.deduplicatedPuts == 1)
            #expect(try engine.get("a5") == a)
            try engine.close()
        }
    }

    @Test func filePerEntryKeepsLRUOrderByFileTimes() async throws {
        try await withTemporaryDirectory { dir in
            let engine = try FilePerEntryEngine(directory: dir + "/files")
            for i in 0..<10 { try engine.put(Data(testBytes(seed: UInt64(i), count: 8000)), key: "k\(i)", etag: "") }
            usleep(20_000)
            // Reading k0 and k1 makes them the most recently used.
            _ = try engine.get("k0")
            _ = try engine.get("k1")
            let perFile = engine.allocatedBytes(of: "k5")
            let removed = engine.sweep(toBytes: try engine.allocatedBytes() - 7 * perFile)
            #expect(removed >= 7)
            #expect(try engine.get("k0") != nil)
            #expect(try engine.get("k1") != nil)
            #expect(try engine.get("k2") == nil)
        }
    }

    @Test func zipfFavoursLowRanks() {
        let zipf = ZipfSampler(count: 1000)
        var generator = SplitMix(state: 1)
        var counts = [Int](repeating: 0, count: 1000)
        for _ in 0..<100_000 { counts[zipf.next(using: &generator)] += 1 }
        // With s = 1, rank 0 is drawn about twice as often as rank 1 and ~1/H(1000) ≈ 13 % of the time.
        #expect(counts[0] > 11_000 && counts[0] < 15_500)
        #expect(Double(counts[0]) / Double(counts[1]) > 1.7)
        #expect(counts[999] < 100)
    }

    @Test func contentPoolStampsIDs() {
        let pool = ContentPool(size: 1 << 16)
        let a = pool.value(id: 1, size: 5000)
        #expect(ContentPool.id(of: a) == 1)
        #expect(a != pool.value(id: 2, size: 5000))
        #expect(a == pool.value(id: 1, size: 5000))
    }

    /// Settling a directory's file system before a timed loop writes and syncs its probe file
    /// (it reports the first sync's time), then leaves the directory as it was — a probe file an
    /// earlier, killed run left behind included; where the probe cannot be written it says so.
    @Test func settlingSyncsAProbeAndLeavesTheDirectoryAsItWas() async throws {
        try await withTemporaryDirectory { dir in
            try Data("kept".utf8).write(to: URL(fileURLWithPath: dir + "/kept"))
            try Data("left by a killed run".utf8).write(to: URL(fileURLWithPath: dir + "/" + settleFileName))
            let wait = settle(dir)
            #expect(wait != nil && wait! > .zero)
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["kept"])
            // Not a directory, then a directory the probe cannot be created in.
            #expect(settle(dir + "/kept") == nil)
            #expect(settle(dir + "/missing") == nil)
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["kept"])
            let m = try measure(3, settling: dir) { $0 }
            #expect(m.latencies.count == 3 && m.settleWait != nil)
            #expect(try measure(3, settling: nil) { $0 }.settleWait == nil)
            #expect(try measureConcurrently(4, threads: 2, settling: dir) { _ in }.settleWait != nil)
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["kept"])
        }
    }
}

@Suite struct SuiteTests {
    /// A reused directory's engines are set aside, not removed, before the population (removing
    /// them would free their inodes right before the timed rows), and removed by
    /// ``EngineFixture/removeSetAside(in:)``.
    @Test func anEarlierRunsEnginesAreSetAsideThenRemoved() async throws {
        try await withTemporaryDirectory { dir in
            let engines = dir + "/engines"
            try FileManager.default.createDirectory(atPath: engines + "/files/ab", withIntermediateDirectories: true)
            try Data("old".utf8).write(to: URL(fileURLWithPath: engines + "/files/ab/earlier"))
            let fixture = try EngineFixture(directory: engines, population: 10)
            let names = try FileManager.default.contentsOfDirectory(atPath: engines)
            let aside = names.filter { $0.hasPrefix("files" + EngineFixture.setAsideMark) }
            #expect(aside.count == 1, "\(names)")
            #expect(FileManager.default.fileExists(atPath: engines + "/" + (aside.first ?? "") + "/ab/earlier"))
            #expect(!FileManager.default.fileExists(atPath: engines + "/files/ab/earlier"))
            #expect(try fixture.files.get(EngineFixture.populationKey(3)) == EngineFixture.populationValue(fixture.pool, 3))
            fixture.close()
            EngineFixture.removeSetAside(in: engines)
            let left = try FileManager.default.contentsOfDirectory(atPath: engines)
            #expect(left.sorted() == ["files", "sqlite", "trove"], "\(left)")
        }
    }

    /// A tiny plan exercises every workload and its verification end to end; no timing is checked.
    @Test func aTinyRunCompletesAndChecksTargets() async throws {
        try await withTemporaryDirectory { dir in
            // An earlier run's engine, which the run sets aside and removes after its last row.
            try FileManager.default.createDirectory(atPath: dir + "/engines/sqlite", withIntermediateDirectories: true)
            let plan = BenchmarkPlan(population: 200, scaleEntries: 10_000, operationScale: 0.01, directory: dir)
            let report = try await offPool { try BenchmarkSuite(plan: plan).run() }
            let left = try FileManager.default.contentsOfDirectory(atPath: dir + "/engines")
            #expect(!left.contains { $0.contains(EngineFixture.setAsideMark) }, "\(left)")
            let workloads = Set(report.results.map(\.workload))
            for name in [
                "put 4KiB", "warm get 4KiB", "put 64KiB", "warm get 64KiB", "put 1MiB", "warm get 1MiB",
                "mixed 90/10 Zipf", "dedup-heavy put 20KiB", "disk per payload 20KB", "cold get at 10000 entries",
                "fill 1KiB to 10000 entries",
                "get, idle", "get, during compaction", "compaction pass",
            ] {
                #expect(workloads.contains(name), "\(name)")
            }
            let engines = Set(report.results.map(\.engine))
            #expect(
                engines.isSuperset(of: [
                    "Trove", "Trove none", "Trove full", "FilePerEntry", "FilePerEntry fsync", "SQLiteBlob",
                    "SQLiteBlob no-LRU", "SQLiteBlob FULL", "Floor+XXH3",
                ]))
            // The floor runs in the put and warm-get rows, and the table prints it as a floor.
            for workload in ["put 4KiB", "warm get 4KiB"] {
                #expect(report.results.contains { $0.workload == workload && $0.engine == "Floor+XXH3" }, "\(workload)")
            }
            #expect(report.results.allSatisfy { $0.operations > 0 && $0.opsPerSecond > 0 })
            // Every put and get row started on a settled file system, which kept no probe file.
            for row in report.results where row.workload.hasPrefix("put ") || row.workload.hasPrefix("warm get ") {
                #expect(row.settleMilliseconds != nil, "\(row.workload) \(row.engine)")
            }
            #expect(report.results.first { $0.workload == "get, during compaction" }?.settleMilliseconds == nil)
            // Every loop timed through `measure` says what the machine read from disk meanwhile.
            for row in report.results where row.workload.hasPrefix("put ") || row.workload.hasPrefix("cold get ") {
                #expect(row.diskReadKiB != nil, "\(row.workload) \(row.engine)")
            }
            #expect(!FileManager.default.fileExists(atPath: dir + "/" + settleFileName))
            #expect(report.targets.count >= 9)
            let table = report.table()
            #expect(table.contains("Targets (DESIGN.md)"))
            #expect(table.contains("floor ÷ FilePerEntry"))
            #expect(table.contains("Trove none ÷ floor"))
        }
    }
}

/// The dedup-heavy workload measures what it names only if Trove stores each distinct value
/// once: its puts, as the benchmark makes them (repeats of earlier values under new keys),
/// after reopens at other durability levels.
@Suite struct DedupWorkloadTests {
    @Test func troveStoresEachDistinctValueOnce() async throws {
        try await withTemporaryDirectory { dir in
            let engine = try TroveEngine(directory: dir + "/trove")
            let pool = ContentPool()
            var rng = SeededGenerator(seed: 99)
            var distinct = Set<UInt64>()
            var written: [String: UInt64] = [:]
            for (round, durability) in [Durability.none, .batched, .none].enumerated() {
                try engine.reopen(durability: durability)
                for i in 0..<600 {
                    let id = i > 10 && rng.next() % 5 == 0 ? rng.next() % UInt64(i / 2) : UInt64(i)
                    distinct.insert(id)
                    written["dedup-\(durability)-\(round)-\(i)"] = id
                    try engine.put(
                        pool.value(id: 5_000_000 + id, size: 20 << 10), key: "dedup-\(durability)-\(round)-\(i)", etag: "d")
                }
                try engine.flush()
                for (key, id) in written where try engine.get(key) != pool.value(id: 5_000_000 + id, size: 20 << 10) {
                    Issue.record("\(key) does not read back")
                }
                let statistics = try engine.store.statistics()
                #expect(statistics.blobs == distinct.count, "\(durability): \(statistics)")
            }
        }
    }
}

/// A row's disk reads are the machine's, and the table names them where a loop read from disk.
@Suite struct DiskReadTests {
    /// Reading a file whose pages the kernel dropped grows the count by about its size (on a
    /// file system backed by a disk: tmpfs keeps its pages, having nowhere to read them from).
    /// The file sits two folders down, beside a symbolic link to its own folder and a FIFO,
    /// which the read skips.
    @Test func readingDroppedPagesCountsAsDiskReads() async throws {
        try await withTemporaryDirectory { dir in
            try FileManager.default.createDirectory(atPath: dir + "/a/b", withIntermediateDirectories: true)
            #expect(symlink(".", dir + "/a/loop") == 0)
            #expect(mkfifo(dir + "/a/b/fifo", 0o600) == 0)
            let path = dir + "/a/b/pages"
            let size = 8 << 20
            try Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) }).write(to: URL(fileURLWithPath: path))
            let descriptor = open(path, O_RDONLY)
            #expect(descriptor >= 0)
            defer { close(descriptor) }
            #expect(fsync(descriptor) == 0)
            #expect(posix_fadvise(descriptor, 0, 0, POSIX_FADV_DONTNEED) == 0)
            // Which pages are still in the page cache: the test needs them gone.
            let mapped = try #require(mmap(nil, size, PROT_READ, MAP_SHARED, descriptor, 0))
            #expect(mapped != MAP_FAILED)
            var resident = [UInt8](repeating: 0, count: size / 4_096)
            #expect(mincore(mapped, size, &resident) == 0)
            munmap(mapped, size)
            guard resident.allSatisfy({ $0 & 1 == 0 }) else { return }
            let before = try #require(DiskReads.kibibytes())
            try readIntoPageCache(dir)
            let read = try #require(DiskReads.since(before))
            #expect(read >= size / 1_024 / 2, "\(read) KiB")
            // Read again, the pages are in the page cache.
            let again = try #require(DiskReads.kibibytes())
            try readIntoPageCache(dir)
            #expect(try #require(DiskReads.since(again)) < size / 1_024 / 2)
        }
    }

    @Test func theTableNamesALoopThatReadFromDisk() {
        func row(_ engine: String, _ kibibytes: Int?) -> BenchmarkResult {
            var row = BenchmarkResult(
                workload: "cold get at 10000 entries", engine: engine, operations: 1, seconds: 1, opsPerSecond: 1,
                p50Microseconds: 1, p99Microseconds: 1, metric: nil, metricName: nil)
            row.diskReadKiB = kibibytes
            return row
        }
        let plan = BenchmarkPlan(population: 1, scaleEntries: 1, operationScale: 1, directory: nil)
        let table = BenchmarkReport(plan: plan, results: [row("Trove", 3_072), row("Trove none", 1_023)], targets: []).table()
        let lines = table.split(separator: "\n")
        #expect(lines.contains { $0.contains("Trove ") && $0.hasSuffix("read 3.0 MiB from disk") })
        // Under a MiB is the noise of metadata and of other processes: not named.
        #expect(lines.filter { $0.contains("from disk") }.count == 1)
    }
}

/// The first-read row is the median of several fresh processes (FirstReadBenchmark).
@Suite struct FirstReadRoundsTests {
    @Test func theMedianProcessIsTheMiddleOneAndTheLowerOfTwo() {
        #expect(FirstReadBenchmark.medianIndex([0.3, 0.1, 0.2]) == 2)
        #expect(FirstReadBenchmark.medianIndex([5, 1, 4, 2, 3]) == 4)
        #expect(FirstReadBenchmark.medianIndex([0.4, 0.1]) == 1)
        #expect(FirstReadBenchmark.medianIndex([7]) == 0)
    }

    @Test func aFullRunTimesFiveProcessesAndAQuickOneOne() {
        #expect(FirstReadBenchmark.firstReadRounds(.standard) == 5)
        #expect(FirstReadBenchmark.firstReadRounds(.quick) == 1)
    }

    @Test func theTableGivesTheProcessesSpread() {
        var row = BenchmarkResult(
            workload: "first read (fresh process)", engine: "Trove", operations: 3_000, seconds: 0.1, opsPerSecond: 30_000,
            p50Microseconds: 10, p99Microseconds: 300, metric: nil, metricName: nil)
        row.processesPerSecond = [31_000, 28_000, 30_000, 35_500, 29_000]
        let plan = BenchmarkPlan(population: 1, scaleEntries: 1, operationScale: 1, directory: nil)
        let table = BenchmarkReport(plan: plan, results: [row], targets: []).table()
        #expect(table.contains("median of 5 processes (28000–35500/s)"))
    }
}
