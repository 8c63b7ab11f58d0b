import Foundation
import TroveCore
import TroveIndex
import TrovePack

// The commit cycle: writes reach the index here, in batches, off the put path.
//
// One cycle: take a snapshot of the appender's queue (under its lock, briefly); start the
// fdatasync of the segments it touched (unless durability is `none`) on the syncer thread; apply
// the queued records to the index in one transaction, with the active segment's indexed length
// and the sequence counter, while that sync runs; wait for the sync; commit; then release the
// committed writes from the queue. No lock but the committer's is held, so puts keep appending.
// The pack bytes are durable before the rows that point at them are committed (a failed sync
// rolls the transaction back, and the segment refuses every later sync, so the store refuses
// writes until reopened), and recovery replays whatever the index had not committed.

extension Store {
    /// Commits every queued write; with `through`, returns at once if that sequence number is
    /// already committed (another caller's cycle covered it).
    /// - Returns: the committed sequence: every write with a lower sequence number is committed.
    @discardableResult
    func commitPending(through target: UInt64? = nil, flushReadTimes: Bool = false) throws(StoreError) -> UInt64 {
        try committer.withLock { (state) throws(StoreError) -> UInt64 in
            guard let state, !state.isClosed else { throw Self.closedError(directory) }
            if let target, state.committedSequence > target { return state.committedSequence }
            try commitCycle(state, flushReadTimes: flushReadTimes)
            return state.committedSequence
        }
    }

    /// One commit cycle. Returns where its snapshot ended: every record before that place of
    /// that segment, and in every older segment, is reflected by the index once it returns.
    @discardableResult
    func commitCycle(_ state: CommitState, flushReadTimes: Bool) throws(StoreError) -> (segment: UInt32, end: UInt64) {
        groupCommit.roundStarted()
        defer { groupCommit.roundEnded(reached: state.committedSequence) }
        let snapshot = appender.withLock { $0.snapshot() }
        let bound = (segment: snapshot.active.id, end: snapshot.end)
        let now = ContinuousClock.now
        var readTimes: [CacheKey: Int64] = [:]
        if flushReadTimes || now - state.lastReadTimeFlush >= configuration.accessTimeFlushInterval {
            readTimes = shared.withLock { shared in
                defer { shared.readTimes.removeAll(keepingCapacity: true) }
                return shared.readTimes
            }
            state.lastReadTimeFlush = now
        }
        let moved = state.committedEnd != (snapshot.active.id, snapshot.end)
        guard
            !snapshot.isEmpty || !readTimes.isEmpty || snapshot.sequence != state.committedSequence
                || state.deferredReplay != nil || moved
        else {
            // Nothing to commit (and so nothing to sync), but reads fill the map too: it is held
            // to its limit here as well.
            holdLocationMap(committed: state.committedSequence)
            return bound
        }
        // The pack's sync runs beside the apply, and the transaction commits only after it. (A
        // segment that failed a sync, or tails opening could not make durable, fail the cycle
        // here, before anything is applied.)
        let sync: BackgroundSyncer.Job?
        do throws(StoreError) {
            if let refusal = snapshot.refusal { throw StoreError(pack: refusal) }
            sync = try packSync(for: snapshot)
        } catch {
            // No cycle commits until the store is reopened: reads still fill the location map
            // and the read times, which are held to their bounds here (read times are advisory:
            // this cycle's are dropped).
            shared.withLock { $0.readTimes.removeAll() }
            holdLocationMap(committed: state.committedSequence)
            throw error
        }
        var superseded: [LinkRecord] = []
        let index = state.index
        do {
            try index.writing {
                // What opening could not write comes first: the queued writes are newer.
                if let deferred = state.deferredReplay { superseded = try deferred.apply(to: index).supersede }
                for id in snapshot.created {
                    try index.insertSegment(id: id, indexedBytes: UInt64(PackFormat.segmentHeaderSize))
                }
                try IndexApplier(index: index).apply(snapshot.writes)
                for sealed in snapshot.rotated {
                    try index.setIndexedBytes(sealed.end, segment: sealed.file.id)
                    try index.sealSegment(sealed.file.id)
                }
                try index.setIndexedBytes(snapshot.end, segment: snapshot.active.id)
                try index.setCommittedSequence(snapshot.sequence)
                try index.touch(readTimes.map { (digest: $0.key.digest, accessedAt: $0.value) })
                try sync?.wait()
            }
        } catch {
            // No sync outlives its cycle (a failed apply still waits for it).
            try? sync?.wait()
            // The writes stay queued and the read times go back, for the next cycle.
            shared.withLock { $0.readTimes.merge(readTimes) { max($0, $1) } }
            throw StoreError(index: error)
        }
        state.committedSequence = snapshot.sequence
        state.committedEnd = (snapshot.active.id, snapshot.end)
        scheduleCheckpoint(index)
        if state.deferredReplay != nil {
            state.deferredReplay = nil
            shared.withLock { $0.map.unpin() }
            // Older values whose newer write the replay found lost: tombstones, committed by the
            // next cycle.
            for link in superseded {
                _ = try? withAppender { (appender) throws(StoreError) in _ = try appendTombstone(for: link.key, to: appender) }
            }
        }
        let released = appender.withLock { $0.release(snapshot) }
        holdLocationMap(committed: state.committedSequence)
        // The released records are freed here, after the appender lock (with the snapshot's
        // reference, the last ones).
        withExtendedLifetime(released) {}
        return bound
    }

