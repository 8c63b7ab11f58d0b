import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

@testable import Trove
@_spi(Testing) @testable import TroveStore

// MARK: Fixtures

/// An entry for `key` holding `size` bytes made from `seed`.
private func memoryEntry(_ key: CacheKey, size: Int = 1_000, seed: Int = 0, expiresAt: Date? = nil) -> Entry {
    let data = Data(testBytes(seed: UInt64(seed), count: size))
    let info = EntryInfo(
        key: key, metadata: EntryMetadata(expiresAt: expiresAt), createdAt: Date(), accessedAt: Date(), cost: size,
        contentHash: ContentHash(hashing: [UInt8](data)))
    return Entry(data: data, info: info)
}

/// A memory cache's clock that tests move by hand.
private final class ManualClock: Sendable {
    private let value = Locked(Date(timeIntervalSince1970: 1_000_000))
    var now: Date { value.withLock { $0 } }
    var function: @Sendable () -> Date { { self.now } }
    func advance(by seconds: TimeInterval) { value.withLock { $0 += seconds } }
}

/// Every shard's invariants (MemoryShard.checkInvariants); empty when all hold.
private func problems(_ cache: MemoryCache) -> [String] {
    var found: [String] = []
    cache.forEachShard { found += $0.checkInvariants() }
    return found
}

/// A cache of one shard (one S3-FIFO over everything), so tests can reason about exact order.
private func singleShardCache(countLimit: Int = 10_000, costLimit: Int = 1 << 30, clock: ManualClock? = nil) -> MemoryCache {
    var configuration = MemoryCache.Configuration(costLimit: costLimit, countLimit: countLimit)
    configuration.shardCount = 1
    if let clock { configuration.clock = clock.function }
    return MemoryCache(configuration: configuration)
}

/// The textbook LRU (evict the least recently used), for comparison in tests: each access
/// appends the key with a new tick; eviction skips places whose tick is no longer the key's.
private struct TestLRU {
    let capacity: Int
    private var ticks: [CacheKey: Int] = [:]
    private var order: [(key: CacheKey, tick: Int)] = []
    private var front = 0
    private var now = 0

    init(capacity: Int) { self.capacity = capacity }

    /// Looks `key` up; inserts it on a miss. Whether it was a hit.
    mutating func access(_ key: CacheKey) -> Bool {
        now += 1
        let hit = ticks[key] != nil
        if !hit && ticks.count == capacity {
            while true {
                let (oldest, tick) = order[front]
                front += 1
                if ticks[oldest] == tick {
                    ticks.removeValue(forKey: oldest)
                    break
                }
            }
        }
        ticks[key] = now
        order.append((key, now))
        return hit
    }

    func contains(_ key: CacheKey) -> Bool { ticks[key] != nil }
}

// MARK: Behaviour

@Suite struct MemoryCacheTests {
    @Test func countersAreExact() {
        let cache = MemoryCache()
        #expect(cache.entry(for: key(1)) == nil)
        #expect(cache.insert(memoryEntry(key(1), seed: 1), for: key(1)))
        #expect(cache.insert(memoryEntry(key(2), seed: 2), for: key(2)))
        #expect(cache.data(for: key(1)) == memoryEntry(key(1), seed: 1).data)
        #expect(cache.entry(for: key(1))?.info.key == key(1))
        #expect(cache.entry(for: key(2)) != nil)
        #expect(cache.entry(for: key(3)) == nil)
        cache.insert(memoryEntry(key(2), seed: 22), for: key(2))  // a replacement
        #expect(cache.data(for: key(2)) == memoryEntry(key(2), seed: 22).data)
        #expect(cache.remove(key(1)))
        #expect(!cache.remove(key(1)))
        var expected = MemoryCache.Statistics()
        expected.hits = 4
        expected.misses = 2
        expected.inserts = 3
        expected.replacements = 1
        expected.invalidations = 1
        expected.count = 1
        expected.cost = 1_000 + MemoryCache.itemOverhead
        #expect(cache.statistics == expected)
        #expect(cache.statistics.hitRatio == 4.0 / 6)
        #expect(cache.count == 1)
        #expect(cache.totalCost == 1_000 + MemoryCache.itemOverhead)
        #expect(problems(cache).isEmpty)
    }

