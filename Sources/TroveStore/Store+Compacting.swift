import Foundation
import TroveCore
import TroveIndex
import TrovePack

/// What a compaction pass did.
public struct CompactionReport: Hashable, Sendable, Codable {
    /// Entries removed because they expired (their expiry, or the pass's time to live).
    public var expiredEntries = 0
    /// Payload bytes of the expired entries.
    public var expiredBytes: Int64 = 0
    /// Least recently read entries removed to bring disk usage under the low watermark.
    public var evictedEntries = 0
    /// Payload bytes of the evicted entries.
    public var evictedBytes: Int64 = 0
    /// Sealed segments whose live records were copied forward before the file was deleted.
    public var segmentsRewritten = 0
    /// Segments deleted (rewritten ones included).
    public var segmentsDeleted = 0
    /// Bytes of live records copied forward.
    public var bytesCopied: Int64 = 0
    /// Segments left alone because they hold damaged records (`trove fsck --repair` handles them).
    public var segmentsSkipped = 0
    /// Disk usage (packs and index) when the pass started.
    public var diskBytesBefore: Int64 = 0
    /// Disk usage when the pass ended.
    public var diskBytesAfter: Int64 = 0
    /// Bytes given back to the file system.
    public var reclaimedBytes: Int64 { diskBytesBefore - diskBytesAfter }
}

extension Store {
    /// Runs a compaction pass now: drops expired entries, evicts least recently read entries
    /// while disk usage is over ``Configuration/capacity``'s high watermark (down to the low
    /// watermark), rewrites sparse sealed segments and deletes empty ones.
    ///
    /// Every step is crash-safe (Docs/Compaction.md): records are copied forward and synced, the
    /// index is committed, and only then is a file deleted. Reads go on throughout; writes go on
    /// unless eight batches queue up while a segment is being rewritten.
    ///
    /// - Parameters:
    ///   - timeToLive: also remove entries created longer ago than this.
    ///   - progress: called as segments are processed.
    /// - Returns: what was expired, evicted and reclaimed.
    @discardableResult
    public func compact(timeToLive: Duration? = nil, progress: (WorkProgress) -> Void = { _ in }) throws(StoreError)
        -> CompactionReport
    {
        try compactPass(timeToLive: timeToLive, progress: progress)
    }

    func compactPass(timeToLive: Duration?, progress: (WorkProgress) -> Void = { _ in }) throws(StoreError) -> CompactionReport {
        try commitPending(flushReadTimes: true)
        var report = CompactionReport()
        report.diskBytesBefore = diskUsage()
        // The WAL only grows between checkpoints; truncate it so usage counts what the index needs.
        try checkpointIndex()
        let now = configuration.clock()

        // 1. Expiry: entries past their expiry, then (on demand) entries older than a TTL.
        try removeInBatches(into: &report.expiredEntries, bytes: &report.expiredBytes) { index in
            try index.expiredEntries(now: now, limit: Self.compactionBatch)
        }
        if let timeToLive {
            let cutoff = saturatingDifference(now, milliseconds(timeToLive))
            try removeInBatches(into: &report.expiredEntries, bytes: &report.expiredBytes) { index in
                try index.entriesCreated(before: cutoff, limit: Self.compactionBatch)
            }
        }

        // 2. Eviction, least recently read first, while the bytes that would remain after the
        //    rewrite exceed the low watermark.
        if let capacity = configuration.capacity, Double(chargeableUsage()) > Double(capacity) * configuration.highWatermark {
            let low = Int64(Double(capacity) * configuration.lowWatermark)
            try removeInBatches(into: &report.evictedEntries, bytes: &report.evictedBytes, while: { self.projectedUsage() > low })
            {
                index in
                // Only as many as the excess needs: a batch of the least recently read, cut
                // where their records add up to the bytes still to free.
                var excess = self.projectedUsage(index: index) - low
                return try index.leastRecentlyUsed(limit: Self.compactionBatch).prefix { row in
                    guard excess > 0 else { return false }
                    excess -= row.cost + Int64(row.linkLength) + Int64(PackWriter.blobRecordLength(payloadLength: 0))
                    return true
                }
            }
        }

        // 3 and 4. Rewrite sparse sealed segments (all with dead bytes while over capacity,
        //    most dead first) and delete empty ones. An active segment that is sparse, or holds
        //    dead bytes while the store is over capacity, is sealed first so it can be rewritten.
        try sealActiveSegmentIfWorthRewriting()
        let activeID = appender.withLock { $0.pack.segment.id }
        let sealed = try withIndex { try $0.segments() }.filter { $0.isSealed && $0.id < activeID }
        let candidates = sealed.map { row -> (row: SegmentRow, size: Int64) in
            (row, Int64(PackDirectory.segmentSize(row.id, in: packsDirectory) ?? 0))
        }.sorted { ($0.size - $0.row.liveBytes) > ($1.size - $1.row.liveBytes) }
        let totalBytes = candidates.reduce(Int64(0)) { $0 + $1.size }
        var doneBytes: Int64 = 0
        for (row, size) in candidates {
            defer {
                doneBytes += size
                progress(WorkProgress(phase: "compacting segments", bytesDone: doneBytes, bytesTotal: totalBytes))
            }
            let body = max(1, size - Int64(PackFormat.segmentHeaderSize))
            let overCapacity = configuration.capacity.map { chargeableUsage() > $0 } ?? false
            let sparse = Double(row.liveBytes) < configuration.rewriteLiveRatio * Double(body)
            // Segments of format version 1 are rewritten whatever their liveness: their records
            // are not bound to their store and place (Docs/PackFormat.md, "Version 1").
            let outdated = (try? segmentFile(row.id).format.version).map { $0 < PackFormat.currentVersion } ?? false
            guard row.liveBytes <= 0 || sparse || outdated || (overCapacity && row.liveBytes < body) else { continue }
            do {
                report.bytesCopied += try rewrite(segment: row.id)
            } catch  where error.code == .corruptRecord || error.code == .missingSegment {
                // A damaged segment is left for `trove fsck --repair`; the rest of the pass goes on.
                report.segmentsSkipped += 1
                continue
            }
            report.segmentsDeleted += 1
            if row.liveBytes > 0 { report.segmentsRewritten += 1 }
        }
        // Measured with the log just truncated and no commit cycle in between (a read-time flush
        // landing there would count its log pages as the pass's result).
        report.diskBytesAfter = try withIndex { index in
            try index.checkpoint()
            return diskUsage()
        }
        return report
    }

