import Foundation
import TroveCore
import TroveIndex
import TrovePack

extension Store {
    /// Checks the whole store: SQLite's `integrity_check`; segment rows against files; every
    /// segment scanned (past damage) and folded the way recovery and rebuilds fold records;
    /// every index row checked against the record it points at; reference counts and
    /// per-segment byte counts.
    ///
    /// With `repair`, makes the index what the packs say (the packs are the truth; an index row
    /// is only ever evidence that a write happened, never the source of an entry), appends a
    /// tombstone over every older value that must not come back, and salvages damaged segments
    /// (their intact live records are copied forward, the file is set aside as `.damaged`).
    /// What repair never does: serve or re-apply a link older than a write it knows of, restore
    /// a link older than what the index committed, or write a record from an index row.
    /// Entries whose newest write is damaged are lost (``FsckReport/entriesLost``). An index
    /// that fails `integrity_check` needs ``Store/rebuildIndex(directory:configuration:progress:)``.
    ///
    /// Commit cycles wait while fsck runs; reads go on.
    ///
    /// - Parameter progress: called as bytes are scanned.
    public func fsck(repair: Bool = false, progress: (WorkProgress) -> Void = { _ in }) throws(StoreError) -> FsckReport {
        do {
            return try checkStore(repair: repair, progress: progress)
        } catch let error as StoreError {
            throw error
        } catch {
            // IndexError and PackError map to their StoreError codes (a damaged index to
            // `.indexCorrupt`, which `--rebuild-index` answers).
            throw StoreError(index: error)
        }
    }

    private func checkStore(repair: Bool, progress: (WorkProgress) -> Void) throws -> FsckReport {
        // A check runs on a full disk too (what the index could not commit yet is reported as
        // newer than the index); a repair must write, and fails there with the commit's error.
        if repair { try commitPending(flushReadTimes: true) } else { _ = try commitForListing() }
        let (report, salvage) = try withoutActuallyEscaping(progress) { progress in
            try committer.withLock { (slot) throws -> (FsckReport, [UInt32]?) in
                guard let state = slot, !state.isClosed else { throw Self.closedError(directory) }
                // Writes go on while fsck runs: those queued since the commit above are committed
                // now, and the check stops where this cycle's snapshot ended. Later records are
                // the queue's, not damage (on a full disk a check judges up to the appender's end,
                // reporting what the index could not commit yet).
                var bound: (segment: UInt32, end: UInt64)?
                do { bound = try commitCycle(state, flushReadTimes: false) } catch  where !repair { bound = nil }
                var check = FsckRun(store: self, index: state.index, repair: repair, bound: bound, progress: progress)
                try check.run()
                // The tombstones repair appended are committed with the cycle.
                if repair { try commitCycle(state, flushReadTimes: false) }
                return (check.report, check.repaired ? check.salvage.sorted() : nil)
            }
        }
        // Damaged bytes cannot be mended, but the segment can go: its intact live records are
        // copied forward past the damage (the index is repaired, so nothing live is stranded),
        // and the file is set aside. Not when repair declined a damaged index: that index is
        // rebuilt first, and the damage stays reported until then.
        if let salvage {
            for id in salvage {
                try sealIfActive(id)
                _ = try rewrite(segment: id, salvaging: true)
            }
            try withIndex { try $0.clearDamage() }
        }
        return report
    }
}

/// One fsck run, under the committer lock.
struct FsckRun {
    let store: Store
    let index: IndexDatabase
    let repair: Bool
    /// Where the last commit cycle's snapshot ended: records past it are queued writes.
    let bound: (segment: UInt32, end: UInt64)?
    let progress: (WorkProgress) -> Void
    var report = FsckReport()
    /// Segments with damaged bytes (or an unreadable header): repair salvages them once the
    /// index is repaired.
    var salvage: Set<UInt32> = []
    /// Whether repair ran (asked for, and the index passed its integrity check).
    var repaired = false

    init(
        store: Store, index: IndexDatabase, repair: Bool, bound: (segment: UInt32, end: UInt64)? = nil,
        progress: @escaping (WorkProgress) -> Void
    ) {
        self.store = store
        self.index = index
        self.repair = repair
        self.bound = bound
        self.progress = progress
    }