    @Test func theCostLimitHolds() {
        let perItem = 1_000 + MemoryCache.itemOverhead
        let cache = singleShardCache(costLimit: 10 * perItem)
        for i in 0..<50 { cache.insert(memoryEntry(key(i), seed: i), for: key(i)) }
        #expect(cache.count == 10)
        #expect(cache.totalCost == 10 * perItem)
        #expect(cache.statistics.evictions == 40)
        #expect(problems(cache).isEmpty)

        // Sharded: the totals hold too, whatever the spread of keys over shards.
        let sharded = MemoryCache(costLimit: 200 * perItem)
        #expect(sharded.shardCount == 16)
        for i in 0..<2_000 { sharded.insert(memoryEntry(key(i), seed: i), for: key(i)) }
        #expect(sharded.totalCost <= 200 * perItem)
        #expect(sharded.count > 150)
        #expect(sharded.statistics.evictions == 2_000 - sharded.count)
        #expect(problems(sharded).isEmpty)
    }

    @Test func theCountLimitHolds() {
        let cache = MemoryCache(costLimit: 1 << 30, countLimit: 100)
        for i in 0..<1_000 { cache.insert(memoryEntry(key(i), size: 10, seed: i), for: key(i)) }
        #expect(cache.count <= 100)
        #expect(cache.count > 80)
        #expect(problems(cache).isEmpty)
        // Fewer allowed entries than shards: fewer shards, each may hold one.
        let tiny = MemoryCache(costLimit: 1 << 30, countLimit: 3)
        #expect(tiny.shardCount == 2)
        for i in 0..<10 { tiny.insert(memoryEntry(key(i), size: 10), for: key(i)) }
        #expect(tiny.count <= 3)
        #expect(problems(tiny).isEmpty)
    }

    @Test func anEntryCostingMoreThanAShardIsRefusedAndDropsTheOldValue() {
        let cache = MemoryCache(costLimit: 16 * 2_000)  // 2 000 bytes per shard
        #expect(cache.insert(memoryEntry(key(1), size: 1_000), for: key(1)))
        #expect(!cache.insert(memoryEntry(key(1), size: 5_000), for: key(1)))
        #expect(cache.entry(for: key(1)) == nil)
        #expect(cache.statistics.refusedInserts == 1)
        #expect(cache.statistics.replacements == 1)
        #expect(cache.count == 0)
    }

