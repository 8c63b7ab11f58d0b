import Foundation
import Testing
import TroveCore
import TroveIndex
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

/// A commit cycle's fdatasync runs on the syncer thread beside the index apply
/// (Docs/Architecture.md, "Data flow", commit cycles); the order that makes a power loss safe
/// must hold all the same: no row is committed before the pack bytes it points at are synced.
@Suite struct CommitCycleTests {
    /// A sync that waits for the test: `started` is signalled as a segment's fdatasync begins,
    /// which then blocks until `release`; with `failing`, it then fails with EIO.
    final class HeldSync: Sendable {
        let started = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let armed = Locked(false)
        let failing = Locked(false)

        var injector: FaultInjector {
            FaultInjector { [self] operation, path in
                guard operation == .sync, path.hasSuffix(".pack"), armed.withLock({ $0 }) else { return nil }
                started.signal()
                release.wait()
                return failing.withLock { $0 } ? .error(EIO) : nil
            }
        }
    }

    static func configure(_ held: HeldSync) -> (inout Store.Configuration) -> Void {
        { configuration in
            configuration.faultInjector = held.injector
            // Only the test's flushes run cycles.
            configuration.batchInterval = .seconds(3600)
            configuration.accessTimeFlushInterval = .seconds(3600)
            configuration.compactionInterval = nil
        }
    }

    /// The committed index's row for `key`, read through a connection of its own.
    static func committedRow(_ dir: String, _ key: CacheKey) throws -> EntryRow? {
        let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: true)
        return try index.entryRow(digest: key.digest)
    }

    /// While the pack's sync is held, the cycle's apply has run but nothing is committed; once
    /// the sync returns, the row is.
    @Test(arguments: [Durability.batched, .full])
    func noRowIsCommittedBeforeItsBytesAreSynced(durability: Durability) async throws {
        try await withTemporaryDirectory { dir in
            let held = HeldSync()
            let store = try openStore(dir, durability: durability, Self.configure(held))
            let value = Data(testBytes(seed: 7, count: 5_000))
            held.armed.withLock { $0 = true }
            let done = DispatchSemaphore(value: 0)
            let failure = Locked<(any Error)?>(nil)
            Thread.detachNewThread {
                do {
                    try store.put(value, for: key(1))
                    // A `full` put has committed before it returns; `batched` needs the flush.
                    if durability == .batched { try store.flush() }
                } catch { failure.withLock { $0 = error } }
                done.signal()
            }
            held.started.wait()
            // Time for the apply beside the held sync (it takes well under a millisecond).
            usleep(300_000)
            #expect(try Self.committedRow(dir, key(1)) == nil, "a row was committed before its bytes were synced")
            held.armed.withLock { $0 = false }
            held.release.signal()
            done.wait()
            #expect(failure.withLock { $0 } == nil)
            #expect(try Self.committedRow(dir, key(1)) != nil)
            #expect(try store.data(for: key(1)) == value)
            try store.close()
        }
    }

    /// A sync that fails rolls the cycle's transaction back: the row is not committed, the write
    /// stays queued and readable, and the next cycle commits it.
    @Test func aFailedSyncRollsTheApplyBack() async throws {
        try await withTemporaryDirectory { dir in
            let held = HeldSync()
            let store = try openStore(dir, Self.configure(held))
            let value = Data(testBytes(seed: 8, count: 3_000))
            try store.put(value, for: key(2))
            held.armed.withLock { $0 = true }
            held.failing.withLock { $0 = true }
            held.release.signal()
            #expect(throws: StoreError.self) { try store.flush() }
            held.armed.withLock { $0 = false }
            #expect(try Self.committedRow(dir, key(2)) == nil)
            #expect(try store.data(for: key(2)) == value)
            try store.flush()
            #expect(try Self.committedRow(dir, key(2)) != nil)
            try store.close()
            let reopened = try openStore(dir) { $0.compactionInterval = nil }
            #expect(try reopened.data(for: key(2)) == value)
            #expect(try reopened.fsck().isClean)
            try reopened.close()
        }
    }
}
