import Foundation
import Testing
import TroveCore
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@testable import TroveIndex
@_spi(Testing) @testable import TroveStore

/// An outside attack on places forgotten at SQLite's commit hook and on the write queue's
/// inline pending blobs: readers racing writers, metadata updates, removals, compaction, the
/// background place load, a full index and replay — every read checked against the history of
/// writes (linearizable) — and every shape of commit SQLite has taking changed rows' places away.
/// Store-level races catch a place never forgotten; one forgotten late (after the commit is
/// visible) is masked by the location map, which holds the write until the cycle releases it:
/// `EntryDigestTableTests.placesAreNeverOlderThanTheirRows` checks the order itself.
@Suite(.serialized) struct PlacesRaceAttackTests {
    /// One observable state of a key: nil = absent; else (generation of its bytes, etag).
    struct Step: Hashable, Sendable {
        var gen: UInt64?
        var etag: String?
    }

    /// Per key: every step begun, in order; `done` = steps completed (the last completed one is
    /// `steps[done - 1]`).
    struct History: Sendable {
        var steps: [[Step]]
        var done: [Int]
    }

    static func bytes(_ gen: UInt64, length: Int = 2_000) -> Data {
        var d = Data(count: length)
        d.withUnsafeMutableBytes { raw in
            let p = raw.bindMemory(to: UInt8.self)
            var x = gen &* 0x9E37_79B9_7F4A_7C15 | 1
            for i in 0..<p.count {
                x ^= x << 13
                x ^= x >> 7
                x ^= x << 17
                p[i] = UInt8(truncatingIfNeeded: x)
            }
        }
        withUnsafeBytes(of: gen.littleEndian) { d.replaceSubrange(0..<8, with: $0) }
        return d
    }

