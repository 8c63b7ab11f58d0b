import Foundation
import Testing
import TroveCore
import TroveIndex
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

@Suite struct CompactionTests {
    @Test func expiredEntriesGoAtTheirTime() async throws {
        try await withTemporaryDirectory { dir in
            let clock = TestClock(start: 1_000_000)
            let store = try openStore(dir) {
                $0.clock = clock.now
                $0.defaultTimeToLive = .seconds(600)
                $0.compactionInterval = nil
            }
            let soon = Date(timeIntervalSince1970: 1_060)
            try store.put(value(1), for: key(1), metadata: EntryMetadata(expiresAt: soon))
            try store.put(value(2), for: key(2))  // default TTL: 600 s
            try store.put(value(3), for: key(3), metadata: EntryMetadata(expiresAt: Date(timeIntervalSince1970: 5_000)))
            #expect(try store.info(for: key(2))?.expiresAt == Date(timeIntervalSince1970: 1_600))

            clock.advance(by: 59_000)
            #expect(try store.compact().expiredEntries == 0)
            clock.advance(by: 2_000)
            let first = try store.compact()
            #expect(first.expiredEntries == 1)
            #expect(first.expiredBytes == Int64(value(1).count))
            #expect(try store.data(for: key(1)) == nil)
            #expect(try store.data(for: key(2)) == value(2))

            clock.advance(by: 600_000)
            #expect(try store.compact().expiredEntries == 1)
            #expect(try store.data(for: key(2)) == nil)
            #expect(try store.data(for: key(3)) == value(3))
            // An on-demand TTL removes what was created longer ago, expiry or not.
            #expect(try store.compact(timeToLive: .seconds(60)).expiredEntries == 1)
            #expect(try store.statistics().entries == 0)
        }
    }

    @Test func capacityHoldsAfterCompactionUnderARandomWorkload() async throws {
        try await withTemporaryDirectory { dir in
            let capacity: Int64 = 3 << 20
            let store = try openStore(dir, segmentSize: 256 << 10) {
                $0.capacity = capacity
                $0.compactionInterval = nil
                // Read times are written by the passes only: a background flush of this test's
                // reads between a pass and the check below would grow the log (counted in the
                // usage) by up to ~100 KB — the log grows between passes (Compaction.md).
                $0.accessTimeFlushInterval = .seconds(3_600)
            }
            var generator = SeededGenerator(seed: 11)
            var expected: [Int: Data] = [:]
            for round in 0..<6 {
                for _ in 0..<120 {
                    let k = Int.random(in: 0..<400, using: &generator)
                    if Int.random(in: 0..<10, using: &generator) == 0 {
                        try store.remove(key(k))
                        expected[k] = nil
                    } else {
                        let v = Data(
                            testBytes(seed: UInt64(round * 1000 + k), count: Int.random(in: 1_000...60_000, using: &generator)))
                        try store.put(v, for: key(k))
                        expected[k] = v
                    }
                }
                let report = try store.compact()
                #expect(report.diskBytesAfter <= capacity, "round \(round): \(report)")
                #expect(store.diskUsage() <= capacity)
                // Whatever is still there is exactly what was last written.
                var present = 0
                for (k, v) in expected {
                    if let data = try store.data(for: key(k)) {
                        #expect(data == v)
                        present += 1
                    }
                }
                #expect(present > 0)
            }
            let stats = try store.statistics()
            #expect(stats.diskBytes <= capacity)
        }
    }