    @Test func removeAllURLDropsTheOriginalAndEveryVariantOnly() {
        let cache = MemoryCache()
        let keys = [key(1), key(1, variant: "w64"), key(1, variant: "w256"), key(2), key(2, variant: "w64")]
        for (i, k) in keys.enumerated() { cache.insert(memoryEntry(k, seed: i), for: k) }
        #expect(cache.removeAll(url: key(1).url) == 3)
        #expect(cache.removeAll(url: key(1).url) == 0)
        for k in keys.prefix(3) { #expect(cache.entry(for: k) == nil) }
        #expect(cache.data(for: key(2)) == memoryEntry(key(2), seed: 3).data)
        #expect(cache.data(for: key(2, variant: "w64")) == memoryEntry(key(2, variant: "w64"), seed: 4).data)
        #expect(cache.statistics.invalidations == 3)
        #expect(problems(cache).isEmpty)
    }

    @Test func removeAllAndTrim() {
        let cache = MemoryCache()
        for i in 0..<500 { cache.insert(memoryEntry(key(i), seed: i), for: key(i)) }
        let perItem = 1_000 + MemoryCache.itemOverhead
        #expect(cache.totalCost == 500 * perItem)
        cache.trim(toCost: 100 * perItem)
        #expect(cache.totalCost <= 100 * perItem)
        #expect(cache.statistics.evictions == 500 - cache.count)
        #expect(problems(cache).isEmpty)
        cache.removeAll()
        #expect(cache.count == 0 && cache.totalCost == 0)
        #expect(cache.entry(for: key(1)) == nil)
        #expect(cache.statistics.invalidations + cache.statistics.evictions == 500)
        // Usable afterwards.
        cache.insert(memoryEntry(key(1)), for: key(1))
        #expect(cache.entry(for: key(1)) != nil)
        cache.trim(toCost: 0)
        #expect(cache.count == 0)
        #expect(problems(cache).isEmpty)
    }

    @Test func anExpiredEntryIsAMissAndIsDropped() {
        let clock = ManualClock()
        let cache = singleShardCache(clock: clock)
        cache.insert(memoryEntry(key(1), expiresAt: clock.now + 60), for: key(1))
        cache.insert(memoryEntry(key(2)), for: key(2))
        #expect(cache.entry(for: key(1)) != nil)
        clock.advance(by: 59)
        #expect(cache.entry(for: key(1)) != nil)
        clock.advance(by: 1)
        #expect(cache.entry(for: key(1)) == nil)
        #expect(cache.entry(for: key(2)) != nil)  // no expiry: never
        let statistics = cache.statistics
        #expect(statistics.expirations == 1)
        #expect(statistics.misses == 1)
        #expect(statistics.count == 1)
        // An entry already expired is not stored.
        #expect(!cache.insert(memoryEntry(key(3), expiresAt: clock.now - 1), for: key(3)))
        #expect(cache.entry(for: key(3)) == nil)
        #expect(problems(cache).isEmpty)
    }

    // MARK: Insertion tokens

    @Test func aTokenIsRefusedAfterItsKeyIsInvalidated() {
        let cache = MemoryCache()
        let token = cache.insertionToken(for: key(1))
        cache.apply(KeyChange(key: key(1), kind: .stored))
        #expect(!cache.insert(memoryEntry(key(1)), for: key(1), ifUnchangedSince: token))
        #expect(cache.entry(for: key(1)) == nil)
        #expect(cache.statistics.refusedInserts == 1)
        // A token taken after the change is accepted.
        let later = cache.insertionToken(for: key(1))
        #expect(cache.insert(memoryEntry(key(1)), for: key(1), ifUnchangedSince: later))
        // A relocation changes nothing.
        let third = cache.insertionToken(for: key(1))
        cache.apply(KeyChange(key: key(1), kind: .relocated))
        #expect(cache.entry(for: key(1)) != nil)
        #expect(cache.insert(memoryEntry(key(1), seed: 3), for: key(1), ifUnchangedSince: third))
        // Removals refuse too.
        for remove in [{ _ = cache.remove(key(1)) }, { _ = cache.removeAll(url: key(1).url) }, { cache.removeAll() }] {
            let token = cache.insertionToken(for: key(1))
            remove()
            #expect(!cache.insert(memoryEntry(key(1)), for: key(1), ifUnchangedSince: token))
        }
    }

    @Test func aTokenSurvivesChangesOfOtherKeysWhileTheLogReachesBack() {
        let cache = singleShardCache()
        let token = cache.insertionToken(for: key(1))
        for i in 2..<(2 + InvalidationLog.capacity) { cache.apply(KeyChange(key: key(i), kind: .removed)) }
        #expect(cache.insert(memoryEntry(key(1)), for: key(1), ifUnchangedSince: token))
        // One more than the log holds: it cannot tell any more, so it refuses.
        let old = cache.insertionToken(for: key(1))
        for i in 2..<(3 + InvalidationLog.capacity) { cache.apply(KeyChange(key: key(i), kind: .removed)) }
        #expect(!cache.insert(memoryEntry(key(1)), for: key(1), ifUnchangedSince: old))
        // A token is its key's only.
        let other = cache.insertionToken(for: key(2))
        #expect(!cache.insert(memoryEntry(key(1)), for: key(1), ifUnchangedSince: other))
    }

    @Test func aWriterInsertIsAcceptedOnlyAfterItsOwnWriteAlone() {
        let cache = MemoryCache()
        let stored = KeyChange(key: key(1), kind: .stored)
        // A alone: its own change, accepted.
        let a = cache.insertionToken(for: key(1))
        cache.apply(stored)
        #expect(cache.insert(memoryEntry(key(1), seed: 1), for: key(1), afterWriteSince: a))
        // A and B both put, A inserts last: two changes since A's token, refused; B too.
        let tokenA = cache.insertionToken(for: key(1))
        let tokenB = cache.insertionToken(for: key(1))
        cache.apply(stored)  // A's put
        cache.apply(stored)  // B's put
        #expect(!cache.insert(memoryEntry(key(1), seed: 2), for: key(1), afterWriteSince: tokenB))
        #expect(!cache.insert(memoryEntry(key(1), seed: 1), for: key(1), afterWriteSince: tokenA))
        #expect(cache.entry(for: key(1)) == nil)
        // B took its token after A's put: B's insert is accepted, A's refused.
        let tokenA2 = cache.insertionToken(for: key(1))
        cache.apply(stored)  // A's put
        let tokenB2 = cache.insertionToken(for: key(1))
        cache.apply(stored)  // B's put
        #expect(cache.insert(memoryEntry(key(1), seed: 2), for: key(1), afterWriteSince: tokenB2))
        #expect(!cache.insert(memoryEntry(key(1), seed: 1), for: key(1), afterWriteSince: tokenA2))
        #expect(cache.data(for: key(1)) == memoryEntry(key(1), seed: 2).data)
    }
}

// MARK: Scan resistance

@Suite struct MemoryCacheScanTests {
    /// A hot set is hit several times; then a one-time scan reads 10 × the capacity of cold keys,
    /// each inserted on its miss as a cache would. S3-FIFO keeps the whole hot set; an LRU of the
    /// same capacity loses all of it.
    @Test func aOneTimeScanDoesNotFlushTheHotSet() {
        let capacity = 100
        let hot = (0..<50).map { key($0) }
        let cold = (1_000..<(1_000 + 10 * capacity)).map { key($0) }
        let cache = singleShardCache(countLimit: capacity)
        var lru = TestLRU(capacity: capacity)
        for _ in 0..<3 {
            for k in hot {
                if cache.entry(for: k) == nil { cache.insert(memoryEntry(k, size: 100), for: k) }
                _ = lru.access(k)
            }
        }
        for k in cold {
            if cache.entry(for: k) == nil { cache.insert(memoryEntry(k, size: 100), for: k) }
            _ = lru.access(k)
        }
        let survivors = hot.filter { cache.entry(for: $0) != nil }.count
        let lruSurvivors = hot.filter { lru.contains($0) }.count
        #expect(survivors == hot.count)
        #expect(lruSurvivors == 0)
        #expect(problems(cache).isEmpty)
    }