    static func gen(of data: Data) -> UInt64? {
        guard data.count >= 8 else { return nil }
        let g = data.prefix(8).withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }.littleEndian
        return bytes(g, length: data.count) == data ? g : nil
    }

    static func k(_ i: Int) -> CacheKey { CacheKey(url: "https://places-race.example/\(i).jpg") }

    /// Runs one writer (`ops` random operations on `keys` keys, flushing now and then) and
    /// `readers` reader threads checking every read against the history: a read must return
    /// a step begun before it ended and not older than the last step completed before it began.
    static func race(
        _ store: Store, history: Locked<History>, keys: Int, ops: Int, readers: Int, seed: UInt64,
        firstGen: UInt64, compactEvery: Int? = nil, reuse: Bool = false, keyOffset: Int = 0
    ) -> (violations: [String], reads: Int, nextGen: UInt64) {
        let stop = Locked(false)
        let violations = Locked<[String]>([])
        let reads = Locked(0)
        let group = DispatchGroup()
        for r in 0..<readers {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                var g = SeededGenerator(seed: seed &+ UInt64(r) &+ 100)
                var n = 0
                while !stop.withLock({ $0 }) {
                    let i = Int(g.next() % UInt64(keys))
                    let s0 = history.withLock { $0.done[i] }
                    let seen: Step
                    do {
                        if let entry = try store.entry(for: k(i + keyOffset)) {
                            guard let gen = gen(of: entry.data) else {
                                violations.withLock { $0.append("key \(i): wrong bytes (\(entry.data.count) bytes)") }
                                continue
                            }
                            if !reuse, entry.info.contentHash != ContentHash(hashing: [UInt8](entry.data)) {
                                violations.withLock { $0.append("key \(i): info hash does not match the bytes") }
                            }
                            seen = Step(gen: gen, etag: entry.info.metadata.etag)
                        } else {
                            seen = Step(gen: nil, etag: nil)
                        }
                    } catch {
                        violations.withLock { $0.append("key \(i): read threw \(error)") }
                        continue
                    }
                    n += 1
                    let (steps, s1) = history.withLock { ($0.steps[i], $0.steps[i].count) }
                    // Allowed: steps[s0-1 ..< s1] (the last completed before, up to the last begun).
                    let lo = max(s0 - 1, 0)
                    if !steps[lo..<s1].contains(seen) {
                        let place = steps.lastIndex(of: seen).map(String.init) ?? "never"
                        violations.withLock {
                            $0.append(
                                "key \(i): read \(seen) (step \(place)); allowed steps \(lo)..<\(s1): \(Array(steps[lo..<s1]))"
                            )
                        }
                    }
                }
                reads.withLock { $0 += n }
            }
        }
        var g = SeededGenerator(seed: seed)
        var nextGen = firstGen
        for op in 0..<ops {
            let i = Int(g.next() % UInt64(keys))
            let choice = g.next() % 10
            let current = history.withLock { $0.steps[i][$0.done[i] - 1] }
            do {
                if choice < 5 || current.gen == nil {
                    var gen = nextGen
                    nextGen += 1
                    let step0 = "p\(gen)"
                    if reuse && g.next() % 2 == 0 { gen = g.next() % 5 }
                    let step = Step(gen: gen, etag: step0)
                    history.withLock { $0.steps[i].append(step) }
                    try store.put(bytes(gen), for: k(i + keyOffset), metadata: EntryMetadata(etag: step.etag))
                } else if choice < 8 {
                    let tag = "u\(nextGen)"
                    nextGen += 1
                    history.withLock { $0.steps[i].append(Step(gen: current.gen, etag: tag)) }
                    let updated = try store.updateMetadata(EntryMetadata(etag: tag), for: k(i + keyOffset))
                    if !updated { violations.withLock { $0.append("key \(i): updateMetadata found no entry") } }
                } else {
                    history.withLock { $0.steps[i].append(Step(gen: nil, etag: nil)) }
                    let removed = try store.remove(k(i + keyOffset))
                    if !removed { violations.withLock { $0.append("key \(i): remove found no entry") } }
                }
                history.withLock { $0.done[i] = $0.steps[i].count }
                if op % 7 == 0 { try store.flush() }
                if let every = compactEvery, op % every == every - 1 { try store.compact() }
            } catch {
                violations.withLock { $0.append("writer op \(op) threw \(error)") }
                history.withLock { $0.done[i] = $0.steps[i].count }
            }
        }
        stop.withLock { $0 = true }
        group.wait()
        return (violations.withLock { $0 }, reads.withLock { $0 }, nextGen)
    }

    /// Cold readers (no location cache) race a writer overwriting, updating metadata and
    /// removing: every read is linearizable.
    @Test func coldReadersRacingWritesAreLinearizable() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.compactionInterval = nil
                $0.locationCacheLimit = 0
            }
            defer { try? store.close() }
            let keys = 16
            let history = Locked(
                History(steps: Array(repeating: [Step(gen: nil, etag: nil)], count: keys), done: Array(repeating: 1, count: keys))
            )
            let result = Self.race(store, history: history, keys: keys, ops: 3_000, readers: 2, seed: 1, firstGen: 1)
            #expect(result.violations.isEmpty, "\(result.violations.count) violations, first: \(result.violations.prefix(5))")
            print("attack19 cold race: reads \(result.reads), through places \(store.shared.withLock { $0.readsThroughPlaces })")
            #expect(try store.fsck().isClean)
        }
    }

    /// The same race right after reopening, while places load in the background, over many
    /// rounds of reopen.
    @Test func readersAndWritesRacingThePlaceLoadAreLinearizable() async throws {
        try await withTemporaryDirectory { dir in
            let keys = 3_000
            var nextGen: UInt64 = 1
            let history: Locked<History>
            do {
                let store = try openStore(dir) { $0.compactionInterval = nil }
                var steps: [[Step]] = []
                for i in 0..<keys {
                    let gen = nextGen
                    nextGen += 1
                    try store.put(Self.bytes(gen), for: Self.k(i), metadata: EntryMetadata(etag: "p\(gen)"))
                    steps.append([Step(gen: gen, etag: "p\(gen)")])
                }
                try store.close()
                history = Locked(History(steps: steps, done: Array(repeating: 1, count: keys)))
            }
            var total: [String] = []
            for round in 0..<6 {
                let store = try openStore(dir) {
                    $0.compactionInterval = nil
                    $0.locationCacheLimit = 0
                }
                let result = Self.race(
                    store, history: history, keys: keys, ops: 600, readers: 2, seed: UInt64(round) * 1_000 + 7,
                    firstGen: nextGen)
                nextGen = result.nextGen
                total += result.violations.map { "round \(round): \($0)" }
                print(
                    "attack19 load race round \(round): reads \(result.reads), through places \(store.shared.withLock { $0.readsThroughPlaces }), placeCount \(store.entryDigests.placeCount)"
                )
                store.waitForLoads()
                // After the load: every key cold, as the model says.
                for i in 0..<keys {
                    let want = history.withLock { $0.steps[i][$0.done[i] - 1] }
                    let got = try store.entry(for: Self.k(i))
                    let seen =
                        got.map { Step(gen: Self.gen(of: $0.data), etag: $0.info.metadata.etag) } ?? Step(gen: nil, etag: nil)
                    if seen != want { total.append("round \(round) after load: key \(i) \(seen) != \(want)") }
                }
                try store.close()
            }
            #expect(total.isEmpty, "\(total.count) violations, first: \(total.prefix(5))")
        }
    }

    /// The race with every blob under one hash (a constant hasher): equal and differing bytes of
    /// one length, several pending blobs per hash and length in a batch.
    @Test func readersRacingWritesUnderOneHashAreLinearizable() async throws {
        try await withTemporaryDirectory { dir in
            let hasher: @Sendable (UnsafeRawBufferPointer) -> ContentHash = { _ in ContentHash(high: 9, low: 9) }
            var total: [String] = []
            let keys = 12
            let history = Locked(
                History(steps: Array(repeating: [Step(gen: nil, etag: nil)], count: keys), done: Array(repeating: 1, count: keys))
            )
            var nextGen: UInt64 = 100
            for round in 0..<3 {
                let store = try openStore(dir, segmentSize: 256 << 10) {
                    $0.compactionInterval = nil
                    $0.locationCacheLimit = 0
                    $0.contentHasher = hasher
                }
                let result = Self.race(
                    store, history: history, keys: keys, ops: 800, readers: 2, seed: 500 + UInt64(round), firstGen: nextGen,
                    compactEvery: round == 2 ? 200 : nil, reuse: true)
                nextGen = result.nextGen
                total += result.violations.map { "round \(round): \($0)" }
                print("attack19 one-hash race round \(round): reads \(result.reads), through places \(store.readsThroughPlaces)")
                #expect(try store.fsck().isClean)
                try store.close()
            }
            #expect(total.isEmpty, "\(total.count) violations, first: \(total.prefix(5))")
        }
    }

    /// Two writers on disjoint keys (grouped puts of several threads in one cycle), each with a
    /// cold reader.
    @Test func twoWritersAndReadersAreLinearizable() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.compactionInterval = nil
                $0.locationCacheLimit = 0
            }
            defer { try? store.close() }
            let keys = 40
            let results = Locked<[String]>([])
            let group = DispatchGroup()
            for w in 0..<2 {
                group.enter()
                Thread.detachNewThread {
                    defer { group.leave() }
                    let history = Locked(
                        History(
                            steps: Array(repeating: [Step(gen: nil, etag: nil)], count: keys),
                            done: Array(repeating: 1, count: keys)))
                    let r = Self.race(
                        store, history: history, keys: keys, ops: 2_000, readers: 1, seed: 77 + UInt64(w),
                        firstGen: UInt64(w) << 40, keyOffset: w * 1_000)
                    results.withLock { $0 += r.violations }
                }
            }
            group.wait()
            let v = results.withLock { $0 }
            #expect(v.isEmpty, "\(v.count) violations, first: \(v.prefix(5))")
            print("attack19 two writers: through places \(store.readsThroughPlaces)")
            #expect(try store.fsck().isClean)
        }
    }

    /// The race with compaction passes (the compactor's link moves and blob moves) between
    /// writes.
    @Test func readersRacingWritesAndCompactionAreLinearizable() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir, segmentSize: 256 << 10) {
                $0.compactionInterval = nil
                $0.locationCacheLimit = 0
            }
            defer { try? store.close() }
            let keys = 24
            let history = Locked(
                History(steps: Array(repeating: [Step(gen: nil, etag: nil)], count: keys), done: Array(repeating: 1, count: keys))
            )
            let result = Self.race(
                store, history: history, keys: keys, ops: 1_500, readers: 2, seed: 99, firstGen: 1, compactEvery: 150)
            #expect(result.violations.isEmpty, "\(result.violations.count) violations, first: \(result.violations.prefix(5))")
            print(
                "attack19 compaction race: reads \(result.reads), through places \(store.shared.withLock { $0.readsThroughPlaces })"
            )
            #expect(try store.fsck().isClean)
        }
    }

    /// Every blob gets one hash (a constant hasher): bytes that differ under an equal hash and
    /// length, and equal bytes, in one batch and across batches; each key keeps its own bytes
    /// before and after commits, a compaction and a reopen.
    @Test func duplicateHashesInOneBatchKeepEachKeysBytes() async throws {
        try await withTemporaryDirectory { dir in
            let hasher: @Sendable (UnsafeRawBufferPointer) -> ContentHash = { _ in ContentHash(high: 7, low: 7) }
            func configure(_ c: inout Store.Configuration) {
                c.compactionInterval = nil
                c.contentHasher = hasher
                c.batchInterval = .seconds(3600)
                c.batchSize = 100_000
                c.locationCacheLimit = 0
            }
            var model: [Int: Data] = [:]
            do {
                let store = try openStore(dir, segmentSize: 128 << 10, configure)
                var g = SeededGenerator(seed: 5)
                for round in 0..<8 {
                    for _ in 0..<40 {
                        let i = Int(g.next() % 30)
                        // Few distinct values of one length: many equal, many differing.
                        let v = Self.bytes(g.next() % 6, length: 1_500)
                        if g.next() % 9 == 0 {
                            _ = try store.remove(Self.k(i))
                            model[i] = nil
                        } else {
                            guard try store.putWithoutWaiting(v, for: Self.k(i)) != nil else {
                                try store.put(v, for: Self.k(i))
                                model[i] = v
                                continue
                            }
                            model[i] = v
                        }
                        // Read back before the commit, from memory.
                        #expect(try store.data(for: Self.k(i)) == model[i], "round \(round) pending key \(i)")
                    }
                    for i in 0..<30 {
                        #expect(try store.data(for: Self.k(i)) == model[i], "round \(round) before flush key \(i)")
                    }
                    try store.flush()
                    for i in 0..<30 { #expect(try store.data(for: Self.k(i)) == model[i], "round \(round) after flush key \(i)") }
                    if round % 3 == 2 { try store.compact() }
                }
                try store.appender.withLock { state in #expect(!state.queue.holdsBlobs) }
                #expect(try store.fsck().isClean)
                try store.close()
            }
            let store = try openStore(dir, segmentSize: 128 << 10, configure)
            store.waitForLoads()
            for i in 0..<30 { #expect(try store.data(for: Self.k(i)) == model[i], "reopened key \(i)") }
            #expect(try store.fsck().isClean)
            try store.close()
        }
    }

    /// A cycle that fails on a full index (PRAGMA max_page_count) after overwriting committed
    /// keys with places: reads stay right while it fails and after the limit is lifted.
    @Test func aFullIndexBetweenOverwritesKeepsPlacesRight() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.compactionInterval = nil
                $0.batchInterval = .seconds(3600)
                $0.batchSize = 100_000
                $0.locationCacheLimit = 0
            }
            defer { try? store.close() }
            func key(_ i: Int) -> CacheKey { CacheKey(url: "https://full.example/\(i)/" + String(repeating: "u", count: 1_800)) }
            var model: [Int: Data] = [:]
            for i in 0..<40 {
                try store.put(Self.bytes(UInt64(i)), for: key(i))
                model[i] = Self.bytes(UInt64(i))
            }
            try store.flush()
            let placed = store.entryDigests.placeCount
            try store.committer.withLock { state in
                let index = try #require(state).index
                let pages = try #require(try index.connection.statement("PRAGMA page_count").first { $0.int64(0) })
                try index.connection.execute("PRAGMA max_page_count = \(pages)")
            }
            var gen: UInt64 = 1_000
            for round in 0..<3 {
                for i in 0..<40 where i % 2 == round % 2 {
                    gen += 1
                    try store.put(Self.bytes(gen), for: key(i))
                    model[i] = Self.bytes(gen)
                }
                for i in 40 + round * 20..<60 + round * 20 {
                    gen += 1
                    try store.put(Self.bytes(gen), for: key(i))
                    model[i] = Self.bytes(gen)
                }
                _ = #expect(throws: StoreError.self) { try store.flush() }
                for (i, v) in model { #expect(try store.data(for: key(i)) == v, "round \(round), key \(i)") }
            }
            try store.committer.withLock { state in
                try #require(state).index.connection.execute("PRAGMA max_page_count = 1073741823")
            }
            try store.flush()
            for (i, v) in model { #expect(try store.data(for: key(i)) == v, "after, key \(i)") }
            print(
                "attack19 full index: places before \(placed), after \(store.entryDigests.placeCount), through places \(store.shared.withLock { $0.readsThroughPlaces })"
            )
            #expect(try store.fsck().isClean)
        }
    }
}

extension PlacesRaceAttackTests {
    /// Rows the compactor removes itself (a TTL, eviction by capacity), not through the location
    /// map: their places must go with them; cold readers racing the passes never see a removed
    /// entry after its pass returned, and never wrong bytes.
    @Test func compactorRemovalsTakePlacesAway() async throws {
        try await withTemporaryDirectory { dir in
            let clock = Locked(Int64(10_000_000))
            let store = try openStore(dir, segmentSize: 256 << 10) {
                $0.compactionInterval = nil
                $0.locationCacheLimit = 0
                $0.clock = { clock.withLock { $0 } }
            }
            defer { try? store.close() }
            let keys = 200
            for i in 0..<keys { try store.put(Self.bytes(UInt64(i)), for: Self.k(i)) }
            try store.flush()
            // Cold reads: places in use.
            for i in 0..<keys { #expect(try store.data(for: Self.k(i)) == Self.bytes(UInt64(i))) }
            let before = store.readsThroughPlaces
            #expect(before > 0)
            // Half the keys written again later; the rest expire by TTL.
            clock.withLock { $0 += 60_000 }
            for i in 0..<keys where i % 2 == 0 { try store.put(Self.bytes(UInt64(1_000 + i)), for: Self.k(i)) }
            try store.flush()
            let stop = Locked(false)
            let bad = Locked<[String]>([])
            let passed = Locked(false)
            let group = DispatchGroup()
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                var g = SeededGenerator(seed: 3)
                while !stop.withLock({ $0 }) {
                    let i = Int(g.next() % UInt64(keys))
                    let after = passed.withLock { $0 }
                    do {
                        let d = try store.data(for: Self.k(i))
                        if i % 2 == 0 {
                            if d != Self.bytes(UInt64(1_000 + i)) {
                                bad.withLock { $0.append("kept key \(i): \(String(describing: d?.count))") }
                            }
                        } else if let d {
                            if d != Self.bytes(UInt64(i)) { bad.withLock { $0.append("key \(i): wrong bytes") } }
                            if after { bad.withLock { $0.append("key \(i): served after its removal") } }
                        }
                    } catch {
                        bad.withLock { $0.append("key \(i): \(error)") }
                    }
                }
            }
            try store.compact(timeToLive: .seconds(30))
            passed.withLock { $0 = true }
            usleep(300_000)
            stop.withLock { $0 = true }
            group.wait()
            #expect(bad.withLock { $0 }.isEmpty, "\(bad.withLock { $0 }.prefix(5))")
            for i in 0..<keys {
                #expect(try store.data(for: Self.k(i)) == (i % 2 == 0 ? Self.bytes(UInt64(1_000 + i)) : nil), "key \(i)")
            }
            #expect(try store.fsck().isClean)
        }
    }
}

extension PlacesRaceAttackTests {
    /// Writes the index could not take (full) when the store closed: the next open replays them
    /// from the packs, with places staged by the replay and loaded after it; every key reads as
    /// last written (bytes and etag), cold, before and after the load, and after a pass.
    @Test func replayedWritesAfterAFullIndexReadRightThroughPlaces() async throws {
        try await withTemporaryDirectory { dir in
            func key(_ i: Int) -> CacheKey {
                CacheKey(url: "https://replay.example/\(i)/" + String(repeating: "u", count: 1_500))
            }
            var model: [Int: (Data, String?)] = [:]
            do {
                let store = try openStore(dir) {
                    $0.compactionInterval = nil
                    $0.batchInterval = .seconds(3600)
                    $0.batchSize = 100_000
                    $0.locationCacheLimit = 0
                }
                for i in 0..<60 {
                    try store.put(Self.bytes(UInt64(i)), for: key(i), metadata: EntryMetadata(etag: "a\(i)"))
                    model[i] = (Self.bytes(UInt64(i)), "a\(i)")
                }
                try store.flush()
                for i in 0..<60 { _ = try store.data(for: key(i)) }
                try store.committer.withLock { state in
                    let index = try #require(state).index
                    let pages = try #require(try index.connection.statement("PRAGMA page_count").first { $0.int64(0) })
                    try index.connection.execute("PRAGMA max_page_count = \(pages)")
                }
                for i in 0..<60 {
                    switch i % 4 {
                    case 0:
                        try store.put(Self.bytes(UInt64(500 + i)), for: key(i), metadata: EntryMetadata(etag: "b\(i)"))
                        model[i] = (Self.bytes(UInt64(500 + i)), "b\(i)")
                    case 1:
                        #expect(try store.updateMetadata(EntryMetadata(etag: "m\(i)"), for: key(i)))
                        model[i]!.1 = "m\(i)"
                    case 2:
                        #expect(try store.remove(key(i)))
                        model[i] = nil
                    default: break
                    }
                }
                for i in 60..<100 {
                    try store.put(Self.bytes(UInt64(i)), for: key(i), metadata: EntryMetadata(etag: "a\(i)"))
                    model[i] = (Self.bytes(UInt64(i)), "a\(i)")
                }
                _ = #expect(throws: StoreError.self) { try store.flush() }
                try? store.close()
            }
            for round in 0..<2 {
                let store = try openStore(dir) {
                    $0.compactionInterval = nil
                    $0.locationCacheLimit = 0
                }
                for i in 0..<100 {
                    let e = try store.entry(for: key(i))
                    #expect(e?.data == model[i]?.0 && e?.info.metadata.etag == model[i]?.1, "round \(round) early key \(i)")
                }
                store.waitForLoads()
                for i in 0..<100 {
                    let e = try store.entry(for: key(i))
                    #expect(e?.data == model[i]?.0 && e?.info.metadata.etag == model[i]?.1, "round \(round) loaded key \(i)")
                }
                try store.compact()
                for i in 0..<100 {
                    let e = try store.entry(for: key(i))
                    #expect(e?.data == model[i]?.0 && e?.info.metadata.etag == model[i]?.1, "round \(round) compacted key \(i)")
                }
                #expect(try store.fsck().isClean)
                print("attack19 replay round \(round): through places \(store.readsThroughPlaces)")
                try store.close()
            }
        }
    }
}

extension PlacesRaceAttackTests {
    /// Raw statements on the writer's connection, in every commit shape SQLite has: a savepoint
    /// released as the outermost transaction, a rolled-back savepoint inside a committed one,
    /// several autocommit statements in one exec, a DELETE … RETURNING stepped once: each changed
    /// row loses its place by the time the change is committed.
    @Test func everyCommitShapeTakesChangedPlacesAway() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.compactionInterval = nil }
            defer { try? store.close() }
            for i in 0..<10 { try store.put(Self.bytes(UInt64(i)), for: Self.k(i)) }
            try store.flush()
            store.waitForLoads()
            let table = store.entryDigests
            func placed(_ i: Int) -> Bool { !table.placedCandidates(Self.k(i).digest).isEmpty }
            func id(_ i: Int) throws -> Int64 { try #require(table.candidates(Self.k(i).digest).first) }
            for i in 0..<10 { #expect(placed(i), "key \(i) placed at first") }
            let ids = try (0..<10).map(id)
            try store.committer.withLock { state in
                let c = try #require(state).index.connection
                try c.execute("SAVEPOINT a; UPDATE entries SET etag = 'x' WHERE id = \(ids[0]); RELEASE a")
                #expect(!placed(0), "savepoint released")
                try c.execute(
                    "BEGIN IMMEDIATE; SAVEPOINT b; UPDATE entries SET etag = 'y' WHERE id = \(ids[1]); ROLLBACK TO b; RELEASE b; UPDATE entries SET etag = 'z' WHERE id = \(ids[2]); COMMIT"
                )
                #expect(!placed(2), "committed after a savepoint rollback")
                try c.execute(
                    "UPDATE entries SET etag = 'p' WHERE id = \(ids[3]); UPDATE entries SET etag = 'q' WHERE id = \(ids[4])")
                #expect(!placed(3) && !placed(4), "autocommit in one exec")
                _ = try c.statement("UPDATE entries SET etag = 'r' WHERE id IN (\(ids[5]), \(ids[6])) RETURNING id").first {
                    $0.int64(0)
                }
                #expect(!placed(5) && !placed(6), "RETURNING stepped once")
                try c.execute("BEGIN IMMEDIATE; UPDATE entries SET etag = 's' WHERE id = \(ids[7]); ROLLBACK")
                try c.execute("BEGIN IMMEDIATE; UPDATE entries SET etag = 't' WHERE id = \(ids[8]); COMMIT")
                #expect(!placed(8), "explicit commit")
                #expect(placed(9), "untouched row keeps its place")
            }
        }
    }
}
