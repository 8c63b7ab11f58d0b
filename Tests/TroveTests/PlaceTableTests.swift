import Testing
import TroveTestSupport

@testable import TroveIndex

/// The entry digest table's two containers: places in pages of row ids, and the slot multimap
/// split into shards. Each must answer exactly as the plain container it replaced.
@Suite struct PlaceTableTests {
    private static func place(_ n: UInt64) -> EntryPlace {
        EntryPlace(
            sequence: n, blobOffset: n &* 3, accessedAt: Int64(n % 1000), fingerprint: n &* 0x9E37_79B9_7F4A_7C15,
            segment: UInt32(truncatingIfNeeded: n), span: UInt32(truncatingIfNeeded: n) | 1)
    }

    /// Random sets, replacements, removals and read-time raises against a dictionary, over ids
    /// dense (a burst's), sparse (what removals leave), at page edges, negative and extreme.
    @Test func placesMatchADictionaryOverAnyIDs() {
        var g = SeededGenerator(seed: 11)
        let edges: [Int64] = [0, 1, 62, 63, 64, 65, 127, 128, -1, -2, -63, -64, -65, .max, .max - 63, .min, .min + 64]
        for round in 0..<12 {
            var table = PlaceTable()
            var model: [Int64: EntryPlace] = [:]
            func randomID() -> Int64 {
                switch g.next() % 4 {
                case 0: Int64(g.next() % 300)  // dense
                case 1: Int64(g.next() % 50) * 97 - 2_000  // sparse, some negative
                case 2: edges[Int(g.next() % UInt64(edges.count))]
                default: Int64(bitPattern: g.next())  // anywhere
                }
            }
            var universe = Set(edges)
            for step in 0..<3_000 {
                let id = randomID()
                universe.insert(id)
                switch g.next() % 5 {
                case 0, 1:
                    let place = Self.place(g.next())
                    table.set(place, for: id)
                    model[id] = place
                case 2:
                    let removed = table.remove(id)
                    #expect(removed == (model.removeValue(forKey: id) != nil), "round \(round) step \(step)")
                case 3:
                    let time = Int64(g.next() % 2000)
                    table.raiseReadTime(of: id, to: time)
                    if let old = model[id], old.accessedAt < time { model[id]!.accessedAt = time }
                default:
                    #expect(table[id] == model[id], "round \(round) step \(step): id \(id)")
                }
                #expect(table.count == model.count)
            }
            for id in universe {
                #expect(table[id] == model[id], "round \(round): id \(id)")
                #expect(table.contains(id) == (model[id] != nil))
            }
            for id in model.keys {
                let removed = table.remove(id)
                #expect(removed)
            }
            #expect(table.count == 0)
            #expect(table.pageCount == 0, "an emptied table keeps no pages")
        }
    }

    /// The memory the budget states: a burst's places (consecutive ids) ~41 bytes each, and a
    /// table that removals thinned to one place a page no more than a dictionary of places
    /// would cost at its fullest (~130 bytes).
    @Test func pagesCostWhatTheBudgetSays() {
        var dense = PlaceTable()
        for id in Int64(1)...65_536 { dense.set(Self.place(UInt64(id)), for: id) }
        #expect(dense.byteCount <= 48 * dense.count, "dense: \(dense.byteCount / dense.count) bytes a place")
        var sparse = dense
        for id in Int64(1)...65_536 where id % 64 != 0 { sparse.remove(id) }
        #expect(sparse.count == 1_024)
        #expect(sparse.byteCount <= 200 * sparse.count, "sparse: \(sparse.byteCount / sparse.count) bytes a place")
        #expect(dense.count == 65_536, "a copy is a value")
    }

    /// The sharded slots against a model multiset, with keys spread over every shard and
    /// crowded on a few home slots within each, pairs held twice and removals of absent pairs;
    /// and a table loaded from pairs answers as one built by inserts.
    @Test func shardedSlotsMatchAModel() {
        var g = SeededGenerator(seed: 5)
        for round in 0..<10 {
            var shards = DigestShards()
            var model: [UInt64: [Int64]] = [:]
            var keys: Set<UInt64> = []
            func randomKey() -> UInt64 {
                // Top bits pick the shard; the low bits (the home slot) fall on few values.
                let shard: UInt64 = (g.next() % 64) << 58
                let crowd: UInt64 = (g.next() % 8) << 20
                let key: UInt64 = shard | crowd | (g.next() % 3) | (1 << 40)
                keys.insert(key)
                return key
            }
            for _ in 0..<5_000 {
                let key = randomKey()
                let id = Int64(g.next() % 6)
                if g.next() % 3 == 0 {
                    shards.remove(key, id: id)
                    if let at = model[key]?.firstIndex(of: id) { model[key]!.remove(at: at) }
                } else {
                    shards.insert(key, id: id)
                    model[key, default: []].append(id)
                }
            }
            let pairs = model.flatMap { key, ids in ids.map { (key: key, id: $0) } }
            #expect(shards.count == pairs.count, "round \(round)")
            let loaded = DigestShards(loading: pairs)
            #expect(loaded.count == pairs.count)
            for key in keys {
                let expected = Set(model[key] ?? []).sorted()
                #expect(shards.ids(for: key).sorted() == expected, "round \(round), key \(key)")
                #expect(loaded.ids(for: key).sorted() == expected, "round \(round), loaded, key \(key)")
                #expect(shards.contains(key) == !expected.isEmpty)
                #expect(loaded.contains(key) == !expected.isEmpty)
            }
        }
    }
}