    /// Starts the wait that makes `snapshot`'s pack bytes durable (none under
    /// ``Durability/none``): every byte before its end, in its rotated segments and the active
    /// one, and the packs directory's entries when segments were created — a sync of the pack
    /// (``makeDurable(through:)``), shared with the writers waiting for one, and none at all
    /// when one of theirs covered these bytes already. The caller waits for the job before it
    /// commits.
    ///
    /// - Throws: ``StoreError/Code/syncFailed`` at once, without applying anything, when one of
    ///   those segments already failed a sync: none of its unsynced writes can be committed
    ///   until the store is reopened (``SegmentFile/synchronize()``).
    private func packSync(for snapshot: CommitSnapshot) throws(StoreError) -> BackgroundSyncer.Job? {
        guard configuration.durability != .none else { return nil }
        let files = snapshot.rotated.map(\.file) + [snapshot.active]
        if let failure = files.lazy.compactMap(\.syncFailure).first { throw StoreError(pack: failure) }
        // The cycle commits the active segment's length whatever it carries (read times, say):
        // bytes inside that length are never replayed, so they must be on disk first — queued
        // writes' and the compactor's copies alike.
        let through = PackPosition(segment: snapshot.active.id, offset: snapshot.end)
        guard !groupSync.hasReached(through) else { return nil }
        return syncer.submit { [self] in try makeDurable(through: through) }
    }

    /// Returns once every byte appended to the pack before `through` is durable, and the packs
    /// directory's entry of every segment that holds one: a sync another writer or a commit
    /// cycle leads covers it, or this call leads one (``groupSync``), which covers every byte
    /// appended so far. (A `full` write waits here, not for an index commit: the packs carry
    /// durability, and recovery replays what the index has not committed.)
    ///
    /// - Throws: ``StoreError/Code/syncFailed`` when the sync fails, or failed before (a
    ///   segment refuses every sync after a failed one until the store is reopened), `.io` when
    ///   the directory's fails; the refusal opening left (``AppendState/unsyncedTails``).
    func makeDurable(through: PackPosition) throws(StoreError) {
        try groupSync.wait(for: through) { () throws(StoreError) in try syncPack() }
    }

    /// One sync of the pack (the leader of a ``groupSync`` round): fdatasyncs the segments
    /// sealed since the last sync and the active segment, then the packs directory when
    /// rotations created segments since; returns the place every byte before which is durable.
    /// Held: no store lock (it takes `appender` briefly, before and after).
    private func syncPack() throws(StoreError) -> PackPosition {
        let (unsynced, refusal) = appender.withLock { ($0.unsynced(), $0.unsyncedTails) }
        // Tails opening could not make durable are never reported durable in this opening.
        if let refusal { throw StoreError(pack: refusal) }
        do {
            for file in unsynced.sealed { try file.synchronize() }
            try unsynced.active.synchronize()
            if unsynced.creations > 0 {
                try PackDirectory.synchronize(packsDirectory, faults: configuration.faultInjector)
            }
        } catch {
            throw StoreError(pack: error)
        }
        appender.withLock { $0.synced(sealed: unsynced.sealed.count, creations: unsynced.creations) }
        return unsynced.through
    }

    /// Log frames (pages written by commits) at which a commit asks the checkpointer to copy
    /// the log into the database, at least: SQLite's own automatic threshold, a 4 MiB log.
    static let minimumCheckpointFrames = 1_000

