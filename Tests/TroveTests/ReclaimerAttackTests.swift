import Foundation
import Testing
import TroveCore
import TroveIndex
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

/// An outside attack on the location map's boxed slots and on freeing its dropped table on
/// `trove-reclaim` (the `Reclaimer`, commit 7606330; helper-33's review, no finding).
@Suite(.serialized) struct ReclaimerAttackTests {
    // MARK: Helpers

    /// Runs each body on a thread of its own; returns when all are done.
    static func run(_ bodies: [@Sendable () -> Void]) async {
        let finished = DispatchGroup()
        for body in bodies {
            finished.enter()
            let thread = Thread {
                body()
                finished.leave()
            }
            thread.start()
        }
        await withCheckedContinuation { continuation in
            finished.notify(queue: .global()) { continuation.resume() }
        }
    }

    /// An entry read back from a real store (to fill maps with, for unit-level attacks).
    static func someEntry(_ dir: String) throws -> IndexedEntry {
        let store = try openStore(dir)
        defer { try? store.close() }
        try store.put(Data([1, 2, 3]), for: key(0))
        guard case .present(let entry)? = store.shared.withLock({ $0.map.slot(for: key(0)) }) else {
            Issue.record("no slot after a put")
            throw CancellationError()
        }
        return entry
    }

    // MARK: The reclaimer's lifecycle

    /// A table handed over after `stop()` is freed by the caller: nothing is counted as freed
    /// on the thread, and it does not hang.
    @Test func aReleaseAfterStopIsFreedByTheCaller() async throws {
        try await withTemporaryDirectory { dir in
            let entry = try Self.someEntry(dir)
            let reclaimer = Reclaimer()
            reclaimer.stop()
            var map = LocationMap(observer: nil)
            for i in 0..<(2 * Reclaimer.threshold) { map.stored(entry, for: key(i)) }
            let dropped = map.committed(limit: 0, through: .max).dropped
            #expect(dropped.count == 2 * Reclaimer.threshold)
            #expect(map.count == 0)
            reclaimer.release(dropped)
            #expect(reclaimer.freedSlots == 0)
            reclaimer.stop()  // idempotent
            #expect(reclaimer.freedSlots == 0)
        }
    }

    /// Tables handed over before `stop()` are all freed by the time it returns; the thread is
    /// gone afterwards, and a later release frees inline.
    @Test func stopWaitsForEveryHandedTable() async throws {
        try await withTemporaryDirectory { dir in
            let entry = try Self.someEntry(dir)
            let reclaimer = Reclaimer()
            var total = 0
            for round in 0..<20 {
                var map = LocationMap(observer: nil)
                let n = Reclaimer.threshold + round * 7
                for i in 0..<n { map.stored(entry, for: key(i, variant: "\(round)")) }
                let dropped = map.committed(limit: 0, through: .max).dropped
                total += dropped.count
                reclaimer.release(dropped)
            }
            // A small one is freed inline.
            var small = LocationMap(observer: nil)
            for i in 0..<(Reclaimer.threshold - 1) { small.stored(entry, for: key(i)) }
            reclaimer.release(small.committed(limit: 0, through: .max).dropped)
            reclaimer.stop()
            #expect(reclaimer.freedSlots == total)
        }
    }

    /// The map of a store whose committed sequence is `committed`, holding `n` slots — every
    /// fifth a removal — of which those of keys `i % 3 == 0` wait (their writes are numbered
    /// `committed` and above, as a queued write's is): the sequence numbers of a commit.
    static func mapWithWaitingSlots(_ entry: IndexedEntry, n: Int, committed: UInt64) -> LocationMap {
        var map = LocationMap(observer: nil)
        for i in 0..<n {
            let sequence = i % 3 == 0 ? committed + UInt64(i) : UInt64(i)
            if i % 5 == 0 {
                map.removed(key(i), sequence: sequence)
            } else {
                var numbered = entry
                numbered.entry.sequence = sequence
                map.stored(numbered, for: key(i))
            }
        }
        return map
    }

