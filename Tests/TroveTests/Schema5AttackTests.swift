import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

#if canImport(Glibc)
    import Glibc
#endif

@testable import TroveIndex
@_spi(Testing) @testable import TroveStore
@testable import TrovePack

/// Attacks on index schema 5 and the cheaper apply (issue 11): a URL's keys found through the
/// original's digest plus the partial index of variants; dedup candidates from in-memory hints
/// (which may be stale, wrong or shared — they must only ever cost a missed dedup); the
/// committer's inserts that do nothing on conflict; hashes read from 16-byte columns that a
/// damaged index may hold at another length or type; and the v4 → v5 migration.
@Suite struct Schema5AttackTests {
    /// One of a small set of contents: some share a length (so a per-length hasher makes full
    /// 128-bit collisions), one is empty.
    static func content(_ id: Int) -> Data {
        let lengths = [1500, 1500, 2600, 2600, 0, 3100, 1500, 700]
        return Data(testBytes(seed: 0x5C4E_0000 &+ UInt64(id), count: lengths[id % lengths.count]))
    }
    static let contentCount = 8

    /// How a store addresses content: the real XXH3, every content sharing the 64 bits the
    /// hints are keyed by, or equal lengths sharing the whole hash.
    enum Hashing: Int, CaseIterable, CustomStringConvertible {
        case real, sharedPrefix, fullCollisionPerLength

        var hasher: @Sendable (UnsafeRawBufferPointer) -> ContentHash {
            switch self {
            case .real: { XXH3.hash128($0) }
            case .sharedPrefix: { ContentHash(high: 0x5EED, low: XXH3.hash128($0).low) }
            case .fullCollisionPerLength: { ContentHash(high: 1, low: UInt64($0.count)) }
            }
        }

        var description: String { ["real", "sharedPrefix", "fullCollisionPerLength"][rawValue] }
    }

    static func open(
        _ dir: String, hashing: Hashing = .real, durability: Durability = .none, segmentSize: Int64 = 16 << 10,
        _ configure: (inout Store.Configuration) -> Void = { _ in }
    ) throws -> Store {
        try openStore(dir, durability: durability, segmentSize: segmentSize) {
            $0.contentHasher = hashing.hasher
            $0.compactionInterval = nil
            $0.rewriteLiveRatio = 0.9
            configure(&$0)
        }
    }

