import Foundation
import Testing
import TroveCore
import TroveIndex
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

/// The location map's arrival order (``ArrivalOrder``) and the eviction it drives: over its limit
/// the map lets go of the least recently written or filled slots, wherever their keys hash —
/// not of the first slots in the table's bucket order, which emptied the low buckets and left
/// the high ones full (Docs/Benchmarks.md, "a location map at its limit slows down with churn").
@Suite struct ArrivalOrderTests {
    /// Random appends, moves to the back and removals agree with an array model, and freed
    /// nodes are reused (the list never holds more nodes than it ever held keys at once).
    @Test(arguments: [1, 2, 3]) func theListFollowsAModel(seed: UInt64) {
        var random = SeededGenerator(seed: seed)
        var order = ArrivalOrder()
        var model: [(key: CacheKey, position: ArrivalOrder.Position)] = []
        var next = 0
        for _ in 0..<20_000 {
            // (A `where` binds to the last pattern of a case only: the empty model goes first.)
            switch model.isEmpty ? 0 : random.next() % 8 {
            case 0...3:
                let k = key(next)
                next += 1
                model.append((k, order.append(k)))
            case 4, 5:
                let at = Int(random.next() % UInt64(model.count))
                let item = model.remove(at: at)
                order.moveToBack(item.position)
                model.append(item)
            case 6, 7:
                // The front more often than not, as the map's eviction takes it.
                let at = random.next() % 2 == 0 ? 0 : Int(random.next() % UInt64(model.count))
                let item = model.remove(at: at)
                #expect(order.remove(item.position) == item.key)
            default:
                break
            }
            #expect(order.count == model.count)
        }
        #expect(order.keys == model.map(\.key))
        var walked: [CacheKey] = []
        var position = order.first
        while let at = position {
            walked.append(order.key(at: at))
            position = order.position(after: at)
        }
        #expect(walked == model.map(\.key))
    }

    /// A map over its limit lets go of exactly the oldest slots (by last write or fill), passing
    /// over waiting ones, whatever their keys' hashes; a removal takes a key out of the order and
    /// a later write puts it at the back. Hash order would drop a scattered set instead.
    @Test func theMapLetsGoOfTheLeastRecentlyWrittenOrFilled() async throws {
        try await withTemporaryDirectory { dir in
            let entry = try ReclaimerAttackTests.someEntry(dir)
            var map = LocationMap(observer: nil)
            let committed: UInt64 = 1_000_000
            func numbered(_ sequence: UInt64) -> IndexedEntry {
                var numbered = entry
                numbered.entry.sequence = sequence
                return numbered
            }
            var model: [CacheKey] = []  // oldest first
            func write(_ i: Int, waiting: Bool = false) {
                map.stored(numbered(waiting ? committed + UInt64(i) : UInt64(i)), for: key(i))
                model.removeAll { $0 == key(i) }
                model.append(key(i))
            }
            // Two keys written early and still queued: they must stay, and the eviction passes them.
            write(5_000, waiting: true)
            for i in 0..<2_000 {
                write(i)
                if i == 1_000 { write(5_001, waiting: true) }
            }
            // Rewrites move keys to the back; fills append; removals leave the order.
            for i in stride(from: 0, to: 2_000, by: 7) { write(i) }
            let generation = map.generation
            for i in 2_000..<2_500 {
                map.fill(numbered(UInt64(i)), for: key(i), readAt: generation)
                model.append(key(i))
            }
            for i in stride(from: 1, to: 2_000, by: 11) {
                map.removed(key(i), sequence: UInt64(i))
                model.removeAll { $0 == key(i) }
            }
            #expect(map.order == model)
            // Fewer go than stay: the eviction in place, a chunk per call (as the store calls it).
            let limit = 2_000
            var (dropped, more) = map.committed(limit: limit, through: committed, atMost: 128)
            while more {
                let (chunk, again) = map.committed(limit: limit, through: committed, atMost: 128, continuing: true)
                dropped.merge(chunk)
                more = again
            }
            // Committed removals all went; then the oldest committed writes, down to the target.
            let removedSlots = map.table.values.filter { if case .removed = $0 { true } else { false } }
            #expect(removedSlots.isEmpty)
            let target = LocationMap.evictionTarget(limit: limit)
            #expect(map.count == target)
            let waiting: Set = [key(5_000), key(5_001)]
            let newest = Set(model.filter { !waiting.contains($0) }.suffix(target - waiting.count))
            // The walk passed key 5 000 (the oldest) and moved it to the back; key 5 001, in the
            // middle, lies beyond the last slot it let go of.
            let kept = model.filter { $0 != key(5_000) && (waiting.contains($0) || newest.contains($0)) } + [key(5_000)]
            #expect(map.order == kept)
            #expect(Set(map.table.keys) == Set(kept))
            #expect(dropped.count == model.count + 182 - target, "every committed removal and evicted slot is handed back")
        }
    }