    /// The waiting slots (numbered at or above the committed sequence) survive a drop (present
    /// and removed, unchanged); every committed removal goes; other slots go until the map is at
    /// its eviction target (or holds only waiting slots); and what is dropped is exactly what
    /// left the map — whether the eviction runs in one call or a few hundred slots per call
    /// (``LocationMap/committed(limit:through:atMost:continuing:)``, as the store calls it).
    @Test(arguments: [0, 1, 4_095, 4_096, 4_097, 7_000, 8_194], [Int.max, 300])
    func aDropKeepsTheWaitingSlotsAndEvictsToTheTarget(limit: Int, atMost: Int) async throws {
        try await withTemporaryDirectory { dir in
            let entry = try Self.someEntry(dir)
            let n = 8_192 + 3
            let committed: UInt64 = 1_000_000
            var map = Self.mapWithWaitingSlots(entry, n: n, committed: committed)
            let waiting = Set((0..<n).filter { $0 % 3 == 0 }.map { key($0) } + [key(n + 10)])
            let before = map.table
            var (dropped, more) = map.committed(limit: limit, through: committed, atMost: atMost)
            var calls = 1
            while more {
                let (chunk, again) = map.committed(limit: limit, through: committed, atMost: atMost, continuing: true)
                #expect(chunk.count <= atMost)
                dropped.merge(chunk)
                more = again
                calls += 1
            }
            if atMost == Int.max { #expect(calls == 1) }
            let kept = map.table
            let waitingSlots = Set(waiting.filter { before[$0] != nil })
            let committedRemovals = before.filter { k, slot in
                if case .removed = slot { return !waiting.contains(k) } else { return false }
            }
            if n > limit {
                #expect(dropped.count + kept.count == n, "every slot is either kept or handed back")
                #expect(waitingSlots.isSubset(of: Set(kept.keys)), "no waiting slot is dropped")
                // Committed removals go first; then others, down to the target.
                #expect(
                    kept.count
                        == min(n - committedRemovals.count, max(LocationMap.evictionTarget(limit: limit), waitingSlots.count)))
                for (k, slot) in kept {
                    if case .removed = slot { #expect(waiting.contains(k), "a committed removal of \(k) kept") }
                }
                for (k, slot) in kept {
                    switch (slot, before[k]) {
                    case (.present(let a), .present(let b)?): #expect(a == b)
                    case (.removed, .removed?): break
                    default: Issue.record("slot of \(k) changed")
                    }
                }
                #expect(
                    LocationMapAttackTests.removedKeys(map)
                        == Set(
                            kept.filter {
                                if case .removed = $0.value { return true } else { return false }
                            }.keys))
            } else {
                // Under the limit only committed removals go, freed in place.
                #expect(dropped.count == 0)
                #expect(kept.count == n - committedRemovals.count)
            }
        }
    }

    // MARK: Through a real store