    private var packs: String { store.packsDirectory }

    private mutating func find(
        _ kind: FsckReport.Finding.Kind, _ message: String, segment: UInt32? = nil, offset: UInt64? = nil,
        repaired: Bool = false
    ) {
        report.findings.append(.init(kind: kind, message: message, segment: segment, offset: offset, repaired: repaired))
    }

    mutating func run() throws {
        reportWhatOpeningDid()
        let integrity = try index.integrityCheck()
        // A sound file's committed sequence is evidence; damage to the digest index alone
        // (schema 6) leaves that, but repair must not write through the index (below).
        let indexIsSound = integrity == ["ok"]
        let digestFindings = try index.digestFindings()
        let findings = (indexIsSound ? [] : integrity) + digestFindings
        if !findings.isEmpty {
            find(
                .indexIntegrity, "index.sqlite: \(findings.prefix(5).joined(separator: "; ")); run `trove fsck --rebuild-index`")
        }
        let start = report.findings.count
        let (appenderID, appenderEnd, format) = store.appender.withLock { ($0.pack.segment.id, $0.pack.end, $0.format) }
        let (activeID, activeEnd) = bound ?? (appenderID, appenderEnd)
        let segmentRows = try index.segments()
        let rowsByID = Dictionary(uniqueKeysWithValues: segmentRows.map { ($0.id, $0) })
        let fileIDs = try PackDirectory.segmentIDs(in: packs)

        // 1. Segment rows against files; every readable segment folded.
        var fold = RecordFold()
        var readable: [UInt32: SegmentFile] = [:]
        var unreadableRows: Set<UInt32> = []
        var unsalvageable: [UInt32] = []
        var truncated: [UInt32: UInt64] = [:]
        let total = fileIDs.reduce(Int64(0)) { $0 + Int64(PackDirectory.segmentSize($1, in: packs) ?? 0) }
        var done: Int64 = 0
        // A segment newer than the active one was created since: it holds queued writes only.
        for id in Set(fileIDs).union(rowsByID.keys).sorted() where id <= activeID {
            let name = "packs/\(PackFormat.fileName(forSegment: id))"
            let file: SegmentFile
            do {
                file = try store.segmentFile(id)
            } catch {
                guard error.code == .missingSegment else { throw error }
                // Missing, or no valid header: a version-2 segment's records can still be found
                // with the store secret, bound as they are to this id and their offsets. (A
                // read that failed — `.io`, thrown on — decides nothing: taken for an unreadable
                // file, a repair would drop the entries of a segment that is whole.)
                var salvageable: SegmentFile?
                if fileIDs.contains(id) {
                    do {
                        salvageable = try SegmentFile.openForSalvage(
                            id: id, in: packs, format: format, faults: store.configuration.faultInjector)
                    } catch {
                        if (error as? PackError)?.isFailedAccess == true { throw StoreError(pack: error) }
                    }
                }
                if let salvageable {
                    salvage.insert(id)
                    try fold.fold(salvageable)
                    find(
                        .missingSegment, "\(name) has no valid segment header; its intact records are salvaged by repair",
                        segment: id)
                } else {
                    let what = fileIDs.contains(id) ? "unreadable" : "missing"
                    find(
                        .missingSegment, "\(name) is \(what)\(rowsByID[id] != nil ? "; the index has rows in it" : "")",
                        segment: id)
                    if fileIDs.contains(id) { unsalvageable.append(id) }
                }
                if rowsByID[id] != nil { unreadableRows.insert(id) }
                continue
            }
            readable[id] = file
            let size = try file.size()
            if let row = rowsByID[id], size < row.indexedBytes {
                truncated[id] = size
                find(.truncatedSegment, "\(name) has \(size) bytes; the index reflects \(row.indexedBytes)", segment: id)
            }
            if rowsByID[id] == nil && id != activeID {
                find(.orphanSegment, "\(name) is not in the index", segment: id)
            }
            let scan = try fold.fold(file, upTo: id == activeID ? activeEnd : nil)
            if scan.stoppedAtDamage, let first = scan.damage.first {
                // Version 1: records the index names past the damage are read where it says.
                for offset in try index.referencedOffsets(inSegment: id, from: first.start) {
                    if let verified = try? file.readRecord(at: offset, limit: size) { fold.add(verified.record, segment: id) }
                }
            }
            if !scan.damage.isEmpty { salvage.insert(id) }
            report.segmentsChecked += 1
            report.recordsVerified += scan.recordCount
            report.bytesVerified += Int64(scan.fileSize)
            done += Int64(scan.fileSize)
            progress(WorkProgress(phase: "scanning segments", bytesDone: done, bytesTotal: total))
        }
        for (segment, range) in fold.damage {
            let what = range.identity.map { " (\($0.type) record, sequence \($0.sequence)\(keyName($0.digest, fold)))" } ?? ""
            find(
                .corruptRecord,
                "segment \(segment): bytes \(range.start)..<\(range.end) hold no intact record\(what): \(range.reason)",
                segment: segment, offset: range.start)
        }

        // 2. The index's rows as evidence: a row vouched for by the intact link it points at
        //    counts for that link's key, whatever its own key columns say.
        let rows = try index.entryRows()
        var evidence = IndexEvidence(committedSequence: indexIsSound ? try index.committedSequence()?.higher : nil)
        evidence.recordedSequence = indexIsSound ? try index.recordedSequence() : nil
        // Whether a write could be hidden in the packs: any damage whose record cannot be
        // named, a segment missing, cut short, unknown to the index or set aside, a tail cut.
        let opening = store.recoveryReport
        evidence.packsAreWhole =
            fold.damage.allSatisfy { $0.1.identity != nil }
            && !report.findings[start...].contains { [.missingSegment, .truncatedSegment, .orphanSegment].contains($0.kind) }
            && opening.truncatedTails.isEmpty && opening.setAsideFiles.isEmpty && opening.missingSegments.isEmpty
        var rowByDigest: [ContentHash: EntryRow] = [:]
        var strayRows: [EntryRow] = []
        for row in rows {
            var digest = row.keyDigest
            if let (_, identity) = fold.record(atSegment: row.linkSegment, offset: row.linkOffset), identity.type == .link,
                identity.sequence == row.sequence
            {
                digest = identity.digest
            }
            if digest != row.keyDigest || row.key.digest != row.keyDigest {
                strayRows.append(row)
            } else {
                rowByDigest[digest] = row
            }
            evidence.claim(
                digest, sequence: row.sequence, at: (row.linkSegment, row.linkOffset), blob: UInt64(bitPattern: row.blobID))
            evidence.accessTimes[digest] = max(evidence.accessTimes[digest] ?? 0, row.accessedAt)
        }
        for row in strayRows {
            find(
                .staleIndexRow,
                "the index row for \(row.key) disagrees with the link record it points at (segment "
                    + "\(row.linkSegment) offset \(row.linkOffset)); it is rebuilt from the record",
                segment: row.linkSegment, offset: row.linkOffset)
        }

        // 3. Resolve every key and compare with the index.
        let applier = IndexApplier(index: index, accessTimes: evidence.accessTimes)
        var resolutions: [(ContentHash, KeyResolution)] = []
        var blobRowsToSet: [UInt64: BlobCopy] = [:]
        for digest in fold.keys(evidence: evidence).sorted() {
            var resolution = fold.resolve(digest, evidence: evidence)
            let row = rowByDigest[digest]
            // The index may point at either copy of a record an interrupted compaction copied.
            if case .entry(let link, _, let blob) = resolution, let row,
                fold.isCopy(ofLink: digest, sequence: link.sequence, atSegment: row.linkSegment, offset: row.linkOffset),
                let (copy, _) = fold.record(atSegment: row.linkSegment, offset: row.linkOffset)
            {
                resolution = .entry(link, link: copy, blob: blob)
            }
            resolutions.append((digest, resolution))
            switch resolution {
            case .entry(let link, let location, let blob):
                let wanted = applier.row(for: link, digest: digest, location: location, accessedAt: 0)
                if row == nil {
                    if !strayRows.contains(where: { $0.linkSegment == location.segment && $0.linkOffset == location.offset }) {
                        find(
                            .orphanRecord,
                            "\(link.key): the link at segment \(location.segment) offset \(location.offset) "
                                + "is newer than the index", segment: location.segment, offset: location.offset)
                    }
                } else if var row {
                    row.accessedAt = 0
                    if row != wanted {
                        find(
                            .staleIndexRow,
                            "\(link.key): the index row disagrees with its link record at segment "
                                + "\(location.segment) offset \(location.offset)", segment: location.segment,
                            offset: location.offset)
                    }
                }
                let copies = fold.blobCopies[link.blobID] ?? []
                let stored = try index.blob(id: Int64(bitPattern: link.blobID))
                let storedIsIntact =
                    stored.map {
                        $0.hash == blob.hash && $0.length == blob.payloadLength
                            && copies.contains(RecordLocation(segment: $0.segment, offset: $0.offset, length: $0.recordBytes))
                    } ?? false
                if !storedIsIntact && blobRowsToSet.updateValue(blob, forKey: link.blobID) == nil && stored != nil {
                    find(
                        .staleIndexRow,
                        "blob \(link.blobID): the index row disagrees with its record at segment "
                            + "\(blob.location.segment) offset \(blob.location.offset)", segment: blob.location.segment,
                        offset: blob.location.offset)
                }
            case .absent:
                if let row {
                    find(.orphanRecord, "\(row.key): a removal newer than the index entry was lost")
                }
            case .lost(let older, let reason):
                let key = row?.key ?? older?.key
                if row != nil || older != nil {
                    find(
                        .lostWrite,
                        "\(key.map(\.description) ?? "a key"): \(reason); its entry is dropped and no older value is served")
                    if row != nil { report.entriesLost += 1 }
                }
            case .unreflected(let link, let location):
                find(
                    .unreflectedRecord,
                    "\(link.key): the link at segment \(location.segment) offset \(location.offset) is "
                        + "older than what the index committed and the index has no entry for it; not restored",
                    segment: location.segment, offset: location.offset)
            }
        }
        // Blob rows with no intact record and no entry: nothing to dedup onto.
        let liveBlobs = Set(
            resolutions.compactMap { resolution -> UInt64? in
                if case .entry(let link, _, _) = resolution.1 { link.blobID } else { nil }
            })
        var deadBlobRows: [Int64] = []
        for blob in try index.blobRows() where fold.blobs[UInt64(bitPattern: blob.id)] == nil {
            if !liveBlobs.contains(UInt64(bitPattern: blob.id)) { deadBlobRows.append(blob.id) }
        }

        // 4. Counts (repairs change them, so they are recomputed last).
        for wrong in try index.wrongReferenceCounts() {
            find(.wrongReferenceCount, "blob \(wrong.id): \(wrong.stored) references stored, \(wrong.actual) entries link to it")
        }
        for wrong in try index.wrongLiveBytes() {
            find(
                .wrongLiveBytes, "segment \(wrong.segment): \(wrong.stored) live bytes stored, rows add up to \(wrong.actual)",
                segment: wrong.segment)
        }
        let nextSequence = store.appender.withLock { $0.nextSequence }
        if fold.nextSequence > nextSequence {
            find(
                .wrongSequence,
                "the sequence counter would give \(nextSequence) to the next write, but the packs already hold "
                    + "sequence \(fold.nextSequence - 1)")
        }
        for damage in try index.damage()
        where damage.kind == FsckReport.Finding.Kind.setAsideFile.rawValue
            || damage.kind == FsckReport.Finding.Kind.rebuiltIndex.rawValue
        {
            find(FsckReport.Finding.Kind(rawValue: damage.kind) ?? .setAsideFile, damage.message)
        }
        // A damaged index is rebuilt, not repaired: what lookups through it miss (a row whose
        // digest cell was lost) would be written over.
        guard repair, findings.isEmpty else { return }
        repaired = true

        // 5. Repair: the index becomes what the packs say.
        var changes: [KeyChange] = []
        try index.writing {
            for row in strayRows { try index.deleteEntryRow(digest: row.keyDigest) }
            // A stray row whose key digest is damaged (not a 16-byte BLOB) reads as a digest it
            // is not stored under: the delete above misses it.
            try index.deleteMalformedEntryRows()
            for (id, blob) in blobRowsToSet.sorted(by: { $0.key < $1.key }) {
                try index.setBlob(
                    id: Int64(bitPattern: id), hash: blob.hash, length: blob.payloadLength, segment: blob.location.segment,
                    offset: blob.location.offset, recordBytes: blob.location.length)
            }
            for (digest, resolution) in resolutions {
                if let change = try applier.apply(resolution, digest: digest).change { changes.append(change) }
            }
            for id in deadBlobRows { try index.deleteBlob(id) }
            for id in unreadableRows where !salvage.contains(id) {
                for row in try index.dropRecords(segment: id, beyond: 0) {
                    changes.append(KeyChange(key: row.key, kind: .removed))
                }
                try index.deleteSegment(id)
            }
            for (id, size) in truncated { try index.setIndexedBytes(size, segment: id) }
            for id in readable.keys where rowsByID[id] == nil && id != activeID {
                try index.insertSegment(id: id, indexedBytes: try readable[id]!.size())
                try index.sealSegment(id)
            }
            for id in salvage where rowsByID[id] == nil {
                try index.insertSegment(id: id, indexedBytes: PackDirectory.segmentSize(id, in: packs) ?? 0)
                try index.sealSegment(id)
            }
            try index.recomputeDerivedColumns()
        }
        // What is in a segment's place but cannot be read at all is set aside, never deleted.
        for id in unsalvageable {
            try PackDirectory.quarantine(PackFormat.fileName(forSegment: id), suffix: "damaged", in: packs)
        }
        // Older values that must never come back get tombstones (a key written again meanwhile
        // needs none: its new record supersedes them).
        let superseded = resolutions.compactMap(\.1.supersededLink)
        try store.withAppender { (state) throws(StoreError) in
            state.nextSequence = max(state.nextSequence, fold.nextSequence)
            var queued = Set<CacheKey>()
            for write in state.queue {
                switch write.record.content {
                case .link(let link): queued.insert(link.key)
                case .tombstone(let t): queued.insert(t.key)
                case .blob: break
                }
            }
            for link in superseded where !queued.contains(link.key) {
                _ = try store.appendTombstone(for: link.key, to: state)
            }
            // Repairs can change what readers see: drop every cached location but those of
            // writes still queued, and report each key repair changed.
            store.shared.withLock { $0.map.indexChanged(changes, keeping: queued) }
        }
        // Repair deleted and rewrote blob rows: dedup hints load again.
        store.forgetDedupHints()
        for i in start..<report.findings.count where report.findings[i].kind != .indexIntegrity {
            report.findings[i].repaired = true
        }
    }

    /// What opening the store already found and did belongs in the first report too.
    private mutating func reportWhatOpeningDid() {
        let firstCheck = store.shared.withLock { state in
            defer { state.recoveryReported = true }
            return !state.recoveryReported
        }
        guard firstCheck else { return }
        let opened = store.recoveryReport
        for tail in opened.truncatedTails {
            find(
                .truncatedSegment,
                "segment \(tail.segment): \(tail.bytesRemoved) bytes of torn tail were cut when the store "
                    + "opened (\(tail.reason))", segment: tail.segment, offset: tail.validEnd, repaired: true)
        }
        for moved in opened.renamedFiles {
            find(
                .renamedSegment, "packs/\(moved.from) was renamed to packs/\(moved.to) when the store opened (\(moved.reason))",
                repaired: true)
        }
        report.entriesLost += opened.droppedEntries.count
    }

    private func keyName(_ digest: ContentHash, _ fold: RecordFold) -> String {
        fold.newest[digest].map { ", \($0.key)" } ?? ""
    }
}
