import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

@testable import TroveIndex
@testable import TrovePack
@_spi(Testing) @testable import TroveStore

#if canImport(Glibc)
    import Glibc
#endif

/// After an fdatasync of a segment fails, the store never reports a write as durable on the
/// strength of a retried sync (Linux reports a failed writeback once, then a sync of the same
/// file succeeds whether or not the bytes reached the disk). It refuses writes with
/// `.syncFailed` until it is reopened; reads go on; reopening replays what the packs hold.
@Suite(.serialized) struct StoreSyncFailureTests {
    /// Fails the next data sync of a segment file once when armed, like the kernel: the sync
    /// after it would succeed. Counts the segment syncs asked after the failure.
    final class OneFailedSync: Sendable {
        struct State {
            var armed = false
            var failed = false
            var asksAfterFailure = 0
        }
        let state = Locked(State())
        let errno: Int32
        init(errno: Int32) { self.errno = errno }

        var injector: FaultInjector {
            FaultInjector { [self] operation, path in
                // Data syncs of segments only (a directory's path has no ".pack").
                guard operation == .sync, path.hasSuffix(".pack") else { return nil }
                return state.withLock { s in
                    if s.failed {
                        s.asksAfterFailure += 1
                        return nil
                    }
                    guard s.armed else { return nil }
                    s.failed = true
                    return .error(errno)
                }
            }
        }
        func arm() { state.withLock { $0.armed = true } }
        var failed: Bool { state.withLock { $0.failed } }
        var asksAfterFailure: Int { state.withLock { $0.asksAfterFailure } }
    }

    func value(_ i: Int) -> Data { Data(testBytes(seed: UInt64(i) &+ 77, count: 3000)) }

    /// A `batched` store whose segment syncs go through `fault`, committing every `interval`.
    func openBatched(_ dir: String, _ fault: OneFailedSync, interval: Duration) throws -> Store {
        try openStore(dir, durability: .batched) {
            $0.faultInjector = fault.injector
            $0.batchInterval = interval
        }
    }

