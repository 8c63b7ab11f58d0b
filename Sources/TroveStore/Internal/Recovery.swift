#if canImport(Glibc)
    import Glibc
#endif
import TroveCore
import TroveIndex
import TrovePack

// Opening a store: the segment files put under their names, the index, then the replay of the
// tails the index has not committed — or, when the index is lost, the index rebuilt from every
// segment. Sealed segments are never read when the index is there (only their sizes are
// checked), so open time does not grow with the number of entries.

extension Store {
    /// What opening a store produced.
    struct Opened {
        var index: IndexDatabase
        /// The writer's entry digest table, which the store's readers share.
        var digests: EntryDigestTable
        var pack: PackWriter
        var nextSequence: UInt64
        var report: RecoveryReport
        /// Links that a newer write superseded but whose newer record is lost: tombstones over
        /// them are appended right after opening, so no later replay can serve them.
        var supersede: [LinkRecord]
        /// The replay that could not be written for lack of space (nil normally).
        var deferred: Recovery.ReplayPlan?
        /// Every key the replay or rebuild changed (or, deferred, will change).
        var changes: [KeyChange]
        /// Why the tails could not be written again and synced (nil normally): the replay is
        /// then deferred, served from memory, and the store refuses writes and commits until it
        /// is opened again.
        var unsyncedTails: PackError?
    }

    static func recover(
        directory: String, packsDirectory: String, configuration: Configuration, rebuilding evidence: IndexEvidence?,
        progress: (WorkProgress) -> Void
    ) throws(StoreError) -> Opened {
        do {
            try PackDirectory.create(packsDirectory)
            let digests = EntryDigestTable()
            let index = try IndexDatabase(path: directory + "/index.sqlite", readOnly: false, digests: digests)
            var recovery = Recovery(index: index, packs: packsDirectory, configuration: configuration)
            let pack = try recovery.run(rebuilding: evidence, progress: progress)
            return Opened(
                index: index, digests: digests, pack: pack, nextSequence: recovery.nextSequence, report: recovery.report,
                supersede: recovery.supersede, deferred: recovery.deferred, changes: recovery.changes,
                unsyncedTails: recovery.unsyncedTails)
        } catch let error as StoreError {
            throw error
        } catch {
            // IndexError and PackError map to their StoreError codes; anything else is I/O.
            throw StoreError(index: error)
        }
    }
}

/// One run of crash recovery (or of an index rebuild) over a store's index and packs.
struct Recovery {
    let index: IndexDatabase
    let packs: String
    let configuration: Store.Configuration
    var report = RecoveryReport()
    var nextSequence: UInt64 = 0
    var supersede: [LinkRecord] = []
    /// Every key the replay or rebuild changed.
    var changes: [KeyChange] = []
    /// What opening could not write for lack of space: applied by the first commit cycle that
    /// finds it.
    var deferred: ReplayPlan?
    /// The failure that kept a tail from being written again and synced (planReplay, step 3).
    var unsyncedTails: PackError?
    private var damageRows: [DamageRow] = []
    private var faults: FaultInjector? { configuration.faultInjector }

    init(index: IndexDatabase, packs: String, configuration: Store.Configuration) {
        self.index = index
        self.packs = packs
        self.configuration = configuration
    }