    /// The same with the default sharding and interleaving: a Zipf-like hot set keeps being hit
    /// while the scan runs, and its hit ratio after the scan is what it was before.
    @Test func aScanInterleavedWithHotTrafficKeepsTheHotSetSharded() {
        let capacity = 1_600
        let cache = MemoryCache(costLimit: 1 << 30, countLimit: capacity)
        var lru = TestLRU(capacity: capacity)
        let hot = (0..<800).map { key($0) }
        var generator = SeededGenerator(seed: 7)
        func touch(_ k: CacheKey) {
            if cache.entry(for: k) == nil { cache.insert(memoryEntry(k, size: 64), for: k) }
            _ = lru.access(k)
        }
        for _ in 0..<4 { for k in hot { touch(k) } }
        // 20 000 cold keys, once each, with one hot access after every fourth.
        for i in 0..<20_000 {
            touch(key(100_000 + i))
            if i % 4 == 0 { touch(hot.randomElement(using: &generator)!) }
        }
        let survivors = hot.filter { cache.entry(for: $0) != nil }.count
        let lruSurvivors = hot.filter { lru.contains($0) }.count
        #expect(survivors >= hot.count * 95 / 100, "S3-FIFO kept \(survivors) of \(hot.count)")
        #expect(lruSurvivors < hot.count / 2, "LRU kept \(lruSurvivors) of \(hot.count)")
        #expect(problems(cache).isEmpty)
    }
}

// MARK: Bounds

@Suite struct MemoryCacheBoundsTests {
    /// Evictions followed soon by a return (a ghost hit removes the hash) leave stale places in
    /// the ghost queue; they are bounded by twice its limit, not by the number of evictions.
    @Test func theGhostQueueStaysBoundedUnderEvictionsAndQuickReturns() {
        var ghost = GhostFIFO()
        ghost.append(-1, limit: 16)
        // Counted, then checked once: an #expect per iteration cost this test over a minute
        // under ThreadSanitizer.
        var notReturned = 0
        for i in 0..<100_000 {
            ghost.append(i, limit: 16)
            if !ghost.remove(i) { notReturned += 1 }
        }
        #expect(notReturned == 0)
        #expect(ghost.count == 1)  // the first hash is still remembered
        #expect(ghost.places <= 32)
        // Members beyond the limit leave oldest first.
        for i in 0..<100 { ghost.append(1_000_000 + i, limit: 16) }
        #expect(ghost.count == 16)
        let (oldest, kept) = (ghost.remove(1_000_000 + 83), ghost.remove(1_000_000 + 84))
        #expect(!oldest && kept)
    }