    /// Copies the index's WAL into the database and truncates it (waits for readers).
    private func checkpointIndex() throws(StoreError) {
        try withIndex { try $0.checkpoint() }
    }

    static let compactionBatch = 256

    /// Seals segment `id` if it is the active one, so that it can be rewritten.
    func sealIfActive(_ id: UInt32) throws(StoreError) {
        try withCommitter { (state) throws(StoreError) in
            let rotated = try withAppender { (appender) throws(StoreError) -> Bool in
                guard appender.pack.segment.id == id else { return false }
                try appender.rotate(packs: packsDirectory, createdAt: configuration.clock())
                return true
            }
            if rotated { try commitCycle(state, flushReadTimes: false) }
        }
    }

    private func sealActiveSegmentIfWorthRewriting() throws(StoreError) {
        let overCapacity = configuration.capacity.map { chargeableUsage() > $0 } ?? false
        try withCommitter { (state) throws(StoreError) in
            try commitCycle(state, flushReadTimes: false)
            let (activeID, end) = appender.withLock { ($0.pack.segment.id, $0.pack.end) }
            let live: Int64
            do { live = try state.index.segments().first { $0.id == activeID }?.liveBytes ?? 0 } catch {
                throw StoreError(index: error)
            }
            let body = Int64(end) - Int64(PackFormat.segmentHeaderSize)
            let dead = body - live
            guard dead > 0, overCapacity || Double(live) < configuration.rewriteLiveRatio * Double(body) else { return }
            try withAppender { (appender) throws(StoreError) in
                guard appender.pack.segment.id == activeID else { return }
                try appender.rotate(packs: packsDirectory, createdAt: configuration.clock())
            }
            // Commits the new segment's row and marks the old one sealed.
            try commitCycle(state, flushReadTimes: false)
        }
    }

    /// Removes the entries `victims` yields, a batch at a time, while `condition` holds.
    private func removeInBatches(
        into count: inout Int, bytes: inout Int64, while condition: () -> Bool = { true },
        _ victims: (IndexDatabase) throws -> [EntryRow]
    ) throws(StoreError) {
        while condition() {
            let removed = try withCommitter { (state) throws(StoreError) -> [EntryRow]? in
                let batch: [EntryRow]
                do { batch = try victims(state.index) } catch { throw StoreError(index: error) }
                guard !batch.isEmpty else { return nil }
                let removed = try appendGuardedTombstones(for: batch, index: state.index)
                try commitCycle(state, flushReadTimes: false)
                return removed
            }
            guard let removed, !removed.isEmpty else { return }
            count += removed.count
            bytes += removed.reduce(0) { $0 + $1.cost }
        }
    }

