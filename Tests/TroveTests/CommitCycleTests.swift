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
            // The syncs held are the writers' and the cycles'; ZeroFillTests hold a fill's.
            configuration.zeroFill = 0
        }
    }

    /// The committed index's row for `key`, read through a connection of its own.
    static func committedRow(_ dir: String, _ key: CacheKey) throws -> EntryRow? {
        let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: true)
        return try index.entryRow(digest: key.digest)
    }

    /// While the pack's sync is held, the cycle's apply has run but nothing is committed; once
    /// the sync returns, the row is. Under `full` the put itself leads that sync (and does not
    /// return while it is held); the flush's cycle then finds the bytes durable already.
    @Test(arguments: [Durability.batched, .full])
    func noRowIsCommittedBeforeItsBytesAreSynced(durability: Durability) async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let held = HeldSync()
                let store = try openStore(dir, durability: durability, Self.configure(held))
                let value = Data(testBytes(seed: 7, count: 5_000))
                held.armed.withLock { $0 = true }
                let done = DispatchSemaphore(value: 0)
                let failure = Locked<(any Error)?>(nil)
                let putReturned = Locked(false)
                Thread.detachNewThread {
                    do {
                        try store.put(value, for: key(1))
                        putReturned.withLock { $0 = true }
                        try store.flush()
                    } catch { failure.withLock { $0 = error } }
                    done.signal()
                }
                held.started.wait()
                // Time for the apply beside the held sync (it takes well under a millisecond).
                usleep(300_000)
                #expect(try Self.committedRow(dir, key(1)) == nil, "a row was committed before its bytes were synced")
                if durability == .full {
                    #expect(!putReturned.withLock { $0 }, "a full put returned before its bytes were synced")
                }
                held.armed.withLock { $0 = false }
                held.release.signal()
                done.wait()
                #expect(failure.withLock { $0 } == nil)
                #expect(try Self.committedRow(dir, key(1)) != nil)
                #expect(try store.data(for: key(1)) == value)
                try store.close()
            }
        }
    }

    /// A sync that fails rolls the cycle's transaction back: the row is not committed and the
    /// write stays readable. The sync is never retried — the kernel would report a second one
    /// as successful whether or not the bytes reached the disk — so the next flush is refused
    /// too, and the write is committed by the next opening's replay.
    @Test func aFailedSyncRollsTheApplyBackAndIsNeverRetried() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
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
                let again = #expect(throws: StoreError.self) { try store.flush() }
                #expect(again?.code == .syncFailed)
                #expect(try Self.committedRow(dir, key(2)) == nil)
                #expect(throws: StoreError.self) { try store.close() }
                let reopened = try openStore(dir) { $0.compactionInterval = nil }
                #expect(try reopened.data(for: key(2)) == value)
                #expect(try reopened.fsck().isClean)
                try reopened.close()
            }
        }
    }

    /// A `full` write waits for the sync of its bytes, not for the index: it returns while the
    /// test holds the committer (no cycle can run), having synced the pack; the commit that
    /// follows finds those bytes durable and syncs nothing again.
    @Test func aFullWriteWaitsForItsSyncNotForTheIndex() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let syncs = Locked(0)
                let store = try openStore(dir, durability: .full) { configuration in
                    configuration.zeroFill = 0  // every sync counted is a writer's or a cycle's
                    configuration.compactionInterval = nil
                    configuration.batchInterval = .seconds(3600)
                    configuration.accessTimeFlushInterval = .seconds(3600)
                    configuration.faultInjector = FaultInjector { operation, path in
                        if operation == .sync, path.hasSuffix(".pack") { syncs.withLock { $0 += 1 } }
                        return nil
                    }
                }
                let value = Data(testBytes(seed: 5, count: 9_000))
                let before = syncs.withLock { $0 }
                let returned = store.committer.withLock { _ in
                    let done = DispatchSemaphore(value: 0)
                    Thread.detachNewThread {
                        if (try? store.put(value, for: key(1))) != nil { done.signal() }
                    }
                    return done.wait(timeout: .now() + 30) == .success
                }
                #expect(returned, "a full put waited for the committer")
                let synced = syncs.withLock { $0 }
                #expect(synced == before + 1, "the put's own sync")
                #expect(try Self.committedRow(dir, key(1)) == nil)
                try store.flush()
                #expect(try Self.committedRow(dir, key(1)) != nil)
                #expect(syncs.withLock { $0 } == synced, "the commit synced bytes a writer's sync covered")
                #expect(try store.data(for: key(1)) == value)
                try store.close()
            }
        }
    }

    /// Under `full`, a removal that finds the key already removed by another writer's tombstone
    /// — appended, not yet synced — returns only once that tombstone is durable: what it reports
    /// (no entry) must survive a power loss too. (Found by an outside attack: it returned at
    /// once.)
    @Test func aFullRemovalOfAKeyBeingRemovedWaitsForThatRemovalsSync() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let held = HeldSync()
                let store = try openStore(dir, durability: .full, Self.configure(held))
                try store.put(Data(testBytes(seed: 3, count: 2_000)), for: key(3))
                held.armed.withLock { $0 = true }
                let first = DispatchSemaphore(value: 0)
                Thread.detachNewThread {
                    _ = try? store.remove(key(3))
                    first.signal()
                }
                held.started.wait()
                let second = DispatchSemaphore(value: 0)
                let reported = Locked<Bool?>(nil)
                Thread.detachNewThread {
                    reported.withLock { $0 = try? store.remove(key(3)) }
                    second.signal()
                }
                let returnedEarly = second.wait(timeout: .now() + .milliseconds(300)) == .success
                #expect(!returnedEarly, "the second removal returned before the first one's tombstone was synced")
                held.armed.withLock { $0 = false }
                held.release.signal()
                #expect(first.wait(timeout: .now() + 30) == .success)
                if !returnedEarly { #expect(second.wait(timeout: .now() + 30) == .success) }
                #expect(reported.withLock { $0 } == false)
                #expect(try store.data(for: key(3)) == nil)
                try store.close()
            }
        }
    }

    /// The end of `key`'s newest record still queued (not committed): its segment and the
    /// offset past it; nil when none is queued.
    static func queuedEnd(_ store: Store, _ key: CacheKey) -> (segment: UInt32, end: UInt64)? {
        store.appender.withLock { state in
            var found: (segment: UInt32, end: UInt64)?
            for write in state.queue {
                let named: CacheKey? =
                    switch write.record.content {
                    case .link(let link): link.key
                    case .tombstone(let tombstone): CacheKey(url: tombstone.url, variant: tombstone.variant)
                    case .blob: nil
                    }
                if named == key { found = (write.segment, write.record.offset + write.record.length) }
            }
            return found
        }
    }

    /// Under `full`, eight writers share the pack's syncs (``GroupWait``) and each put or
    /// removal returns only once its record is durable — checked against a sync of the test's
    /// own, run as each of the store's begins, which records how much of the file it made
    /// durable — also when a leader's sync fails: its followers lead syncs of their own, which
    /// fail at once, as does every write after it (the store refuses writes until reopened);
    /// none returns success for a write that is not durable. What the index has not committed
    /// when they return, the next opening replays.
    ///
    /// With zeros kept ahead of the writes (`zeroFill`), a sync makes durable the records
    /// written when it began — the active segment's end, not its file size; the fills' own
    /// syncs are left out of the model (the store never counts on them).
    @Test(arguments: [false, true], [0, 16_384])
    func everyFullWriteIsDurableWhenItReturns(failingOnce: Bool, zeroFill: Int64) async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let syncs = Locked(0)
                // By segment path: how many of its bytes a sync has made durable.
                let durable = Locked<[String: UInt64]>([:])
                let opened = Locked<Store?>(nil)
                let store = try openStore(dir, durability: .full) { configuration in
                    configuration.zeroFill = zeroFill
                    configuration.compactionInterval = nil
                    // Only the writers run syncs, so the failed sync is always a writer's.
                    configuration.batchInterval = .seconds(3600)
                    configuration.accessTimeFlushInterval = .seconds(3600)
                    configuration.faultInjector = FaultInjector { operation, path in
                        guard operation == .sync, path.hasSuffix(".pack") else { return nil }
                        let n = syncs.withLock {
                            $0 += 1; return $0
                        }
                        if failingOnce && n == 20 { return .error(EIO) }
                        // What the segment held before the sync — its records, where zeros
                        // lie ahead of them — is durable once it returns.
                        var info = stat()
                        guard stat(path, &info) == 0 else { return .error(EIO) }
                        let filling = onThread(named: "trove-preparer")
                        // (Never on the preparer's thread: a writer may hold the appender
                        // while it waits for the zeros of the fill queued behind this one.)
                        let records =
                            filling
                            ? nil
                            : opened.withLock { $0 }.map { store in
                                store.appender.withLock { $0.pack.segment.path == path ? $0.pack.end : nil }
                            }
                        let fd = open(path, O_RDONLY)
                        guard fd >= 0, fdatasync(fd) == 0 else { return .error(EIO) }
                        close(fd)
                        if !filling {
                            let end = (records ?? nil) ?? UInt64(info.st_size)
                            durable.withLock { $0[path] = max($0[path] ?? 0, end) }
                        }
                        return nil
                    }
                }
                opened.withLock { $0 = store }
                defer { opened.withLock { $0 = nil } }
                let packs = dir + "/store/packs"
                /// Whether `key`'s newest queued record, if any, is inside what a sync made durable.
                @Sendable func isDurable(_ key: CacheKey) -> Bool {
                    guard let queued = Self.queuedEnd(store, key) else { return true }
                    let path = PackDirectory.segmentPath(queued.segment, in: packs)
                    return durable.withLock { $0[path] ?? 0 } >= queued.end
                }
                let writers = 8
                let perWriter = 25
                let problems = Locked<[String]>([])
                let failed = Locked(0)
                let acknowledged = Locked(Set<Int>())  // keys whose put returned
                let removed = Locked(Set<Int>())  // keys whose removal was asked (after a put that returned)
                let removalAcknowledged = Locked(Set<Int>())
                let group = DispatchGroup()
                for w in 0..<writers {
                    group.enter()
                    Thread.detachNewThread {
                        defer { group.leave() }
                        for j in 0..<perWriter {
                            let i = w * 1_000 + j
                            let value = Data(testBytes(seed: UInt64(i), count: 2_000 + j * 10))
                            do {
                                try store.put(value, for: key(i))
                                acknowledged.withLock { _ = $0.insert(i) }
                            } catch {
                                failed.withLock { $0 += 1 }
                                continue
                            }
                            if !isDurable(key(i)) {
                                problems.withLock { $0.append("\(key(i)) returned before its record was synced") }
                            }
                            // A removal is one record (a put is two): it waits the same way.
                            guard j % 5 == 4 else { continue }
                            removed.withLock { _ = $0.insert(i) }
                            do {
                                try store.remove(key(i))
                                removalAcknowledged.withLock { _ = $0.insert(i) }
                                if !isDurable(key(i)) {
                                    problems.withLock { $0.append("removing \(key(i)) returned before it was synced") }
                                }
                            } catch {
                                // Still queued: it takes effect once the index catches up.
                                failed.withLock { $0 += 1 }
                            }
                        }
                    }
                }
                group.wait()
                #expect(problems.withLock { $0 }.isEmpty, "\(problems.withLock { $0 }.prefix(5))")
                if failingOnce {
                    #expect(failed.withLock { $0 } >= 1)
                    // The failed sync is not retried: the store refuses writes until reopened.
                    let refused = #expect(throws: StoreError.self) { try store.put(Data("late".utf8), for: key(99_999)) }
                    #expect(refused?.code == .syncFailed)
                    #expect(throws: StoreError.self) { try store.close() }
                } else {
                    #expect(failed.withLock { $0 } == 0)
                    try store.close()
                }
                let reopened = try openStore(dir) { $0.compactionInterval = nil }
                for w in 0..<writers {
                    for j in 0..<perWriter {
                        let i = w * 1_000 + j
                        let expected = Data(testBytes(seed: UInt64(i), count: 2_000 + j * 10))
                        let served = try reopened.data(for: key(i))
                        if removalAcknowledged.withLock({ $0.contains(i) }) {
                            #expect(served == nil, "\(key(i)): its removal was acknowledged")
                        } else if acknowledged.withLock({ $0.contains(i) }) && !removed.withLock({ $0.contains(i) }) {
                            #expect(served == expected, "\(key(i)): its put was acknowledged")
                        } else {
                            // A failed put or removal: either outcome, never other bytes.
                            #expect(served == nil || served == expected, "\(key(i))")
                        }
                    }
                }
                #expect(try reopened.fsck().isClean)
                try reopened.close()
            }
        }
    }

    /// A leader whose sync fails does not release its followers as durable: each leads a sync
    /// of its own, which fails at once — without asking the kernel for a second sync, which
    /// would succeed whether or not the bytes reached the disk.
    @Test func followersOfAFailedLeaderFailWithoutASecondSync() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                // Sync 1 is held until the test lets it go; 2 is held, then fails.
                let started = DispatchSemaphore(value: 0)
                let release = DispatchSemaphore(value: 0)
                let syncs = Locked(0)
                let armed = Locked(false)  // after the open's own syncs
                let store = try openStore(dir, durability: .full) { configuration in
                    configuration.zeroFill = 0  // every sync counted is a writer's or a cycle's
                    configuration.compactionInterval = nil
                    configuration.batchInterval = .seconds(3600)
                    configuration.accessTimeFlushInterval = .seconds(3600)
                    configuration.faultInjector = FaultInjector { operation, path in
                        guard operation == .sync, path.hasSuffix(".pack"), armed.withLock({ $0 }) else { return nil }
                        let n = syncs.withLock {
                            $0 += 1; return $0
                        }
                        guard n <= 2 else { return nil }
                        started.signal()
                        release.wait()
                        return n == 2 ? .error(EIO) : nil
                    }
                }
                armed.withLock { $0 = true }
                /// Waits for the next held sync; on a timeout lets every held one go, and fails.
                func nextSync(_ what: String) throws {
                    let began = started.wait(timeout: .now() + 30) == .success
                    if !began { for _ in 0..<4 { release.signal() } }
                    try #require(began, "no \(what) within 30 s")
                }
                let writers = 6
                let outcomes = Locked<[Int: Bool]>([:])  // writer: succeeded
                let group = DispatchGroup()
                func startWriter(_ w: Int) {
                    group.enter()
                    Thread.detachNewThread {
                        let ok = (try? store.put(Data(testBytes(seed: UInt64(w), count: 3_000)), for: key(w))) != nil
                        outcomes.withLock { $0[w] = ok }
                        group.leave()
                    }
                }
                // Sync 1 covers writer 0's write alone (it read how far to sync before it
                // began); the others append meanwhile and follow.
                startWriter(0)
                try nextSync("first sync")
                for w in 1..<writers { startWriter(w) }
                while store.appender.withLock({ $0.queue.count }) < 2 * writers { usleep(1_000) }
                usleep(100_000)
                release.signal()
                // Sync 2 covers the other five; it fails, and so does every follower's own sync.
                try nextSync("second sync")
                usleep(100_000)
                release.signal()
                #expect(group.wait(timeout: .now() + 30) == .success, "the followers did not return")
                let final = outcomes.withLock { $0 }
                #expect(final[0] == true, "the first cycle's writer: \(final)")
                #expect(final.values.filter { $0 }.count == 1, "a follower returned success after the failed sync: \(final)")
                #expect(syncs.withLock { $0 } == 2, "a sync was asked again after it failed")
                // Nothing commits after the failed sync; writer 0's write is durable, and the
                // next opening replays it.
                for w in 1..<writers { #expect(try Self.committedRow(dir, key(w)) == nil) }
                #expect(throws: StoreError.self) { try store.close() }
                let reopened = try openStore(dir) { $0.compactionInterval = nil }
                #expect(try reopened.data(for: key(0)) == Data(testBytes(seed: 0, count: 3_000)))
                try reopened.close()
            }
        }
    }

    /// Back-pressure bounds the queue, not a write's latency: a writer that finds the queue at
    /// its bound (8 × `batchSize` records) while a cycle is in flight returns once that cycle
    /// has committed the oldest writes — its own still queued — without waiting for the next
    /// cycle, whose sync the test holds. (It used to wait for a cycle covering its own write:
    /// the one in flight, then another.)
    @Test func aWriterAtBackPressureWaitsForTheCycleInFlightOnly() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let held = HeldSync()
                let store = try openStore(dir) {
                    Self.configure(held)(&$0)
                    $0.batchSize = 4
                }
                let value: @Sendable (Int) -> Data = { i in Data(testBytes(seed: UInt64(100 + i), count: 700)) }
                try store.put(value(0), for: key(0))
                held.armed.withLock { $0 = true }
                let flushed = DispatchSemaphore(value: 0)
                Thread.detachNewThread {
                    _ = try? store.flush()
                    flushed.signal()
                }
                // The cycle in flight: its snapshot holds key 0's two records, its sync is held.
                held.started.wait()
                var written = 1
                while try store.putWithoutWaiting(value(written), for: key(written)) != nil { written += 1 }
                #expect(store.appender.withLock { $0.queue.count } == 30)
                let returned = DispatchSemaphore(value: 0)
                let failure = Locked<(any Error)?>(nil)
                Thread.detachNewThread {
                    do { try store.put(value(100), for: key(100)) } catch { failure.withLock { $0 = error } }
                    returned.signal()
                }
                #expect(returned.wait(timeout: .now() + .milliseconds(300)) == .timedOut, "back-pressure did not hold the writer")
                // Every sync after this one stays held: only the cycle in flight can end.
                held.release.signal()
                #expect(flushed.wait(timeout: .now() + 30) == .success)
                #expect(returned.wait(timeout: .now() + 30) == .success, "the writer waited for a cycle after the one in flight")
                #expect(failure.withLock { $0 } == nil)
                #expect(try Self.committedRow(dir, key(100)) == nil, "its own write is committed by a later cycle")
                #expect(try Self.committedRow(dir, key(0)) != nil)
                held.armed.withLock { $0 = false }
                held.release.signal()  // a background cycle may be holding in its sync
                try store.flush()
                for i in 0..<written { #expect(try store.data(for: key(i)) == value(i)) }
                #expect(try store.data(for: key(100)) == value(100))
                #expect(try Self.committedRow(dir, key(100)) != nil)
                try store.close()
            }
        }
    }

    /// Two writers wait at the bound for the cycle in flight; its end leaves the queue at the
    /// bound still (their own records refilled it), so they wait again, for the next cycle: the
    /// queue never exceeds its bound by more than two records per writer.
    @Test func writersWokenWithTheQueueStillAtItsBoundWaitAgain() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let held = HeldSync()
                let store = try openStore(dir) {
                    Self.configure(held)(&$0)
                    $0.batchSize = 4
                }
                let value: @Sendable (Int) -> Data = { i in Data(testBytes(seed: UInt64(300 + i), count: 700)) }
                let queued = { store.appender.withLock { $0.queue.count } }
                try store.put(value(0), for: key(0))
                held.armed.withLock { $0 = true }
                let flushed = DispatchSemaphore(value: 0)
                Thread.detachNewThread {
                    _ = try? store.flush()
                    flushed.signal()
                }
                held.started.wait()  // the cycle in flight holds key 0's two records
                var written = 1
                while try store.putWithoutWaiting(value(written), for: key(written)) != nil { written += 1 }
                #expect(queued() == 30)
                let returned = DispatchSemaphore(value: 0)
                let failure = Locked<(any Error)?>(nil)
                for (n, k) in [100, 101].enumerated() {
                    Thread.detachNewThread {
                        do { try store.put(value(k), for: key(k)) } catch { failure.withLock { $0 = error } }
                        returned.signal()
                    }
                    let expected = 32 + 2 * n
                    let deadline = Date().addingTimeInterval(30)
                    while queued() < expected && Date() < deadline { usleep(1_000) }
                    #expect(queued() == expected)
                }
                held.release.signal()  // the cycle in flight ends; every later sync stays held
                #expect(flushed.wait(timeout: .now() + 30) == .success)
                #expect(queued() == 32, "key 0's records left; the writers' own refilled the queue")
                #expect(
                    returned.wait(timeout: .now() + .milliseconds(300)) == .timedOut,
                    "a writer returned with the queue still at its bound")
                held.started.wait()  // the next cycle, holding everything queued
                held.armed.withLock { $0 = false }
                held.release.signal()
                for _ in 0..<2 { #expect(returned.wait(timeout: .now() + 30) == .success) }
                #expect(failure.withLock { $0 } == nil)
                #expect(queued() < 32)
                try store.flush()
                for i in 0..<written { #expect(try store.data(for: key(i)) == value(i)) }
                for k in [100, 101] { #expect(try store.data(for: key(k)) == value(k)) }
                try store.close()
            }
        }
    }

    /// A writer whose own write was committed by the cycle it waited for, woken with the queue
    /// still at its bound, waits again; that next cycle's failed sync is not its failure.
    /// (Found by an outside review: the put threw syncFailed with its row committed.)
    @Test func aWaiterWhoseWriteIsCommittedIsNotFailedByALaterCycle() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let held = HeldSync()
                let store = try openStore(dir) {
                    Self.configure(held)(&$0)
                    $0.batchSize = 1  // bound 8
                }
                let v: @Sendable (Int) -> Data = { i in Data(testBytes(seed: UInt64(500 + i), count: 700)) }
                let queued = { store.appender.withLock { $0.queue.count } }
                store.waitForLoads()  // until the dedup hints load, puts without waiting are refused
                // Hold the committer lock so that no cycle takes a snapshot while the queue fills.
                let holding = DispatchSemaphore(value: 0)
                let letGo = DispatchSemaphore(value: 0)
                Thread.detachNewThread {
                    store.committer.withLock { _ in
                        holding.signal()
                        letGo.wait()
                    }
                }
                holding.wait()
                var written = 0
                while try store.putWithoutWaiting(v(written), for: key(written)) != nil { written += 1 }
                #expect(queued() == 6)
                let wDone = DispatchSemaphore(value: 0)
                let wError = Locked<StoreError?>(nil)
                Thread.detachNewThread {
                    do { try store.put(v(1000), for: key(1000)) } catch { wError.withLock { $0 = error as? StoreError } }
                    wDone.signal()
                }
                let filled = Date().addingTimeInterval(30)
                while queued() < 8 && Date() < filled { usleep(1_000) }
                held.armed.withLock { $0 = true }
                letGo.signal()
                held.started.wait()  // C1 holds all 8 records, W's included
                let others = DispatchGroup()
                for i in 0..<4 {
                    others.enter()
                    Thread.detachNewThread {
                        _ = try? store.put(v(2000 + i), for: key(2000 + i))
                        others.leave()
                    }
                }
                let deadline = Date().addingTimeInterval(30)
                while queued() < 16 && Date() < deadline { usleep(1_000) }
                #expect(queued() == 16)
                held.release.signal()  // C1 succeeds: W's write is committed
                held.started.wait()  // C2, held
                #expect(try Self.committedRow(dir, key(1000)) != nil, "W's write committed by C1")
                #expect(wDone.wait(timeout: .now() + .milliseconds(300)) == .timedOut, "W still waiting")
                held.failing.withLock { $0 = true }
                held.release.signal()  // C2's sync fails with EIO
                #expect(wDone.wait(timeout: .now() + 30) == .success, "W hung")
                #expect(others.wait(timeout: .now() + 30) == .success)
                let err = wError.withLock { $0 }
                #expect(err == nil, "a put whose write was committed and synced by C1 threw \(String(describing: err?.code))")
                held.armed.withLock { $0 = false }
                _ = try? store.close()
                let reopened = try openStore(dir)
                #expect(try reopened.data(for: key(1000)) == v(1000))
                try reopened.close()
            }
        }
    }
}
