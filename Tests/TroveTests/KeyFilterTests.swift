import Foundation
import Testing
import TroveCore
@testable import TroveIndex
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

/// The key filter lets a put of a new key skip the index lookup of its collision check. It must
/// never say "absent" for a digest the committed index holds, however that row got there.
@Suite struct KeyFilterTests {
    static func digest(_ g: inout SeededGenerator) -> ContentHash { ContentHash(high: g.next(), low: g.next()) }

    /// Every digest loaded or inserted tests positive; about 1 % of others do, at capacity.
    @Test func noFalseNegativesAndFewFalsePositives() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.compactionInterval = nil }
            for i in 0..<3_000 { try store.put(Data("v\(i)".utf8), for: key(i)) }
            try store.flush()
            var filter = try store.withIndex { try KeyDigestFilter.loaded(from: $0) }
            for i in 0..<3_000 { #expect(filter.holds(key(i).digest)) }
            var g = SeededGenerator(seed: 5)
            // Fill to capacity (twice the entries at load, at least 65 536 keys), then measure.
            var inserted: [ContentHash] = []
            for _ in 0..<(KeyDigestFilter.minimumCapacity - 3_000) {
                let d = Self.digest(&g)
                filter.insert(d)
                inserted.append(d)
            }
            #expect(filter.isLoaded)
            #expect(inserted.allSatisfy { filter.holds($0) })
            var positives = 0
            let trials = 100_000
            for _ in 0..<trials where filter.holds(Self.digest(&g)) { positives += 1 }
            #expect(Double(positives) / Double(trials) < 0.02, "\(positives) false positives in \(trials)")
            // One more than capacity: it gives up (and says "maybe" to everything) until loaded again.
            for _ in 0..<10 { filter.insert(Self.digest(&g)) }
            #expect(!filter.isLoaded)
            #expect(filter.holds(Self.digest(&g)))
            try store.close()
        }
    }

    /// A row planted under another key's digest — as a crafted collision would make — before the
    /// filter is loaded (it reads it from the index) or after (the committer's connection reports
    /// it): either way the put of the colliding key is refused, not skipped past.
    @Test func aCollidingRowIsFoundBeforeAndAfterTheFilterLoads() async throws {
        try await withTemporaryDirectory { dir in
            func plant(_ store: Store, under victim: CacheKey) throws {
                try store.committer.withLock { state in
                    let index = try #require(state).index
                    var row = try #require(try index.entry(digest: key(1).digest)).entry
                    row.keyDigest = victim.digest
                    row.url = "https://attacker.example/\(victim.url.count)"
                    try index.writing { try index.link(row) }
                }
            }
            var store = try openStore(dir)
            try store.put(Data("mine".utf8), for: key(1))
            try store.close()
            store = try openStore(dir)
            #expect(!store.keyFilter.withLock { $0.isLoaded })
            try plant(store, under: key(2))
            // The first put asks for the filter (and looks the key up meanwhile); the next cycle
            // loads it, with the planted row in the index.
            var error = #expect(throws: StoreError.self) { try store.put(Data("yours".utf8), for: key(2)) }
            #expect(error?.code == .keyCollision)
            try store.flush()
            #expect(store.keyFilter.withLock { $0.isLoaded })
            let known = store.keyFilter.withLock { $0.holds(key(2).digest) }
            #expect(known)
            try plant(store, under: key(3))
            error = #expect(throws: StoreError.self) { try store.put(Data("theirs".utf8), for: key(3)) }
            #expect(error?.code == .keyCollision)
            #expect(try store.data(for: key(1)) == Data("mine".utf8))
            try store.close()
        }
    }

    /// The committer skips the lookup of a key's current row when the loaded filter rules the
    /// key out. Keys put twice in one cycle (the second must find the first's row, written in the
    /// open transaction), overwritten across cycles, removed and put again: every value, count
    /// and check stays right, against a model.
    @Test func theCommitterSkipsOnlyLookupsTheFilterRulesOut() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.compactionInterval = nil
                $0.batchInterval = .seconds(3600)
            }
            for i in 0..<100 { try store.put(Data("seed \(i)".utf8), for: key(i)) }
            try store.flush()
            try store.flush()
            #expect(store.keyFilter.withLock { $0.isLoaded })
            var model: [Int: Data] = [:]
            for i in 0..<100 { model[i] = Data("seed \(i)".utf8) }
            var g = SeededGenerator(seed: 11)
            for round in 0..<20 {
                for _ in 0..<60 {
                    let i = Int(g.next() % 300)  // a third known, two thirds new at first
                    if g.next() % 5 == 0 {
                        _ = try store.remove(key(i))
                        model[i] = nil
                    } else {
                        let value = Data("r\(round) \(i) \(g.next() % 1000)".utf8)
                        try store.put(value, for: key(i))
                        model[i] = value
                    }
                }
                try store.flush()
            }
            for i in 0..<300 { #expect(try store.data(for: key(i)) == model[i], "\(key(i))") }
            #expect(try store.statistics().entries == model.count)
            #expect(try store.fsck().isClean)
            try store.close()
            let reopened = try openStore(dir)
            for i in 0..<300 { #expect(try reopened.data(for: key(i)) == model[i], "reopened: \(key(i))") }
            try reopened.close()
        }
    }

    /// Entries that reach the index without a put — here restored by `fsck --repair` after their
    /// rows' digests were damaged (TEXT instead of a BLOB: no lookup matches them and the filter's
    /// load skipped them) — are in the filter too, because repair writes them through the
    /// committer's connection: a put of a colliding key after them is still refused.
    @Test func rowsRestoredByRepairAreInTheFilter() async throws {
        try await withTemporaryDirectory { dir in
            do {
                let store = try openStore(dir) { $0.compactionInterval = nil }
                for i in 0..<200 { try store.put(Data("v\(i)".utf8), for: key(i)) }
                try store.close()
            }
            do {
                let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
                try index.connection.execute("UPDATE entries SET key_hash = CAST(key_hash AS TEXT) WHERE url LIKE '%/1__.jpg'")
                #expect(index.connection.changes == 100)
            }
            let store = try openStore(dir) { $0.compactionInterval = nil }
            try store.put(Data("load".utf8), for: key(10_000))
            try store.flush()
            #expect(store.keyFilter.withLock { $0.isLoaded })
            let damaged = (100..<200).filter { i in !store.keyFilter.withLock { $0.holds(key(i).digest) } }
            #expect(damaged.count > 90, "the load skipped the damaged digests")
            _ = try store.fsck(repair: true)
            var restored = 0
            for i in 0..<200 {
                guard let data = try store.data(for: key(i)) else { continue }
                #expect(data == Data("v\(i)".utf8))
                restored += 1
                let heard = store.keyFilter.withLock { $0.holds(key(i).digest) }
                #expect(heard, "\(key(i)) restored without the filter hearing")
            }
            #expect(restored == 200)
            try store.close()
        }
    }
}
