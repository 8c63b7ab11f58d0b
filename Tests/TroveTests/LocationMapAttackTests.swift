import Foundation
import Testing
import TroveCore
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

/// An outside review of the location map's set of removed keys (commit 006f579): every
/// mutation of the map, driven through a real store, must leave `removedKeys` exactly the keys
/// whose slot is `.removed`, and no get may see a removed key's old bytes, a stale value, or
/// miss a committed one. Writes are raced into a commit cycle's window — after its snapshot,
/// before it releases the queue — deterministically, from inside the cycle's fdatasync (the
/// fault injector's hook).
@Suite struct LocationMapAttackTests {
    // MARK: The window between a commit cycle's snapshot and its release

    /// Runs `action` once, inside the next segment sync after ``arm(_:)``: a commit cycle syncs
    /// after taking its snapshot and before releasing the queue, holding no lock but the
    /// committer's, so writes made there are the ones `waiting` is about.
    final class SyncWindow: Sendable {
        private let pending = Locked<(@Sendable () -> Void)?>(nil)
        private let operation: FaultInjector.Operation
        private let pathSuffix: String

        /// A window at the next `operation` (default: a sync) of a file whose path ends with
        /// `pathSuffix` (default: any).
        init(at operation: FaultInjector.Operation = .sync, pathSuffix: String = "") {
            self.operation = operation
            self.pathSuffix = pathSuffix
        }

        var faults: FaultInjector {
            FaultInjector { [self] operation, path in
                guard operation == self.operation, path.hasSuffix(pathSuffix) else { return nil }
                let action = pending.withLock { slot in
                    defer { slot = nil }
                    return slot
                }
                action?()
                return nil
            }
        }

        func arm(_ action: @escaping @Sendable () -> Void) { pending.withLock { $0 = action } }

        /// Disarms; returns whether the action had not run.
        @discardableResult
        func disarm() -> Bool {
            pending.withLock { slot in
                defer { slot = nil }
                return slot != nil
            }
        }
    }

    // MARK: White-box view of the map

    /// The map's private set of removed keys, read by reflection (no source change for the
    /// test's sake), and its table of slots.
    static func removedKeys(_ map: LocationMap) -> Set<CacheKey> {
        Mirror(reflecting: map).descendant("removedKeys") as! Set<CacheKey>
    }

    static func slots(_ map: LocationMap) -> [CacheKey: LocationMap.Slot] {
        map.table
    }

    /// One write of a racing writer: version `v` of key `k` — a removal when `v` is a
    /// multiple of 3, else `value` — with its start and end noted for the readers' checks.
    static func racingWrite(
        _ store: Store, _ k: Int, _ v: Int, _ value: Data, started: Locked<[Int]>, done: Locked<[Int]>,
        note: (String) -> Void
    ) {
        started.withLock { $0[k] = v }
        do {
            if v % 3 == 0 { try store.remove(key(k)) } else { try store.put(value, for: key(k)) }
        } catch {
            note("write \(k)#\(v): \(error)")
        }
        done.withLock { $0[k] = v }
    }

