import Dispatch
import Foundation
import Testing
import TroveCore
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

/// Attacks on `Store.putWithoutWaiting` and `Store.keys(url:)` (533b220).
@Suite struct WithoutWaitingAttackTests {
    /// Runs `body` on a thread of its own while another thread holds the committer lock (no
    /// commit cycle can run, and any caller that would wait for one blocks). Returns nil when
    /// `body` did not finish within `limit`: it waited.
    static func whileCommitterHeld<T: Sendable>(
        _ store: Store, limit: DispatchTimeInterval = .seconds(2), _ body: @escaping @Sendable () throws -> T
    ) throws -> T? {
        let held = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let holder = Thread {
            store.committer.withLock { _ in
                held.signal()
                release.wait()
            }
        }
        holder.start()
        held.wait()
        defer { release.signal() }
        let result = Locked<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let worker = Thread {
            let outcome = Result { try body() }
            result.withLock { $0 = outcome }
            done.signal()
        }
        worker.start()
        guard done.wait(timeout: .now() + limit) == .success else {
            release.signal()
            done.wait()
            return nil
        }
        return try result.withLock { $0 }!.get()
    }

    @Test func neitherKeysNorPutWithoutWaitingWaitForACommitCycle() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.batchInterval = .seconds(3600)
                $0.batchSize = 4
            }
            try store.put(Data([1]), for: key(1))
            try store.put(Data([2]), for: key(1, variant: "w64"))
            let outcome = try Self.whileCommitterHeld(store) {
                var written = 0
                while try store.putWithoutWaiting(Data([UInt8(written), 9]), for: key(100 + written)) != nil {
                    written += 1
                    _ = try store.keys(url: key(1).url)
                }
                return (written, try store.keys(url: key(1).url))
            }
            let (written, keys) = try #require(outcome, "a call waited for the held committer")
            #expect(written > 0)
            #expect(keys == [key(1), key(1, variant: "w64")])
            for i in 0..<written { #expect(try store.data(for: key(100 + i)) == Data([UInt8(i), 9])) }
            #expect(try store.contains(key(100 + written)) == false)
        }
    }

    @Test func aRefusedPutChangesNothing() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.batchInterval = .seconds(3600)
                $0.batchSize = 2
            }
            try store.put(Data([7, 7, 7]), for: key(1))
            try store.committer.withLock { _ in
                var i = 10
                while try store.putWithoutWaiting(Data([UInt8(i)]), for: key(i)) != nil { i += 1 }
                let before = store.appender.withLock { ($0.queue.count, $0.nextSequence, $0.pack.end) }
                // Refused: an overwrite of an existing key, and bytes equal to a stored blob.
                #expect(try store.putWithoutWaiting(Data([8]), for: key(1)) == nil)
                #expect(try store.putWithoutWaiting(Data([7, 7, 7]), for: key(2)) == nil)
                let after = store.appender.withLock { ($0.queue.count, $0.nextSequence, $0.pack.end) }
                #expect(before == after)
                #expect(try store.data(for: key(1)) == Data([7, 7, 7]))
                #expect(try store.contains(key(2)) == false)
                #expect(try store.keys(url: key(2).url).isEmpty)
            }
        }
    }

    @Test(arguments: [Durability.none, .batched])
    func nothingWrittenTwiceWhenARefusedPutIsRetriedWithPut(durability: Durability) async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir, durability: durability) {
                $0.batchInterval = .seconds(3600)
                $0.batchSize = 2
            }
            let payload = Data(testBytes(seed: 3, count: 5000))
            store.waitForLoads()  // until the dedup hints load, puts without waiting are refused
            let (accepted, refused) = try store.committer.withLock { _ in
                var i = 0
                while try store.putWithoutWaiting(value(i, size: 10), for: key(i)) != nil { i += 1 }
                return (i, try store.putWithoutWaiting(payload, for: key(999)))
            }
            #expect(refused == nil)
            try store.put(payload, for: key(999))
            try store.flush()
            #expect(try store.data(for: key(999)) == payload)
            let stats = try store.statistics()
            // One blob for the payload, one per small value; one entry per key.
            #expect(stats.entries == accepted + 1)
            #expect(stats.blobs == accepted + 1)
            try store.close()
            let reopened = try openStore(dir, durability: durability)
            #expect(try reopened.data(for: key(999)) == payload)
            #expect(reopened.recoveryReport.isClean)
        }
    }

    @Test func fullDurabilityRefusesWithoutTouchingThePackOrTheQueue() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir, durability: .full)
            try store.put(Data([1]), for: key(1))
            let before = store.appender.withLock { ($0.queue.count, $0.nextSequence, $0.pack.end) }
            #expect(try store.putWithoutWaiting(Data([2]), for: key(1)) == nil)
            #expect(try store.putWithoutWaiting(Data([3]), for: key(2)) == nil)
            #expect(store.appender.withLock { ($0.queue.count, $0.nextSequence, $0.pack.end) } == before)
            #expect(try store.data(for: key(1)) == Data([1]))
            #expect(try store.keys(url: key(2).url).isEmpty)
        }
    }

    /// While the dedup hints load (opening starts the load; a repair starts it again), asking
    /// them would wait: a put without waiting is refused then, writing nothing, and a put that
    /// may wait finds content stored before the store was opened.
    @Test func aPutWithoutWaitingIsRefusedWhileTheHintsLoad() async throws {
        try await withTemporaryDirectory { dir in
            let shared = Data(testBytes(seed: 5, count: 4000))
            do {
                let store = try openStore(dir)
                try store.put(shared, for: key(1))
                try store.close()
            }
            let store = try openStore(dir) { $0.batchInterval = .seconds(3600) }
            store.waitForLoads()
            let before = store.appender.withLock { ($0.queue.count, $0.nextSequence, $0.pack.end) }
            // A load holds the hints' lock for its whole pass, and only while they are not loaded.
            store.dedupHints.withLock { $0.reset() }
            let refused = try store.dedupHints.withLock { _ in try store.putWithoutWaiting(shared, for: key(2)) }
            #expect(refused == nil, "refused while a load holds the hints")
            #expect(try store.putWithoutWaiting(shared, for: key(3)) == nil, "refused while the hints are not loaded")
            #expect(store.appender.withLock { ($0.queue.count, $0.nextSequence, $0.pack.end) } == before)
            // A put that may wait loads them itself, and links to the blob from before the reopen.
            try store.put(shared, for: key(4))
            #expect(try store.putWithoutWaiting(shared, for: key(5)) != nil)
            try store.flush()
            #expect(try store.statistics().blobs == 1)
            for k in [1, 4, 5] { #expect(try store.data(for: key(k)) == shared) }
            #expect(try store.contains(key(2)) == false)
            #expect(try store.contains(key(3)) == false)
        }
    }

    @Test(arguments: Durability.allCases)
    func putWithoutWaitingOnAClosedStoreThrowsClosed(durability: Durability) async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir, durability: durability)
            try store.close()
            #expect(throws: StoreError.self) { try store.putWithoutWaiting(Data([1]), for: key(1)) }
            #expect(throws: StoreError.self) { try store.keys(url: key(1).url) }
        }
    }

    @Test func keysFollowTombstonesAndRewritesInTheQueue() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.batchInterval = .seconds(3600) }
            let url = key(1).url
            try store.put(Data([1]), for: key(1))
            try store.put(Data([2]), for: key(1, variant: "a"))
            try store.put(Data([3]), for: key(1, variant: "b"))
            try store.flush()
            // Removed in the queue (tombstones not committed).
            try store.remove(key(1))
            #expect(try store.keys(url: url) == [key(1, variant: "a"), key(1, variant: "b")])
            // Written again after its tombstone, still queued.
            try store.put(Data([4]), for: key(1))
            #expect(try store.keys(url: url) == [key(1), key(1, variant: "a"), key(1, variant: "b")])
            // A URL's removal in the queue; then a put of one variant only.
            #expect(try store.removeAll(url: url) == 3)
            #expect(try store.keys(url: url).isEmpty)
            try store.put(Data([5]), for: key(1, variant: "b"))
            #expect(try store.keys(url: url) == [key(1, variant: "b")])
            try store.flush()
            #expect(try store.keys(url: url) == [key(1, variant: "b")])
            // Only this URL: not a prefix of it, not a longer one.
            try store.put(Data([6]), for: CacheKey(url: url + "?x=1"))
            try store.put(Data([7]), for: CacheKey(url: String(url.dropLast())))
            #expect(try store.keys(url: url) == [key(1, variant: "b")])
            try store.close()
            let reopened = try openStore(dir) { $0.batchInterval = .seconds(3600) }
            #expect(try reopened.keys(url: url) == [key(1, variant: "b")])
        }
    }

    @Test func keysIncludeExpiredEntriesEvenAfterACommit() async throws {
        try await withTemporaryDirectory { dir in
            let clock = TestClock(start: 1_700_000_000_000)
            let store = try openStore(dir) {
                $0.batchInterval = .seconds(3600)
                $0.clock = clock.now
            }
            let soon = Date(timeIntervalSince1970: 1_700_000_001)
            try store.put(Data([1]), for: key(1), metadata: EntryMetadata(expiresAt: soon))
            try store.put(Data([2]), for: key(1, variant: "v"), metadata: EntryMetadata(expiresAt: soon))
            clock.advance(by: 5_000)
            #expect(try store.contains(key(1)) == false)
            #expect(try store.keys(url: key(1).url) == [key(1), key(1, variant: "v")])
            try store.flush()
            #expect(try store.keys(url: key(1).url) == [key(1), key(1, variant: "v")])
        }
    }

    /// keys(url:) against a concurrent stream of removals and puts of the URL: every answer is
    /// a set that existed (with a single writer that alternates full sets and empty sets, the
    /// answer is one of the states it wrote, never a mix of a removal and stale keys).
    @Test func keysNeverSeeAKeyRemovedBeforeTheCallStarted() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.batchSize = 8 }
            let url = key(1).url
            let stop = Locked(false)
            let removedThrough = Locked(-1)
            let writer = Thread {
                var round = 0
                while !stop.withLock({ $0 }) {
                    try? store.put(Data([UInt8(truncatingIfNeeded: round)]), for: key(1, variant: "r\(round)"))
                    _ = try? store.removeAll(url: url)
                    removedThrough.withLock { $0 = round }
                    round += 1
                }
            }
            writer.start()
            defer { stop.withLock { $0 = true } }
            for _ in 0..<2_000 {
                let floor = removedThrough.withLock { $0 }
                let keys = try store.keys(url: url)
                #expect(keys.count <= 1)
                for found in keys {
                    let round = Int(found.variant.dropFirst())!
                    #expect(round > floor, "\(found) was removed before keys(url:) was called")
                }
            }
        }
    }
}