    mutating func run(rebuilding evidence: IndexEvidence?, progress: (WorkProgress) -> Void) throws -> PackWriter {
        let indexed = Set(try index.segments().map(\.id))
        var placement = try SegmentPlacement.place(packs, indexedMax: indexed.max() ?? 0, faults: faults)
        let stored = try index.secret().map { PackSecret(first: $0.first, second: $0.second) }
        let secret = placement.secret(fromIndex: stored, indexed: indexed) ?? PackSecret.random()
        try placement.setAsideForeign(secret: secret, in: packs, faults: faults)
        let now = configuration.clock()
        for moved in placement.renamed {
            report.renamedFiles.append(.init(from: moved.from, to: moved.to, reason: "its header names that segment"))
        }
        for moved in placement.setAside {
            report.setAsideFiles.append(.init(from: moved.from, to: moved.to, reason: moved.reason))
            recordDamage(
                .setAsideFile, segment: PackFormat.segmentID(fromFileName: moved.from) ?? 0, start: 0, end: 0,
                "packs/\(moved.from) was set aside as packs/\(moved.to): \(moved.reason); inspect it, then delete it",
                at: now)
        }
        let format = SegmentFormat.version2(secret: secret)
        let rows = try index.segments()
        let committed = try index.committedSequence()
        let lostIndex = rows.isEmpty && committed == nil && !(placement.headers.isEmpty && placement.unreadable.isEmpty)
        // New sequence numbers start past anything the index shows, even a damaged raised copy.
        nextSequence = committed?.higher ?? 0
        // An index whose every copy of the counter is lost or damaged cannot say which numbers
        // a removal used (tombstones leave no row): only the packs can. Read them all — this
        // is damage, and rare — so that no number is handed out twice.
        var packsSequence: UInt64?
        let counterLost = try index.hasLostSequence()
        if !rows.isEmpty, counterLost {
            var fold = RecordFold()
            var unread = !placement.unreadable.isEmpty
            for id in placement.headers.keys.sorted() {
                do {
                    try fold.fold(try SegmentFile.open(id: id, in: packs, writable: false, faults: faults))
                } catch let error as PackError where error.isFailedAccess {
                    // Unread, its numbers could be handed out again.
                    throw Self.unreadable(PackFormat.fileName(forSegment: id), error)
                } catch {
                    unread = true
                }
            }
            packsSequence = fold.nextSequence
            // Nothing in the index or in any segment ever took a number (a store made before
            // the first open wrote the counter, and never written to): nothing was lost.
            if committed != nil || fold.nextSequence > 0 || unread {
                recordDamage(
                    .wrongSequence, segment: 0, start: 0, end: 0,
                    "the index's sequence counter was lost or damaged; it was recovered from the packs (\(fold.nextSequence))",
                    at: now)
            }
        }
        if evidence != nil || lostIndex {
            return try index.writing {
                if stored != secret { try index.setSecret(first: secret.first, second: secret.second) }
                let writer = try rebuild(
                    placement, evidence: evidence ?? IndexEvidence(), format: format, asked: evidence != nil, progress: progress)
                for row in damageRows { try index.recordDamage(row) }
                try index.setCommittedSequence(nextSequence)
                return writer
            }
        }
        // The usual open: plan without writing, then write only what changed — so that a store
        // opens, and reads, on a full disk.
        var sequences = committed ?? (0, 0)
        if let packsSequence { sequences.higher = max(sequences.higher, packsSequence) }
        var (plan, writer) = try planReplay(rows, committed: sequences, placement: placement, format: format)
        plan.secret = stored != secret ? secret : nil
        // A new store's first open has no counter yet (nothing committed): it is written with
        // the segment, so that the next open does not take its absence for damage; a lost one
        // is written back even when the packs show no newer number.
        plan.writesCounter = counterLost
        do {
            if unsyncedTails != nil {
                // Never committed in this opening: the tails may not be on disk.
                deferred = plan
            } else if !plan.isEmpty {
                let applied = try index.writing { try plan.apply(to: index) }
                report.replayedRecords += applied.replayed
                report.droppedEntries += applied.dropped
                supersede += applied.supersede
                changes += applied.changes
            }
        } catch let error as IndexError where error.isOutOfSpace {
            // Nothing could be written. The store opens on what the index has; what the tails
            // hold is served from memory and goes into the index with the first commit that
            // finds space (Store+Committing).
            deferred = plan
        }
        if deferred != nil {
            // Served from memory meanwhile (when the tails are not durable, until the store is
            // opened again: it refuses every commit).
            changes += plan.slots().map { key, slot in
                switch slot {
                case .present: KeyChange(key: key, kind: .stored)
                case .removed: KeyChange(key: key, kind: .removed)
                }
            }
        }
        nextSequence = plan.nextSequence
        return writer
    }

    // MARK: Replay (the index is there)

    /// What opening a store with its index must write to the index. Made without writing, so
    /// that it can be applied at once or — when the disk is full — deferred to the first
    /// commit cycle that finds space, in the same transaction as that cycle's writes.
    struct ReplayPlan: Sendable {
        /// Segments created after the index's last commit, with their header sizes.
        var newSegments: [(id: UInt32, headerSize: UInt64)] = []
        /// How far the index reflects each tail, once replayed.
        var indexedBytes: [UInt32: UInt64] = [:]
        /// Segments to mark sealed.
        var sealing: [UInt32] = []
        /// Blobs of the tails the index lacks.
        var blobs: [(id: UInt64, copy: BlobCopy)] = []
        /// What each key the tails touch resolves to.
        var resolutions: [(digest: ContentHash, resolution: KeyResolution)] = []
        /// Damage to record, new since the index last recorded it.
        var damage: [DamageRow] = []
        /// Segments recorded missing that are back (restored): their `missingSegment` rows go.
        var restored: [UInt32] = []
        /// The store secret, when the index does not have it yet.
        var secret: PackSecret?
        /// The sequence counter the index had, and the one after replaying.
        var committedSequence: UInt64 = 0
        var nextSequence: UInt64 = 0
        /// The index has no valid copy of the counter: write it even when it does not move.
        var writesCounter = false

