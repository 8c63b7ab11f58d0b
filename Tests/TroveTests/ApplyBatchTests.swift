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
            let packs = dir + "/store/packs"
            var writes: [PendingWrite] = []
            for id in try PackDirectory.segmentIDs(in: packs) {
                let file = try SegmentFile.open(id: id, in: packs, writable: false)
                _ = try SegmentScanner.scan(file) { writes.append(PendingWrite(segment: id, record: $0)) }
            }
            func fresh(_ name: String) throws -> IndexDatabase {
                let index = try IndexDatabase(path: dir + "/\(name).sqlite", readOnly: false)
                try index.writing {
                    for id in Set(writes.map(\.segment)).sorted() { try index.insertSegment(id: id, indexedBytes: 0) }
                }
                return index
            }
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
}