    /// ... and at most: a 16 MiB log. On a large index the pages a put dirties at random (the
    /// digest index's) are then written back about once per four times as many puts, and the
    /// checkpointer's copying, which shares the cores with the committer, costs less per put
    /// (Docs/Benchmarks.md, "the checkpoint threshold").
    static let maximumCheckpointFrames = 4_000

    /// The log frames at which a commit asks for a checkpoint, for an index file of
    /// `indexBytes` and a store of `capacity`: as many as the index has pages, between
    /// ``minimumCheckpointFrames`` and ``maximumCheckpointFrames``, and no more than a
    /// sixteenth of `capacity` holds. A small index gains nothing from a longer log (a
    /// checkpoint writes each of its pages once anyway) and a small store or disk cannot spare
    /// it (found by an outside attack: a 16 MiB log filled a 24 MiB file system).
    static func checkpointFrames(indexBytes: Int64, capacity: Int64?) -> Int {
        let pageBytes: Int64 = 4_096
        var frames = min(Int64(maximumCheckpointFrames), indexBytes / pageBytes)
        if let capacity { frames = min(frames, capacity / 16 / pageBytes) }
        return Int(max(Int64(minimumCheckpointFrames), frames))
    }

    /// Log frames at which the committer checkpoints itself after a commit: the checkpointer fell
    /// behind (or failed), and the log must not grow without bound. About 32 MiB.
    static let walFrameLimit = 8_000

    /// After a commit: asks for a checkpoint when the log has grown past
    /// ``checkpointFrames(indexBytes:capacity:)``, and runs one on the committer when it is past
    /// ``walFrameLimit`` (held: the committer lock).
    private func scheduleCheckpoint(_ index: IndexDatabase) {
        let frames = index.walFrames
        guard frames >= Self.minimumCheckpointFrames else { return }
        let indexBytes = SystemCall.fileSize(directory + "/index.sqlite") ?? 0
        guard frames >= Self.checkpointFrames(indexBytes: indexBytes, capacity: configuration.capacity) else { return }
        if frames >= Self.walFrameLimit {
            // Best effort, as SQLite's automatic checkpoint: a failure leaves the log to the next try.
            _ = try? index.checkpointPassively()
        } else {
            checkpointer.request()
        }
    }

    /// Every slot of a write numbered below `committed` is answered by the index: drops those of
    /// committed removals, and when the map holds more than ``Configuration/locationCacheLimit``
    /// keys, lets go of slots of committed writes and of reads until it is a sixteenth under it —
    /// never of a queued write, whose number is `committed` or above. Takes the map's lock only,
    /// a chunk of slots at a time, so puts and gets go on between chunks; the slots let go of are
    /// freed by the reclaimer, after the lock. Held: the committer lock.
    private func holdLocationMap(committed: UInt64) {
        let limit = configuration.locationCacheLimit
        var dropped = LocationMap.Dropped()
        // The chunks it takes to let go of what the map was over its target when the eviction
        // began, and one more:
        // reads that fill the map between chunks wait for the next cycle, so that a stream of
        // them cannot keep this cycle evicting.
        var chunksLeft = 0
        var continuing = false
        while true {
            let (chunk, more) = shared.withLock { shared in
                if !continuing {
                    let over = shared.map.count - LocationMap.evictionTarget(limit: limit)
                    chunksLeft = max(0, over) / Self.evictionChunk + 1
                }
                return shared.map.committed(
                    limit: limit, through: committed, atMost: Self.evictionChunk, continuing: continuing)
            }
            if continuing { dropped.merge(chunk) } else { dropped = chunk }
            chunksLeft -= 1
            guard more, chunksLeft > 0 else { break }
            continuing = true
        }
        reclaimer.release(dropped)
    }

    /// Slots the location map lets go of per hold of its lock when it evicts: ~0.1 ms of work.
    static let evictionChunk = 512

