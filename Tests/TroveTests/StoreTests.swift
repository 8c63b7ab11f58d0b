import Foundation
import Testing
import TroveCore
import TroveIndex
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

@Suite struct StoreTests {
    @Test(arguments: [0, 1, 100, 4096, 3 << 20 + 17])
    func roundTrip(size: Int) async throws {
        try await withTemporaryDirectory { dir in
            let bytes = Data(testBytes(seed: UInt64(size), count: size))
            do {
                let store = try openStore(dir)
                try store.put(bytes, for: key(1))
                #expect(try store.data(for: key(1)) == bytes)
                try store.close()
            }
            let store = try openStore(dir)
            #expect(try store.data(for: key(1)) == bytes)
            #expect(store.recoveryReport.isClean)
        }
    }

    @Test(arguments: Durability.allCases)
    func everyDurabilityPersists(durability: Durability) async throws {
        try await withTemporaryDirectory { dir in
            do {
                let store = try openStore(dir, durability: durability)
                for i in 0..<50 { try store.put(Data(testBytes(seed: UInt64(i), count: 1000 + i)), for: key(i)) }
                try store.close()
            }
            let store = try openStore(dir, durability: durability)
            for i in 0..<50 { #expect(try store.data(for: key(i)) == Data(testBytes(seed: UInt64(i), count: 1000 + i))) }
        }
    }

    @Test func metadataRoundTrip() async throws {
        try await withTemporaryDirectory { dir in
            let clock = TestClock(start: 1_700_000_000_000)
            let expires = Date(timeIntervalSince1970: 1_800_000_000)
            let metadata = EntryMetadata(etag: "W/\"abc\"", lastModified: "Wed, 21 Oct 2015 07:28:00 GMT", expiresAt: expires)
            do {
                let store = try openStore(dir) { $0.clock = clock.now }
                try store.put(Data([1, 2, 3]), for: key(1, variant: "w64"), metadata: metadata)
                let entry = try #require(try store.entry(for: key(1, variant: "w64")))
                #expect(entry.info.metadata == metadata)
                #expect(entry.cost == 3)
                #expect(entry.createdAt == Date(timeIntervalSince1970: 1_700_000_000))
                try store.close()
            }
            let store = try openStore(dir) { $0.clock = clock.now }
            let info = try #require(try store.info(for: key(1, variant: "w64")))
            #expect(info.metadata == metadata)
            #expect(info.contentHash == ContentHash(hashing: [1, 2, 3]))
            #expect(try store.info(for: key(1)) == nil)
        }
    }

    @Test func replaceAndRemove() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir)
            try store.put(Data("one".utf8), for: key(1))
            try store.put(Data("two".utf8), for: key(1))
            #expect(try store.data(for: key(1)) == Data("two".utf8))
            #expect(try store.contains(key(1)))
            #expect(try store.remove(key(1)))
            #expect(try !store.remove(key(1)))
            #expect(try store.data(for: key(1)) == nil)
            #expect(try !store.contains(key(1)))
            let stats = try store.statistics()
            #expect(stats.entries == 0)
            #expect(stats.blobs == 0)
            #expect(stats.liveBytes == 0)
            try store.close()
            let reopened = try openStore(dir)
            #expect(try reopened.data(for: key(1)) == nil)
        }
    }

    @Test func removeAllVariantsOfAURL() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir)
            for variant in ["", "w64", "w128", "w256"] {
                try store.put(Data(variant.utf8), for: key(1, variant: variant))
            }
            try store.put(Data("other".utf8), for: key(2))
            #expect(try store.entries(url: key(1).url).map(\.key.variant) == ["", "w128", "w256", "w64"])
            #expect(try store.removeAll(url: key(1).url) == 4)
            #expect(try store.removeAll(url: key(1).url) == 0)
            #expect(try store.data(for: key(1, variant: "w64")) == nil)
            #expect(try store.data(for: key(2)) == Data("other".utf8))
        }
    }

    @Test func enumerationSeesEveryEntryInKeyOrder() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir)
            for i in (0..<30).reversed() { try store.put(Data([UInt8(i)]), for: key(i)) }
            try store.remove(key(7))
            var seen: [CacheKey] = []
            try store.forEachEntry { seen.append($0.key) }
            #expect(seen.count == 29)
            #expect(seen == seen.sorted())
            #expect(!seen.contains(key(7)))
            struct Stop: Error {}
            var visited = 0
            #expect(throws: Stop.self) {
                try store.forEachEntry { _ in
                    visited += 1
                    if visited == 3 { throw Stop() }
                }
            }
            #expect(visited == 3)
        }
    }

    @Test func readYourWritesBeforeTheGroupCommit() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.batchInterval = .seconds(3600)
                $0.batchSize = 1_000_000
            }
            try store.put(Data("v1".utf8), for: key(1))
            // Nothing is committed yet: a reader connection would not see the row.
            #expect(try store.readIndex { try $0.entry(digest: key(1).digest) } == nil)
            #expect(try store.data(for: key(1)) == Data("v1".utf8))
            try store.remove(key(1))
            #expect(try store.data(for: key(1)) == nil)
            try store.put(Data("v2".utf8), for: key(1))
            #expect(try store.data(for: key(1)) == Data("v2".utf8))
            try store.flush()
            #expect(try store.readIndex { try $0.entry(digest: key(1).digest) }?.entry.url == key(1).url)
        }
    }

    @Test func deduplicatesEqualBytes() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir)
            let bytes = Data(testBytes(seed: 9, count: 20_000))
            for i in 0..<10 { try store.put(bytes, for: key(i)) }
            let stats = try store.statistics()
            #expect(stats.entries == 10)
            #expect(stats.blobs == 1)
            #expect(stats.payloadBytes == 200_000)
            #expect(stats.storedPayloadBytes == 20_000)
            #expect(stats.dedupSavedBytes == 180_000)
            #expect(stats.packBytes < 30_000)
            // The blob lives until its last key goes.
            for i in 0..<9 { try store.remove(key(i)) }
            #expect(try store.data(for: key(9)) == bytes)
            #expect(try store.statistics().blobs == 1)
            try store.remove(key(9))
            #expect(try store.statistics().blobs == 0)
        }
    }

    @Test func aForcedHashCollisionNeverSharesUnequalBytes() async throws {
        try await withTemporaryDirectory { dir in
            // Every content hashes alike: only the byte comparison tells them apart. No cycle
            // commits until the statistics ask (a timer's cycle would leave one dedup hint for
            // the shared hash, and a missed dedup — a third blob — is allowed; see DedupHints).
            let store = try openStore(dir) {
                $0.contentHasher = { _ in ContentHash(high: 0xdead, low: 0xbeef) }
                $0.batchInterval = .seconds(3_600)
                $0.accessTimeFlushInterval = .seconds(3_600)
                $0.compactionInterval = nil
            }
            let a = Data(testBytes(seed: 1, count: 5000))
            let b = Data(testBytes(seed: 2, count: 5000))
            try store.put(a, for: key(1))
            try store.put(b, for: key(2))
            try store.put(a, for: key(3))
            #expect(try store.data(for: key(1)) == a)
            #expect(try store.data(for: key(2)) == b)
            #expect(try store.data(for: key(3)) == a)
            #expect(try store.statistics().blobs == 2)
            // Committed now: the one hint for the shared hash names b; a put of a compares,
            // finds other bytes, and stores a again rather than link to b.
            try store.put(a, for: key(4))
            #expect(try store.data(for: key(4)) == a)
            #expect(try store.data(for: key(2)) == b)
            #expect((2...3).contains(try store.statistics().blobs))
            try store.close()
            let reopened = try openStore(dir) { $0.contentHasher = { _ in ContentHash(high: 0xdead, low: 0xbeef) } }
            #expect(try reopened.data(for: key(2)) == b)
            #expect(try reopened.data(for: key(3)) == a)
        }
    }

    @Test func segmentsRotate() async throws {
        try await withTemporaryDirectory { dir in
            do {
                let store = try openStore(dir, segmentSize: 64 << 10)
                for i in 0..<40 { try store.put(Data(testBytes(seed: UInt64(i), count: 10_000)), for: key(i)) }
                // A blob larger than a segment gets a segment of its own.
                try store.put(Data(testBytes(seed: 99, count: 200_000)), for: key(99))
                let stats = try store.statistics()
                #expect(stats.segments >= 7)
                try store.close()
            }
            let store = try openStore(dir, segmentSize: 64 << 10)
            for i in 0..<40 { #expect(try store.data(for: key(i)) == Data(testBytes(seed: UInt64(i), count: 10_000))) }
            #expect(try store.data(for: key(99)) == Data(testBytes(seed: 99, count: 200_000)))
            let rows = try store.readIndex { try $0.segments() }
            #expect(rows.filter { !$0.isSealed }.count == 1)
            #expect(rows.last?.isSealed == false)
        }
    }

    @Test func secondOpenIsRefusedNamingThePid() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir)
            let error = #expect(throws: StoreError.self) { try openStore(dir) }
            #expect(error?.code == .locked)
            #expect(error?.message.contains("\(getpid())") == true)
            try store.close()
            // Closing releases the lock.
            let again = try openStore(dir)
            try again.close()
        }
    }

    @Test func closedStoreRefusesWork() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir)
            try store.put(Data([1]), for: key(1))
            try store.close()
            try store.close()
            for attempt in [
                { _ = try store.data(for: key(1)) }, { try store.put(Data([2]), for: key(2)) },
                { _ = try store.remove(key(1)) }, { _ = try store.statistics() },
            ] as [() throws -> Void] {
                let error = #expect(throws: StoreError.self) { try attempt() }
                #expect(error?.code == .closed)
            }
        }
    }

    @Test func directoryThatIsAFileIsRefused() async throws {
        try await withTemporaryDirectory { dir in
            try Data([1]).write(to: URL(fileURLWithPath: dir + "/store"))
            let error = #expect(throws: StoreError.self) { try openStore(dir) }
            #expect(error?.code == .invalidDirectory)
        }
    }

    @Test func keysAreNeverPaths() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir)
            let hostile = ["../../etc/passwd", "/tmp/x", String(repeating: "é", count: 10_000), ""]
            // A NUL is refused, typed (TextTests).
            #expect(throws: StoreError.self) { try store.put(Data([9]), for: CacheKey(url: "a\u{0}b")) }
            for (i, url) in hostile.enumerated() {
                try store.put(Data([UInt8(i)]), for: CacheKey(url: url, variant: "../\(i)"))
            }
            for (i, url) in hostile.enumerated() {
                #expect(try store.data(for: CacheKey(url: url, variant: "../\(i)")) == Data([UInt8(i)]))
            }
            try store.close()
            let names = try FileManager.default.subpathsOfDirectory(atPath: dir).sorted()
            #expect(names.allSatisfy { $0.hasPrefix("store") })
            #expect(
                Set(names).isSubset(of: [
                    "store", "store/LOCK", "store/index.sqlite", "store/index.sqlite-wal", "store/index.sqlite-shm",
                    "store/packs", "store/packs/00000001.pack",
                ]))
        }
    }

    @Test func readTimesAreFlushedWithoutBlockingReads() async throws {
        try await withTemporaryDirectory { dir in
            let clock = TestClock(start: 1_000_000)
            do {
                let store = try openStore(dir) { $0.clock = clock.now }
                try store.put(Data([1]), for: key(1))
                try store.flush()
                clock.advance(by: 60_000)
                _ = try store.data(for: key(1))
                // Not yet in the index, but reported.
                #expect(try store.readIndex { try $0.entry(digest: key(1).digest) }?.entry.accessedAt == 1_000_000)
                #expect(try store.info(for: key(1))?.accessedAt == Date(timeIntervalSince1970: 1_060))
                try store.close()
            }
            let store = try openStore(dir)
            #expect(try store.info(for: key(1))?.accessedAt == Date(timeIntervalSince1970: 1_060))
        }
    }

    @Test func anEntryReportsTheReadBeforeThisOne() async throws {
        try await withTemporaryDirectory { dir in
            let clock = TestClock(start: 1_000_000)
            let store = try openStore(dir) { $0.clock = clock.now }
            try store.put(Data([1]), for: key(1))
            clock.advance(by: 1_000)
            #expect(try store.entry(for: key(1))?.accessedAt == Date(timeIntervalSince1970: 1_000))  // never read: creation
            clock.advance(by: 1_000)
            #expect(try store.entry(for: key(1))?.accessedAt == Date(timeIntervalSince1970: 1_001))  // the read at 1 001
            // The same from the index side, once the map no longer has the key.
            try store.flush()
            store.shared.withLock { $0.map.removeAll() }
            clock.advance(by: 1_000)
            #expect(try store.entry(for: key(1))?.accessedAt == Date(timeIntervalSince1970: 1_002))
        }
    }

    /// A commit drops the slots of committed removals (the index answers for them) and keeps
    /// the entries and the removals still queued — found without walking every slot.
    @Test func aCommitDropsCommittedRemovalsOnly() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.batchInterval = .seconds(3_600) }
            for i in 0..<100 { try store.put(Data([UInt8(i)]), for: key(i)) }
            for i in 0..<50 { try store.remove(key(i)) }
            try store.flush()
            #expect(store.shared.withLock { $0.map.count } == 50)
            // Removals not committed yet keep their slots (a reader must not ask the index);
            // the committer is held so that none commits meanwhile.
            try store.committer.withLock { _ in
                for i in 50..<60 { try store.remove(key(i)) }
            }
            #expect(store.shared.withLock { $0.map.count } == 50)
            try store.flush()
            #expect(store.shared.withLock { $0.map.count } == 40)
            try store.put(Data([7]), for: key(5))  // a removed key stored again is an entry
            try store.flush()
            #expect(store.shared.withLock { $0.map.count } == 41)
            for i in 0..<100 {
                #expect(try store.data(for: key(i)) == (i == 5 ? Data([7]) : i < 60 ? nil : Data([UInt8(i)])))
            }
        }
    }

    @Test func locationCacheLimitIsHonoured() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.locationCacheLimit = 10 }
            for i in 0..<100 { try store.put(Data([UInt8(i)]), for: key(i)) }
            try store.flush()
            #expect(store.shared.withLock { $0.map.count } <= 10)
            for i in 0..<100 { #expect(try store.data(for: key(i)) == Data([UInt8(i)])) }
            // Small tables are freed where they are dropped: a hop would cost more.
            try store.close()
            #expect(store.reclaimer.freedSlots == 0)
        }
    }

    /// A map over its limit lets go of slots until it is a sixteenth under it — not all of
    /// them — and hands many at once to the reclaimer's thread, which frees them off the commit
    /// cycle (whose locks puts wait for); what it let go of reads from the index.
    @Test func aLargeDropIsFreedOffTheCommitCycleAndLeavesTheMapAtItsTarget() async throws {
        try await withTemporaryDirectory { dir in
            let limit = 1_000
            let n = limit + 2 * Reclaimer.threshold
            let store = try openStore(dir) {
                $0.locationCacheLimit = limit
                $0.batchInterval = .seconds(3_600)
                $0.accessTimeFlushInterval = .seconds(3_600)
            }
            for i in 0..<n { try store.put(Data([UInt8(i & 0xFF), 1]), for: key(i)) }
            try store.flush()
            // Each cycle over the limit let go of what came in since the last: a few at a time,
            // freed in place (back-pressure bounds a cycle's writes well under the threshold).
            let afterPuts = store.shared.withLock { $0.map.count }
            #expect((LocationMap.evictionTarget(limit: limit)...limit).contains(afterPuts), "\(afterPuts) slots")
            #expect(store.reclaimer.freedSlots == 0)
            // Reads between two cycles fill the map far past its limit; the next cycle lets go of
            // thousands at once, on the reclaimer.
            for i in 0..<n { #expect(try store.data(for: key(i)) == Data([UInt8(i & 0xFF), 1])) }
            #expect(store.shared.withLock { $0.map.count } == n)
            try store.flush()
            #expect(store.shared.withLock { $0.map.count } == LocationMap.evictionTarget(limit: limit))
            for i in 0..<n { #expect(try store.data(for: key(i)) == Data([UInt8(i & 0xFF), 1])) }
            try store.close()  // waits for the reclaimer's jobs
            #expect(store.reclaimer.freedSlots >= n - LocationMap.evictionTarget(limit: limit))
        }
    }
}

@Suite struct WriteWithoutWaitingTests {
    @Test func putsLikePutAndReturnsTheHash() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir)
            store.waitForLoads()  // until the dedup hints load, a put without waiting is refused
            let bytes = Data(testBytes(seed: 7, count: 70_000))
            let hash = try #require(try store.putWithoutWaiting(bytes, for: key(1), metadata: EntryMetadata(etag: "\"a\"")))
            #expect(hash == ContentHash(hashing: [UInt8](bytes)))
            try store.put(bytes, for: key(2))
            #expect(try store.info(for: key(2))?.contentHash == hash)
            #expect(try store.data(for: key(1)) == bytes)
            #expect(try store.info(for: key(1))?.etag == "\"a\"")
            try store.close()
            let reopened = try openStore(dir)
            #expect(try reopened.data(for: key(1)) == bytes)
        }
    }

    @Test func refusesUnderFullDurabilityWritingNothing() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir, durability: .full)
            #expect(try store.putWithoutWaiting(Data([1, 2, 3]), for: key(1)) == nil)
            #expect(try store.contains(key(1)) == false)
            #expect(store.appender.withLock { $0.queue.count } == 0)
            // Its arguments are still checked first, as a put's are.
            #expect(throws: StoreError.self) {
                _ = try store.putWithoutWaiting(Data([1]), for: CacheKey(url: "https://img.example/\u{0}.jpg"))
            }
        }
    }

    @Test func refusesAtBackPressureWritingNothing() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.batchInterval = .seconds(3600)
                $0.batchSize = 4
            }
            // Until the dedup hints have loaded, a put would wait for them: it is refused too.
            store.waitForLoads()
            // The committer is held, so no commit cycle drains the queue: it only grows.
            // The queue is read before the lock goes: a woken committer drains it right after.
            let (written, queued) = try store.committer.withLock { _ in
                var written = 0
                while try store.putWithoutWaiting(Data([UInt8(written)]), for: key(written)) != nil { written += 1 }
                return (written, store.appender.withLock { $0.queue.count })
            }
            // Back-pressure starts at 8 × batchSize queued records; each new value queues two.
            #expect(written == 15)
            #expect(try store.contains(key(written)) == false)
            #expect(queued == 30)
            // A put that may wait runs the commit cycle itself and empties the queue.
            try store.put(Data([255]), for: key(100))
            #expect(store.appender.withLock { $0.queue.count } < queued)
            #expect(try store.putWithoutWaiting(Data([254]), for: key(101)) != nil)
            for i in 0..<written { #expect(try store.data(for: key(i)) == Data([UInt8(i)])) }
        }
    }

    @Test func keysOfAURLSeeQueuedAndIndexedEntriesButNotRemovedOnes() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.batchInterval = .seconds(3600) }
            let url = key(1).url
            try store.put(Data([1]), for: key(1))
            try store.put(Data([2]), for: key(1, variant: "w64"))
            try store.flush()  // these two are in the index
            try store.put(Data([3]), for: key(1, variant: "w128"))  // this one only in the queue
            try store.put(Data([4]), for: key(2))
            #expect(try store.keys(url: url) == [key(1), key(1, variant: "w128"), key(1, variant: "w64")])
            try store.remove(key(1, variant: "w64"))
            #expect(try store.keys(url: url) == [key(1), key(1, variant: "w128")])
            #expect(try store.keys(url: "https://img.example/none.jpg").isEmpty)
            // It did not commit: the queued put is still queued.
            #expect(store.appender.withLock { $0.queue.count } > 0)
        }
    }
}