        var isEmpty: Bool {
            newSegments.isEmpty && indexedBytes.isEmpty && sealing.isEmpty && blobs.isEmpty && resolutions.isEmpty
                && damage.isEmpty && restored.isEmpty && secret == nil && nextSequence == committedSequence
                && !writesCounter
        }

        /// What each key the plan resolves is, for the location map while the plan waits.
        func slots() -> [CacheKey: LocationMap.Slot] {
            var slots: [CacheKey: LocationMap.Slot] = [:]
            for (_, resolution) in resolutions {
                switch resolution {
                case .entry(let link, let location, let blob):
                    let row = IndexApplier.row(for: link, digest: link.key.digest, location: location, accessedAt: link.createdAt)
                    let blobRow = BlobRow(
                        id: Int64(bitPattern: link.blobID), hash: blob.hash, length: blob.payloadLength,
                        segment: blob.location.segment, offset: blob.location.offset, recordBytes: blob.location.length,
                        references: 1)
                    slots[link.key] = .present(IndexedEntry(entry: row, blob: blobRow))
                case .lost(let older?, _): slots[older.key] = .removed
                case .unreflected(let link, _): slots[link.key] = .removed
                case .absent(let key?): slots[key] = .removed
                case .absent(nil), .lost(nil, _): break
                }
            }
            return slots
        }

        /// Writes the plan into `index` (in the caller's transaction).
        func apply(
            to index: IndexDatabase
        ) throws -> (replayed: Int, dropped: [CacheKey], supersede: [LinkRecord], changes: [KeyChange]) {
            if let secret { try index.setSecret(first: secret.first, second: secret.second) }
            for segment in newSegments { try index.insertSegment(id: segment.id, indexedBytes: segment.headerSize) }
            for (id, bytes) in indexedBytes.sorted(by: { $0.key < $1.key }) { try index.setIndexedBytes(bytes, segment: id) }
            let applier = IndexApplier(index: index)
            var replayed = 0
            var dropped: [CacheKey] = []
            var supersede: [LinkRecord] = []
            var changes: [KeyChange] = []
            for (id, copy) in blobs where try applier.insertBlob(id: id, copy) { replayed += 1 }
            for (digest, resolution) in resolutions {
                let outcome = try applier.apply(resolution, digest: digest)
                switch outcome {
                case .applied: replayed += 1
                case .dropped(let key): dropped.append(key)
                case .unchanged: break
                }
                if let change = outcome.change { changes.append(change) }
                if case .lost(let older?, _) = resolution { supersede.append(older) }
            }
            for id in sealing { try index.sealSegment(id) }
            for row in damage { try index.recordDamage(row) }
            for id in restored { try index.clearDamage(segment: id, kind: FsckReport.Finding.Kind.missingSegment.rawValue) }
            if nextSequence != committedSequence || writesCounter { try index.setCommittedSequence(nextSequence) }
            return (replayed, dropped, supersede, changes)
        }
    }

