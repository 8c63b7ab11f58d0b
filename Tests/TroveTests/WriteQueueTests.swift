import Foundation
import Testing
import TroveCore
@testable import TroveIndex
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

/// The appender's queue in batches (`WriteQueue`): a snapshot takes the open batch without a
/// copy, a release drops exactly the batches the snapshot took, and a cycle that fails leaves
/// its batch for the next one, which joins them.
@Suite struct WriteQueueTests {
    static func write(_ i: Int) -> PendingWrite {
        let tombstone = TombstoneRecord(url: "https://q.example/\(i)", variant: "", sequence: UInt64(i), removedAt: 0)
        return PendingWrite(segment: 1, record: ScannedRecord(offset: UInt64(i), length: 1, content: .tombstone(tombstone)))
    }

    static func offsets<S: Sequence<PendingWrite>>(_ writes: S) -> [UInt64] { writes.map(\.record.offset) }

    @Test func aSnapshotTakesTheOpenBatchAndAReleaseDropsIt() {
        var queue = WriteQueue()
        #expect(queue.seal().isEmpty && queue.isEmpty)
        for i in 0..<5 { queue.append(Self.write(i)) }
        let first = queue.seal()
        #expect(Self.offsets(first) == [0, 1, 2, 3, 4])
        // Appended while the snapshot is committed: a new batch, after the sealed one.
        for i in 5..<8 { queue.append(Self.write(i)) }
        #expect(queue.count == 8)
        #expect(Self.offsets(queue) == Array(0..<8))
        let released = queue.removeSealed(first.count)
        #expect(released.count == 5)
        #expect(queue.count == 3)
        #expect(Self.offsets(queue) == [5, 6, 7])
        #expect(Self.offsets(queue.seal()) == [5, 6, 7])
        _ = queue.removeSealed(3)
        #expect(queue.isEmpty && Self.offsets(queue).isEmpty)
    }

    /// A batch's blobs are found until the batch is released, and go with it.
    @Test func pendingBlobsGoWithTheirBatch() {
        func blob(_ id: Int64) -> BlobRow {
            BlobRow(
                id: id, hash: ContentHash(high: 7, low: 7), length: 10, segment: 1, offset: UInt64(id), recordBytes: 62,
                references: 0)
        }
        let key = PendingBlobKey(hash: ContentHash(high: 7, low: 7), length: 10)
        let other = PendingBlobKey(hash: ContentHash(high: 7, low: 8), length: 10)
        var queue = WriteQueue()
        queue.append(Self.write(0))
        queue.addBlob(blob(0), key)
        let first = queue.seal()
        queue.append(Self.write(1))
        queue.addBlob(blob(1), key)
        // More blobs with the same hash and length in one batch (bytes that differ under an equal
        // hash): every one is found, in append order, the first one still first.
        queue.addBlob(blob(2), key)
        queue.addBlob(blob(3), key)
        queue.addBlob(blob(4), other)
        #expect(queue.blobs(key).map(\.id) == [0, 1, 2, 3])
        #expect(queue.blobs(other).map(\.id) == [4])
        _ = queue.removeSealed(first.count)
        #expect(queue.blobs(key).map(\.id) == [1, 2, 3])
        #expect(queue.holdsBlobs)
        _ = queue.removeSealed(queue.seal().count)
        #expect(queue.blobs(key).isEmpty && !queue.holdsBlobs)
    }

    /// Failed cycles seal batches that no release removed: the next snapshot holds them all, in
    /// order, and its release removes them all.
    @Test func batchesLeftByFailedCyclesAreJoinedInOrder() {
        var queue = WriteQueue()
        var next = 0
        var sealedTotal = 0
        for batch in [3, 0, 4, 1] {
            for _ in 0..<batch {
                queue.append(Self.write(next))
                next += 1
            }
            let snapshot = queue.seal()  // a cycle that fails: nothing released
            sealedTotal += batch
            #expect(Self.offsets(snapshot) == (0..<UInt64(sealedTotal)).map { $0 })
        }
        queue.append(Self.write(next))
        let snapshot = queue.seal()
        #expect(Self.offsets(snapshot) == (0...UInt64(next)).map { $0 })
        queue.append(Self.write(next + 1))
        let released = queue.removeSealed(snapshot.count)
        #expect(released.count == 9)
        #expect(Self.offsets(queue) == [UInt64(next + 1)])
    }

    /// Through a store: cycles that fail at the index (a full index) with puts appended between
    /// them, then one that commits everything. Every value is served throughout, the queue and
    /// the pending blobs end empty, and the store checks clean and reopens with every value.
    @Test func cyclesThatFailBetweenPutsCommitEverythingOnce() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.compactionInterval = nil
                $0.batchInterval = .seconds(3600)
                $0.batchSize = 100_000
            }
            func key(_ i: Int) -> CacheKey { CacheKey(url: "https://q.example/\(i)/" + String(repeating: "u", count: 1_800)) }
            for i in 0..<10 { try store.put(value(i), for: key(i)) }
            try store.flush()
            try store.committer.withLock { state in
                let index = try #require(state).index
                let pages = try #require(try index.connection.statement("PRAGMA page_count").first { $0.int64(0) })
                try index.connection.execute("PRAGMA max_page_count = \(pages)")
            }
            var written = 10
            for round in 0..<3 {
                for i in written..<written + 20 { try store.put(value(i), for: key(i)) }
                written += 20
                // A duplicate of a value of this round: its blob is pending, it is linked to.
                try store.put(value(written - 1), for: key(1_000 + round))
                let failure = #expect(throws: StoreError.self) { try store.flush() }
                #expect(failure?.code == .index, "\(String(describing: failure))")
                for i in 0..<written { #expect(try store.data(for: key(i)) == value(i), "round \(round), key \(i)") }
            }
            try store.committer.withLock { state in
                try #require(state).index.connection.execute("PRAGMA max_page_count = 1073741823")
            }
            try store.flush()
            try store.appender.withLock { state in
                #expect(state.queue.isEmpty)
                #expect(!state.queue.holdsBlobs)
            }
            for i in 0..<written { #expect(try store.data(for: key(i)) == value(i), "\(i)") }
            for round in 0..<3 { #expect(try store.data(for: key(1_000 + round)) == value(30 + 20 * round - 1)) }
            #expect(try store.statistics().entries == written + 3)
            #expect(try store.fsck().isClean)
            try store.close()
            let again = try openStore(dir) { $0.compactionInterval = nil }
            for i in 0..<written { #expect(try again.data(for: key(i)) == value(i), "\(i)") }
            #expect(try again.fsck().isClean)
            try again.close()
        }
    }
}
