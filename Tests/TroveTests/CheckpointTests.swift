import Foundation
import Testing
import TroveCore
import TroveIndex
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

/// Checkpoints of the index's write-ahead log run on the checkpointer's thread, not inside the
/// committer's `COMMIT` (Docs/Architecture.md, "Checkpoints"), and the log stays bounded
/// whether the checkpointer keeps up or not.
@Suite struct CheckpointTests {
    /// The pages a commit writes to the log, with their frame headers.
    static let frameBytes = Int64(4096 + 24)

    static func walBytes(_ dir: String) -> Int64 {
        Int64((try? FileManager.default.attributesOfItem(atPath: dir + "/store/index.sqlite-wal")[.size] as? Int) ?? 0)
    }

    static func small(_ i: Int) -> Data { Data(testBytes(seed: UInt64(i) &* 31, count: 200 + i % 300)) }

    /// A stream of puts takes the log past the threshold many times over: the checkpointer copies
    /// it, the values read back before and after a reopen, and fsck finds the index sound.
    @Test func theCheckpointerCopiesTheLogWhilePutsGoOn() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.compactionInterval = nil }
            let count = 12_000
            for i in 0..<count { try store.put(Self.small(i), for: key(i)) }
            try store.flush()
            #expect(store.checkpointer.copiedFrames > 0, "no checkpoint copied anything on the checkpointer's thread")
            // Frames the log may hold at most: the committer's own limit, and a cycle's pages.
            #expect(Self.walBytes(dir) <= Int64(Store.walFrameLimit + 4_000) * Self.frameBytes)
            for i in stride(from: 0, to: count, by: 7) { #expect(try store.data(for: key(i)) == Self.small(i)) }
            try store.close()
            // Closing truncates the log.
            #expect(Self.walBytes(dir) == 0)
            let reopened = try openStore(dir) { $0.compactionInterval = nil }
            for i in stride(from: 3, to: count, by: 7) { #expect(try reopened.data(for: key(i)) == Self.small(i)) }
            #expect(try reopened.fsck().isClean)
            try reopened.close()
        }
    }

    /// With the checkpointer gone (stopped here; in life: it fails, or falls behind), the
    /// committer checkpoints itself once the log passes ``Store/walFrameLimit``, and not before:
    /// the log grows past the checkpointer's threshold, restarts once the committer has copied
    /// it, and never holds more than the limit and a cycle's pages.
    ///
    /// Puts go on until the log has restarted (or a bound shows it never does): how many log
    /// frames a put costs depends on how many puts each commit carries, which a loaded machine
    /// changes (a fixed count of 24 000 puts once left the log under the threshold in CI). Long
    /// ETags make each put's row fill more of a page, so the limits come within fewer puts.
    @Test func theCommitterBoundsTheLogWhenTheCheckpointerDoesNotRun() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.compactionInterval = nil }
            store.checkpointer.stop()
            let metadata = EntryMetadata(etag: String(repeating: "e", count: 2_000))
            var count = 0
            var largest: Int64 = 0
            var peakBeforeRestart = 0
            var lastFrames = 0
            var restarted = false
            while !restarted && count < 120_000 {
                for i in count..<(count + 500) { try store.put(Self.small(i), for: key(i), metadata: metadata) }
                count += 500
                try store.flush()
                largest = max(largest, Self.walBytes(dir))
                let frames = try store.withIndex { $0.walFrames }
                if frames < lastFrames {
                    restarted = true
                } else {
                    peakBeforeRestart = frames
                }
                lastFrames = frames
            }
            #expect(restarted, "the log never restarted within \(count) puts: the committer did not checkpoint it")
            #expect(
                peakBeforeRestart > Store.maximumCheckpointFrames,
                "the committer checkpointed at \(peakBeforeRestart) frames, before its limit")
            #expect(largest <= Int64(Store.walFrameLimit + 4_000) * Self.frameBytes, "the log grew to \(largest) bytes")
            #expect(store.checkpointer.completedPasses == 0)
            for i in stride(from: 0, to: count, by: 11) { #expect(try store.data(for: key(i)) == Self.small(i)) }
            try store.close()
            let reopened = try openStore(dir) { $0.compactionInterval = nil }
            #expect(try reopened.fsck().isClean)
            try reopened.close()
        }
    }

    /// A read transaction held across commits — `forEachEntry` holds one for its whole
    /// enumeration, by design (one snapshot) — pins the log: no checkpoint copies past its
    /// snapshot and the log outgrows the bound while it lasts (found by an outside attack;
    /// Docs/Architecture.md, "Checkpoints", says so). Once it ends, the next commits copy the log
    /// and start it over.
    @Test func aReaderHeldAcrossCommitsPinsTheLogUntilItEnds() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.compactionInterval = nil }
            try store.put(Self.small(0), for: key(0))
            try store.flush()
            // Puts until the log is past the committer's own limit (~24 000 under schema 6, more
            // since schema 7 writes fewer pages a put), or a bound that shows it never gets there.
            var count = 1
            var pinnedFrames = 0
            var first = true
            try store.forEachEntry { _ in
                guard first else { return }
                first = false
                while pinnedFrames <= Store.walFrameLimit && count < 120_000 {
                    for i in count..<(count + 4_000) { try store.put(Self.small(i), for: key(i)) }
                    count += 4_000
                    try store.flush()
                    pinnedFrames = try store.withIndex { $0.walFrames }
                }
            }
            #expect(pinnedFrames > Store.walFrameLimit, "the enumeration did not pin the log (\(pinnedFrames) frames)")
            // Released: a few more commits, and the log starts over.
            var frames = Int.max
            for round in 0..<20 where frames > Store.walFrameLimit {
                for i in 0..<300 { try store.put(Self.small(count + round * 300 + i), for: key(count + round * 300 + i)) }
                try store.flush()
                frames = try store.withIndex { $0.walFrames }
            }
            #expect(frames <= Store.walFrameLimit, "the log kept \(frames) frames after the reader ended")
            for i in stride(from: 0, to: count, by: 13) { #expect(try store.data(for: key(i)) == Self.small(i)) }
            try store.close()
        }
    }

    /// The checkpoint threshold follows the index: SQLite's 1 000 frames for a small one (a
    /// longer log gains it nothing and costs a small disk up to 12 MiB more), up to 4 000 for one
    /// of as many pages, and never more than a sixteenth of the store's capacity.
    @Test func theCheckpointThresholdFollowsTheIndexAndTheCapacity() {
        let mib: Int64 = 1 << 20
        #expect(Store.checkpointFrames(indexBytes: 0, capacity: nil) == 1_000)
        #expect(Store.checkpointFrames(indexBytes: 240 * 1_024, capacity: nil) == 1_000)
        #expect(Store.checkpointFrames(indexBytes: 10 * mib, capacity: nil) == 2_560)
        #expect(Store.checkpointFrames(indexBytes: 25 * mib, capacity: nil) == 4_000)
        #expect(Store.checkpointFrames(indexBytes: 250 * mib, capacity: nil) == 4_000)
        #expect(Store.checkpointFrames(indexBytes: 250 * mib, capacity: 24 * mib) == 1_000)
        #expect(Store.checkpointFrames(indexBytes: 250 * mib, capacity: 160 * mib) == 2_560)
        #expect(Store.checkpointFrames(indexBytes: 250 * mib, capacity: 1_024 * mib) == 4_000)
    }

    /// Compaction's TRUNCATE while the checkpointer runs its own checkpoint (which makes SQLite
    /// answer BUSY at once, without waiting): it is asked again, and the log is truncated.
    @Test func aCompactionPassTruncatesTheLogWhileTheCheckpointerWorks() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.compactionInterval = nil }
            // Each round's puts take the log past the checkpointer's threshold.
            let perRound = 2 * Store.maximumCheckpointFrames
            for round in 0..<5 {
                for i in 0..<perRound { try store.put(Self.small(round * perRound + i), for: key(round * perRound + i)) }
                try store.flush()
                _ = try store.compact()
                #expect(Self.walBytes(dir) == 0, "round \(round): the pass left \(Self.walBytes(dir)) bytes of log")
            }
            #expect(store.checkpointer.completedPasses > 0)
            try store.close()
        }
    }
}