    private mutating func planReplay(
        _ rows: [SegmentRow], committed sequences: (lower: UInt64, higher: UInt64), placement: SegmentPlacement,
        format: SegmentFormat
    ) throws -> (ReplayPlan, PackWriter) {
        let now = configuration.clock()
        var plan = ReplayPlan()
        // The tails are judged by the lower copy of the committed sequence (a raised copy must
        // not make the replay skip a write it has to apply); new numbers start past the higher.
        let committed = sequences.lower
        plan.committedSequence = committed
        var tails: [(id: UInt32, file: SegmentFile, from: UInt64)] = []
        var sealing: [UInt32] = []
        let named = Set(rows.map(\.id))
        let recordedRows = try index.damage()
        let recorded = Set(recordedRows.map { "\($0.kind) \($0.segment) \($0.start)" })
        let recordedMissing = Set(
            recordedRows.filter { $0.kind == FsckReport.Finding.Kind.missingSegment.rawValue }.map(\.segment))

        // 1. The segments the index names: only their headers and sizes are read.
        let knownMax = rows.map(\.id).max() ?? 0
        for row in rows {
            var opened: SegmentFile?
            if placement.headers[row.id] != nil {
                do { opened = try SegmentFile.open(id: row.id, in: packs, writable: !row.isSealed, faults: faults) } catch {
                    if let error = error as? PackError, error.isFailedAccess {
                        throw Self.unreadable(PackFormat.fileName(forSegment: row.id), error)
                    }
                }
            }
            guard let file = opened else {
                report.missingSegments.append(row.id)
                let why = placement.unreadable[row.id].map { "is unreadable (\($0))" } ?? "is missing"
                recordDamage(
                    .missingSegment, segment: row.id, start: 0, end: row.indexedBytes,
                    "packs/\(PackFormat.fileName(forSegment: row.id)) \(why); its entries are not served until it is "
                        + "restored or `trove fsck --repair` drops them", at: now)
                if !row.isSealed { sealing.append(row.id) }
                continue
            }
            let size = try file.size()
            if size < row.indexedBytes {
                report.missingSegments.append(row.id)
                recordDamage(
                    .truncatedSegment, segment: row.id, start: size, end: row.indexedBytes,
                    "packs/\(PackFormat.fileName(forSegment: row.id)) has \(size) bytes, the index relies on "
                        + "\(row.indexedBytes); entries past its end are not served until `trove fsck --repair` drops them",
                    at: now)
                if !row.isSealed { sealing.append(row.id) }
                continue
            }
            // Recorded missing, and whole again (restored): its entries are served, so it is
            // no longer reported.
            if recordedMissing.contains(row.id) { plan.restored.append(row.id) }
            if !row.isSealed { tails.append((row.id, file, row.indexedBytes)) }
        }

        // 2. Segment files created after the index's last commit (rotation just before a
        //    crash): ids above every id the index names. Older unknown files are fsck's.
        for id in placement.headers.keys.sorted() where !named.contains(id) && id > knownMax {
            let file = try SegmentFile.open(id: id, in: packs, writable: true, faults: faults)
            plan.newSegments.append((id, file.headerSize))
            tails.append((id, file, file.headerSize))
        }
        // Older files the index does not name: a segment the compactor had rewritten when a crash
        // came between its index commit and the unlink (every record in it is reflected, or
        // superseded). Registered sealed, without being read: the compactor reclaims it, and
        // fsck judges its records like any others.
        for id in placement.headers.keys.sorted() where !named.contains(id) && id < knownMax {
            guard let size = PackDirectory.segmentSize(id, in: packs) else { continue }
            plan.newSegments.append((id, size))
            plan.sealing.append(id)
        }
        for (id, why) in placement.unreadable.sorted(by: { $0.key < $1.key }) where !named.contains(id) {
            recordDamage(
                .missingSegment, segment: id, start: 0, end: 0,
                "packs/\(PackFormat.fileName(forSegment: id)) is unreadable (\(why)) and the index does not use it; "
                    + "`trove fsck --repair` salvages what is intact in it", at: now)
        }

        // 3. Fold the tails past what the index reflects. A tail must start at a record: if no
        //    record starts where the index says (a damaged row), the whole segment is replayed
        //    (idempotent) rather than taking committed records for a torn tail. Only the
        //    newest segment's torn tail is cut (a truncation needs no space), nothing else.
        //    Under `batched` and `full` a tail is first written again, unchanged, and synced:
        //    past the last successful sync its bytes may be in the page cache only, after a
        //    writeback that failed in this boot (Architecture.md, "A failed sync"), where a sync
        //    alone would not write them. Before the fold, so that what the fold verifies is what
        //    is on disk (a clean page can be dropped and read back from the disk at any time).
        //    When that fails, no tail is written again and the plan is only deferred (run()).
        let synchronize = configuration.durability != .none
        var rewritten: Set<UInt32> = []
        var fold = RecordFold()
        tails.sort { $0.id < $1.id }
        let newestID = ([knownMax] + Array(placement.headers.keys) + Array(placement.unreadable.keys)).max() ?? 0
        for var tail in tails {
            let cutting = tail.id == newestID
            // The hole the writer kept ahead of its records goes, unreported (it never held a
            // record): the file is read as ending where it starts, so that it is neither written
            // below as zeros nor reported as a torn tail — only past what the index reflects: a
            // hole over committed records is damage. It is cut below together with the torn tail
            // the scan finds before it (the leftover zeros of its first block), in one
            // truncation: a kill between two cuts would leave those zeros ending the file with
            // no hole after them, a torn tail the next opening reports (PreparedTail.start).
            let indexed = tail.from
            let holeStart = cutting ? try PreparedTail.start(tail.file, above: indexed) : nil
            // The usual state a kill leaves: the records end where the index says, the rest of
            // their block is zeros, the hole follows. No record starts at `indexed` then; if
            // records are found to end there (the last few, verified), nothing is past the
            // index: nothing is scanned, written again or synced. Otherwise — a damaged
            // `indexed_bytes` in zeros ending a record must not get it cut — the segment is
            // scanned from its header, but only what is past the index is written again.
            let leftoverOnly = try PreparedTail.isLeftover(indexed, in: tail.file, cutAt: holeStart)
            if tail.from > tail.file.headerSize,
                try !SegmentScanner.startsRecord(tail.file, at: tail.from, upTo: holeStart),
                try !(leftoverOnly && SegmentScanner.endsRecords(tail.file, at: indexed))
            {
                tail.from = tail.file.headerSize
            }
            if synchronize && unsyncedTails == nil {
                // A segment the index does not know yet is written from its first byte: its
                // header may be in the page cache only too (rotation does not sync it).
                let from = plan.newSegments.contains { $0.id == tail.id } ? 0 : leftoverOnly ? indexed : tail.from
                do {
                    let size = leftoverOnly ? indexed : try holeStart ?? tail.file.size()
                    if size > from {
                        try tail.file.rewriteUnchanged(from..<size)
                        try tail.file.synchronize()
                        rewritten.insert(tail.id)
                    }
                } catch {
                    noteUnsynced(error, segment: tail.id, path: tail.file.path)
                }
            }
            let scan = try fold.fold(tail.file, from: tail.from, upTo: holeStart, excludingTornTail: cutting)
            var end = scan.fileSize
            if cutting, let torn = scan.tornTail {
                let leftover = try PreparedTail.isLeftover(torn, in: tail.file, cutAt: holeStart, above: indexed)
                try tail.file.truncate(to: torn.start)
                end = torn.start
                if !leftover {
                    report.truncatedTails.append(
                        .init(segment: tail.id, validEnd: torn.start, bytesRemoved: torn.end - torn.start, reason: torn.reason))
                }
            } else if let holeStart {
                try tail.file.truncate(to: holeStart)
            }
            for range in scan.damage where !(cutting && range == scan.tornTail) {
                recordDamage(range, segment: tail.id, at: now)
                if !sealing.contains(tail.id) { sealing.append(tail.id) }
            }
            if end != tail.from { plan.indexedBytes[tail.id] = end }
        }

        // 4. Resolve every key the tails touch, against the index's rows (trusted here: they
        //    stand for the records outside the tails).
        for (id, copy) in fold.blobs.sorted(by: { $0.key < $1.key }) where try index.blob(id: Int64(bitPattern: id)) == nil {
            plan.blobs.append((id, copy))
        }
        var evidence = IndexEvidence(committedSequence: committed)
        for digest in fold.keys(evidence: evidence) {
            if let indexed = try index.entry(digest: digest) {
                fold.seed(indexed)
                evidence.claim(digest, sequence: indexed.entry.sequence, at: nil)
            }
            if case .link(let link)? = fold.newest[digest]?.content, fold.blobs[link.blobID] == nil,
                let blob = try index.blob(id: Int64(bitPattern: link.blobID))
            {
                fold.seed(blob)
            }
        }
        for digest in fold.keys(evidence: evidence).sorted() {
            plan.resolutions.append((digest, fold.resolve(digest, evidence: evidence)))
        }
        plan.nextSequence = max(sequences.higher, fold.nextSequence)

        // 5. The active segment: the newest unsealed one, if it is whole and of the current
        //    version. The others are sealed.
        let candidates = tails.filter { !sealing.contains($0.id) }
        let active = candidates.last.flatMap {
            $0.id == newestID && $0.file.format.version == PackFormat.currentVersion ? $0 : nil
        }
        for tail in tails where tail.id != active?.id {
            if synchronize && unsyncedTails == nil && !rewritten.contains(tail.id) && !sealing.contains(tail.id) {
                do { try tail.file.synchronize() } catch { noteUnsynced(error, segment: tail.id, path: tail.file.path) }
            }
            sealing.append(tail.id)
        }
        // Segment files registered by the plan: their directory entries are durable before
        // their rows are (a commit cycle syncs the directory for the segments rotation makes).
        if synchronize && unsyncedTails == nil && !plan.newSegments.isEmpty {
            do { try PackDirectory.synchronize(packs, faults: faults) } catch { noteUnsynced(error, segment: 0, path: packs) }
        }
        plan.sealing = Array(Set(sealing + plan.sealing).intersection(named.union(plan.newSegments.map(\.id)))).sorted()
        plan.damage = damageRows.filter { !recorded.contains("\($0.kind) \($0.segment) \($0.start)") }
        damageRows = []
        let writer: PackWriter
        if let active {
            writer = PackWriter(segment: active.file, end: try active.file.size(), segmentSizeLimit: segmentLimit)
        } else {
            // A new segment's row is part of the plan too.
            let file = try SegmentFile.create(
                id: newestID + 1, in: packs, createdAt: configuration.clock(), format: format,
                synchronize: configuration.durability != .none, faults: faults)
            plan.newSegments.append((file.id, file.headerSize))
            writer = PackWriter(segment: file, end: file.headerSize, segmentSizeLimit: segmentLimit)
        }
        return (plan, writer)
    }

