import Foundation
import Testing
import TroveCore
import TroveIndex
import TroveStoreTestSupport
import TroveTestSupport

#if canImport(Glibc)
    import Glibc
#endif

@_spi(Testing) @testable import TroveStore

/// An outside attack on partial eviction from the location map (commit adef54f): over its
/// limit, a commit cycle drops committed removals, then other slots in hash order — never a
/// queued write's — down to `LocationMap.evictionTarget(limit:)`. No get may see a stale,
/// removed or lost value; the map must be held to its bounds; every acknowledged write must
/// read back after a reopen.
@Suite(.serialized) struct EvictionAttackTests {
    // MARK: Helpers

    /// Runs each body on a thread of its own; returns when all are done.
    static func run(_ bodies: [@Sendable () -> Void]) async { await ReclaimerAttackTests.run(bodies) }

    static func bytes(_ tag: Int) -> Data {
        var data = Data("v\(tag)-".utf8)
        data.append(contentsOf: (0..<(tag % 97 + 5)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ tag) })
        return data
    }

    static func putVersion(_ v: Int) -> Int { v % 5 == 3 ? v - 1 : v }
    static func payload(_ k: Int, _ v: Int) -> Data { bytes(k * 100_000 + v) }

    static func mapCount(_ store: Store) -> Int { store.shared.withLock { $0.map.count } }

    /// Every value in `model` reads back (and every absent key reads nil).
    static func check(
        _ store: Store, _ model: [Int: (data: Data, etag: String?)], keys: Range<Int>, _ context: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        for k in keys {
            let entry = try store.entry(for: key(k))
            switch (entry, model[k]) {
            case (nil, nil): break
            case (let e?, let m?):
                #expect(e.data == m.data, "\(context): key \(k) bytes", sourceLocation: sourceLocation)
                #expect(e.etag == m.etag, "\(context): key \(k) etag", sourceLocation: sourceLocation)
            case (nil, _?): Issue.record("\(context): key \(k) lost", sourceLocation: sourceLocation)
            case (_?, nil): Issue.record("\(context): removed key \(k) served", sourceLocation: sourceLocation)
            }
        }
    }

    // MARK: A model, single-threaded, at tiny limits

    /// Random puts, overwrites, removals, metadata updates, reads, flushes, compactions and a
    /// repair on a few keys, at limits where `limit / 16` is 0 or 1: every get and every
    /// operation's result matches a dictionary; after each flush the map is at most its limit
    /// (at most the target when it was over); after a reopen the store equals the model.
    @Test(arguments: [0, 1, 2, 15, 16, 17, 33])
    func tinyLimitsAgainstAModel(limit: Int) async throws {
        try await withTemporaryDirectory { dir in
            var model: [Int: (data: Data, etag: String?)] = [:]
            let keys = 0..<24
            var rng = SeededGenerator(seed: UInt64(limit) &+ 77)
            do {
                let store = try openStore(dir) {
                    $0.locationCacheLimit = limit
                    $0.batchInterval = .seconds(3_600)
                    $0.accessTimeFlushInterval = .seconds(3_600)
                    $0.compactionInterval = nil
                }
                defer { try? store.close() }
                let target = LocationMap.evictionTarget(limit: limit)
                for step in 0..<900 {
                    let k = keys.lowerBound + rng.below(keys.count)
                    switch rng.below(20) {
                    case 0..<6:
                        let data = Self.bytes(step)
                        let etag = rng.below(2) == 0 ? "p\(step)" : nil
                        try store.put(data, for: key(k), metadata: EntryMetadata(etag: etag))
                        model[k] = (data, etag)
                    case 6..<9:
                        let had = try store.remove(key(k))
                        #expect(had == (model[k] != nil), "step \(step): remove \(k)")
                        model[k] = nil
                    case 9..<11:
                        let updated = try store.updateMetadata(EntryMetadata(etag: "u\(step)"), for: key(k))
                        #expect(updated == (model[k] != nil), "step \(step): update \(k)")
                        if let m = model[k] { model[k] = (m.data, "u\(step)") }
                    case 11..<17:
                        let entry = try store.entry(for: key(k))
                        #expect(entry?.data == model[k]?.data, "step \(step): get \(k)")
                        #expect(entry?.etag == model[k]?.etag, "step \(step): get \(k) etag")
                    case 17, 18:
                        let before = Self.mapCount(store)
                        try store.flush()
                        let after = Self.mapCount(store)
                        #expect(after <= limit, "step \(step): \(after) slots over limit \(limit)")
                        if before > limit {
                            #expect(after <= target, "step \(step): \(before) → \(after), target \(target)")
                        }
                    default:
                        if step % 300 == 19 {
                            _ = try store.fsck(repair: true)
                        } else {
                            try store.compact()
                        }
                        try Self.check(store, model, keys: keys, "after maintenance at step \(step)")
                    }
                }
                try Self.check(store, model, keys: keys, "before close")
                try store.close()
            }
            let reopened = try openStore(dir)
            defer { try? reopened.close() }
            try Self.check(reopened, model, keys: keys, "after reopen")
        }
    }

    // MARK: Reads far past the limit between two cycles

    /// Reads between two cycles fill the map far past its limit; the next cycle brings it to
    /// exactly its target, and every key (present, removed, overwritten) reads right before,
    /// after, and after a reopen.
    @Test(arguments: [0, 1, 2, 15, 16, 17, 100])
    func readsFarPastTheLimit(limit: Int) async throws {
        try await withTemporaryDirectory { dir in
            let n = 1_500
            var model: [Int: (data: Data, etag: String?)] = [:]
            do {
                let store = try openStore(dir) {
                    $0.locationCacheLimit = limit
                    $0.batchInterval = .seconds(3_600)
                    $0.accessTimeFlushInterval = .seconds(3_600)
                }
                defer { try? store.close() }
                for i in 0..<n {
                    try store.put(Self.bytes(i), for: key(i))
                    model[i] = (Self.bytes(i), nil)
                }
                try store.flush()
                #expect(Self.mapCount(store) <= limit)
                try Self.check(store, model, keys: 0..<n, "first reads")
                // (A wake-up the puts left may run one background cycle during the reads.)
                let filled = Self.mapCount(store)
                #expect(filled > limit, "the reads filled the map past its limit")
                try store.flush()
                #expect(Self.mapCount(store) == LocationMap.evictionTarget(limit: limit), "from \(filled)")
                try Self.check(store, model, keys: 0..<n, "after the drop")
                // Overwrites and removals queued with the map far over its limit.
                for i in stride(from: 0, to: n, by: 7) {
                    try store.remove(key(i))
                    model[i] = nil
                }
                for i in stride(from: 0, to: n, by: 14) {
                    try store.put(Self.bytes(i + 10_000), for: key(i))
                    model[i] = (Self.bytes(i + 10_000), nil)
                }
                try Self.check(store, model, keys: 0..<n, "queued overwrites")
                try store.flush()
                #expect(Self.mapCount(store) <= LocationMap.evictionTarget(limit: limit))
                try Self.check(store, model, keys: 0..<n, "after the next drop")
                try store.close()
            }
            let reopened = try openStore(dir)
            defer { try? reopened.close() }
            try Self.check(reopened, model, keys: 0..<n, "after reopen")
        }
    }

    // MARK: Writes raced into a cycle's window while the map is far over its limit

    /// Inside a cycle's sync (after its snapshot, before it releases the queue) a removal of a
    /// key whose put the cycle commits, a re-put of a key whose removal it commits, put+remove
    /// and remove+put pairs, and reads that push the map far over its limit: the cycle's
    /// eviction must keep every one of those slots.
    @Test(arguments: [0, 1, 16, 17])
    func writesInTheWindowSurviveAnEviction(limit: Int) async throws {
        try await withTemporaryDirectory { dir in
            let window = LocationMapAttackTests.SyncWindow()
            let n = 600
            let store = try openStore(dir) {
                $0.locationCacheLimit = limit
                $0.batchInterval = .seconds(3_600)
                $0.accessTimeFlushInterval = .seconds(3_600)
                // Only the flushes below run cycles: the 600 puts' wake-ups could otherwise run
                // a late background cycle that commits the window's snapshot before it is armed.
                $0.batchSize = 100_000
                $0.faultInjector = window.faults
            }
            defer { try? store.close() }
            for i in 0..<n { try store.put(Self.bytes(i), for: key(i)) }
            try store.flush()
            // In the next snapshot: puts of 0..<50, removals of 50..<100.
            for i in 0..<50 { try store.put(Self.bytes(i + 1_000), for: key(i)) }
            for i in 50..<100 { try store.remove(key(i)) }
            let failures = Locked<[String]>([])
            window.arm {
                do {
                    for i in 0..<25 { try store.remove(key(i)) }  // its put is in the snapshot
                    for i in 50..<75 { try store.put(Self.bytes(i + 2_000), for: key(i)) }  // its removal is
                    for i in 100..<110 {
                        try store.put(Self.bytes(i + 3_000), for: key(i))
                        try store.remove(key(i))
                    }
                    for i in 110..<120 {
                        try store.remove(key(i))
                        try store.put(Self.bytes(i + 4_000), for: key(i))
                    }
                    // Reads push the map far over its limit before the cycle's eviction.
                    for i in 200..<n { _ = try store.data(for: key(i)) }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }
            try store.flush()
            #expect(!window.disarm(), "the window never opened")
            #expect(failures.withLock { $0 }.isEmpty)
            var expected: [Data?] = (0..<n).map { Self.bytes($0) }
            for i in 0..<25 { expected[i] = nil }
            for i in 25..<50 { expected[i] = Self.bytes(i + 1_000) }
            for i in 50..<75 { expected[i] = Self.bytes(i + 2_000) }
            for i in 75..<100 { expected[i] = nil }
            for i in 100..<110 { expected[i] = nil }
            for i in 110..<120 { expected[i] = Self.bytes(i + 4_000) }
            func verify(_ s: Store, _ context: String) throws {
                for i in 0..<n { #expect(try s.data(for: key(i)) == expected[i], "\(context): key \(i)") }
            }
            try verify(store, "after the raced cycle")
            try store.flush()
            try verify(store, "after the next cycle")
            try store.flush()
            #expect(Self.mapCount(store) <= max(limit, 0))
            try store.close()
            let reopened = try openStore(dir)
            defer { try? reopened.close() }
            try verify(reopened, "after reopen")
        }
    }

    // MARK: Racing writers, readers, flushes and compactions

    /// Per key one writer writes versions 1, 2, 3, … (v % 5: 0 remove, 1 and 2 and 4 put, 3
    /// update the metadata); the version is in the etag and the put's version in the bytes.
    /// Readers check each get against the window [last completed, last started] of its key's
    /// writer — linearizability for one writer per key — while a flusher, a compactor and a
    /// reader of filler keys keep the map going over a tiny limit and being evicted.
    @Test(arguments: [0, 2, 16, 17])
    func racingOperationsAreLinearizable(limit: Int) async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir, segmentSize: 256 << 10) {
                $0.locationCacheLimit = limit
                $0.batchInterval = .seconds(3_600)
                $0.accessTimeFlushInterval = .seconds(3_600)
                $0.compactionInterval = nil
                $0.rewriteLiveRatio = 0.9
            }
            let writers = 2
            let keysPerWriter = 12
            let versions = 220
            let keyCount = writers * keysPerWriter
            let fillers = 1_000..<1_400
            for i in fillers { try store.put(Self.bytes(i), for: key(i)) }
            try store.flush()
            let started = Locked([Int](repeating: 0, count: keyCount))
            let completed = Locked([Int](repeating: 0, count: keyCount))
            let failures = Locked<[String]>([])
            let stop = Locked(false)
            let note: @Sendable (String) -> Void = { m in failures.withLock { if $0.count < 30 { $0.append(m) } } }

            var bodies: [@Sendable () -> Void] = []
            for w in 0..<writers {
                bodies.append {
                    for v in 1...versions {
                        for j in 0..<keysPerWriter {
                            let k = w * keysPerWriter + j
                            started.withLock { $0[k] = v }
                            do {
                                switch v % 5 {
                                case 0:
                                    if try !store.remove(key(k)) { note("remove \(k)#\(v) found nothing") }
                                case 3:
                                    if try !store.updateMetadata(EntryMetadata(etag: "\(v)"), for: key(k)) {
                                        note("update \(k)#\(v) found nothing")
                                    }
                                default:
                                    try store.put(Self.payload(k, v), for: key(k), metadata: EntryMetadata(etag: "\(v)"))
                                }
                            } catch {
                                note("write \(k)#\(v): \(error)")
                            }
                            completed.withLock { $0[k] = v }
                        }
                    }
                }
            }
            for r in 0..<2 {
                bodies.append {
                    var rng = SeededGenerator(seed: UInt64(r + 1))
                    while !stop.withLock({ $0 }) {
                        let k = rng.below(keyCount)
                        let lo = completed.withLock { $0[k] }
                        let entry: Entry?
                        do { entry = try store.entry(for: key(k)) } catch {
                            note("get \(k): \(error)")
                            continue
                        }
                        let hi = started.withLock { $0[k] }
                        if let entry {
                            guard let v = entry.etag.flatMap({ Int($0) }) else {
                                note("get \(k): etag \(entry.etag ?? "nil")")
                                continue
                            }
                            if v < lo || v > hi || v % 5 == 0 {
                                note("get \(k): version \(v) outside [\(lo), \(hi)]")
                            } else if entry.data != Self.payload(k, Self.putVersion(v)) {
                                note("get \(k): bytes not those of version \(Self.putVersion(v)) (etag \(v))")
                            }
                        } else if lo != 0 && !(lo...hi).contains(where: { $0 % 5 == 0 }) {
                            note("get \(k): nil, but no removal in [\(lo), \(hi)]")
                        }
                    }
                }
            }
            bodies.append {
                var rng = SeededGenerator(seed: 99)
                while !stop.withLock({ $0 }) {
                    let i = fillers.lowerBound + rng.below(fillers.count)
                    do {
                        if try store.data(for: key(i)) != Self.bytes(i) { note("filler \(i) wrong") }
                    } catch { note("filler \(i): \(error)") }
                }
            }
            bodies.append {
                while !stop.withLock({ $0 }) {
                    do { try store.flush() } catch { note("flush: \(error)") }
                    usleep(1_000)
                }
            }
            bodies.append {
                while !stop.withLock({ $0 }) {
                    do { try store.compact() } catch { note("compact: \(error)") }
                    usleep(20_000)
                }
            }
            let writersDone = Locked(0)
            bodies = bodies.enumerated().map { index, body in
                if index < writers {
                    return {
                        body()
                        let done = writersDone.withLock { count -> Int in
                            count += 1
                            return count
                        }
                        if done == writers { stop.withLock { $0 = true } }
                    }
                }
                return body
            }
            await Self.run(bodies)
            #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
            try store.flush()
            #expect(Self.mapCount(store) <= limit)
            func finalCheck(_ s: Store, _ context: String) throws {
                for k in 0..<keyCount {
                    let entry = try s.entry(for: key(k))
                    let v = versions
                    if v % 5 == 0 {
                        #expect(entry == nil, "\(context): key \(k)")
                    } else {
                        #expect(entry?.etag == "\(v)", "\(context): key \(k)")
                        #expect(entry?.data == Self.payload(k, Self.putVersion(v)), "\(context): key \(k)")
                    }
                }
                for i in fillers { #expect(try s.data(for: key(i)) == Self.bytes(i), "\(context): filler \(i)") }
            }
            try finalCheck(store, "after the race")
            try store.close()
            let reopened = try openStore(dir)
            defer { try? reopened.close() }
            try finalCheck(reopened, "after reopen")
        }
    }

    // MARK: Many overwrites of one key, the map over its limit every cycle

    /// One key overwritten thousands of times (and removed now and then) while other keys'
    /// reads keep the map over a limit of 1: every get of it returns its latest write.
    @Test func manyOverwritesOfOneKey() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.locationCacheLimit = 1
                $0.batchInterval = .seconds(3_600)
                $0.accessTimeFlushInterval = .seconds(3_600)
            }
            defer { try? store.close() }
            for i in 1..<40 { try store.put(Self.bytes(i), for: key(i)) }
            try store.flush()
            var last: Data? = nil
            for v in 0..<3_000 {
                if v % 11 == 0 {
                    try store.remove(key(0))
                    last = nil
                } else {
                    try store.put(Self.bytes(50_000 + v), for: key(0))
                    last = Self.bytes(50_000 + v)
                }
                if v % 3 == 0 { _ = try store.data(for: key(1 + v % 39)) }
                if v % 17 == 0 { try store.flush() }
                #expect(try store.data(for: key(0)) == last, "version \(v)")
            }
            try store.close()
            let reopened = try openStore(dir)
            defer { try? reopened.close() }
            #expect(try reopened.data(for: key(0)) == last)
        }
    }

    // MARK: Memory: what a drop leaves behind, and where it is freed

    /// Reads between two cycles filled the map to 100 000 slots; the cycle let go of all but
    /// ~94 of them. The table's buckets should not stay sized for the burst: the old code
    /// handed the whole table to the reclaimer and kept a new small one. Measured by the
    /// table's capacity (reflection: `slots` is private).
    @Test func aDropDoesNotKeepTheBurstsTable() async throws {
        try await withTemporaryDirectory { dir in
            let entry = try ReclaimerAttackTests.someEntry(dir)
            var map = LocationMap(observer: nil)
            let limit = 100
            let generation = map.generation
            for i in 0..<100_000 { map.fill(entry, for: key(i), readAt: generation) }
            let reclaimer = Reclaimer()
            reclaimer.release(map.committed(limit: limit, through: .max).dropped)
            reclaimer.stop()
            #expect(map.count == LocationMap.evictionTarget(limit: limit))
            let capacity = Self.tableCapacity(map)
            // 100 000 slots need a table of 131 072 buckets (40 bytes each): ~5 MB kept for 94.
            #expect(capacity <= 16 * limit, "the table keeps \(capacity) buckets for \(map.count) slots")
        }
    }

    /// The same through a store: reads between two cycles fill the map to 30 000 slots; after
    /// the drop, and after many later cycles, its table still has buckets for the burst.
    @Test func aReadBurstLeavesItsTableBehind() async throws {
        try await withTemporaryDirectory { dir in
            let limit = 100
            let n = 30_000
            let store = try openStore(dir) {
                $0.locationCacheLimit = limit
                $0.batchInterval = .seconds(3_600)
                $0.accessTimeFlushInterval = .seconds(3_600)
            }
            defer { try? store.close() }
            for i in 0..<n { try store.put(Data([UInt8(i & 0xFF)]), for: key(i)) }
            try store.flush()
            let smallTable = store.shared.withLock { Self.tableCapacity($0.map) }
            for i in 0..<n { _ = try store.data(for: key(i)) }
            try store.flush()
            for round in 0..<20 {
                for i in 0..<50 { try store.put(Data([UInt8(round)]), for: key(n + round * 50 + i)) }
                try store.flush()
            }
            let (count, capacity) = store.shared.withLock { ($0.map.count, Self.tableCapacity($0.map)) }
            #expect(count <= limit)
            #expect(
                capacity <= 16 * max(limit, smallTable),
                "\(capacity) buckets kept for \(count) slots (\(smallTable) before the read burst)")
        }
    }

    static func tableCapacity(_ map: LocationMap) -> Int {
        guard let table = Mirror(reflecting: map).descendant("slots") as? any HasCapacity else { return -1 }
        return table.capacity
    }
}

protocol HasCapacity { var capacity: Int { get } }
extension Dictionary: HasCapacity {}

extension SeededGenerator {
    /// A number in `0..<n` (modulo: a slight bias is harmless here).
    fileprivate mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
}