    /// Reads that filled the map far past its limit between two cycles: the new table keeps the
    /// waiting slots and the newest others, in their order, and the old table goes back whole.
    @Test func aLargeDropKeepsTheNewestInTheirOrder() async throws {
        try await withTemporaryDirectory { dir in
            let entry = try ReclaimerAttackTests.someEntry(dir)
            var map = LocationMap(observer: nil)
            let committed: UInt64 = 1_000_000
            var waitingEntry = entry
            waitingEntry.entry.sequence = committed + 1
            map.stored(waitingEntry, for: key(0))
            let generation = map.generation
            for i in 1..<10_000 { map.fill(entry, for: key(i), readAt: generation) }
            map.removed(key(10_000), sequence: committed + 2)
            let limit = 100
            let (dropped, more) = map.committed(limit: limit, through: committed)
            #expect(!more)
            let target = LocationMap.evictionTarget(limit: limit)
            #expect(map.count == target)
            #expect(dropped.count == 10_001 - target)
            // The waiting write and removal, then the newest fills.
            #expect(map.order == [key(0)] + (10_000 - (target - 2)..<10_000).map { key($0) })
            if case .removed? = map.table[key(10_000)] {} else { Issue.record("the waiting removal went") }
        }
    }

    /// Random writes, removals, fills, moves, repairs and commits with random limits: after each,
    /// the order holds exactly the present slots' keys, once each, and every commit that evicts
    /// takes the oldest committed ones (the map's own check would trap on a key without a slot).
    @Test(arguments: [11, 12, 13, 14]) func theOrderHoldsExactlyThePresentSlots(seed: UInt64) async throws {
        try await withTemporaryDirectory { dir in
            let entry = try ReclaimerAttackTests.someEntry(dir)
            var random = SeededGenerator(seed: seed)
            var map = LocationMap(observer: nil)
            var sequence: UInt64 = 0
            var committed: UInt64 = 0
            for step in 0..<6_000 {
                let k = key(Int(random.next() % 600))
                switch random.next() % 16 {
                case 0...6:
                    sequence += 1
                    var numbered = entry
                    numbered.entry.sequence = sequence
                    map.stored(numbered, for: k)
                case 7, 8:
                    sequence += 1
                    map.removed(k, sequence: sequence)
                case 9, 10:
                    var read = entry
                    read.entry.sequence = committed / 2
                    map.fill(read, for: k, readAt: map.generation)
                case 11:
                    map.moved(blobs: [entry.blob.id: (entry.blob.segment, entry.blob.offset, entry.blob.recordBytes)], keys: [])
                case 12 where random.next() % 8 == 0:
                    let queued = Set(map.table.keys.filter { _ in random.next() % 2 == 0 })
                    map.indexChanged([], keeping: queued)
                default:
                    committed = sequence - min(sequence, random.next() % 40)
                    let limit = Int(random.next() % 500)
                    let before = map.order
                    var (_, more) = map.committed(limit: limit, through: committed, atMost: 64)
                    while more { more = map.committed(limit: limit, through: committed, atMost: 64, continuing: true).more }
                    // What went of the present slots is a run of the oldest committed ones.
                    let kept = Set(map.order)
                    let table = map.table
                    var sawKept = false
                    for k in before {
                        if kept.contains(k) {
                            if case .present(let e)? = table[k], e.entry.sequence < committed { sawKept = true }
                        } else if case .removed? = table[k] {
                            // A commit removes nothing: a key leaves the order only by going.
                            Issue.record("step \(step): \(k) left the order but has a removed slot")
                        } else {
                            #expect(!sawKept, "step \(step): \(k) went after a newer committed slot stayed")
                        }
                    }
                }
                let presentKeys = map.table.compactMap { k, slot in
                    if case .present = slot { return k } else { return nil }
                }
                let order = map.order
                #expect(order.count == presentKeys.count, "step \(step)")
                #expect(Set(order) == Set(presentKeys), "step \(step)")
                if order.count != presentKeys.count || Set(order) != Set(presentKeys) { return }
            }
        }
    }

    /// A repair keeps the queued keys' slots and their order, and the map evicts on from there.
    @Test func aRepairKeepsTheQueuedKeysInTheirOrder() async throws {
        try await withTemporaryDirectory { dir in
            let entry = try ReclaimerAttackTests.someEntry(dir)
            var map = LocationMap(observer: nil)
            for i in 0..<100 { map.stored(entry, for: key(i)) }
            let queued = Set([90, 10, 50].map { key($0) })
            map.indexChanged([], keeping: queued)
            #expect(map.order == [key(10), key(50), key(90)])
            map.stored(entry, for: key(10))
            map.stored(entry, for: key(200))
            #expect(map.order == [key(50), key(90), key(10), key(200)])
            map.removeAll()
            #expect(map.order.isEmpty)
        }
    }
}