    /// Appends a tombstone for each victim whose entry is still exactly the one selected: no
    /// newer write committed (same sequence in the index) and none queued (no slot saying
    /// otherwise). A key written meanwhile is never removed. Held: the committer lock.
    ///
    /// A victim whose row claims a sequence the store has not given yet (a damaged column) gets
    /// no tombstone: the tombstone's lower sequence would not remove the row, which the next
    /// batch would select again, forever, growing the pack (found by an outside attack). It is
    /// recorded as damage for `trove fsck --repair` instead.
    func appendGuardedTombstones(for victims: [EntryRow], index: IndexDatabase) throws(StoreError) -> [EntryRow] {
        var claimingTheFuture: [EntryRow] = []
        defer {
            for row in claimingTheFuture {
                recordDamage(
                    .staleIndexRow, segment: row.linkSegment, offset: row.linkOffset, end: row.linkOffset + row.linkLength,
                    "the index row of \(row.key) claims sequence \(row.sequence), which the store has not given yet: "
                        + "it cannot be evicted or expired until `trove fsck --repair` rebuilds it from its link record",
                    in: index)
            }
        }
        return try withAppender { (state) throws(StoreError) -> [EntryRow] in
            var removed: [EntryRow] = []
            for victim in victims {
                let key = victim.key
                let current: IndexedEntry?
                do { current = try index.entry(digest: victim.keyDigest) } catch { throw StoreError(index: error) }
                guard let current, current.entry.key == key, current.entry.sequence == victim.sequence else { continue }
                guard victim.sequence < state.nextSequence else {
                    claimingTheFuture.append(victim)
                    continue
                }
                let queued = shared.withLock { shared -> Bool in
                    switch shared.map.slot(for: key) {
                    case .removed: return true
                    case .present(let slot): return slot.entry.sequence != victim.sequence
                    case nil: return false
                    }
                }
                guard !queued else { continue }
                _ = try appendTombstone(for: key, to: state)
                removed.append(victim)
            }
            return removed
        }
    }

    /// Copies the live records of sealed segment `id` forward into the active segment, syncs
    /// them, moves the index to the copies and deletes the segment's row in one transaction,
    /// and only then unlinks the file (``SegmentRewriter``). Returns the bytes copied.
    /// - Parameter salvaging: scan past damaged bytes and drop them (fsck's repair), instead of
    ///   leaving a damaged segment alone.
    func rewrite(segment id: UInt32, salvaging: Bool = false) throws(StoreError) -> Int64 {
        try withCommitter { (state) throws(StoreError) -> Int64 in
            try SegmentRewriter(store: self, state: state, segment: id, salvaging: salvaging).run()
        }
    }

    /// Disk usage now: pack segment files plus index files.
    func diskUsage() -> Int64 {
        packFileBytes() + indexFileBytes()
    }

    /// The bytes of the pack segment files, less the hole the active segment keeps ahead of
    /// its writes (``Configuration/warmAhead``), which takes no space. Read without a lock
    /// across the two: an estimate by at most a few writes.
    func packFileBytes() -> Int64 {
        let hole = appender.withLock { $0.pack.holeAhead }
        return max(0, PackDirectory.totalSize(in: packsDirectory) - Int64(hole))
    }

    /// Disk usage that compaction can act on: ``diskUsage()`` less the index file's free pages
    /// (which later rows reuse and no eviction gives back — the migration to index schema 6
    /// leaves the old entries table's pages free). What triggers eviction and rewrites, so that
    /// it is measured like ``projectedUsage()``, the target.
    func chargeableUsage() -> Int64 {
        max(0, diskUsage() - IndexDatabase.freePageBytes(atPath: directory + "/index.sqlite"))
    }

    /// The bytes of index.sqlite and its `-wal` and `-shm` files.
    func indexFileBytes() -> Int64 {
        let indexPath = directory + "/index.sqlite"
        return ["", "-wal", "-shm"].reduce(Int64(0)) { $0 + Int64(SystemCall.fileSize(indexPath + $1) ?? 0) }
    }

    /// Disk usage once every dead byte is reclaimed and the WAL is checkpointed: the live bytes,
    /// segment headers and the index's database pages. (Counting the WAL would make eviction chase
    /// the WAL growth its own deletions cause.)
    func projectedUsage() -> Int64 {
        (try? withIndex { projectedUsage(index: $0) }) ?? diskUsage()
    }

    /// ``projectedUsage()`` on a connection the caller holds (under the committer lock).
    func projectedUsage(index: IndexDatabase) -> Int64 {
        guard let rows = try? index.segments(), let indexBytes = try? index.databaseBytes() else { return diskUsage() }
        // Every segment counts its header and live bytes: sealed ones are rewritten, and the
        // active one is sealed when that is worth it (see sealActiveSegmentIfWorthRewriting).
        return rows.reduce(indexBytes) { $0 + Int64(PackFormat.segmentHeaderSize) + max(0, $1.liveBytes) }
    }

    /// Runs `body` on the committer's connection.
    func withIndex<T>(_ body: (IndexDatabase) throws -> T) throws(StoreError) -> T {
        try withCommitter { (state) throws(StoreError) -> T in
            do { return try body(state.index) } catch let error as StoreError { throw error } catch {
                throw StoreError(index: error)
            }
        }
    }
}
