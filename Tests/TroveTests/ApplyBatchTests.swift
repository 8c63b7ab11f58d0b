import Foundation
import Testing
import TroveCore
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@testable import TroveIndex
@_spi(Testing) @testable import TroveStore

/// The committer applies a new blob and the link that names it as one (two statements instead
/// of four). That must leave exactly the index that applying the records one by one leaves —
/// rows, reference counts, live bytes — over a history of new bytes, repeated bytes, overwrites,
/// removals and metadata updates, and applying it again must change nothing.
@Suite struct ApplyBatchTests {
    @Test(arguments: [3, 41, 97])
    func theBatchApplyLeavesTheSameIndexAsOneByOne(seed: UInt64) async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir, segmentSize: 256 << 10) { $0.compactionInterval = nil }
            var g = SeededGenerator(seed: seed)
            for step in 0..<600 {
                let key = CacheKey(url: "https://batch.example/\(g.next() % 60)", variant: g.next() % 3 == 0 ? "w" : "")
                switch g.next() % 10 {
                case 0: try store.remove(key)
                case 1: try store.updateMetadata(EntryMetadata(etag: "\"\(step)\""), for: key)
                case 2, 3: try store.put(Data(testBytes(seed: g.next() % 5, count: 900)), for: key)  // repeats
                default: try store.put(Data(testBytes(seed: 1_000 + UInt64(step), count: 300 + step)), for: key)
                }
                if step % 97 == 0 { try store.flush() }
            }
            try store.close()
            let writes = try Self.records(in: dir)
            func fresh(_ name: String) throws -> IndexDatabase { try Self.index(dir + "/\(name).sqlite", for: writes) }
            func dump(_ index: IndexDatabase) throws -> [String] {
                try index.entryRows().map { "\($0)" }.sorted() + index.blobRows().map { "\($0)" }.sorted()
                    + index.segments().map { "segment \($0.id) live \($0.liveBytes)" }
            }
            let one = try fresh("one")
            let oneByOne = IndexApplier(index: one)
            try one.writing { for write in writes { try oneByOne.apply(write.record, segment: write.segment) } }
            let batch = try fresh("batch")
            let batched = IndexApplier(index: batch)
            try batch.writing { try batched.apply(writes) }
            let expected = try dump(one)
            #expect(try one.entryRows().count > 20)
            #expect(try dump(batch) == expected)
            // Again, as a retried cycle or a replay from an older point would: nothing changes.
            try batch.writing { try batched.apply(writes) }
            #expect(try dump(batch) == expected)
            // In commit-sized pieces, as the committer sees them.
            let pieces = try fresh("pieces")
            let pieceApplier = IndexApplier(index: pieces)
            var start = 0
            while start < writes.count {
                let end = min(writes.count, start + 1 + Int(g.next() % 40))
                try pieces.writing { try pieceApplier.apply(Array(writes[start..<end])) }
                start = end
            }
            #expect(try dump(pieces) == expected)
        }
    }

    /// Bursts of new keys go in group statements (``IndexDatabase/insertNewPuts(_:)``). They
    /// must leave what the pairs leave one after another: the same rows with the same ids, the
    /// same ids and places in the digest table — also when some of a group's blobs are in the
    /// index already (as after a replay that reached a blob record but not its link), where the
    /// index declines the group and the pairs are applied one by one.
    @Test(arguments: [5, 23, 61])
    func groupsOfNewPutsLeaveWhatPairsLeave(seed: UInt64) async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir, segmentSize: 256 << 10) { $0.compactionInterval = nil }
            var g = SeededGenerator(seed: seed)
            for step in 0..<700 {
                // Mostly new keys; now and then an earlier key again, a repeat of earlier bytes,
                // a removal or a variant.
                let earlier = step > 0 && g.next() % 8 == 0
                let url = "https://groups.example/\(earlier ? g.next() % UInt64(step) : UInt64(step))"
                let key = CacheKey(url: url, variant: g.next() % 6 == 0 ? "w256" : "")
                switch g.next() % 20 {
                case 0: try store.remove(key)
                case 1: try store.put(Data(testBytes(seed: g.next() % 4, count: 700)), for: key)
                default: try store.put(Data(testBytes(seed: 10_000 + UInt64(step), count: 200 + step % 300)), for: key)
                }
                if g.next() % 90 == 0 { try store.flush() }
            }
            try store.close()
            let writes = try Self.records(in: dir)
            let blobWrites = writes.filter { if case .blob = $0.record.content { true } else { false } }
            func fresh(_ name: String, preloading blobs: [PendingWrite] = []) throws -> IndexDatabase {
                try Self.index(dir + "/\(name).sqlite", for: writes, preloading: blobs)
            }
            func dump(_ index: IndexDatabase) throws -> [String] {
                var rows: [String] = []
                try index.connection.statement("SELECT id, key_hash FROM entries ORDER BY id").query {
                    (r) throws(IndexError) in
                    let id = r.int64(0)
                    let digest = r.hash(1)!
                    let candidates = index.digests!.candidates(digest)
                    let places = index.digests!.placedCandidates(digest).filter { $0.id == id }.map(\.place)
                    rows.append("row \(id) \(digest) candidates \(candidates) places \(places)")
                    return true
                }
                return try rows + index.entryRows().map { "\($0)" }.sorted() + index.blobRows().map { "\($0)" }
                    + index.segments().map { "segment \($0.id) live \($0.liveBytes)" }
            }
            func check(preloading blobs: [PendingWrite], _ name: String) throws -> Int {
                let one = try fresh(name + "-one", preloading: blobs)
                let oneByOne = IndexApplier(index: one)
                try one.writing { for write in writes { try oneByOne.apply(write.record, segment: write.segment) } }
                let grouped = try fresh(name + "-grouped", preloading: blobs)
                let before = grouped.groupedPuts
                try grouped.writing { try IndexApplier(index: grouped).apply(writes) }
                let expected = try dump(one)
                #expect(try one.entryRows().count > 300)
                #expect(try dump(grouped) == expected)
                // Applied again, nothing changes.
                try grouped.writing { try IndexApplier(index: grouped).apply(writes) }
                #expect(try dump(grouped) == expected)
                return grouped.groupedPuts - before
            }
            let all = try check(preloading: [], "plain")
            #expect(all >= 200, "the bursts of new keys went in groups")
            // Every seventh blob already in the index: the groups holding one are declined.
            let some = try check(preloading: blobWrites.enumerated().filter { $0.offset % 7 == 3 }.map(\.element), "replayed")
            #expect(some < all)
        }
    }

    /// Every record of the store's packs in `dir`, in segment and write order.
    static func records(in dir: String) throws -> [PendingWrite] {
        let packs = dir + "/store/packs"
        var writes: [PendingWrite] = []
        for id in try PackDirectory.segmentIDs(in: packs) {
            let file = try SegmentFile.open(id: id, in: packs, writable: false)
            _ = try SegmentScanner.scan(file) { writes.append(PendingWrite(segment: id, record: $0)) }
        }
        return writes
    }

    /// A new index at `path` with the segments of `writes`, and the records `blobs` applied.
    static func index(_ path: String, for writes: [PendingWrite], preloading blobs: [PendingWrite] = []) throws -> IndexDatabase {
        let index = try IndexDatabase(path: path, readOnly: false)
        try index.writing {
            for id in Set(writes.map(\.segment)).sorted() { try index.insertSegment(id: id, indexedBytes: 0) }
            for write in blobs { try IndexApplier(index: index).apply(write.record, segment: write.segment) }
        }
        return index
    }
}