    /// `removedKeys` is exactly the set of keys whose slot is `.removed`.
    static func checkRemovedKeys(
        _ store: Store, _ context: @autoclosure () -> String = "", sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let (removed, slots) = store.shared.withLock { (removedKeys($0.map), self.slots($0.map)) }
        var removedSlots = Set<CacheKey>()
        for (key, slot) in slots { if case .removed = slot { removedSlots.insert(key) } }
        #expect(
            removed == removedSlots,
            "removedKeys \(removed.count) vs removed slots \(removedSlots.count): \(context())",
            sourceLocation: sourceLocation)
    }

    static func removedCount(_ store: Store) -> Int { store.shared.withLock { removedKeys($0.map).count } }

    // MARK: Deterministic sequences

    /// Every order of put and removal of one key with no commit between them, then a commit:
    /// the set follows the slot through each step, and empties once nothing is queued.
    @Test func putsAndRemovalsOfOneKeyBetweenCommits() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.batchInterval = .seconds(3_600)
                $0.accessTimeFlushInterval = .seconds(3_600)
            }
            defer { try? store.close() }
            try store.put(value(0), for: key(0))
            try store.flush()
            // Held: no cycle runs, so every step below is uncommitted.
            try store.committer.withLock { _ in
                try store.remove(key(0))
                Self.checkRemovedKeys(store, "removed")
                #expect(Self.removedCount(store) == 1)
                try store.put(value(1), for: key(0))
                Self.checkRemovedKeys(store, "stored after removed")
                #expect(Self.removedCount(store) == 0)
                try store.remove(key(0))
                try store.remove(key(0))  // no entry: no tombstone
                try store.put(value(2), for: key(1))
                try store.remove(key(1))
                Self.checkRemovedKeys(store, "removed after stored")
                #expect(Self.removedCount(store) == 2)
                #expect(try store.data(for: key(0)) == nil)
                #expect(try store.data(for: key(1)) == nil)
            }
            try store.flush()
            Self.checkRemovedKeys(store, "after the commit")
            #expect(Self.removedCount(store) == 0)
            #expect(try store.data(for: key(0)) == nil)
            #expect(try store.data(for: key(1)) == nil)
            try store.put(value(3), for: key(0))
            try store.flush()
            #expect(try store.data(for: key(0)) == value(3))
            #expect(Self.removedCount(store) == 0)
        }
    }

    /// Writes raced into a cycle's window, under and over the map's limit: a removal of a
    /// key whose put the cycle commits, a put of a key whose removal it commits, and a put
    /// then a removal (and back) of one key. Each must survive the release as a slot, and the
    /// next cycle must leave nothing behind.
    @Test(arguments: [0, 1, 1_000])
    func writesInsideTheCommitWindow(limit: Int) async throws {
        try await withTemporaryDirectory { dir in
            let window = SyncWindow()
            let store = try openStore(dir) {
                $0.batchInterval = .seconds(3_600)
                $0.accessTimeFlushInterval = .seconds(3_600)
                $0.locationCacheLimit = limit
                $0.faultInjector = window.faults
            }
            defer { try? store.close() }
            for i in 0..<8 { try store.put(value(i, size: 300), for: key(i)) }
            try store.flush()
            // Queued for the next cycle: a put of 0 and 1, a removal of 2 and 3.
            try store.put(value(100, size: 300), for: key(0))
            try store.put(value(101, size: 300), for: key(1))
            try store.remove(key(2))
            try store.remove(key(3))
            let failures = Locked<[String]>([])
            window.arm {
                do {
                    try store.remove(key(0))  // its put is in the snapshot
                    try store.put(value(102, size: 300), for: key(2))  // its removal is in the snapshot
                    try store.put(value(104, size: 300), for: key(4))
                    try store.remove(key(4))  // put then removal
                    try store.remove(key(5))
                    try store.put(value(105, size: 300), for: key(5))  // removal then put
                    try store.remove(key(1))
                    try store.remove(key(6))
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }
            try store.flush()
            #expect(!window.disarm(), "the window never opened")
            #expect(failures.withLock { $0 }.isEmpty)
            Self.checkRemovedKeys(store, "after the raced cycle")
            #expect(Self.removedKeys(store.shared.withLock { $0.map }) == [key(0), key(1), key(4), key(6)])
            let expected: [Int: Data?] = [
                0: nil, 1: nil, 2: value(102, size: 300), 3: nil, 4: nil, 5: value(105, size: 300), 6: nil,
                7: value(7, size: 300),
            ]
            for (i, data) in expected.sorted(by: { $0.key < $1.key }) {
                #expect(try store.data(for: key(i)) == data, "key \(i) after the raced cycle")
            }
            try store.flush()
            Self.checkRemovedKeys(store, "after the next cycle")
            #expect(Self.removedCount(store) == 0)
            for (i, data) in expected.sorted(by: { $0.key < $1.key }) {
                #expect(try store.data(for: key(i)) == data, "key \(i) after the next cycle")
            }
            try store.close()
            let reopened = try openStore(dir)
            defer { try? reopened.close() }
            for (i, data) in expected.sorted(by: { $0.key < $1.key }) {
                #expect(try reopened.data(for: key(i)) == data, "key \(i) after reopening")
            }
        }
    }

    /// fsck's repair keeps `.removed` slots (its `indexChanged` does not touch the set): a
    /// removal queued across a repair stays removed, and the next commit drops it from both.
    @Test func repairKeepsQueuedRemovalsAndTheSetFollows() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.batchInterval = .seconds(3_600)
                $0.accessTimeFlushInterval = .seconds(3_600)
                $0.locationCacheLimit = 2
            }
            defer { try? store.close() }
            for i in 0..<6 { try store.put(value(i, size: 500), for: key(i)) }
            try store.flush()
            for i in 0..<6 { _ = try store.data(for: key(i)) }  // fills
            try store.remove(key(1))
            try store.remove(key(2))
            let report = try store.fsck(repair: true)
            #expect(report.isClean)
            Self.checkRemovedKeys(store, "after the repair")
            #expect(Self.removedCount(store) == 0)  // fsck's repair commits first
            #expect(try store.data(for: key(1)) == nil)
            // Removals queued while no cycle can run; a repair of the index alone (what
            // fsck's last step does) keeps them.
            try store.committer.withLock { _ in
                try store.remove(key(3))
                try store.put(value(40, size: 500), for: key(4))
                store.shared.withLock { $0.map.indexChanged([], keeping: [key(4)]) }
                Self.checkRemovedKeys(store, "after indexChanged")
                #expect(try store.data(for: key(3)) == nil)
                #expect(try store.data(for: key(4)) == value(40, size: 500))
            }
            try store.flush()
            Self.checkRemovedKeys(store, "after the commit")
            #expect(Self.removedCount(store) == 0)
            for (i, data) in [0: value(0, size: 500), 1: nil, 2: nil, 3: nil, 4: value(40, size: 500), 5: value(5, size: 500)] {
                #expect(try store.data(for: key(i)) == data, "key \(i)")
            }
        }
    }

    /// Many rounds of puts and removals of fresh keys: the set of removed keys (and the map,
    /// over its limit) empties at every commit instead of growing with the keys ever removed.
    @Test func removedKeysDoNotAccumulate() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.batchInterval = .seconds(3_600)
                $0.accessTimeFlushInterval = .seconds(3_600)
                $0.locationCacheLimit = 50
            }
            defer { try? store.close() }
            for round in 0..<20 {
                for i in 0..<40 { try store.put(Data([UInt8(i), UInt8(round)]), for: key(round * 40 + i)) }
                for i in 0..<40 where i % 4 != 0 { try store.remove(key(round * 40 + i)) }
                Self.checkRemovedKeys(store, "round \(round)")
                #expect(Self.removedCount(store) == 30)
                try store.flush()
                #expect(Self.removedCount(store) == 0, "round \(round)")
                #expect(store.shared.withLock { $0.map.count } <= 50, "round \(round)")
            }
            for round in 0..<20 {
                for i in 0..<40 {
                    #expect(try store.data(for: key(round * 40 + i)) == (i % 4 == 0 ? Data([UInt8(i), UInt8(round)]) : nil))
                }
            }
        }
    }

    // MARK: The map's limit and reads

    /// The map "may hold" `locationCacheLimit` entries "before it is emptied"; reads fill it
    /// too. It used to be emptied only by a cycle that committed something (a cycle with
    /// nothing to commit returned early), so `contains`, `info` and `keys(url:)` — and `data`
    /// between two read-time flushes, 5 s by default — grew it past the limit with no bound but
    /// the number of keys in the index.
    @Test func readsAloneDoNotGrowTheMapPastItsLimit() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.batchInterval = .seconds(3_600)
                $0.accessTimeFlushInterval = .seconds(3_600)
                $0.locationCacheLimit = 10
            }
            defer { try? store.close() }
            for i in 0..<500 { try store.put(Data([UInt8(i % 256)]), for: key(i)) }
            try store.flush()
            #expect(store.shared.withLock { $0.map.count } <= 10)
            for i in 0..<500 { #expect(try store.contains(key(i))) }
            for i in 0..<500 { #expect(try store.info(for: key(i))?.cost == 1) }
            #expect(store.shared.withLock { $0.map.count } == 500)  // filled between two cycles
            try store.flush()  // a cycle with nothing to commit
            let count = store.shared.withLock { $0.map.count }
            #expect(count <= 10, "the map holds \(count) slots with a limit of 10")
            // Filled again, then a removal committed: every read still right.
            for i in 0..<500 { _ = try store.contains(key(i)) }
            try store.remove(key(3))
            try store.flush()
            #expect(try store.data(for: key(3)) == nil)
            for i in 0..<500 where i != 3 { #expect(try store.data(for: key(i)) == Data([UInt8(i % 256)])) }
        }
    }

    // MARK: fsck with writes going on

    /// fsck commits what is queued, then takes the committer lock and judges the packs; writes
    /// go on meanwhile. A write that lands between the two used to be judged as damage: a
    /// check reported it ("newer than the index", "a removal newer than the index entry was
    /// lost", "the index row disagrees"), a repair applied it ahead of its commit — into a
    /// segment the index had no row for yet when the write rotated, so that segment's live
    /// bytes stayed 0 for good (the next fsck: "0 live bytes stored, rows add up to …").
    @Test(arguments: [false, true])
    func fsckWithWritesRacedIntoItsCommit(rotating: Bool) async throws {
        try await withTemporaryDirectory { dir in
            let window = SyncWindow()
            let store = try openStore(dir, segmentSize: rotating ? 4 << 10 : 64 << 20) {
                $0.batchInterval = .seconds(3_600)
                $0.accessTimeFlushInterval = .seconds(3_600)
                $0.compactionInterval = nil
                $0.faultInjector = window.faults
            }
            defer { try? store.close() }
            for i in 0..<4 { try store.put(value(i, size: 1000), for: key(i)) }
            try store.flush()
            let failures = Locked<[String]>([])
            for repair in [false, true] {
                // One write queued, so that fsck's own commit syncs (and opens the window).
                try store.put(value(10, size: 1000), for: key(0))
                window.arm {
                    do {
                        try store.put(value(11, size: 1000), for: key(1))
                        try store.remove(key(2))
                        try store.put(value(12, size: 1000), for: key(5))
                    } catch {
                        failures.withLock { $0.append("\(error)") }
                    }
                }
                let report = try store.fsck(repair: repair)
                #expect(!window.disarm(), "the window never opened")
                #expect(report.isClean, "fsck(repair: \(repair)): \(report.findings.map(\.message))")
                let after = try store.fsck()
                #expect(after.isClean, "fsck after fsck(repair: \(repair)): \(after.findings.map(\.message))")
                #expect(try store.data(for: key(0)) == value(10, size: 1000))
                #expect(try store.data(for: key(1)) == value(11, size: 1000))
                #expect(try store.data(for: key(2)) == nil)
                #expect(try store.data(for: key(5)) == value(12, size: 1000))
                try store.put(value(2, size: 1000), for: key(2))
                try store.flush()
            }
            #expect(failures.withLock { $0 }.isEmpty)
            try store.close()
            let reopened = try openStore(dir)
            defer { try? reopened.close() }
            #expect(reopened.recoveryReport.isClean)
            let last = try reopened.fsck()
            #expect(last.isClean, "fsck after reopening: \(last.findings.map(\.message))")
        }
    }

    // MARK: A read racing a write and the compactor

    /// A get looks `key` up (its index row names blob B in segment 1), then — before it reads
    /// B — the key is written again, committed, and the compactor reclaims segment 1 (B is
    /// dead now) and unlinks it. The get must return the old bytes or the new ones (or look
    /// again); it used to throw `.missingSegment` and record damage against a healthy store
    /// (every command then reports it until `trove fsck --repair`). The window opens inside the
    /// get's own check of the link record (a read of segment 1).
    @Test func aGetRacingAnOverwriteAndItsReclaimIsNotDamage() async throws {
        try await withTemporaryDirectory { dir in
            let window = SyncWindow(at: .read, pathSuffix: "/" + PackFormat.fileName(forSegment: 1))
            let store = try openStore(dir, segmentSize: 8 << 10) {
                $0.batchInterval = .seconds(3_600)
                $0.accessTimeFlushInterval = .seconds(3_600)
                $0.compactionInterval = nil
                $0.locationCacheLimit = 0  // every get goes to the index
                $0.faultInjector = window.faults
            }
            defer { try? store.close() }
            try store.put(value(1, size: 3_000), for: key(1))
            for i in 10..<14 { try store.put(value(i, size: 3_000), for: key(i)) }  // rotates past segment 1
            for i in 10..<14 { try store.remove(key(i)) }
            try store.flush()
            #expect(store.shared.withLock { $0.map.count } == 0)
            let failures = Locked<[String]>([])
            window.arm {
                do {
                    try store.put(value(2, size: 3_000), for: key(1))
                    try store.flush()
                    let report = try store.compact()
                    if report.segmentsDeleted == 0 { failures.withLock { $0.append("segment 1 was not reclaimed") } }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }
            let got: Data?
            do {
                got = try store.data(for: key(1))
            } catch {
                Issue.record("the racing get threw: \(error)")
                got = nil
            }
            #expect(!window.disarm(), "the window never opened")
            #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
            if let got { #expect(got == value(1, size: 3_000) || got == value(2, size: 3_000)) }
            let damage = try store.unrepairedDamage()
            #expect(damage.isEmpty, "\(damage.map(\.message))")
            #expect(try store.data(for: key(1)) == value(2, size: 3_000))
        }
    }

    // MARK: Randomized property test

    /// Random sequences of puts, removals, gets, commits (some with writes raced into the
    /// cycle's window), compactions (likewise), metadata updates, repairs, listings and
    /// reopenings, with a tiny map limit and small segments, checked op by op against a
    /// dictionary. Every other seed runs the background committer every millisecond instead
    /// of the raced windows (commits then race the test's own reads and writes).
    /// `TROVE_ATTACK_SEED=<n>` replays one seed; `TROVE_ATTACK_SEEDS=<count>` runs more.
    @Test func randomSequencesAgreeWithAModel() async throws {
        let environment = ProcessInfo.processInfo.environment
        let seeds: [UInt64] =
            environment["TROVE_ATTACK_SEED"].flatMap(UInt64.init).map { [$0] }
            ?? Array(1...(environment["TROVE_ATTACK_SEEDS"].flatMap(UInt64.init) ?? 24))
        var total = Stats()
        for seed in seeds {
            let stats = try await withTemporaryDirectory { dir in
                try Self.runSequence(seed: seed, dir: dir, steps: 160)
            }
            total.add(stats)
        }
        print("location map attack: \(seeds.count) seeds, \(total)")
        #expect(total.placeReads > 0, "no cold get went through a place: the path this attack also covers was missed")
    }

    /// What the random sequences did, so that a run shows it reached the paths it means to.
    struct Stats: CustomStringConvertible {
        var steps = 0
        var windowsRaced = 0
        var writesInWindows = 0
        var segmentsRewritten = 0
        var repairs = 0
        var reopens = 0
        var gets = 0
        /// Cold gets served through the entry digest table's places (no SQLite).
        var placeReads = 0

        mutating func add(_ other: Stats) {
            placeReads += other.placeReads
            steps += other.steps
            windowsRaced += other.windowsRaced
            writesInWindows += other.writesInWindows
            segmentsRewritten += other.segmentsRewritten
            repairs += other.repairs
            reopens += other.reopens
            gets += other.gets
        }

        var description: String {
            "\(steps) steps, \(gets) gets checked, \(windowsRaced) commit windows raced by \(writesInWindows) writes, "
                + "\(segmentsRewritten) segments rewritten, \(repairs) repairs, \(reopens) reopenings, "
                + "\(placeReads) gets through places"
        }
    }

    /// The value with id `v` (a few share bytes, so puts deduplicate).
    static func pooled(_ v: Int) -> Data { value(v % 5, size: 300 + 350 * (v % 5)) }

    /// Makes `writes` (a value id, or nil for a removal) in `store` and in `model`, one by one.
    static func apply(_ writes: [(key: Int, value: Int?)], to store: Store, model: Locked<[Int: Data]>) throws {
        for (k, v) in writes {
            if let v {
                try store.put(pooled(v), for: key(k))
                model.withLock { $0[k] = pooled(v) }
            } else {
                try store.remove(key(k))
                model.withLock { $0[k] = nil }
            }
        }
    }

    static func runSequence(seed: UInt64, dir: String, steps: Int) throws -> Stats {
        var rng = SeededGenerator(seed: seed)
        var stats = Stats()
        let keys = 6
        let limit = [0, 1, 2, 3, 1_000][Int.random(in: 0..<5, using: &rng)]
        // Odd seeds: commits only when the test asks, with writes raced into their window.
        // Even seeds: the background committer too, every millisecond (and no windows).
        let background = seed % 2 == 0
        let window = SyncWindow()
        func open() throws -> Store {
            try openStore(dir, segmentSize: 6 << 10) {
                $0.batchInterval = background ? .milliseconds(1) : .seconds(3_600)
                $0.accessTimeFlushInterval = background ? .milliseconds(1) : .seconds(3_600)
                $0.batchSize = 100_000
                $0.compactionInterval = nil
                $0.locationCacheLimit = limit
                $0.faultInjector = window.faults
            }
        }
        let model = Locked<[Int: Data]>([:])
        var store = try open()
        defer { try? store.close() }
        var trace: [String] = []
        let context = {
            "seed \(seed) (TROVE_ATTACK_SEED=\(seed)), limit \(limit), background \(background), ops: \(trace.suffix(12))"
        }

        func check(_ k: Int, _ what: String) throws {
            let expected = model.withLock { $0[k] }
            let got = try store.data(for: key(k))
            stats.gets += 1
            #expect(
                got == expected,
                "\(what) key \(k): got \(got?.count ?? -1) bytes, expected \(expected?.count ?? -1); \(context())")
        }

        /// Random writes: a value id, or nil for a removal.
        func randomWrites(_ count: Int, _ rng: inout SeededGenerator) -> [(key: Int, value: Int?)] {
            (0..<count).map { _ in
                let k = Int.random(in: 0..<keys, using: &rng)
                return (k, Bool.random(using: &rng) ? Int.random(in: 0..<7, using: &rng) : nil)
            }
        }
        /// Arms the window with random writes (not with the background committer, whose
        /// cycles would run them on its thread); returns them for the trace.
        func armWindow(_ rng: inout SeededGenerator) -> String {
            guard !background, Bool.random(using: &rng) else { return "" }
            let writes = randomWrites(Int.random(in: 1...4, using: &rng), &rng)
            let target = store
            window.arm {
                do { try Self.apply(writes, to: target, model: model) } catch { Issue.record("window writes: \(error)") }
            }
            return " window \(writes.map { "\($0.key)=\($0.value.map(String.init) ?? "rm")" })"
        }
        /// Disarms the window; when it was raced, every key is read at once (before the next
        /// commit settles what the raced cycle left in the map).
        func disarm(_ raced: String) throws {
            guard !raced.isEmpty else { return }
            if window.disarm() {
                trace[trace.count - 1] += " (window unused)"
            } else {
                stats.windowsRaced += 1
                stats.writesInWindows += raced.split(separator: ",").count
                for i in 0..<keys { try check(i, "after a raced window") }
            }
        }

        for _ in 0..<steps {
            stats.steps += 1
            let roll = Int.random(in: 0..<100, using: &rng)
            let k = Int.random(in: 0..<keys, using: &rng)
            switch roll {
            case 0..<30:
                let v = Int.random(in: 0..<7, using: &rng)
                trace.append("put \(k)=\(v)")
                try Self.apply([(k, v)], to: store, model: model)
            case 30..<44:
                trace.append("rm \(k)")
                let had = model.withLock { $0[k] != nil }
                #expect(try store.remove(key(k)) == had, "remove \(k): \(context())")
                model.withLock { $0[k] = nil }
            case 44..<62:
                trace.append("get \(k)")
                try check(k, "get")
            case 62..<67:
                trace.append("contains \(k)")
                let expected = model.withLock { $0[k] }
                #expect(try store.contains(key(k)) == (expected != nil), "contains \(k): \(context())")
                #expect(
                    try store.info(for: key(k))?.contentHash == expected.map { d in d.withUnsafeBytes { XXH3.hash128($0) } },
                    "info \(k): \(context())")
            case 67..<71:
                trace.append("meta \(k)")
                let had = model.withLock { $0[k] != nil }
                #expect(
                    try store.updateMetadata(EntryMetadata(etag: "e\(roll)"), for: key(k)) == had,
                    "updateMetadata \(k): \(context())")
            case 71..<82:
                let raced = armWindow(&rng)
                trace.append("flush" + raced)
                try store.flush()
                try disarm(raced)
                if raced.isEmpty || trace[trace.count - 1].hasSuffix("(window unused)") {
                    #expect(Self.removedCount(store) == 0, "removedKeys after a plain commit: \(context())")
                }
            case 82..<87:
                let raced = armWindow(&rng)
                trace.append("compact" + raced)
                stats.segmentsRewritten += try store.compact().segmentsRewritten
                try disarm(raced)
            case 87..<89:
                trace.append("fsck repair")
                stats.repairs += 1
                let report = try store.fsck(repair: true)
                #expect(report.isClean, "fsck: \(report.findings.map(\.message)); \(context())")
            case 89..<91:
                trace.append("reopen")
                stats.reopens += 1
                stats.placeReads += store.shared.withLock { $0.readsThroughPlaces }
                try store.close()
                store = try open()
            case 91..<94:
                trace.append("list")
                var listed: [CacheKey: ContentHash] = [:]
                try store.forEachEntry { listed[$0.key] = $0.contentHash }
                let expected = model.withLock { m in
                    Dictionary(uniqueKeysWithValues: m.map { (key($0.key), $0.value.withUnsafeBytes { XXH3.hash128($0) }) })
                }
                #expect(listed == expected, "forEachEntry: \(context())")
            default:
                trace.append("get all")
                for i in 0..<keys { try check(i, "get all") }
            }
            Self.checkRemovedKeys(store, context())
        }
        for i in 0..<keys { try check(i, "final") }
        #expect(try store.fsck().isClean, "final fsck: \(context())")
        stats.placeReads += store.shared.withLock { $0.readsThroughPlaces }
        try store.close()
        store = try open()
        for i in 0..<keys { try check(i, "reopened") }
        stats.placeReads += store.shared.withLock { $0.readsThroughPlaces }
        return stats
    }

    // MARK: Racing threads

    /// Writers, readers, the background committer (every millisecond), a compactor and a
    /// repairer at once, with a map limit of 2 and small segments. Each key has one writer,
    /// whose k-th write is a removal when k is a multiple of 3 and a value naming (key, k)
    /// otherwise; a read must return the state of some write that had not finished before
    /// it began or had started before it ended (linearizability per key).
    @Test func racingReadersSeeNoStaleOrRemovedValue() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir, segmentSize: 16 << 10) {
                $0.batchInterval = .milliseconds(1)
                $0.batchSize = 8
                $0.compactionInterval = nil
                $0.locationCacheLimit = 2
            }
            defer { try? store.close() }
            let writers = 2
            let keysPerWriter = 4
            let keyCount = writers * keysPerWriter
            let started = Locked([Int](repeating: 0, count: keyCount))
            let done = Locked([Int](repeating: 0, count: keyCount))
            let stop = Locked(false)
            let problems = Locked<[String]>([])
            let counts = Locked((reads: 0, writes: 0, compactions: 0, repairs: 0))
            @Sendable func bytes(_ k: Int, _ version: Int) -> Data {
                var b = testBytes(seed: UInt64(k * 100_003 + version), count: 200 + (version * 37) % 900)
                b[0] = UInt8(k)
                b[1] = UInt8(version & 0xFF)
                b[2] = UInt8((version >> 8) & 0xFF)
                b[3] = UInt8((version >> 16) & 0xFF)
                return Data(b)
            }
            @Sendable func note(_ message: String) { problems.withLock { if $0.count < 20 { $0.append(message) } } }

            var threads: [@Sendable () -> Void] = []
            for w in 0..<writers {
                threads.append {
                    var rng = SeededGenerator(seed: UInt64(w + 1))
                    var version = 0
                    while !stop.withLock({ $0 }) {
                        let k = w * keysPerWriter + Int.random(in: 0..<keysPerWriter, using: &rng)
                        version += 1
                        let v = version
                        LocationMapAttackTests.racingWrite(store, k, v, bytes(k, v), started: started, done: done, note: note)
                        counts.withLock { $0.writes += 1 }
                    }
                }
            }
            for r in 0..<2 {
                threads.append {
                    var rng = SeededGenerator(seed: UInt64(100 + r))
                    while !stop.withLock({ $0 }) {
                        let k = Int.random(in: 0..<keyCount, using: &rng)
                        let low = done.withLock { $0[k] }
                        let data: Data?
                        do { data = try store.data(for: key(k)) } catch {
                            note("read \(k): \(error)")
                            continue
                        }
                        let high = started.withLock { $0[k] }
                        counts.withLock { $0.reads += 1 }
                        if let data {
                            let v = Int(data[1]) | Int(data[2]) << 8 | Int(data[3]) << 16
                            if data[0] != UInt8(k) || data != bytes(k, v) {
                                note("read \(k): bytes of no write")
                            } else if v < low || v > high || v % 3 == 0 {
                                note("read \(k): version \(v), outside [\(low), \(high)]")
                            }
                        } else if !(low...high).contains(where: { $0 % 3 == 0 }) {
                            // Version 0 (never written) and every multiple of 3 are absences.
                            note("read \(k): nil, but every write in [\(low), \(high)] is a value")
                        }
                    }
                }
            }
            threads.append {
                while !stop.withLock({ $0 }) {
                    do { _ = try store.compact() } catch { note("compact: \(error)") }
                    counts.withLock { $0.compactions += 1 }
                }
            }
            threads.append {
                while !stop.withLock({ $0 }) {
                    do {
                        let report = try store.fsck(repair: true)
                        if !report.isClean { note("fsck: \(report.findings.map(\.message))") }
                        counts.withLock { $0.repairs += 1 }
                    } catch {
                        note("fsck: \(error)")
                    }
                    Thread.sleep(forTimeInterval: 0.2)
                }
            }
            let finished = DispatchGroup()
            for body in threads {
                finished.enter()
                let thread = Thread {
                    body()
                    finished.leave()
                }
                thread.start()
            }
            try await Task.sleep(for: .seconds(3))
            stop.withLock { $0 = true }
            await withCheckedContinuation { continuation in
                finished.notify(queue: .global()) { continuation.resume() }
            }
            let placeReads = store.shared.withLock { $0.readsThroughPlaces }
            print("location map race: \(counts.withLock { $0 }), \(placeReads) gets through places")
            #expect(problems.withLock { $0 }.isEmpty, "\(problems.withLock { $0 })")
            #expect(placeReads > 0, "no racing get went through a place")
            #expect(store.backgroundError == nil)
            try store.flush()
            Self.checkRemovedKeys(store, "after the race")
            #expect(Self.removedCount(store) == 0)
            let last = done.withLock { $0 }
            for k in 0..<keyCount {
                let expected = last[k] == 0 || last[k] % 3 == 0 ? nil : bytes(k, last[k])
                #expect(try store.data(for: key(k)) == expected, "key \(k) after the race")
            }
        }
    }
}