    /// Keys are spread over the shards and over each shard's table by different bits of their
    /// hash, so a hit probes about one node: were they the same bits, every key of a shard
    /// would start from 1/16 of its table and runs would pile up.
    @Test func probesStayShort() {
        let cache = MemoryCache(costLimit: 1 << 30, countLimit: 20_000)
        for i in 0..<10_000 {
            let k = key(i, variant: i % 5 == 0 ? "w64" : "")
            cache.insert(memoryEntry(k, size: 10), for: k)
        }
        var worst = 0.0
        cache.forEachShard { worst = max(worst, $0.meanDisplacement) }
        #expect(worst < 2, "mean displacement \(worst)")
        #expect(problems(cache).isEmpty)
    }

    /// A cyclic working set a little larger than the cache (every read a miss, then an insert)
    /// keeps the whole shard — table, ghost, log — at the size of the cache, however long it runs.
    @Test func aCyclicWorkloadDoesNotGrowTheShard() {
        let cache = singleShardCache(countLimit: 20)
        let keys = (0..<22).map { key($0) }
        var places = 0
        for round in 0..<2_000 {
            for k in keys where cache.entry(for: k) == nil { cache.insert(memoryEntry(k, size: 10), for: k) }
            if round == 100 { cache.forEachShard { places = $0.ghostPlaces } }
        }
        var after = 0
        cache.forEachShard { after = $0.ghostPlaces }
        #expect(cache.count <= 20)
        #expect(after <= 2 * 20 && places <= 2 * 20, "ghost places: \(places), then \(after)")
        #expect(problems(cache).isEmpty)
    }
}

// MARK: Concurrency

@Suite struct MemoryCacheConcurrencyTests {
    /// Threads hit, insert (plain and guarded), remove and trim the same keys at once; every
    /// hit returns its own key's bytes, and afterwards every invariant and counter balances.
    @Test func manyThreadsKeepEveryInvariant() async throws {
        let cache = MemoryCache(costLimit: 300 * 1_300, countLimit: 250)
        let threads = 8
        let operations = runningUnderThreadSanitizer ? 2_000 : 20_000
        let gets = Locked(0)
        let wrong = Locked(0)
        // Off the cooperative pool: under ThreadSanitizer this takes minutes on two cores, and
        // a pool thread held that long stalls the other suites' tests.
        try await offPool {
            DispatchQueue.concurrentPerform(iterations: threads) { thread in
                var generator = SeededGenerator(seed: UInt64(thread))
                var myGets = 0
                for _ in 0..<operations {
                    let i = Int.random(in: 0..<400, using: &generator)
                    let k = i % 3 == 0 ? key(i / 3, variant: "w64") : key(i)
                    switch Int.random(in: 0..<100, using: &generator) {
                    case 0..<70:
                        myGets += 1
                        if let entry = cache.entry(for: k), entry.info.key != k || entry.data.count != 1_000 + i {
                            wrong.withLock { $0 += 1 }
                        }
                    case 70..<85: cache.insert(memoryEntry(k, size: 1_000 + i, seed: i), for: k)
                    case 85..<93:
                        let token = cache.insertionToken(for: k)
                        cache.insert(memoryEntry(k, size: 1_000 + i, seed: i), for: k, ifUnchangedSince: token)
                    case 93..<97: cache.remove(k)
                    case 97..<99: cache.apply(KeyChange(key: k, kind: .stored))
                    default:
                        if Int.random(in: 0..<20, using: &generator) == 0 {
                            cache.trim(toCost: 100 * 1_300)
                        } else {
                            cache.removeAll(url: k.url)
                        }
                    }
                }
                gets.withLock { $0 += myGets }
            }
        }
        let statistics = cache.statistics
        #expect(wrong.withLock { $0 } == 0)
        #expect(problems(cache).isEmpty)
        #expect(statistics.hits + statistics.misses == gets.withLock { $0 })
        #expect(
            statistics.count
                == statistics.inserts - statistics.replacements - statistics.evictions - statistics.invalidations
                - statistics.expirations)
        #expect(statistics.count <= 250 && statistics.cost <= 300 * 1_300)
    }