    /// Drops every entry linked to `blob`, whose record is the one the index names but whose
    /// payload fails its checksum: a tombstone per key (so that no replay of the packs can
    /// bring an older value of it back), committed at once; then forgets the blob and records
    /// the damage for `trove fsck --repair`, which salvages the rest of the segment.
    /// - Returns: the dropped keys.
    func dropDamagedBlob(_ blob: BlobRow, reason: String) throws(StoreError) -> [CacheKey] {
        try withCommitter { (state) throws(StoreError) -> [CacheKey] in
            let index = state.index
            // The index must reflect every queued write before the blob's keys are judged.
            try commitCycle(state, flushReadTimes: false)
            let linked: [EntryRow]
            do { linked = try index.entries(blobID: blob.id) } catch { throw StoreError(index: error) }
            // A key written again meanwhile keeps its new value: the tombstones are guarded.
            let dropped = try appendGuardedTombstones(for: linked, index: index)
            try commitCycle(state, flushReadTimes: false)
            do {
                try index.writing {
                    if let row = try index.blob(id: blob.id), row.references == 0, row.segment == blob.segment,
                        row.offset == blob.offset
                    {
                        try index.deleteBlob(blob.id)
                    }
                    try index.recordDamage(
                        DamageRow(
                            segment: blob.segment, start: blob.offset, end: blob.offset + blob.recordBytes,
                            kind: FsckReport.Finding.Kind.corruptRecord.rawValue,
                            message: "blob \(blob.id) at segment \(blob.segment) offset \(blob.offset): \(reason); "
                                + "\(dropped.count) entries dropped — `trove fsck --repair` salvages the rest of the segment",
                            foundAt: configuration.clock()))
                }
            } catch {
                throw StoreError(index: error)
            }
            return dropped.map(\.key)
        }
    }
}

/// The thread that runs commit cycles every ``Store/Configuration/batchInterval``, or at once
/// when woken by a full batch — LevelDB's background-work shape: one thread, a wake-up
/// condition, a shutting-down flag, and the first error kept for callers to see.
///
/// A dedicated thread, not a task: a cycle blocks in fdatasync, which must not hold a thread
/// of the cooperative pool.
final class BackgroundCommitter: @unchecked Sendable {
    // `@unchecked Sendable`: `wakeRequested` and `shuttingDown` are read and written only with
    // `condition` locked; `store` is weak and only read by the thread.
    private let condition = NSCondition()
    private var wakeRequested = false
    private var shuttingDown = false
    private let exited = DispatchSemaphore(value: 0)
    private var thread: Thread?
    weak var store: Store?

    /// Starts the thread, which runs a cycle every `interval` until ``stop()``.
    func start(interval: Duration) {
        let seconds = Double(interval.components.seconds) + Double(interval.components.attoseconds) / 1e18
        thread = Thread.start(named: "trove-committer") { [self] in
            var schedule = BackgroundSchedule()
            while true {
                condition.lock()
                if !wakeRequested && !shuttingDown {
                    _ = condition.wait(until: Date(timeIntervalSinceNow: seconds))
                }
                let stop = shuttingDown
                wakeRequested = false
                condition.unlock()
                guard !stop, let store else { break }
                store.backgroundWork(&schedule)
            }
            exited.signal()
        }
    }

    /// Asks for a cycle now.
    func wake() {
        condition.lock()
        wakeRequested = true
        condition.signal()
        condition.unlock()
    }

    /// Stops the thread and waits for it to finish its cycle — unless called on the thread
    /// itself (the store's last reference can go on it), which then ends after this cycle.
    func stop() {
        guard let thread else { return }
        condition.lock()
        let alreadyStopped = shuttingDown
        shuttingDown = true
        condition.signal()
        condition.unlock()
        if !alreadyStopped && Thread.current != thread { exited.wait() }
    }
}

/// When the background thread last compacted and last checked disk usage.
struct BackgroundSchedule {
    var lastCompaction = ContinuousClock.now
    var lastUsageCheck = ContinuousClock.now
}

extension Store {
    /// One wake-up of the background thread: a commit cycle, then a compaction pass when the
    /// timer says so or disk usage passed the high watermark (checked at most once a second).
    /// The first error is kept in ``backgroundError``.
    func backgroundWork(_ schedule: inout BackgroundSchedule) {
        do {
            try commitPending()
            let now = ContinuousClock.now
            var due = configuration.compactionInterval.map { now - schedule.lastCompaction >= $0 } ?? false
            if !due, let capacity = configuration.capacity, now - schedule.lastUsageCheck >= .seconds(1) {
                schedule.lastUsageCheck = now
                due = Double(chargeableUsage()) > Double(capacity) * configuration.highWatermark
            }
            if due {
                schedule.lastCompaction = now
                _ = try compactPass(timeToLive: nil)
            }
        } catch  where error.code == .closed {
            return
        } catch {
            shared.withLock { state in
                // A failed sync replaces an earlier error: it lasts until the store is reopened.
                if state.backgroundError == nil || (error.code == .syncFailed && state.backgroundError?.code != .syncFailed) {
                    state.backgroundError = error
                }
            }
        }
    }
}