    /// Opening stops when a file of `packs/` is there but could not be read (an I/O error, which
    /// may pass: `EIO`, `EMFILE`, …), rather than decide anything on the failed read. Taken for a
    /// file without a valid header, a whole segment was set aside for another file (placement);
    /// taken for a missing segment, the writes of a tail were never replayed and the numbers
    /// they took handed out again. The next opening tries again; a file that is gone, or holds
    /// no valid header, is damage, reported, and opening goes on without it.
    static func unreadable(_ name: String, _ error: PackError) -> StoreError {
        StoreError(
            code: .io,
            message: "packs/\(name) could not be read (\(error.message)); opening does not decide what a file holds "
                + "on a failed read. Open the store again to retry; if the disk keeps failing there, move the file "
                + "out of packs/: the store then opens without it, its entries reported missing until it is "
                + "restored or `trove fsck --repair` drops them (if it is the segment being written, the writes in "
                + "it that were not yet indexed are given up for good)",
            underlying: error)
    }

    // MARK: Rebuild (the index is lost, or being rebuilt)

    /// - Parameter asked: whether an operator asked for the rebuild (`--rebuild-index`), who
    ///   sees its report; a rebuild of a lost index on open is recorded for every command to
    ///   report until `fsck --repair`.
    private mutating func rebuild(
        _ placement: SegmentPlacement, evidence: IndexEvidence, format: SegmentFormat, asked: Bool,
        progress: (WorkProgress) -> Void
    ) throws -> PackWriter {
        report.rebuiltIndex = true
        let now = configuration.clock()
        if evidence.committedSequence == nil && !asked {
            recordDamage(
                .rebuiltIndex, segment: 0, start: 0, end: 0,
                "the index was \(evidence.claims.isEmpty ? "missing" : "damaged") and was rebuilt from the packs; a write "
                    + "whose records were lost too (a deleted or damaged segment) cannot be known, and its key may show its "
                    + "previous value — run `trove fsck --repair` to review and acknowledge", at: now)
        }
        let ids = placement.headers.keys.sorted()
        let total = ids.reduce(Int64(0)) { $0 + Int64(PackDirectory.segmentSize($1, in: packs) ?? 0) }
        var done: Int64 = 0
        var fold = RecordFold()
        var unknownBytes: UInt64 = 0
        for id in ids {
            let newest = id == ids.last
            let file = try SegmentFile.open(id: id, in: packs, writable: newest, faults: faults)
            // A hole the writer kept ahead of its records is a torn tail here, reported: without
            // an index, nothing says which bytes were committed (PreparedTail cuts only past them).
            let scan = try fold.fold(file, excludingTornTail: newest)
            var end = scan.fileSize
            if newest, let torn = scan.tornTail {
                try file.truncate(to: torn.start)
                end = torn.start
                report.truncatedTails.append(
                    .init(segment: id, validEnd: torn.start, bytesRemoved: torn.end - torn.start, reason: torn.reason))
            }
            for range in scan.damage where !(newest && range == scan.tornTail) {
                recordDamage(range, segment: id, at: now)
                if range.identity == nil { unknownBytes += range.end - range.start }
            }
            try index.insertSegment(id: id, indexedBytes: end)
            try index.sealSegment(id)
            done += Int64(scan.fileSize)
            progress(WorkProgress(phase: "rebuilding the index", bytesDone: done, bytesTotal: total))
        }
        for (id, why) in placement.unreadable.sorted(by: { $0.key < $1.key }) {
            unknownBytes += PackDirectory.segmentSize(id, in: packs) ?? 0
            recordDamage(
                .missingSegment, segment: id, start: 0, end: 0,
                "packs/\(PackFormat.fileName(forSegment: id)) is unreadable (\(why)); its records are not in the "
                    + "rebuilt index until `trove fsck --repair` salvages what is intact in it", at: now)
        }

        var evidence = evidence
        evidence.vouch(with: fold)
        let applier = IndexApplier(index: index, accessTimes: evidence.accessTimes)
        for (id, copy) in fold.blobs.sorted(by: { $0.key < $1.key }) { _ = try applier.insertBlob(id: id, copy) }
        for digest in fold.keys(evidence: evidence).sorted() {
            let resolution = fold.resolve(digest, evidence: evidence)
            let outcome = try applier.apply(resolution, digest: digest)
            if case .dropped(let key) = outcome { report.droppedEntries.append(key) }
            if case .unreflected(let link, let location) = resolution {
                report.unrestoredLinks.append(.init(key: link.key, segment: location.segment, offset: location.offset))
            }
            if let change = outcome.change { changes.append(change) }
            if let superseded = resolution.supersededLink { supersede.append(superseded) }
        }
        try index.recomputeDerivedColumns()
        // Writes in damage nobody could name, or in unreadable files, may have had any sequence
        // up to one per record header's worth of bytes past the highest seen: never reuse one.
        let gap = unknownBytes / UInt64(PackFormat.Version1.recordHeaderSize) + 1
        nextSequence = max(fold.nextSequence, evidence.committedSequence ?? 0) + (unknownBytes > 0 ? gap : 0)
        let newestID = (ids + Array(placement.unreadable.keys)).max() ?? 0
        return try createActiveSegment(id: newestID + 1, format: format)
    }