    /// Writers put new versions into a real store while readers read through the memory tier
    /// (filling it with guarded inserts); once all stop, every key the memory holds has the
    /// store's bytes — never an older version.
    @Test func memoryNeverKeepsAnOlderVersionThanTheStore() async throws {
        try await withTemporaryDirectory { dir in
            let cache = MemoryCache()
            let store = try openStore(dir) { configuration in
                configuration.compactionInterval = nil
                cache.attach(to: &configuration)
            }
            defer { try? store.close() }
            let keys = 24
            @Sendable func version(_ k: Int, _ v: Int) -> Data { Data(testBytes(seed: UInt64(k * 10_000 + v), count: 200 + k)) }
            for k in 0..<keys { try store.put(version(k, 0), for: key(k)) }
            let failures = Locked<[String]>([])
            try await offPool {
                DispatchQueue.concurrentPerform(iterations: 6) { thread in
                    var generator = SeededGenerator(seed: UInt64(thread) + 100)
                    do {
                        for step in 0..<1_500 {
                            let k = Int.random(in: 0..<keys, using: &generator)
                            if thread < 2 {
                                // A writer: put, then insert what it wrote with a token taken before.
                                let token = cache.insertionToken(for: key(k))
                                try store.put(version(k, thread * 100_000 + step + 1), for: key(k))
                                if Bool.random(using: &generator), let entry = try store.entry(for: key(k)) {
                                    cache.insert(entry, for: key(k), afterWriteSince: token)
                                }
                            } else if cache.entry(for: key(k)) == nil {
                                // A reader that missed: fill from the store.
                                let token = cache.insertionToken(for: key(k))
                                if let entry = try store.entry(for: key(k)) {
                                    cache.insert(entry, for: key(k), ifUnchangedSince: token)
                                }
                            }
                        }
                    } catch {
                        failures.withLock { $0.append("\(error)") }
                    }
                }
            }
            #expect(failures.withLock { $0 }.isEmpty)
            var held = 0
            for k in 0..<keys {
                guard let memory = cache.data(for: key(k)) else { continue }
                held += 1
                #expect(memory == (try store.data(for: key(k))), "key \(k): memory holds another version")
            }
            #expect(held > 0)
            #expect(problems(cache).isEmpty)
        }
    }
}

// MARK: With a real store