    @Test func recentlyReadEntriesSurviveEviction() async throws {
        try await withTemporaryDirectory { dir in
            let clock = TestClock(start: 1_000_000)
            let store = try openStore(dir, segmentSize: 128 << 10) {
                $0.clock = clock.now
                $0.compactionInterval = nil
            }
            for i in 0..<200 {
                clock.advance(by: 1_000)
                try store.put(Data(testBytes(seed: UInt64(i), count: 10_000)), for: key(i))
            }
            // Read the 20 oldest again: they become the most recently used.
            clock.advance(by: 1_000)
            for i in 0..<20 { _ = try store.data(for: key(i)) }
            try store.flush()
            try store.close()
            let usage = try openStore(dir, segmentSize: 128 << 10) { $0.compactionInterval = nil }
            let before = usage.diskUsage()
            try usage.close()
            // Room for about half of the data.
            let evicting = try openStore(dir, segmentSize: 128 << 10) {
                $0.clock = clock.now
                $0.capacity = before / 2
                $0.compactionInterval = nil
            }
            // The background thread may start its own pass once it sees usage over the high
            // watermark, so the outcome is checked on the store, not on this pass's report.
            try evicting.compact()
            #expect(evicting.diskUsage() <= before / 2)
            #expect(try (0..<200).filter { try evicting.contains(key($0)) }.count < 150)
            for i in 0..<20 { #expect(try evicting.data(for: key(i)) == Data(testBytes(seed: UInt64(i), count: 10_000))) }
            // The oldest not re-read went first.
            #expect(try evicting.data(for: key(20)) == nil)
            #expect(try evicting.data(for: key(199)) == Data(testBytes(seed: 199, count: 10_000)))
        }
    }

    @Test func aSharedBlobIsFreedOnlyWithItsLastKey() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir, segmentSize: 64 << 10) { $0.compactionInterval = nil }
            let shared = Data(testBytes(seed: 5, count: 40_000))
            try store.put(shared, for: key(1))
            try store.put(shared, for: key(2))
            // Fill a few segments so the first one is sealed.
            for i in 10..<20 { try store.put(Data(testBytes(seed: UInt64(i), count: 30_000)), for: key(i)) }
            try store.remove(key(1))
            try store.compact()
            #expect(try store.data(for: key(2)) == shared)
            #expect(try store.statistics().storedPayloadBytes == 40_000 + 10 * 30_000)
            try store.remove(key(2))
            for i in 10..<20 { try store.remove(key(i)) }
            let report = try store.compact()
            #expect(report.segmentsDeleted >= 1)
            let stats = try store.statistics()
            #expect(stats.blobs == 0)
            #expect(stats.entries == 0)
            #expect(stats.packBytes < 70_000)  // only the active segment is left
        }
    }

    @Test func readsAndWritesGoOnDuringCompaction() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir, segmentSize: 64 << 10) { $0.compactionInterval = nil }
            func v(_ k: Int, _ version: Int) -> Data {
                var bytes = testBytes(seed: UInt64(k * 100 + version), count: 3_000 + k * 50)
                bytes[0] = UInt8(k)
                bytes[1] = UInt8(version)
                return Data(bytes)
            }
            for k in 0..<60 { try store.put(v(k, 0), for: key(k)) }
            let bad = try await withThrowingTaskGroup(of: Int.self) { group in
                group.addTask {
                    for _ in 0..<15 {
                        for k in stride(from: 0, to: 60, by: 3) { try store.remove(key(k)) }
                        try store.compact()
                    }
                    return 0
                }
                for task in 0..<3 {
                    group.addTask {
                        var generator = SeededGenerator(seed: UInt64(task))
                        var wrong = 0
                        for round in 0..<400 {
                            let k = Int.random(in: 0..<60, using: &generator)
                            if round % 4 == 0 {
                                try store.put(v(k, round % 200 + 1), for: key(k))
                            } else if let data = try store.data(for: key(k)) {
                                if data != v(k, Int(data[1])) { wrong += 1 }
                            }
                        }
                        return wrong
                    }
                }
                return try await group.reduce(0, +)
            }
            #expect(bad == 0)
            #expect(store.backgroundError == nil)
            // Every entry still there reads back whole after a reopen.
            try store.close()
            let reopened = try openStore(dir, segmentSize: 64 << 10) { $0.compactionInterval = nil }
            #expect(reopened.recoveryReport.isClean)
            for k in 0..<60 {
                if let data = try reopened.data(for: key(k)) { #expect(data == v(k, Int(data[1]))) }
            }
        }
    }

    @Test func aRebuildAfterCompactionBringsBackExactlyTheLiveEntries() async throws {
        try await withTemporaryDirectory { dir in
            do {
                let store = try openStore(dir, segmentSize: 32 << 10) { $0.compactionInterval = nil }
                for i in 0..<40 { try store.put(value(i), for: key(i), metadata: EntryMetadata(etag: "e\(i)")) }
                for i in stride(from: 0, to: 40, by: 2) { try store.remove(key(i)) }
                try store.put(value(0), for: key(41))  // deduplicated onto a blob whose key went
                let report = try store.compact()
                #expect(report.segmentsRewritten + report.segmentsDeleted > 0)
                try store.close()
            }
            let files = StoreFiles(root: dir)
            for suffix in ["", "-wal", "-shm"] {
                try? FileManager.default.removeItem(atPath: files.store + "/index.sqlite" + suffix)
            }
            let store = try openStore(dir, segmentSize: 32 << 10) { $0.compactionInterval = nil }
            for i in 0..<40 {
                let entry = try store.entry(for: key(i))
                if i % 2 == 0 {
                    #expect(entry == nil, "removed key \(i) came back")
                } else {
                    #expect(entry?.data == value(i))
                    #expect(entry?.etag == "e\(i)")
                }
            }
            #expect(try store.data(for: key(41)) == value(0))
        }
    }
}

@Suite struct BackgroundCompactionTests {
    @Test func passingTheHighWatermarkStartsAPassByItself() async throws {
        try await withTemporaryDirectory { dir in
            let capacity: Int64 = 1 << 20
            let store = try openStore(dir, segmentSize: 128 << 10) {
                $0.capacity = capacity
                $0.compactionInterval = nil
            }
            // About 3 MB against a 1 MiB capacity, and nobody calls compact(). The background
            // thread checks usage once a second, so a pass may already run while these puts go
            // on (a slow machine or ThreadSanitizer makes that likely): only the end is checked.
            let count = 150
            for i in 0..<count { try store.put(Data(testBytes(seed: UInt64(i), count: 20_000)), for: key(i)) }
            let deadline = Date().addingTimeInterval(60)
            while store.diskUsage() > capacity && Date() < deadline { try await Task.sleep(for: .milliseconds(100)) }
            #expect(store.diskUsage() <= capacity)
            // Usage can only be under capacity if a pass evicted entries: the oldest ones went.
            let survivors = try (0..<count).filter { try store.contains(key($0)) }
            #expect(survivors.count < count / 2)
            #expect(try store.contains(key(0)) == false)
            #expect(store.backgroundError == nil)
            #expect(try store.data(for: key(149)) == Data(testBytes(seed: 149, count: 20_000)))
        }
    }
}