    /// close() racing writers, flushes and gets while the map is dropped into the reclaimer
    /// every cycle: close returns, every acknowledged put is there after reopening, no thread is
    /// left behind.
    @Test(arguments: [0, 4_097])
    func closeRacingDropsLosesNoAcknowledgedWrite(limit: Int) async throws {
        try await withTemporaryDirectory { dir in
            try populate(dir, count: 1)
            let acknowledged = Locked<[Int: UInt8]>([:])
            var freedTotal = 0
            let problems = Locked<[String]>([])
            @Sendable func note(_ m: String) { problems.withLock { if $0.count < 20 { $0.append(m) } } }
            for round in 0..<12 {
                let store = try openStore(dir) {
                    $0.locationCacheLimit = limit
                    $0.batchInterval = .milliseconds(1)
                    $0.compactionInterval = nil
                }
                // A map over the threshold before the race.
                for i in 0..<(Reclaimer.threshold + 200) {
                    let k = round * 100_000 + i
                    try store.put(Data([UInt8(k & 0xFF), UInt8(round)]), for: key(k))
                    acknowledged.withLock { $0[k] = UInt8(round) }
                }
                let r = round
                var bodies: [@Sendable () -> Void] = []
                bodies.append {
                    var i = 50_000
                    while true {
                        let k = r * 100_000 + i
                        do {
                            try store.put(Data([UInt8(k & 0xFF), UInt8(r)]), for: key(k))
                            acknowledged.withLock { $0[k] = UInt8(r) }
                        } catch {
                            if (error as? StoreError)?.code != .closed { note("put: \(error)") }
                            return
                        }
                        i += 1
                    }
                }
                bodies.append {
                    while true {
                        do { try store.flush() } catch {
                            if (error as? StoreError)?.code != .closed { note("flush: \(error)") }
                            return
                        }
                    }
                }
                bodies.append {
                    var i = 0
                    while true {
                        do { _ = try store.data(for: key(r * 100_000 + i % 4_000)) } catch {
                            if (error as? StoreError)?.code != .closed { note("get: \(error)") }
                            return
                        }
                        i += 1
                    }
                }
                bodies.append {
                    Thread.sleep(forTimeInterval: Double(r % 4) * 0.02)
                    do { try store.close() } catch { note("close: \(error)") }
                }
                await Self.run(bodies)
                try store.close()
                freedTotal += store.reclaimer.freedSlots
            }
            #expect(problems.withLock { $0 }.isEmpty, "\(problems.withLock { $0 })")
            let store = try openStore(dir)
            defer { try? store.close() }
            let expected = acknowledged.withLock { $0 }
            var missing = 0
            for (k, round) in expected where try store.data(for: key(k)) != Data([UInt8(k & 0xFF), round]) {
                missing += 1
            }
            print(
                "close race (limit \(limit)): \(expected.count) acknowledged puts, \(missing) missing, reclaimer freed \(freedTotal)"
            )
            #expect(missing == 0)
        }
    }