@Suite struct MemoryCacheStoreTests {
    /// Opens a store in `dir` with `cache` attached.
    func open(_ dir: String, _ cache: MemoryCache, _ configure: (inout Store.Configuration) -> Void = { _ in }) throws -> Store {
        try openStore(dir, segmentSize: 16 << 10) { configuration in
            configuration.compactionInterval = nil
            configure(&configuration)
            cache.attach(to: &configuration)
        }
    }

    /// Reads `key` through the memory tier, filling it from the store on a miss.
    func read(_ key: CacheKey, _ cache: MemoryCache, _ store: Store) throws -> Data? {
        if let entry = cache.entry(for: key) { return entry.data }
        let token = cache.insertionToken(for: key)
        guard let entry = try store.entry(for: key) else { return nil }
        cache.insert(entry, for: key, ifUnchangedSince: token)
        return entry.data
    }

    @Test func putsRemovalsAndMetadataUpdatesDropTheKey() async throws {
        try await withTemporaryDirectory { dir in
            let cache = MemoryCache()
            let store = try open(dir, cache)
            defer { try? store.close() }
            let thumb = key(1, variant: "w64")
            try store.put(value(1), for: key(1))
            try store.put(value(2), for: thumb)
            #expect(try read(key(1), cache, store) == value(1))
            #expect(try read(thumb, cache, store) == value(2))
            #expect(cache.count == 2)

            try store.put(value(3), for: key(1))
            #expect(cache.entry(for: key(1)) == nil)
            #expect(try read(key(1), cache, store) == value(3))
            #expect(cache.data(for: key(1)) == value(3))

            #expect(try store.updateMetadata(EntryMetadata(etag: "\"new\""), for: key(1)))
            #expect(cache.entry(for: key(1)) == nil)
            #expect(try read(key(1), cache, store) == value(3))
            #expect(cache.entry(for: key(1))?.etag == "\"new\"")

            try store.remove(key(1))
            #expect(cache.entry(for: key(1)) == nil)
            #expect(try read(key(1), cache, store) == nil)

            try store.put(value(4), for: key(1))
            #expect(try read(key(1), cache, store) == value(4))
            #expect(try store.removeAll(url: key(1).url) == 2)
            #expect(cache.entry(for: key(1)) == nil)
            #expect(cache.entry(for: thumb) == nil)
            #expect(cache.count == 0)
        }
    }

    @Test func compactionExpiryAndEvictionDropKeysAndMovesKeepThem() async throws {
        // Expiry by the compactor, timed by the store's clock (the memory's own clock stands
        // still, so only the store's report can drop the entry).
        try await withTemporaryDirectory { dir in
            let clock = TestClock(start: 1_000_000)
            var memoryConfiguration = MemoryCache.Configuration()
            memoryConfiguration.clock = { Date(timeIntervalSince1970: 1_000) }
            let cache = MemoryCache(configuration: memoryConfiguration)
            let store = try open(dir, cache) { $0.clock = clock.now }
            defer { try? store.close() }
            try store.put(value(1), for: key(1), metadata: EntryMetadata(expiresAt: Date(timeIntervalSince1970: 1_010)))
            try store.put(value(2), for: key(2))
            try store.put(value(3), for: key(3))
            for k in 1...3 { _ = try read(key(k), cache, store) }
            #expect(cache.count == 3)
            clock.advance(by: 20_000)
            #expect(try store.compact().expiredEntries == 1)
            #expect(cache.entry(for: key(1)) == nil)
            // Entries older than a TTL.
            clock.advance(by: 3_600_000)
            try store.put(value(3), for: key(3))  // key 3 is new again
            _ = try read(key(3), cache, store)
            #expect(try store.compact(timeToLive: .seconds(600)).expiredEntries == 1)
            #expect(cache.entry(for: key(2)) == nil)
            #expect(cache.data(for: key(3)) == value(3))
        }
        // Eviction by capacity.
        try await withTemporaryDirectory { dir in
            let cache = MemoryCache()
            let store = try open(dir, cache) { $0.capacity = 60_000 }
            defer { try? store.close() }
            let values = (10..<40).map { Data(testBytes(seed: UInt64($0), count: 4_000)) }
            for (i, v) in values.enumerated() { try store.put(v, for: key(10 + i)) }
            // The committer starts a compaction of its own once usage passes the high watermark
            // (checked each second), so on a slow machine some keys may be gone before they are
            // read; either way the memory tier must hold exactly what the store still has.
            for i in 10..<40 { _ = try read(key(i), cache, store) }
            _ = try store.compact()
            var present = 0
            for i in 10..<40 {
                let stored = try store.data(for: key(i))
                if stored != nil { present += 1 }
                #expect(cache.data(for: key(i)) == stored, "key \(i)")
            }
            #expect(present < 30, "120 KB in a 60 KB store: something was evicted")
            #expect(cache.count == present)
        }
        // Segment rewriting moves records: same bytes, so memory keeps them.
        try await withTemporaryDirectory { dir in
            let cache = MemoryCache()
            let store = try open(dir, cache)
            defer { try? store.close() }
            for i in 0..<12 { try store.put(Data(testBytes(seed: UInt64(i), count: 3_000)), for: key(i)) }
            for i in 0..<12 { _ = try read(key(i), cache, store) }
            for i in stride(from: 0, to: 12, by: 2) { try store.remove(key(i)) }
            try store.flush()
            #expect(cache.count == 6)
            #expect(try store.compact().segmentsRewritten > 0)
            #expect(cache.count == 6)
            for i in stride(from: 1, to: 12, by: 2) {
                #expect(cache.data(for: key(i)) == Data(testBytes(seed: UInt64(i), count: 3_000)))
            }
        }
    }