    @Test(arguments: [EIO, ENOSPC])
    func aFullPutAfterAFailedSyncIsRefusedUntilReopen(errno: Int32) async throws {
        try await withTemporaryDirectory { dir in
            let fault = OneFailedSync(errno: errno)
            let store = try openStore(dir, durability: .full) { $0.faultInjector = fault.injector }
            try store.put(value(0), for: key(0))
            fault.arm()
            let failed = #expect(throws: StoreError.self) { try store.put(value(1), for: key(1)) }
            #expect(failed?.code == .syncFailed)
            #expect(failed?.message.contains("closed and opened again") == true)
            #expect(fault.failed)
            // The retry that would succeed is never made: every write is refused.
            for i in 2..<5 {
                let refused = #expect(throws: StoreError.self) { try store.put(value(i), for: key(i)) }
                #expect(refused?.code == .syncFailed)
            }
            #expect((#expect(throws: StoreError.self) { _ = try store.remove(key(0)) })?.code == .syncFailed)
            #expect((#expect(throws: StoreError.self) { try store.flush() })?.code == .syncFailed)
            #expect(fault.asksAfterFailure == 0)
            // Reads go on: the committed value, and nothing for the refused ones.
            #expect(try store.data(for: key(0)) == value(0))
            #expect(try store.data(for: key(3)) == nil)
            // The failed put's record is still queued, so closing reports the failure too — and
            // releases the store all the same.
            #expect((#expect(throws: StoreError.self) { try store.close() })?.code == .syncFailed)

            let reopened = try openStore(dir, durability: .full)
            #expect(try reopened.data(for: key(0)) == value(0))
            // The failed put was never acknowledged: gone, or replayed from the pack intact.
            let replayed = try reopened.data(for: key(1))
            #expect(replayed == nil || replayed == value(1))
            for i in 2..<5 { #expect(try reopened.data(for: key(i)) == nil) }
            try reopened.put(value(9), for: key(9))
            #expect(try reopened.data(for: key(9)) == value(9))
            #expect(try reopened.fsck().isClean)
            try reopened.close()
        }
    }

    /// `batched`: the writes queued when the cycle's sync failed were acknowledged (not as
    /// durable); they stay readable, are never committed on a retried sync, and are replayed by
    /// the next opening.
    @Test func batchedWritesQueuedAtAFailedSyncAreReplayedAtReopenNotRetried() async throws {
        try await withTemporaryDirectory { dir in
            let (store, fault) = try storeAfterAFailedSync(dir)
            #expect((#expect(throws: StoreError.self) { try store.flush() })?.code == .syncFailed)
            #expect((#expect(throws: StoreError.self) { try store.put(value(5), for: key(5)) })?.code == .syncFailed)
            #expect(fault.asksAfterFailure == 0)
            for i in 0..<4 { #expect(try store.data(for: key(i)) == value(i)) }
            #expect(try store.data(for: key(5)) == nil)
            // Listings go on, with the queued writes laid over the index.
            #expect(try store.keys(url: key(1).url) == [key(1)])
            var listed = 0
            try store.forEachEntry { _ in listed += 1 }
            #expect(listed == 4)
            _ = try store.fsck()
            // Nothing queued was committed on the strength of a later sync.
            let committed = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: true)
            #expect(try committed.entry(digest: key(1).digest) == nil)
            #expect(try committed.entry(digest: key(0).digest) != nil)
            #expect(throws: StoreError.self) { try store.close() }

            let reopened = try openStore(dir, durability: .batched)
            for i in 0..<4 { #expect(try reopened.data(for: key(i)) == value(i)) }
            #expect(try reopened.data(for: key(5)) == nil)
            #expect(try reopened.fsck().isClean)
            try reopened.close()
        }
    }

    /// A `batched` store in `dir` whose last sync failed (at a flush) with keys 1–3 queued, key 0
    /// committed before; and its fault.
    func storeAfterAFailedSync(_ dir: String) throws -> (Store, OneFailedSync) {
        let fault = OneFailedSync(errno: EIO)
        let store = try openBatched(dir, fault, interval: .seconds(3600))
        try store.put(value(0), for: key(0))
        try store.flush()
        fault.arm()
        for i in 1..<4 { try store.put(value(i), for: key(i)) }
        #expect((#expect(throws: StoreError.self) { try store.flush() })?.code == .syncFailed)
        return (store, fault)
    }

    /// Leaves `dir` as ``storeAfterAFailedSync(_:)`` does, closed.
    func storeClosedAfterAFailedSync(_ dir: String) throws {
        let (store, _) = try storeAfterAFailedSync(dir)
        #expect(throws: StoreError.self) { try store.close() }
    }

    /// Every segment system call an opening makes, in order.
    final class SegmentCalls: Sendable {
        let calls = Locked<[(FaultInjector.Operation, String)]>([])
        let failing: Locked<(FaultInjector.Operation, Int32)?>
        let onSync: (@Sendable (String) -> Void)?
        init(failing: (FaultInjector.Operation, Int32)? = nil, onSync: (@Sendable (String) -> Void)? = nil) {
            self.failing = Locked(failing)
            self.onSync = onSync
        }
        /// The disk is sound again.
        func clear() { failing.withLock { $0 = nil } }
        var injector: FaultInjector {
            FaultInjector { [self] operation, path in
                guard path.hasSuffix(".pack") else { return nil }
                calls.withLock { $0.append((operation, path)) }
                if operation == .sync { onSync?(path) }
                return failing.withLock { $0 }.flatMap { $0.0 == operation ? .error($0.1) : nil }
            }
        }
        func kinds(of path: String) -> [FaultInjector.Operation] {
            calls.withLock { $0.filter { $0.1 == path }.map(\.0) }
        }
        func count(_ operation: FaultInjector.Operation) -> Int { calls.withLock { $0.filter { $0.0 == operation }.count } }
        var writes: Int { count(.write) }
    }

    /// The same boot: the bytes of the writes queued at the failure may be in the page cache
    /// only (clean pages whose writeback failed), where a sync alone would not write them. So
    /// reopening writes that tail again and syncs it before it commits the replay; a clean
    /// reopening writes nothing.
    @Test func reopeningRewritesAndSyncsTheReplayedTailBeforeItIsIndexed() async throws {
        try await withTemporaryDirectory { dir in
            try storeClosedAfterAFailedSync(dir)
            let active = StoreFiles(root: dir).segment(1)
            let indexPath = dir + "/store/index.sqlite"
            // When the active segment is synced, the replay must not be committed yet.
            let indexedAtSync = Locked<[Bool]>([])
            let calls = SegmentCalls(onSync: { path in
                guard path == active, let index = try? IndexDatabase(path: indexPath, readOnly: true) else { return }
                let row = (try? index.entry(digest: key(3).digest)) ?? nil
                indexedAtSync.withLock { $0.append(row != nil) }
            })
            let reopened = try openStore(dir, durability: .batched) { $0.faultInjector = calls.injector }
            let kinds = calls.kinds(of: active)
            let lastWrite = kinds.lastIndex(of: .write)
            #expect(lastWrite != nil, "\(kinds)")
            // A sync follows the rewrite, and comes before the replay is committed; the fold's
            // reads come after it (what is verified is what the disk holds).
            let sync = lastWrite.flatMap { kinds[$0...].firstIndex(of: .sync) }
            #expect(sync != nil, "\(kinds)")
            #expect(sync.map { kinds[$0...].contains(.read) } == true, "\(kinds)")
            #expect(indexedAtSync.withLock { $0.first } == false, "\(indexedAtSync.withLock { $0 })")
            #expect(reopened.recoveryReport.replayedRecords > 0)
            for i in 0..<4 { #expect(try reopened.data(for: key(i)) == value(i)) }
            // The replay is committed: the index has the queued writes now.
            let committed = try IndexDatabase(path: indexPath, readOnly: true)
            #expect(try committed.entry(digest: key(3).digest) != nil)
            #expect(try reopened.fsck().isClean)
            try reopened.close()

            let clean = SegmentCalls()
            let again = try openStore(dir, durability: .batched) { $0.faultInjector = clean.injector }
            #expect(clean.writes == 0, "a clean open rewrote \(clean.writes) times")
            for i in 0..<4 { #expect(try again.data(for: key(i)) == value(i)) }
            try again.close()
        }
    }

    /// When the tail cannot be written again (no space: a copy-on-write file system needs room
    /// to overwrite) or its sync fails too, the store still opens: the replayed writes are
    /// served from memory and never committed in this opening, writes are refused, and an open
    /// on a sound disk replays them.
    @Test(arguments: [(FaultInjector.Operation.sync, EIO), (.write, ENOSPC)])
    func aReopenThatCannotMakeTheTailDurableServesItAndCommitsNothing(
        operation: FaultInjector.Operation, errno: Int32
    ) async throws {
        try await withTemporaryDirectory { dir in
            try storeClosedAfterAFailedSync(dir)
            let failing = SegmentCalls(failing: (operation, errno))
            let store = try openStore(dir, durability: .batched) { $0.faultInjector = failing.injector }
            #expect(failing.count(operation) > 0)
            // Seen at once, and kept after the disk is sound again: only an opening proves it.
            #expect(store.backgroundError?.code == .syncFailed)
            failing.clear()
            for i in 0..<4 { #expect(try store.data(for: key(i)) == value(i)) }
            let refused = #expect(throws: StoreError.self) { try store.put(value(7), for: key(7)) }
            #expect(refused?.code == .syncFailed, "\(String(describing: refused))")
            #expect((#expect(throws: StoreError.self) { try store.flush() })?.code == .syncFailed)
            #expect((#expect(throws: StoreError.self) { try store.compact() })?.code == .syncFailed)
            #expect((#expect(throws: StoreError.self) { try store.fsck(repair: true) })?.code == .syncFailed)
            var listed = 0
            try store.forEachEntry { _ in listed += 1 }
            #expect(listed == 4)
            let committed = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: true)
            #expect(try committed.entry(digest: key(1).digest) == nil)
            #expect(try committed.entry(digest: key(0).digest) != nil)
            try store.close()

            let reopened = try openStore(dir, durability: .batched)
            #expect(reopened.recoveryReport.replayedRecords > 0)
            for i in 0..<4 { #expect(try reopened.data(for: key(i)) == value(i)) }
            #expect(try reopened.data(for: key(7)) == nil)
            #expect(try reopened.fsck().isClean)
            try reopened.close()
        }
    }

    /// A store with nothing to commit syncs nothing: after opening (even one that replayed),
    /// after a flush, after a compaction.
    @Test func anIdleStoreSyncsNothing() async throws {
        try await withTemporaryDirectory { dir in
            try storeClosedAfterAFailedSync(dir)
            let calls = SegmentCalls()
            let store = try openStore(dir, durability: .batched, segmentSize: 64 << 10) {
                $0.faultInjector = calls.injector
                $0.batchInterval = .milliseconds(2)
                $0.compactionInterval = nil
                $0.rewriteLiveRatio = 0.9
            }
            func idleSyncs() async throws -> Int {
                let before = calls.count(.sync)
                try await offPool { usleep(300_000) }
                return calls.count(.sync) - before
            }
            #expect(try await idleSyncs() == 0, "after opening")
            for i in 10..<20 { try store.put(Data(testBytes(seed: UInt64(i), count: 20_000)), for: key(i)) }
            try store.flush()
            #expect(try await idleSyncs() == 0, "after a flush")
            for i in 10..<15 { #expect(try store.remove(key(i))) }
            try store.compact()
            // At most the one cycle that commits the copies' length.
            #expect(try await idleSyncs() <= 1, "after a compaction")
            #expect(try await idleSyncs() == 0, "after a compaction, later")
            try store.close()
            // Closed clean: the next open finds no tail to write again or replay.
            let reopening = SegmentCalls()
            let again = try openStore(dir, durability: .batched) { $0.faultInjector = reopening.injector }
            #expect(reopening.writes == 0)
            #expect(again.recoveryReport.replayedRecords == 0)
            try again.close()
        }
    }

    /// A commit cycle that moves the active segment's committed length syncs it first, even
    /// when no write is queued: the compactor appends its copies without queueing them, and a
    /// cycle that carries read times commits the length all the same. An open never rewrites
    /// what lies inside that length, so unsynced copies there could outlive a failed sync.
    @Test func aCycleWithoutWritesSyncsTheCopiesBeforeCommittingTheirLength() async throws {
        try await withTemporaryDirectory { dir in
            let armed = Locked(false)
            let box = Locked<Store?>(nil)
            let store = try openStore(dir, durability: .batched, segmentSize: 64 << 10) {
                $0.compactionInterval = nil
                $0.rewriteLiveRatio = 0.9
                $0.accessTimeFlushInterval = .zero
                $0.faultInjector = FaultInjector { operation, path in
                    guard path.hasSuffix(".pack"), armed.withLock({ $0 }) else { return nil }
                    switch operation {
                    case .write:
                        // A read during the copy: its read time goes with the next cycle.
                        box.withLock { $0 }?.shared.withLock { $0.readTimes[key(0)] = 1 }
                        return nil
                    case .sync: return .error(EIO)
                    default: return nil
                    }
                }
            }
            box.withLock { $0 = store }
            defer { box.withLock { $0 = nil } }
            let big = { (i: Int) in Data(testBytes(seed: UInt64(i), count: 20_000)) }
            // Segments 1 and 2 full (three values each), the active one with room for the copies
            // (rotation would sync it in any case).
            for i in 0..<7 { try store.put(big(i), for: key(i)) }
            #expect(try store.remove(key(1)))
            try store.flush()
            let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: true)
            let active = try #require(try index.segments().filter { !$0.isSealed }.max { $0.id < $1.id })
            #expect(active.id == 3 && active.indexedBytes < 30_000, "\(active)")
            armed.withLock { $0 = true }
            #expect((#expect(throws: StoreError.self) { try store.compact() })?.code == .syncFailed)
            let after = try #require(try index.segments().first { $0.id == active.id })
            #expect(after.indexedBytes == active.indexedBytes, "the copies' length was committed before their sync")
            #expect(try index.entry(digest: key(0).digest)?.blob.segment == 1)
            for i in 0..<7 where i != 1 { #expect(try store.data(for: key(i)) == big(i)) }
            try? store.close()
        }
    }

    /// A failed sync of a segment that rotation sealed, while the active one is sound: its
    /// queued writes can never be committed on a retried sync, so the store refuses writes all
    /// the same, and the background committer reports it.
    @Test func aFailedSyncOfARotatedSegmentRefusesWritesToo() async throws {
        try await withTemporaryDirectory { dir in
            let armed = Locked(false)
            let failed = Locked(false)
            let store = try openStore(dir, durability: .batched, segmentSize: 16 << 10) {
                $0.batchInterval = .seconds(3600)
                $0.faultInjector = FaultInjector { operation, path in
                    guard operation == .sync, path.hasSuffix("/00000001.pack"), armed.withLock({ $0 }) else { return nil }
                    return failed.withLock { done in
                        if done { return nil }
                        done = true
                        return .error(EIO)
                    }
                }
            }
            var n = 0
            while store.appender.withLock({ $0.rotated.isEmpty }) {
                try store.put(value(n), for: key(n))
                n += 1
            }
            #expect(store.appender.withLock { $0.pack.segment.id } == 2)
            armed.withLock { $0 = true }
            #expect((#expect(throws: StoreError.self) { try store.flush() })?.code == .syncFailed)
            #expect(failed.withLock { $0 })
            // The active segment never failed a sync; the rotated one holds queued writes.
            #expect(store.appender.withLock { $0.pack.segment.syncFailure } == nil)
            #expect((#expect(throws: StoreError.self) { try store.put(value(99), for: key(99)) })?.code == .syncFailed)
            #expect(
                (#expect(throws: StoreError.self) { try store.putWithoutWaiting(value(98), for: key(98)) })?.code == .syncFailed)
            for i in 0..<n { #expect(try store.data(for: key(i)) == value(i)) }
            #expect(store.backgroundError == nil || store.backgroundError?.code == .syncFailed)
            #expect(throws: StoreError.self) { try store.close() }
        }
    }

    /// The background committer meets the failure on its own and reports it.
    @Test func theBackgroundCommitterReportsTheFailure() async throws {
        try await withTemporaryDirectory { dir in
            let fault = OneFailedSync(errno: EIO)
            let store = try openBatched(dir, fault, interval: .milliseconds(5))
            fault.arm()
            try store.put(value(1), for: key(1))
            try await offPool {
                let deadline = Date().addingTimeInterval(20)
                while store.backgroundError?.code != .syncFailed && Date() < deadline { usleep(2_000) }
            }
            #expect(store.backgroundError?.code == .syncFailed)
            #expect(fault.asksAfterFailure == 0)
            #expect((#expect(throws: StoreError.self) { try store.put(value(2), for: key(2)) })?.code == .syncFailed)
            #expect(throws: StoreError.self) { try store.close() }
        }
    }
}