    /// The bytes `store` serves for `key` must be `expected` (nil: nothing); a typed error is
    /// tolerated only when `allowErrors`.
    static func check(
        _ store: Store, _ key: CacheKey, _ expected: Data?, _ context: String, allowErrors: Bool = false,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        do {
            let got = try store.data(for: key)
            #expect(
                got == expected, "\(context): \(key) served \(got.map { "\($0.count) bytes" } ?? "nothing")",
                sourceLocation: sourceLocation)
        } catch {
            if !allowErrors { Issue.record("\(context): \(key) threw \(error)", sourceLocation: sourceLocation) }
        }
    }

    // MARK: 1. A URL's keys

    /// Originals and many variants of URLs with odd bytes, some expired, found by `keys(url:)`,
    /// `entries(url:)` and `removeAll(url:)` while queued, committed and after a reopen.
    @Test func everyKeyOfAURLIsListedAndRemovedWhateverItsBytes() async throws {
        try await withTemporaryDirectory { dir in
            let clock = TestClock(start: 1_700_000_000_000)
            let urls = [
                "", " ", "https://odd.example/a b?c=%00&d=\u{7F}", "https://odd.example/ü/日本/🙂",
                "https://odd.example/" + String(repeating: "long/", count: 900), "'; DROP TABLE entries; --",
                "https://odd.example/x", "https://odd.example/x/",
            ]
            let variants = 0..<60
            func expectedKeys(_ url: String) -> [CacheKey] {
                ([CacheKey(url: url)] + variants.map { CacheKey(url: url, variant: "w\($0)-q80") }).sorted()
            }
            var store = try Self.open(dir) { $0.clock = clock.now }
            for (u, url) in urls.enumerated() {
                try store.put(Self.content(u), for: CacheKey(url: url))
                for v in variants {
                    // Every third variant expires at once: still listed, still removed.
                    let expiry = v % 3 == 0 ? Date(timeIntervalSince1970: 1_700_000_000) : nil
                    try store.put(
                        Self.content(v), for: CacheKey(url: url, variant: "w\(v)-q80"),
                        metadata: EntryMetadata(expiresAt: expiry))
                }
            }
            for url in urls { #expect(try store.keys(url: url) == expectedKeys(url), "queued: \(url.prefix(40))") }
            try store.flush()
            for url in urls {
                #expect(try store.keys(url: url) == expectedKeys(url), "committed: \(url.prefix(40))")
                let listed = try store.entries(url: url).map(\.key)
                #expect(Set(listed) == Set(expectedKeys(url)), "entries: \(url.prefix(40))")
                #expect(listed == listed.sorted { $0.variant < $1.variant }, "entries by variant: \(url.prefix(40))")
            }
            // The index alone (a fresh process, an empty location map) answers the same.
            try store.close()
            store = try Self.open(dir) { $0.clock = clock.now }
            for url in urls { #expect(try store.keys(url: url) == expectedKeys(url), "reopened: \(url.prefix(40))") }
            // Remove every other URL, half of them before a commit of the previous removals.
            for (u, url) in urls.enumerated() where u % 2 == 0 {
                #expect(try store.removeAll(url: url) == expectedKeys(url).count, "removeAll: \(url.prefix(40))")
                if u % 4 == 0 { try store.flush() }
            }
            for round in 0..<2 {
                for (u, url) in urls.enumerated() {
                    #expect(
                        try store.keys(url: url) == (u % 2 == 0 ? [] : expectedKeys(url)), "round \(round): \(url.prefix(40))")
                }
                try store.close()
                store = try Self.open(dir) { $0.clock = clock.now }
            }
            #expect(try store.fsck().isClean)
            try store.close()
        }
    }

    /// A row of another URL that claims this URL's url_hash (a 64-bit collision, made by hand)
    /// or sits at the original's digest with another URL is never listed for it.
    @Test func rowsOfOtherURLsAreNeverListedForAURL() async throws {
        try await withTemporaryDirectory { dir in
            let a = "https://collide.example/a"
            let b = "https://collide.example/b"
            do {
                let store = try Self.open(dir)
                try store.put(Self.content(0), for: CacheKey(url: a))
                try store.put(Self.content(1), for: CacheKey(url: a, variant: "v"))
                try store.put(Self.content(2), for: CacheKey(url: b))
                try store.put(Self.content(3), for: CacheKey(url: b, variant: "v"))
                try store.close()
            }
            do {
                let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
                try index.connection.execute(
                    "UPDATE entries SET url_hash = \(CacheKey.urlDigest(a)) WHERE url = '\(b)'")
            }
            let store = try Self.open(dir)
            #expect(try store.keys(url: a) == [CacheKey(url: a), CacheKey(url: a, variant: "v")])
            #expect(try store.entries(url: a).map(\.key) == [CacheKey(url: a), CacheKey(url: a, variant: "v")])
            // b's original is still found by its digest; its variant was lost to the damaged hash.
            #expect(try store.keys(url: b).contains(CacheKey(url: b)))
            #expect(try store.removeAll(url: a) == 2)
            #expect(try store.data(for: CacheKey(url: b)) == Self.content(2))
            #expect(try store.data(for: CacheKey(url: b, variant: "v")) == Self.content(3))
            try store.close()
        }
    }

    // MARK: 2. Dedup hints

    /// Hints that name the wrong blob — nothing, another content, a full hash collision, a blob
    /// made dead, a reclaimed one — are planted before every put: reads stay exact.
    @Test func plantedWrongHintsNeverLinkWrongBytes() async throws {
        for hashing in Hashing.allCases {
            try await withTemporaryDirectory { dir in
                let store = try Self.open(dir, hashing: hashing)
                var model: [CacheKey: Int] = [:]
                var g = SeededGenerator(seed: 0x41A7 &+ UInt64(hashing.rawValue))
                for n in 0..<240 {
                    let ids = try store.readIndex { try $0.blobRows() }.map(\.id)
                    let c = Int(g.next() % UInt64(Self.contentCount))
                    let bytes = Self.content(c)
                    let hash = bytes.withUnsafeBytes { hashing.hasher($0) }
                    // A wrong hint for this put's hash: an id that never was, or any blob's.
                    let planted: Int64 =
                        g.next() % 4 == 0 || ids.isEmpty ? Int64(bitPattern: g.next()) : ids[Int(g.next() % UInt64(ids.count))]
                    store.dedupHints.withLock { hints in
                        if !hints.isLoaded { try? store.readIndex { try hints.load(from: $0) } }
                        hints.add(hash, id: planted)
                    }
                    let key = CacheKey(url: "https://hint.example/\(g.next() % 24)")
                    try store.put(bytes, for: key)
                    model[key] = c
                    Self.check(store, key, bytes, "\(hashing) put \(n)")
                    switch g.next() % 8 {
                    case 0: try store.flush()
                    case 1:
                        let victim = CacheKey(url: "https://hint.example/\(g.next() % 24)")
                        try store.remove(victim)
                        model[victim] = nil
                    case 2: try store.compact()
                    default: break
                    }
                }
                try store.flush()
                for (key, c) in model { Self.check(store, key, Self.content(c), "\(hashing) final") }
                let report = try store.fsck()
                #expect(report.isClean, "\(hashing): \(report.findings)")
                try store.close()
            }
        }
    }

    /// A blob whose last entry was removed (refs 0) is linked again by a put of equal bytes,
    /// across commits, a compaction of its segment and a reopen; one that was reclaimed is
    /// stored again.
    @Test func aDeadBlobIsRelinkedOrStoredAgainNeverLost() async throws {
        try await withTemporaryDirectory { dir in
            var store = try Self.open(dir, segmentSize: 8 << 10)
            let a = Self.content(5)
            try store.put(a, for: CacheKey(url: "a1"))
            try store.flush()
            try store.remove(CacheKey(url: "a1"))
            try store.flush()
            let rows = try store.readIndex { try $0.blobRows() }
            #expect(rows.count == 1 && rows.first?.references == 0)
            // Relinked: no new blob.
            try store.put(a, for: CacheKey(url: "a2"))
            try store.flush()
            let relinked = try store.readIndex { try $0.blobRows() }
            #expect(relinked.map(\.id) == rows.map(\.id) && relinked.first?.references == 1)
            // Fill and seal segments, then compact: the relinked blob moves and stays served.
            for i in 0..<12 { try store.put(Self.content(i % 4), for: CacheKey(url: "fill\(i)")) }
            for i in 0..<12 { try store.remove(CacheKey(url: "fill\(i)")) }
            try store.compact()
            Self.check(store, CacheKey(url: "a2"), a, "after compaction")
            // Dead again, reclaimed by a compaction, then put again: stored anew.
            try store.remove(CacheKey(url: "a2"))
            for i in 0..<12 { try store.put(Self.content(i % 4), for: CacheKey(url: "more\(i)")) }
            try store.compact()
            try store.put(a, for: CacheKey(url: "a3"))
            Self.check(store, CacheKey(url: "a3"), a, "after reclaim, queued")
            try store.flush()
            Self.check(store, CacheKey(url: "a3"), a, "after reclaim, committed")
            try store.close()
            store = try Self.open(dir, segmentSize: 8 << 10)
            Self.check(store, CacheKey(url: "a3"), a, "reopened")
            #expect(try store.fsck().isClean)
            try store.close()
        }
    }

    /// Writers put a few contents under their own keys (so that dead blobs of equal bytes
    /// abound) and remove them, while another thread compacts a store of tiny segments without
    /// pause: every put links to bytes that stay where it found them.
    @Test(arguments: [Hashing.real, .fullCollisionPerLength])
    func putsRacingCompactionKeepEveryValue(hashing: Hashing) async throws {
        try await withTemporaryDirectory { dir in
            let store = try Self.open(dir, hashing: hashing, segmentSize: 12 << 10) { $0.batchSize = 16 }
            let writers = 3
            let failures = Locked<[String]>([])
            let models = Locked<[[CacheKey: Int]]>(Array(repeating: [:], count: writers))
            let done = Locked(0)
            let finished = DispatchSemaphore(value: 0)
            let deadline = ContinuousClock.now + .seconds(4)
            for w in 0..<writers {
                Thread {
                    var g = SeededGenerator(seed: 0xACE0 &+ UInt64(w))
                    var model: [CacheKey: Int] = [:]
                    do {
                        var n = 0
                        while ContinuousClock.now < deadline || n < 300 {
                            n += 1
                            let key = CacheKey(
                                url: "https://race.example/\(w)/\(g.next() % 16)", variant: g.next() % 3 == 0 ? "v" : "")
                            if g.next() % 3 == 0 {
                                try store.remove(key)
                                model[key] = nil
                            } else {
                                let c = Int(g.next() % 4)
                                try store.put(Self.content(c), for: key)
                                model[key] = c
                            }
                            let probe = Array(model.keys).randomElement(using: &g)
                            if let probe, try store.data(for: probe) != Self.content(model[probe]!) {
                                failures.withLock { $0.append("writer \(w) op \(n): \(probe) read back wrong bytes") }
                            }
                        }
                    } catch {
                        failures.withLock { $0.append("writer \(w): \(error)") }
                    }
                    models.withLock { $0[w] = model }
                    done.withLock { $0 += 1 }
                    finished.signal()
                }.start()
            }
            Thread {
                var passes = 0
                while done.withLock({ $0 }) < writers {
                    do {
                        try store.compact()
                        passes += 1
                    } catch {
                        failures.withLock { $0.append("compactor: \(error)") }
                        break
                    }
                }
                print("Schema5AttackTests: \(hashing): \(passes) compaction passes raced the writers")
                finished.signal()
            }.start()
            for _ in 0...writers { finished.wait() }
            #expect(failures.withLock { $0 } == [])
            try store.flush()
            let model = models.withLock { $0 }.reduce(into: [CacheKey: Int]()) { $0.merge($1) { a, _ in a } }
            for (key, c) in model { Self.check(store, key, Self.content(c), "\(hashing) after the race") }
            let report = try store.fsck()
            #expect(report.isClean, "\(hashing): \(report.findings)")
            try store.close()
            let reopened = try Self.open(dir, hashing: hashing, segmentSize: 12 << 10)
            for (key, c) in model { Self.check(reopened, key, Self.content(c), "\(hashing) reopened") }
            try reopened.close()
        }
    }

    /// The put's one clock read falls between its dedup lookup (the hint, the row, the byte
    /// compare) and the appender lock: a trap there runs a whole compaction pass that moves
    /// (`live`) or reclaims (dead) the very blob the put just found. The put must not link to
    /// the place it found: the bytes go in anew and every key reads back.
    @Test(arguments: [false, true])
    func aCompactionBetweenTheLookupAndTheAppenderIsSeen(live: Bool) async throws {
        try await withTemporaryDirectory { dir in
            let box = Locked<Store?>(nil)
            let trap = Locked<UInt?>(nil)
            let sprung = Locked(0)
            let store = try Self.open(dir, segmentSize: 8 << 10) { configuration in
                configuration.clock = {
                    let armed = trap.withLock { armed -> Bool in
                        guard armed == UInt(pthread_self()) else { return false }
                        armed = nil
                        return true
                    }
                    if armed, let store = box.withLock({ $0 }) {
                        do {
                            try store.compact()
                            sprung.withLock { $0 += 1 }
                        } catch {
                            Issue.record("the trap's compaction: \(error)")
                        }
                    }
                    return wallClockMilliseconds()
                }
            }
            box.withLock { $0 = store }
            defer { box.withLock { $0 = nil } }
            let a = Self.content(5)
            try store.put(a, for: CacheKey(url: "a1"))
            // Seal a1's segment with fillers that are removed: the segment is sparse.
            for i in 0..<6 { try store.put(Self.content(i % 4), for: CacheKey(url: "fill\(i)")) }
            for i in 0..<6 { try store.remove(CacheKey(url: "fill\(i)")) }
            if !live { try store.remove(CacheKey(url: "a1")) }
            try store.flush()
            let found = try #require(try store.readIndex { try $0.blobRows() }.first { $0.length == UInt64(a.count) })
            // Without a trap this put would link to `found` (the hints name it, its bytes match).
            trap.withLock { $0 = UInt(pthread_self()) }
            try store.put(a, for: CacheKey(url: "a2"))
            #expect(sprung.withLock { $0 } == 1)
            Self.check(store, CacheKey(url: "a2"), a, "queued")
            try store.flush()
            Self.check(store, CacheKey(url: "a2"), a, "committed")
            if live { Self.check(store, CacheKey(url: "a1"), a, "committed") }
            let after = try store.readIndex { try $0.blobRows() }
            if !live { #expect(!after.contains { $0.id == found.id }, "the dead blob was reclaimed") }
            #expect(after.contains { $0.length == UInt64(a.count) && $0.id != found.id }, "a2's bytes stored anew")
            let report = try store.fsck()
            #expect(report.isClean, "\(report.findings)")
            try store.compact()
            Self.check(store, CacheKey(url: "a2"), a, "compacted again")
            try store.close()
            let reopened = try Self.open(dir, segmentSize: 8 << 10)
            Self.check(reopened, CacheKey(url: "a2"), a, "reopened")
            if live { Self.check(reopened, CacheKey(url: "a1"), a, "reopened") }
            try reopened.close()
        }
    }

    /// Many threads put equal bytes at once under their own keys: all served, few copies.
    @Test func concurrentPutsOfEqualBytesShareABlob() async throws {
        try await withTemporaryDirectory { dir in
            let store = try Self.open(dir, segmentSize: 1 << 20)
            let bytes = Self.content(3)
            let threads = 8
            let finished = DispatchSemaphore(value: 0)
            let failures = Locked<[String]>([])
            for t in 0..<threads {
                Thread {
                    do {
                        for i in 0..<50 { try store.put(bytes, for: CacheKey(url: "https://same.example/\(t)/\(i)")) }
                    } catch {
                        failures.withLock { $0.append("\(error)") }
                    }
                    finished.signal()
                }.start()
            }
            for _ in 0..<threads { finished.wait() }
            #expect(failures.withLock { $0 } == [])
            try store.flush()
            for t in 0..<threads {
                for i in 0..<50 { Self.check(store, CacheKey(url: "https://same.example/\(t)/\(i)"), bytes, "concurrent") }
            }
            let blobs = try store.statistics().blobs
            print("Schema5AttackTests: \(threads * 50) concurrent puts of equal bytes left \(blobs) blobs")
            #expect(blobs >= 1 && blobs <= 4)
            #expect(try store.fsck().isClean)
            try store.close()
        }
    }

    /// Hints after `fsck --repair` of an index damaged under an open store, and after an index
    /// rebuild: equal bytes are deduplicated again where the index allows, never misplaced.
    @Test func hintsAfterRepairAndRebuild() async throws {
        try await withTemporaryDirectory { dir in
            var store = try Self.open(dir, segmentSize: 1 << 20)
            for c in 0..<Self.contentCount { try store.put(Self.content(c), for: CacheKey(url: "r\(c)")) }
            try store.flush()
            // The hints are loaded and name every blob.
            try store.put(Self.content(0), for: CacheKey(url: "r0-again"))
            try store.flush()
            let blobsBefore = try store.statistics().blobs
            #expect(blobsBefore == Self.contentCount)
            // Damage content 0's blob row (the first blob stored) under the open store: a wrong offset.
            let rows = try store.readIndex { try $0.blobRows() }
            let one = try #require(rows.min { $0.id < $1.id })
            do {
                let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
                try index.connection.execute("UPDATE blobs SET offset = offset + 7 WHERE id = \(one.id)")
            }
            // The damaged row fails the byte check: no dedup onto it.
            try store.put(Self.content(0), for: CacheKey(url: "after-damage"))
            try store.flush()
            Self.check(store, CacheKey(url: "after-damage"), Self.content(0), "after damage")
            let report = try store.fsck(repair: true)
            #expect(!report.isClean)
            // Repair deleted and rewrote blob rows: the hints were emptied and load again.
            store.waitForLoads()
            let rowIDs = Set(try store.readIndex { try $0.blobRows() }.map(\.id))
            #expect(store.dedupHints.withLock { $0.isLoaded && $0.hintedIDs.isSubset(of: rowIDs) }, "hints after repair")
            let again = try store.fsck()
            #expect(again.isClean, "after repair: \(again.findings)")
            for c in 0..<Self.contentCount {
                try store.put(Self.content(c), for: CacheKey(url: "after-repair\(c)"))
                Self.check(store, CacheKey(url: "after-repair\(c)"), Self.content(c), "after repair")
            }
            try store.flush()
            for c in 0..<Self.contentCount {
                Self.check(store, CacheKey(url: "r\(c)"), Self.content(c), "after repair", allowErrors: false)
            }
            try store.close()
            _ = try Store.rebuildIndex(directory: dir + "/store")
            store = try Self.open(dir, segmentSize: 1 << 20)
            let blobsRebuilt = try store.statistics().blobs
            for c in 0..<Self.contentCount { try store.put(Self.content(c), for: CacheKey(url: "after-rebuild\(c)")) }
            try store.flush()
            #expect(try store.statistics().blobs == blobsRebuilt, "equal bytes deduplicated after a rebuild")
            for c in 0..<Self.contentCount {
                Self.check(store, CacheKey(url: "after-rebuild\(c)"), Self.content(c), "after rebuild")
                Self.check(store, CacheKey(url: "r\(c)"), Self.content(c), "after rebuild")
            }
            #expect(try store.fsck().isClean)
            try store.close()
        }
    }

    /// Hints never outgrow the blob rows they were loaded from plus the blobs appended since:
    /// churn (distinct contents put, removed, compacted away) keeps them bounded.
    @Test func hintsStayBoundedUnderChurn() async throws {
        try await withTemporaryDirectory { dir in
            let store = try Self.open(dir, segmentSize: 32 << 10)
            var counter: UInt64 = 0
            for round in 0..<8 {
                for i in 0..<150 {
                    counter += 1
                    try store.put(Data(testBytes(seed: counter, count: 400)), for: CacheKey(url: "churn\(i)"))
                }
                for i in 0..<150 where i % 5 != 0 { try store.remove(CacheKey(url: "churn\(i)")) }
                try store.compact()
                let blobs = try store.statistics().blobs
                let hints = store.dedupHints.withLock { $0.count }
                #expect(hints <= blobs + 150, "round \(round): \(hints) hints for \(blobs) blobs")
                // A pass forgets exactly the blobs it deleted: every hint left names a blob row.
                let rowIDs = Set(try store.readIndex { try $0.blobRows() }.map(\.id))
                let stale = store.dedupHints.withLock { $0.hintedIDs.subtracting(rowIDs) }
                #expect(stale.isEmpty, "round \(round): hints name deleted blobs \(stale.sorted())")
            }
            try store.close()
        }
    }

    // MARK: 3. Idempotent apply

    /// Applying every record of the packs to an empty index twice, the way the committer does:
    /// the second pass changes nothing and reports nothing applied.
    @Test func applyingTheRecordsTwiceChangesNothing() async throws {
        try await withTemporaryDirectory { dir in
            let store = try Self.open(dir, segmentSize: 1 << 20)
            var g = SeededGenerator(seed: 77)
            for _ in 0..<300 {
                let key = CacheKey(url: "https://apply.example/\(g.next() % 20)", variant: g.next() % 2 == 0 ? "" : "w")
                if g.next() % 4 == 0 { try store.remove(key) } else { try store.put(Self.content(Int(g.next() % 8)), for: key) }
            }
            try store.flush()
            let expected = try store.readIndex { try $0.entryRows() }.map { "\($0.key)@\($0.sequence)>\($0.blobID)" }
            try store.close()
            let packs = dir + "/store/packs"
            var records: [(ScannedRecord, UInt32)] = []
            for id in try PackDirectory.segmentIDs(in: packs) {
                let file = try SegmentFile.open(id: id, in: packs, writable: false)
                _ = try SegmentScanner.scan(file) { records.append(($0, id)) }
            }
            let index = try IndexDatabase(path: dir + "/fresh.sqlite", readOnly: false)
            for id in Set(records.map(\.1)).sorted() { try index.writing { try index.insertSegment(id: id, indexedBytes: 0) } }
            let applier = IndexApplier(index: index)
            func dump() throws -> [String] {
                try index.entryRows().map { "\($0.key)@\($0.sequence)>\($0.blobID)" }
                    + index.blobRows().map { "blob \($0.id) \($0.hash) \($0.length) refs \($0.references)" }
            }
            // Each record twice in a row (a commit cycle retried after its records were applied):
            // the second application is a no-op.
            var applied = 0
            try index.writing {
                for (record, segment) in records {
                    if try applier.apply(record, segment: segment) == .applied { applied += 1 }
                    let again = try applier.apply(record, segment: segment)
                    #expect(again != .applied, "\(record.content) at \(segment):\(record.offset) applied twice")
                }
            }
            #expect(applied > 0)
            let once = try dump()
            #expect(try index.entryRows().map { "\($0.key)@\($0.sequence)>\($0.blobID)" } == expected)
            // The whole history again (a replay from an older point): the same index at the end.
            try index.writing { for (record, segment) in records { _ = try applier.apply(record, segment: segment) } }
            #expect(try dump() == once)
        }
    }

    // MARK: 4. Damaged hash columns

    /// An index whose 16-byte columns were damaged — a hash or key digest of 15 or 17 bytes, or
    /// TEXT instead of BLOB — never makes the store crash or serve another key's bytes, and
    /// `fsck --repair` leaves a store whose second check is clean.
    @Test(arguments: [
        "UPDATE blobs SET hash = substr(hash, 1, 15) WHERE id = (SELECT blob FROM entries WHERE url = 'k1')",
        "UPDATE blobs SET hash = hash || x'00' WHERE id = (SELECT blob FROM entries WHERE url = 'k1')",
        "UPDATE blobs SET hash = CAST(hash AS TEXT) WHERE id = (SELECT blob FROM entries WHERE url = 'k1')",
        "UPDATE entries SET key_hash = substr(key_hash, 1, 15) WHERE url = 'k2'",
        "UPDATE entries SET key_hash = key_hash || x'00' WHERE url = 'k2' AND variant = 'v'",
        "UPDATE entries SET key_hash = CAST(key_hash AS TEXT) WHERE url = 'k2'",
        "UPDATE entries SET key_hash = x'' WHERE url = 'k3' AND variant = 'v'",
    ])
    func damagedHashColumnsAreSurvived(damage: String) async throws {
        try await withTemporaryDirectory { dir in
            var expected: [CacheKey: Data] = [:]
            do {
                let store = try Self.open(dir, segmentSize: 1 << 20)
                for i in 0..<6 {
                    for variant in ["", "v"] {
                        let key = CacheKey(url: "k\(i)", variant: variant)
                        expected[key] = Self.content(i % 4)
                        try store.put(Self.content(i % 4), for: key)
                    }
                }
                try store.close()
            }
            do {
                let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
                try index.connection.execute(damage)
                #expect(index.connection.changes > 0, "the damage changed nothing")
            }
            func survey(_ store: Store, _ context: String) throws {
                for (key, bytes) in expected {
                    // Right bytes, nothing (a dropped entry) or a typed error; never others.
                    if let got = try? store.data(for: key) { #expect(got == bytes, "\(context): \(key)") }
                }
                for i in 0..<6 { _ = try? store.keys(url: "k\(i)") }
            }
            let store = try Self.open(dir, segmentSize: 1 << 20)
            // A key the damage made unreadable must be reported by a check.
            let before = try store.fsck()
            let unreadable = expected.keys.filter { (try? store.data(for: $0)) ?? nil == nil }.sorted()
            #expect(unreadable.isEmpty || !before.isClean, "\(damage): \(unreadable) unreadable, fsck clean")
            try survey(store, "damaged")
            // Equal bytes put again: served exactly.
            for c in 0..<4 {
                try store.put(Self.content(c), for: CacheKey(url: "new\(c)"))
                Self.check(store, CacheKey(url: "new\(c)"), Self.content(c), "put over damage")
            }
            try store.flush()
            _ = try store.fsck(repair: true)
            try survey(store, "repaired")
            let after = try store.fsck()
            #expect(after.isClean, "\(damage): after repair \(after.findings)")
            try store.close()
            let reopened = try Self.open(dir, segmentSize: 1 << 20)
            try survey(reopened, "reopened")
            for c in 0..<4 { Self.check(reopened, CacheKey(url: "new\(c)"), Self.content(c), "reopened") }
            try reopened.close()
        }
    }

    // MARK: 5. Migration

    /// The schema-4 fixture migrated, then used: variants and originals added, listed,
    /// removed; the index lost its last commits and is replayed onto the migrated schema.
    @Test func aMigratedStoreListsAndReplaysLikeANewOne() async throws {
        try await withTemporaryDirectory { dir in
            let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/v4-store")
            try FileManager.default.copyItem(atPath: fixture.path, toPath: dir + "/store")
            let url = "https://v4.example/a.jpg"
            var store = try Self.open(dir, segmentSize: 1 << 20)
            let before = try store.keys(url: url)
            #expect(before.count == 2)
            try store.flush()
            try ReplayEquivalenceTests.copyIndex(from: dir + "/store/index.sqlite", to: dir + "/saved.sqlite")
            for v in 0..<30 { try store.put(Self.content(v), for: CacheKey(url: url, variant: "x\(v)")) }
            try store.put(Self.content(1), for: CacheKey(url: "https://v4.example/new.jpg"))
            try store.close()
            // The index forgets everything after the migration: opening replays it.
            try ReplayEquivalenceTests.copyIndex(from: dir + "/saved.sqlite", to: dir + "/store/index.sqlite")
            store = try Self.open(dir, segmentSize: 1 << 20)
            #expect(store.recoveryReport.replayedRecords > 0)
            #expect(try store.keys(url: url).count == 32)
            #expect(try store.entries(url: url).count == 32)
            for v in 0..<30 { Self.check(store, CacheKey(url: url, variant: "x\(v)"), Self.content(v), "replayed") }
            Self.check(store, CacheKey(url: "https://v4.example/new.jpg"), Self.content(1), "replayed")
            #expect(try store.removeAll(url: url) == 32)
            #expect(try store.keys(url: url) == [])
            #expect(try store.fsck().isClean)
            try store.close()
        }
    }

    // MARK: 6. Property

    /// Random puts of a few contents under many keys (originals and variants), removals of keys
    /// and of URLs, flushes, compactions of tiny segments and reopens, checked against a model:
    /// every get returns the last bytes put, or nothing after a removal; a URL lists exactly
    /// its keys; fsck is clean. `TROVE_S5_SEED=n` runs seed n alone.
    @Test func randomHistoriesServeTheLastBytesPut() async throws {
        let seeds: [UInt64] =
            ProcessInfo.processInfo.environment["TROVE_S5_SEED"].flatMap { UInt64($0) }.map { [$0] } ?? [0x5A01, 0x5A02, 0x5A03]
        for seed in seeds {
            let hashing = Hashing(rawValue: Int(seed % 3))!
            print("Schema5AttackTests: property seed \(seed) (\(hashing))")
            try await withTemporaryDirectory { dir in try Self.runHistory(seed: seed, hashing: hashing, dir: dir) }
        }
    }

    static func runHistory(seed: UInt64, hashing: Hashing, dir: String) throws {
        var g = SeededGenerator(seed: seed)
        let urls = (0..<6).map { "https://prop.example/\($0)" }
        let variants = ["", "w64", "w128-webp", "q"]
        var model: [CacheKey: Int] = [:]
        var store = try open(dir, hashing: hashing, segmentSize: 10 << 10)
        defer { try? store.close() }
        func verifyAll(_ context: String) throws {
            for url in urls {
                for variant in variants {
                    let key = CacheKey(url: url, variant: variant)
                    check(store, key, model[key].map(content), "seed \(seed) \(context)")
                }
                let listed = try store.keys(url: url)
                let wanted = model.keys.filter { $0.url == url }.sorted()
                #expect(listed == wanted, "seed \(seed) \(context): keys of \(url)")
            }
        }
        for step in 0..<700 {
            let key = CacheKey(
                url: urls[Int(g.next() % UInt64(urls.count))], variant: variants[Int(g.next() % UInt64(variants.count))])
            let context = "step \(step)"
            switch g.next() % 100 {
            case 0..<55:
                let c = Int(g.next() % UInt64(contentCount))
                try store.put(content(c), for: key)
                model[key] = c
                check(store, key, content(c), "seed \(seed) \(context) put")
            case 55..<70:
                let had = try store.remove(key)
                #expect(had == (model[key] != nil), "seed \(seed) \(context): remove \(key)")
                model[key] = nil
            case 70..<73:
                let count = try store.removeAll(url: key.url)
                #expect(count == model.keys.filter { $0.url == key.url }.count, "seed \(seed) \(context): removeAll")
                for k in model.keys where k.url == key.url { model[k] = nil }
            case 73..<80: try store.flush()
            case 80..<86: try store.compact()
            case 86..<88:
                try store.close()
                store = try open(dir, hashing: hashing, segmentSize: 10 << 10)
            default:
                check(store, key, model[key].map(content), "seed \(seed) \(context) get")
            }
            if step % 100 == 99 { try verifyAll(context) }
        }
        try store.flush()
        try verifyAll("end")
        let report = try store.fsck()
        #expect(report.isClean, "seed \(seed): \(report.findings)")
        try store.close()
        store = try open(dir, hashing: hashing, segmentSize: 10 << 10)
        try verifyAll("reopened")
    }
}