    /// The race of a fill, step by step: a reader takes its token and reads the old bytes, a
    /// put replaces them, then the reader inserts — refused, so memory never serves the old
    /// bytes. Without the token (a plain insert) the old bytes would be served.
    @Test func theInsertionTokenClosesTheFillRace() async throws {
        try await withTemporaryDirectory { dir in
            let cache = MemoryCache()
            let store = try open(dir, cache)
            defer { try? store.close() }
            try store.put(value(1), for: key(1))

            let token = cache.insertionToken(for: key(1))
            let old = try #require(try store.entry(for: key(1)))
            try store.put(value(2), for: key(1))  // meanwhile
            #expect(!cache.insert(old, for: key(1), ifUnchangedSince: token))
            #expect(cache.entry(for: key(1)) == nil)
            #expect(try read(key(1), cache, store) == value(2))
            #expect(cache.data(for: key(1)) == value(2))

            // The same interleaving with a removal.
            let token2 = cache.insertionToken(for: key(1))
            let read2 = try #require(try store.entry(for: key(1)))
            try store.remove(key(1))
            #expect(!cache.insert(read2, for: key(1), ifUnchangedSince: token2))
            #expect(cache.entry(for: key(1)) == nil)

            // What the guard prevents: a plain insert of bytes read before a put is stale.
            try store.put(value(3), for: key(1))
            let stale = try #require(try store.entry(for: key(1)))
            try store.put(value(4), for: key(1))
            cache.insert(stale, for: key(1))
            #expect(cache.data(for: key(1)) == value(3))
            #expect(try store.data(for: key(1)) == value(4))
        }
    }

    @Test func attachChainsAnObserverAlreadySet() async throws {
        try await withTemporaryDirectory { dir in
            let cache = MemoryCache()
            let seen = Locked<[KeyChange]>([])
            let store = try openStore(dir) { configuration in
                configuration.compactionInterval = nil
                configuration.keyChanges = { change in seen.withLock { $0.append(change) } }
                cache.attach(to: &configuration)
            }
            defer { try? store.close() }
            try store.put(value(1), for: key(1))
            _ = try read(key(1), cache, store)
            try store.remove(key(1))
            #expect(seen.withLock { $0 } == [KeyChange(key: key(1), kind: .stored), KeyChange(key: key(1), kind: .removed)])
            #expect(cache.entry(for: key(1)) == nil)
        }
    }
}
