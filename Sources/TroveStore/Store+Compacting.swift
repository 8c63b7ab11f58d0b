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
        if let capacity = configuration.capacity, Double(diskUsage()) > Double(capacity) * configuration.highWatermark {
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
            let overCapacity = configuration.capacity.map { diskUsage() > $0 } ?? false
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
        try checkpointIndex()
        report.diskBytesAfter = diskUsage()
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
        let overCapacity = configuration.capacity.map { diskUsage() > $0 } ?? false
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
    func appendGuardedTombstones(for victims: [EntryRow], index: IndexDatabase) throws(StoreError) -> [EntryRow] {
        try withAppender { (state) throws(StoreError) -> [EntryRow] in
            var removed: [EntryRow] = []
            for victim in victims {
                let key = victim.key
                let current: IndexedEntry?
                do { current = try index.entry(digest: victim.keyDigest) } catch { throw StoreError(index: error) }
                guard let current, current.entry.key == key, current.entry.sequence == victim.sequence else { continue }
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
    /// and only then unlinks the file. Returns the bytes copied.
    /// - Parameter salvaging: scan past damaged bytes and drop them (fsck's repair), instead of
    ///   leaving a damaged segment alone.
    func rewrite(segment id: UInt32, salvaging: Bool = false) throws(StoreError) -> Int64 {
        try withCommitter { (state) throws(StoreError) -> Int64 in
            let index = state.index
            // The index must reflect every queued write before liveness is judged.
            try commitCycle(state, flushReadTimes: false)
            // Another pass (the background one and an explicit one can interleave) may have
            // reclaimed the segment since this pass listed it.
            let stillThere: Bool
            do { stillThere = try index.segments().contains { $0.id == id && $0.isSealed } } catch {
                throw StoreError(index: error)
            }
            guard stillThere else { return 0 }
            // Damage found in the segment (by a read, a pass, opening) is left to `trove fsck
            // --repair`, which judges it with every record in view: a rewrite would act on the
            // word of a row already caught disagreeing with the packs, and would delete the
            // record of that damage with the segment.
            if !salvaging {
                let damaged: Bool
                do { damaged = try index.damage().contains { $0.segment == id } } catch { throw StoreError(index: error) }
                if damaged {
                    throw StoreError(
                        code: .corruptRecord,
                        message: "segment \(id) has unrepaired damage; it is left to `trove fsck --repair`")
                }
            }
            let queuedBlobs = appender.withLock { appender -> Set<UInt64> in
                appender.reclaiming.insert(id)
                var ids = Set<UInt64>()
                for write in appender.queue {
                    if case .link(let link) = write.record.content { ids.insert(link.blobID) }
                }
                return ids
            }
            defer { _ = appender.withLock { $0.reclaiming.remove(id) } }
            let file: SegmentFile
            do throws(StoreError) {
                file = try segmentFile(id)
            } catch  where salvaging && error.code == .missingSegment {
                // A damaged header: the records are found with the store secret (fsck found them).
                let format = appender.withLock { $0.format }
                do {
                    file = try SegmentFile.openForSalvage(
                        id: id, in: packsDirectory, format: format, faults: configuration.faultInjector)
                } catch {
                    throw StoreError(pack: error)
                }
            }

            // Which records are live, and their bytes.
            enum Moved { case blob(Int64), link(CacheKey, from: UInt64), tombstone }
            var live: [(record: MovableRecord, kind: Moved)] = []
            do {
                let size = try file.size()
                let visit: (ScannedRecord) throws -> Void = { record in
                    let kind: Moved?
                    switch record.content {
                    case .blob(let hash, let blobID, _):
                        // Dead only when no entry links it: a damaged count must not drop it.
                        let row = try index.blob(id: Int64(bitPattern: blobID))
                        var live = queuedBlobs.contains(blobID)
                        if let row, !live { live = try row.references > 0 || index.isLinked(blobID: row.id) }
                        guard let row, live else {
                            kind = nil
                            break
                        }
                        if row.segment == id && row.offset == record.offset {
                            kind = .blob(row.id)
                        } else if row.hash == hash, try self.holdsBlob(row) {
                            kind = nil  // a copy the index moved past (an interrupted compaction's)
                        } else {
                            throw self.uncorroborated(
                                "the index row of blob \(blobID) points at segment \(row.segment) offset \(row.offset), "
                                    + "where that blob is not", segment: id, offset: record.offset, index: index)
                        }
                    case .link(let link):
                        // A link is dropped only when the index says so in a way the packs bear
                        // out: a damaged row must not make the compactor delete the record the
                        // entry still needs.
                        let key = link.key
                        let found = try index.entry(digest: key.digest)
                        guard let found else {
                            kind = nil  // removed (a tombstone has it) or never committed
                            break
                        }
                        let entry = found.entry
                        if entry.key == key && entry.linkSegment == id && entry.linkOffset == record.offset {
                            // The row must describe this record exactly (as a read requires): a
                            // row damaged to point at an older link of its key must not keep
                            // that link alive, nor one whose blob the row does not name.
                            guard found.describedLink == link else {
                                throw self.uncorroborated(
                                    "the index row of \(key) points at its link at segment \(id) offset \(record.offset) "
                                        + "but disagrees with it", segment: id, offset: record.offset, index: index)
                            }
                            kind = .link(key, from: record.offset)
                        } else if entry.key == key && entry.sequence > link.sequence && self.holdsItsLink(found, key: key) {
                            kind = nil  // superseded by the newer link the row points at
                        } else {
                            throw self.uncorroborated(
                                "the index row of \(key) does not point at its link at segment \(id) offset \(record.offset), "
                                    + "nor at a newer intact one", segment: id, offset: record.offset, index: index)
                        }
                    case .tombstone(let tombstone):
                        // Kept until a newer entry for the key supersedes it, so that a rebuild
                        // from the packs never brings a removed key back.
                        let key = tombstone.key
                        let found = try index.entry(digest: key.digest)
                        let superseded = found.map {
                            $0.entry.key == key && $0.entry.sequence > tombstone.sequence && self.holdsItsLink($0, key: key)
                        }
                        kind = superseded == true ? nil : .tombstone
                    }
                    guard let kind else { return }
                    // Links and tombstones are re-encoded from what was decoded (a salvaged one
                    // has a damaged header); a blob's payload is read again.
                    let movable = try MovableRecord(record) ?? file.readMovable(at: record.offset, limit: size)
                    live.append((movable, kind))
                }
                let report = try SegmentScanner.scan(file, pastDamage: salvaging, visit: visit)
                if salvaging, report.stoppedAtDamage, let first = report.damage.first {
                    // A version-1 segment is not scanned past damage; the records the index
                    // names past it are read where the index says they are.
                    for offset in try index.referencedOffsets(inSegment: id, from: first.start) {
                        if let verified = try? file.readRecord(at: offset, limit: size) { try visit(verified.record) }
                    }
                }
                if !salvaging, let first = report.damage.first {
                    try? index.recordDamage(
                        DamageRow(
                            segment: id, start: first.start, end: first.end,
                            kind: FsckReport.Finding.Kind.corruptRecord.rawValue,
                            message: "segment \(id) bytes \(first.start)..<\(first.end): \(first.reason); the compactor "
                                + "leaves the segment alone — run `trove fsck --repair`",
                            foundAt: configuration.clock()))
                    throw StoreError(
                        code: .corruptRecord,
                        message: "segment \(id) cannot be compacted: \(first.reason); run `trove fsck --repair`")
                }
            } catch let error as StoreError {
                throw error
            } catch {
                throw StoreError(index: error)
            }

            // Copy forward, a few records per hold of the appender lock so puts interleave.
            var copies: [(kind: Moved, segment: UInt32, offset: UInt64, length: UInt64)] = []
            var touched: [UInt32: SegmentFile] = [:]
            var copied: Int64 = 0
            for chunk in stride(from: 0, to: live.count, by: 64).map({ live[$0..<min($0 + 64, live.count)] }) {
                try withAppender { (appender) throws(StoreError) in
                    for record in chunk {
                        let length = UInt64(PackFormat.recordHeaderSize + record.record.body.count)
                        if appender.pack.needsRotation(forAppending: length) {
                            touched[appender.pack.segment.id] = appender.pack.segment
                            try appender.rotate(packs: packsDirectory, createdAt: configuration.clock())
                        }
                        let offset = try packCall { try appender.pack.append(record.record) }
                        copies.append((record.kind, appender.pack.segment.id, offset, length))
                        touched[appender.pack.segment.id] = appender.pack.segment
                    }
                }
                copied += chunk.reduce(0) { $0 + Int64(PackFormat.recordHeaderSize + $1.record.body.count) }
            }
            for file in touched.values { shared.withLock { $0.segmentFiles[file.id] = file } }
            // Segments created by rotation get their rows (and everything gets synced) first.
            try commitCycle(state, flushReadTimes: false)
            if configuration.durability != .none {
                do { for file in touched.values { try file.synchronize() } } catch { throw StoreError(pack: error) }
            }

            // One transaction: the index moves to the copies and forgets the segment.
            var movedBlobs: [Int64: (segment: UInt32, offset: UInt64, recordBytes: UInt64)] = [:]
            var movedKeys = Set<CacheKey>()
            let observed = configuration.keyChanges != nil
            do {
                try index.writing {
                    for copy in copies {
                        switch copy.kind {
                        case .blob(let blobID):
                            try index.moveBlob(blobID, to: copy.segment, offset: copy.offset, recordBytes: copy.length)
                            movedBlobs[blobID] = (copy.segment, copy.offset, copy.length)
                            // Reported to the observer: the keys whose bytes moved.
                            if observed { movedKeys.formUnion(try index.entries(blobID: blobID).map(\.key)) }
                        case .link(let key, let from):
                            let moved = try index.moveLink(
                                of: key.digest, from: (id, from), to: copy.segment, offset: copy.offset, length: copy.length)
                            if moved && observed { movedKeys.insert(key) }
                        case .tombstone: break
                        }
                    }
                    try index.deleteDeadBlobs(in: id)
                    let stranded = try index.dropRecords(segment: id, beyond: 0)
                    guard stranded.isEmpty else {
                        throw StoreError(
                            code: .index,
                            message: "compaction of segment \(id) would strand \(stranded.count) entries; nothing was changed")
                    }
                    try index.deleteSegment(id)
                }
            } catch let error as StoreError {
                throw error
            } catch {
                throw StoreError(index: error)
            }

            // Readers that hold the old file finish from it; new reads go to the copies.
            shared.withLock { shared in
                shared.segmentFiles[id] = nil
                shared.map.moved(blobs: movedBlobs, keys: movedKeys)
            }
            do {
                if salvaging {
                    // Damaged bytes are kept for inspection, out of the segment namespace.
                    try PackDirectory.quarantine(
                        PackFormat.fileName(forSegment: id), suffix: "damaged", in: packsDirectory,
                        faults: configuration.faultInjector)
                } else {
                    try PackDirectory.removeSegment(id, in: packsDirectory, faults: configuration.faultInjector)
                }
                if configuration.durability != .none {
                    try PackDirectory.synchronize(packsDirectory, faults: configuration.faultInjector)
                }
            } catch {
                throw StoreError(pack: error)
            }
            return copied
        }
    }

    /// Whether the blob record `row` names is where it says (its header, checked alone).
    private func holdsBlob(_ row: BlobRow) throws -> Bool {
        let opened: SegmentFile?
        do throws(StoreError) {
            opened = try segmentFile(row.segment)
        } catch {
            guard error.code == .missingSegment else { throw error }
            opened = nil
        }
        guard let file = opened else { return false }
        let identity = RecordIdentity(type: .blob, sequence: UInt64(bitPattern: row.id), digest: row.hash)
        if let holds = try file.holdsRecord(at: row.offset, identity: identity, bodyLength: row.length) { return holds }
        guard let verified = try? file.readRecord(at: row.offset, limit: row.offset + row.recordBytes),
            case .blob(let hash, let blobID, _) = verified.record.content
        else { return false }
        return hash == row.hash && blobID == UInt64(bitPattern: row.id)
    }

    /// Whether `found`'s row points at an intact link record that says what the row says.
    private func holdsItsLink(_ found: IndexedEntry, key: CacheKey) -> Bool {
        do throws(StoreError) {
            try verifyLink(of: found, key: key)
            return true
        } catch {
            return false
        }
    }

    /// The error that leaves a segment alone because the index disagrees with the packs about
    /// a record in it: recorded as damage for `trove fsck --repair`, which settles it.
    private func uncorroborated(_ what: String, segment id: UInt32, offset: UInt64, index: IndexDatabase) -> StoreError {
        recordDamage(.staleIndexRow, segment: id, offset: offset, end: offset, what, in: index)
        return StoreError(
            code: .corruptRecord,
            message: "segment \(id) cannot be compacted: \(what); run `trove fsck --repair`")
    }

    /// Disk usage now: pack segment files plus index files.
    func diskUsage() -> Int64 {
        PackDirectory.totalSize(in: packsDirectory) + indexFileBytes()
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