    /// Writers, readers (whose misses fill the map past the limit), the background committer,
    /// a compactor (moved) and a repairer (indexChanged) at once, with limits around the
    /// reclaimer's threshold, over enough keys that drops go to `trove-reclaim`. Per key, a read
    /// must return the state of a write that had not finished before it began or had started
    /// before it ended.
    @Test(arguments: [1, 4_096, 8_192])
    func racingDropsServeNoStaleValue(limit: Int) async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir, segmentSize: 2 << 20) {
                $0.batchInterval = .milliseconds(1)
                $0.batchSize = 64
                $0.compactionInterval = nil
                $0.locationCacheLimit = limit
            }
            defer { try? store.close() }
            let writers = 2
            let keysPerWriter = 6_000
            let keyCount = writers * keysPerWriter
            let started = Locked([Int](repeating: 0, count: keyCount))
            let done = Locked([Int](repeating: 0, count: keyCount))
            let stop = Locked(false)
            let problems = Locked<[String]>([])
            let counts = Locked((reads: 0, writes: 0, compactions: 0, repairs: 0))
            @Sendable func bytes(_ k: Int, _ version: Int) -> Data {
                var b = testBytes(seed: UInt64(k * 100_003 + version), count: 8 + (version * 37) % 120)
                b[0] = UInt8(k & 0xFF)
                b[1] = UInt8(k >> 8)
                b[2] = UInt8(version & 0xFF)
                b[3] = UInt8((version >> 8) & 0xFF)
                b[4] = UInt8((version >> 16) & 0xFF)
                return Data(b)
            }
            @Sendable func note(_ message: String) { problems.withLock { if $0.count < 20 { $0.append(message) } } }
            @Sendable func check(_ k: Int, _ data: Data?, low: Int, high: Int, _ who: String) {
                if let data {
                    guard data.count >= 8 else { return note("\(who) \(k): \(data.count) bytes") }
                    let v = Int(data[2]) | Int(data[3]) << 8 | Int(data[4]) << 16
                    if Int(data[0]) | Int(data[1]) << 8 != k || data != bytes(k, v) {
                        note("\(who) \(k): bytes of no write")
                    } else if v < low || v > high || v % 3 == 0 {
                        note("\(who) \(k): version \(v), outside [\(low), \(high)]")
                    }
                } else if !(low...high).contains(where: { $0 % 3 == 0 }) {
                    note("\(who) \(k): nil, but every write in [\(low), \(high)] is a value")
                }
            }

            // Every key has a value to begin with, so that sweeping reads fill the map.
            for k in 0..<keyCount { try store.put(bytes(k, 1), for: key(k)) }
            started.withLock { $0 = [Int](repeating: 1, count: keyCount) }
            done.withLock { $0 = [Int](repeating: 1, count: keyCount) }
            let preloadFreed = store.reclaimer.freedSlots
            var bodies: [@Sendable () -> Void] = []
            for w in 0..<writers {
                bodies.append {
                    var rng = SeededGenerator(seed: UInt64(w + 1))
                    var versions = [Int](repeating: 1, count: keysPerWriter)
                    var n = 0
                    while !stop.withLock({ $0 }) {
                        // Mostly a sweep (the map grows past the limit), sometimes a hot key.
                        let j = n % 3 == 0 ? Int.random(in: 0..<16, using: &rng) : (n / 3 * 7) % keysPerWriter
                        n += 1
                        let k = w * keysPerWriter + j
                        versions[j] += 1
                        let v = versions[j]
                        LocationMapAttackTests.racingWrite(store, k, v, bytes(k, v), started: started, done: done, note: note)
                        counts.withLock { $0.writes += 1 }
                    }
                }
            }
            for r in 0..<2 {
                bodies.append {
                    var rng = SeededGenerator(seed: UInt64(100 + r))
                    var n = 0
                    while !stop.withLock({ $0 }) {
                        // One reader reads hot keys, the other sweeps (fills the map).
                        let k =
                            r == 0
                            ? (Int.random(in: 0..<writers, using: &rng) * keysPerWriter + Int.random(in: 0..<16, using: &rng))
                            : (n * 13) % keyCount
                        n += 1
                        let low = done.withLock { $0[k] }
                        let data: Data?
                        do { data = try store.data(for: key(k)) } catch {
                            note("read \(k): \(error)")
                            continue
                        }
                        let high = started.withLock { $0[k] }
                        counts.withLock { $0.reads += 1 }
                        check(k, data, low: low, high: high, "read")
                    }
                }
            }
            bodies.append {
                while !stop.withLock({ $0 }) {
                    do { _ = try store.compact() } catch { note("compact: \(error)") }
                    counts.withLock { $0.compactions += 1 }
                    Thread.sleep(forTimeInterval: 0.3)
                }
            }
            bodies.append {
                while !stop.withLock({ $0 }) {
                    Thread.sleep(forTimeInterval: 1.5)
                    do {
                        let report = try store.fsck(repair: true)
                        if !report.isClean { note("fsck: \(report.findings.map(\.message))") }
                        counts.withLock { $0.repairs += 1 }
                    } catch {
                        note("fsck: \(error)")
                    }
                }
            }
            bodies.append {
                Thread.sleep(forTimeInterval: 4)
                stop.withLock { $0 = true }
            }
            await Self.run(bodies)
            let freedSoFar = store.reclaimer.freedSlots
            print(
                "reclaim race (limit \(limit)): \(counts.withLock { $0 }), reclaimer freed \(freedSoFar) so far (\(preloadFreed) by the preload), map \(store.shared.withLock { $0.map.count })"
            )
            #expect(problems.withLock { $0 }.isEmpty, "\(problems.withLock { $0 })")
            #expect(store.backgroundError == nil)
            try store.flush()
            #expect(store.shared.withLock { $0.map.count } <= max(limit, 0) + 64 * 4)
            LocationMapAttackTests.checkRemovedKeys(store, "after the race (limit \(limit))")
            let last = done.withLock { $0 }
            var wrong = 0
            for k in 0..<keyCount {
                let expected = last[k] == 0 || last[k] % 3 == 0 ? nil : bytes(k, last[k])
                if try store.data(for: key(k)) != expected { wrong += 1 }
            }
            #expect(wrong == 0, "\(wrong) keys wrong after the race")
            try store.close()
            print("reclaim race (limit \(limit)): reclaimer freed \(store.reclaimer.freedSlots) in all")
            let reopened = try openStore(dir, segmentSize: 2 << 20)
            defer { try? reopened.close() }
            wrong = 0
            for k in 0..<keyCount {
                let expected = last[k] == 0 || last[k] % 3 == 0 ? nil : bytes(k, last[k])
                if try reopened.data(for: key(k)) != expected { wrong += 1 }
            }
            #expect(wrong == 0, "\(wrong) keys wrong after reopening")
        }
    }

    /// Evictions of several chunks (`Store.evictionChunk` slots per hold of the shared lock)
    /// racing writers that read each of their own writes back at once, and readers whose misses
    /// fill the map by more than a chunk between two cycles: every write is read back as written
    /// (read-your-writes, a removal as nil), every value a reader gets is the bytes of a write of
    /// its key, and after a flush and after reopening every key holds its last write.
    @Test(arguments: [600, 1_500])
    func chunkedEvictionsKeepEveryWritersOwnWrites(limit: Int) async throws {
        try await withTemporaryDirectory { dir in
            let keyCount = 4_000
            @Sendable func bytes(_ k: Int, _ version: Int) -> Data {
                var b = testBytes(seed: UInt64(k * 100_003 + version), count: 16 + (version * 29) % 200)
                b[0] = UInt8(k & 0xFF)
                b[1] = UInt8(k >> 8)
                b[2] = UInt8(version & 0xFF)
                b[3] = UInt8(version >> 8)
                return Data(b)
            }
            // Cycles far enough apart that the readers' misses fill the map by several chunks
            // between two of them.
            let store = try openStore(dir, segmentSize: 1 << 20) {
                $0.batchInterval = .milliseconds(50)
                $0.batchSize = 4_096
                $0.compactionInterval = nil
                $0.locationCacheLimit = limit
            }
            for k in 0..<keyCount { try store.put(bytes(k, 0), for: key(k)) }
            try store.flush()
            let writers = 2
            // Per key, its last write: a version, or nil once removed (each writer owns its keys).
            let last = Locked([Int?](repeating: 0, count: keyCount))
            let stop = Locked(false)
            let problems = Locked<[String]>([])
            let reads = Locked(0)
            @Sendable func note(_ message: String) { problems.withLock { if $0.count < 20 { $0.append(message) } } }
            var bodies: [@Sendable () -> Void] = []
            for w in 0..<writers {
                bodies.append {
                    var version = 1
                    var generator = SeededGenerator(seed: UInt64(w + 1))
                    // Versions fit the two bytes that carry them.
                    while !stop.withLock({ $0 }), version < 60_000 {
                        let k = Int(generator.next() % UInt64(keyCount / writers)) * writers + w
                        do {
                            if version % 5 == 0 {
                                try store.remove(key(k))
                                last.withLock { $0[k] = nil }
                                if let data = try store.data(for: key(k)) {
                                    note("writer \(w): \(k) removed, read \(data.count) bytes")
                                }
                            } else {
                                try store.put(bytes(k, version), for: key(k))
                                last.withLock { $0[k] = version }
                                if try store.data(for: key(k)) != bytes(k, version) {
                                    note("writer \(w): \(k) version \(version) not read back")
                                }
                            }
                        } catch {
                            note("writer \(w): \(error)")
                        }
                        version += 1
                    }
                }
            }
            for r in 0..<2 {
                bodies.append {
                    var k = r * keyCount / 2
                    while !stop.withLock({ $0 }) {
                        k = (k + 1) % keyCount
                        do {
                            if let data = try store.data(for: key(k)) {
                                let v = Int(data[2]) | Int(data[3]) << 8
                                if data.count < 16 || Int(data[0]) | Int(data[1]) << 8 != k || data != bytes(k, v) {
                                    note("reader: \(k) holds bytes of no write")
                                }
                            }
                        } catch {
                            note("reader: \(error)")
                        }
                        reads.withLock { $0 += 1 }
                    }
                }
            }
            bodies.append {
                Thread.sleep(forTimeInterval: 3)
                stop.withLock { $0 = true }
            }
            await Self.run(bodies)
            #expect(problems.withLock { $0 }.isEmpty, "\(problems.withLock { $0 })")
            #expect(reads.withLock { $0 } > 2 * keyCount, "the readers swept the keys more than twice")
            #expect(store.backgroundError == nil)
            try store.flush()
            #expect(store.shared.withLock { $0.map.count } <= limit)
            LocationMapAttackTests.checkRemovedKeys(store, "after the race (limit \(limit))")
            let expected = last.withLock { $0 }
            func wrongKeys(_ store: Store) throws -> Int {
                try (0..<keyCount).filter { k in try store.data(for: key(k)) != expected[k].map { bytes(k, $0) } }.count
            }
            #expect(try wrongKeys(store) == 0)
            try store.close()
            let reopened = try openStore(dir, segmentSize: 1 << 20)
            defer { try? reopened.close() }
            #expect(try wrongKeys(reopened) == 0)
        }
    }

    /// Listing from memory (`pending`, the overlay used when the commit fails) agrees with the
    /// map's own view after drops: every slot appears, slots over pinned ones.
    @Test func pendingIsTheTableAfterDrops() async throws {
        try await withTemporaryDirectory { dir in
            let entry = try Self.someEntry(dir)
            var map = LocationMap(observer: nil)
            let committed: UInt64 = 1_000_000
            var other = entry
            other.entry.sequence &+= 99
            map.pin([key(1): .removed, key(2): .present(other), key(9_999_999): .present(other)])
            // Even keys wait: their writes are numbered at or above the committed sequence.
            for i in 0..<6_000 {
                let waits = i % 2 == 0
                if i % 4 == 0 {
                    map.removed(key(i), sequence: waits ? committed + 1 : 1)
                } else {
                    var numbered = entry
                    numbered.entry.sequence = waits ? committed + UInt64(i) : UInt64(i)
                    map.stored(numbered, for: key(i))
                }
            }
            let waiting = Set((0..<6_000).filter { $0 % 2 == 0 }.map { key($0) })
            let dropped = map.committed(limit: 10, through: committed).dropped
            #expect(dropped.count == 6_000 - waiting.count, "every slot but the waiting ones")
            let pending = map.pending
            #expect(pending.count == waiting.count + 2, "waiting slots, and pinned 1 and 9 999 999")
            if case .removed? = pending[key(1)] {} else { Issue.record("pinned removal 1 lost") }
            if case .present(let e)? = pending[key(9_999_999)] {
                #expect(e == other)
            } else {
                Issue.record("pinned 9 999 999 lost")
            }
            // Key 2 is waiting: its slot (present) covers its pin.
            if case .present(let e)? = pending[key(2)] {
                #expect(e.entry.sequence == committed + 2)
            } else {
                Issue.record("slot of 2 did not cover its pin")
            }
            for k in waiting {
                #expect(map.slot(for: k) != nil)
            }
            // A dropped key falls through to its pin.
            if case .removed? = map.slot(for: key(1)) {} else { Issue.record("dropped key 1 does not fall to its pin") }
        }
    }
}