    // MARK: Helpers

    /// Keeps the first failure to make a tail durable at open (step 3 and 5 of planReplay).
    private mutating func noteUnsynced(_ error: any Error, segment: UInt32, path: String) {
        guard unsyncedTails == nil else { return }
        let what = segment == 0 ? "the packs directory" : "packs/\(PackFormat.fileName(forSegment: segment))"
        unsyncedTails = PackError(
            code: .syncFailed,
            message: "opening could not make the writes found past the index durable (writing \(what) again and "
                + "syncing it: \((error as? PackError)?.message ?? "\(error)")); they are served from memory and not "
                + "indexed", path: path, errno: (error as? PackError)?.errno)
    }

    private var segmentLimit: UInt64 { UInt64(max(configuration.segmentSize, 4096)) }

    private func createActiveSegment(id: UInt32, format: SegmentFormat) throws -> PackWriter {
        let file = try SegmentFile.create(
            id: id, in: packs, createdAt: configuration.clock(), format: format,
            synchronize: configuration.durability != .none, faults: faults)
        try index.insertSegment(id: id, indexedBytes: file.headerSize)
        return PackWriter(segment: file, end: file.headerSize, segmentSizeLimit: segmentLimit)
    }

    private mutating func recordDamage(_ range: DamagedRange, segment: UInt32, at now: Int64) {
        let what = range.identity.map { " (a \($0.type) record, sequence \($0.sequence))" } ?? ""
        recordDamage(
            .corruptRecord, segment: segment, start: range.start, end: range.end,
            "packs/\(PackFormat.fileName(forSegment: segment)) bytes \(range.start)..<\(range.end)\(what): \(range.reason); "
                + "run `trove fsck --repair`", at: now)
    }

    private mutating func recordDamage(
        _ kind: FsckReport.Finding.Kind, segment: UInt32, start: UInt64, end: UInt64, _ message: String, at now: Int64
    ) {
        damageRows.append(
            DamageRow(segment: segment, start: start, end: end, kind: kind.rawValue, message: message, foundAt: now))
        report.damage.append(StoreDamage(kind: kind, segment: segment, offset: start, message: message))
    }
}
