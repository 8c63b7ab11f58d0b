import Foundation
import TroveCore
import TroveIndex
import TrovePack

extension Store {
    /// Checks the whole store: SQLite's `integrity_check`; every record the index references,
    /// read and verified; reference counts and per-segment byte counts; segment rows against
    /// files; and every segment scanned for damage and for intact records the index lost.
    ///
    /// With `repair`, fixes what it found without losing an intact entry: index rows whose
    /// bytes are gone are dropped, lost writes are applied, damaged link records are written
    /// anew, counts are recomputed. Entries whose bytes are damaged are lost (counted in
    /// ``FsckReport/entriesLost``). An index that fails `integrity_check` needs
    /// ``Store/rebuildIndex(directory:configuration:progress:)`` instead.
    ///
    /// Commit cycles wait while fsck runs; reads go on.
    ///
    /// - Parameter progress: called as bytes are verified.
    public func fsck(repair: Bool = false, progress: (WorkProgress) -> Void = { _ in }) throws -> FsckReport {
        try commitPending(flushReadTimes: true)
        let (report, damaged) = try withoutActuallyEscaping(progress) { progress in
            try committer.withLock { (slot) throws -> (FsckReport, Set<UInt32>) in
                guard let state = slot, !state.isClosed else { throw Self.closedError(directory) }
                var check = FsckRun(store: self, index: state.index, repair: repair, progress: progress)
                try check.run()
                if repair { try commitCycle(state, flushReadTimes: false) }
                return (check.report, check.damagedSegments)
            }
        }
        // Damaged bytes cannot be mended, but the segment can go: its intact live records are
        // copied forward past the damage (the index is repaired, so nothing live is stranded).
        if repair {
            for id in damaged.sorted() {
                try sealIfActive(id)
                _ = try rewrite(segment: id, salvaging: true)
            }
        }
        return report
    }
}

/// One fsck run, under the committer lock.
struct FsckRun {
    let store: Store
    let index: IndexDatabase
    let repair: Bool
    let progress: (WorkProgress) -> Void
    var report = FsckReport()
    /// Segments with damaged bytes: repair salvages them once the index is repaired.
    var damagedSegments: Set<UInt32> = []

    init(store: Store, index: IndexDatabase, repair: Bool, progress: @escaping (WorkProgress) -> Void) {
        self.store = store
        self.index = index
        self.repair = repair
        self.progress = progress
    }

    private mutating func find(
        _ kind: FsckReport.Finding.Kind, _ message: String, segment: UInt32? = nil, offset: UInt64? = nil
    ) {
        report.findings.append(.init(kind: kind, message: message, segment: segment, offset: offset, repaired: false))
    }

    /// Marks the findings from `start` on as repaired.
    private mutating func repaired(from start: Int) {
        for i in start..<report.findings.count where report.findings[i].kind != .indexIntegrity {
            report.findings[i].repaired = true
        }
    }

    mutating func run() throws {
        let packs = store.packsDirectory
        // What opening the store already found and repaired belongs in the report too (once).
        let firstCheck = store.shared.withLock { state in
            defer { state.recoveryReported = true }
            return !state.recoveryReported
        }
        let opened = firstCheck ? store.recoveryReport : RecoveryReport()
        for id in opened.missingSegments {
            report.findings.append(.init(kind: .missingSegment, message: "segment \(id) was missing or unreadable; its entries were dropped when the store opened", segment: id, repaired: true))
        }
        for tail in opened.truncatedTails {
            report.findings.append(.init(kind: .truncatedSegment, message: "segment \(tail.segment): \(tail.bytesRemoved) bytes of torn tail were cut when the store opened (\(tail.reason))", segment: tail.segment, offset: tail.validEnd, repaired: true))
        }
        report.entriesLost += opened.droppedEntries.count
        // 1. SQLite's own check.
        let integrity = try index.integrityCheck()
        if integrity != ["ok"] {
            find(.indexIntegrity, "index.sqlite: \(integrity.prefix(5).joined(separator: "; ")); run `trove fsck --rebuild-index`")
        }
        let start = report.findings.count
        if repair { try index.begin() }
        do {
            try checkSegments(packs)
            try checkIndexAgainstPacks()
            try checkPacksAgainstIndex(packs)
            // Counts last: the repairs above change them.
            for wrong in try index.wrongReferenceCounts() {
                find(.wrongReferenceCount, "blob \(wrong.id): \(wrong.stored) references stored, \(wrong.actual) entries link to it")
            }
            for wrong in try index.wrongLiveBytes() {
                find(.wrongLiveBytes, "segment \(wrong.segment): \(wrong.stored) live bytes stored, rows add up to \(wrong.actual)", segment: wrong.segment)
            }
            if repair {
                try index.recomputeDerivedColumns()
                try index.commit()
                repaired(from: start)
            }
        } catch {
            if repair { try? index.rollback() }
            throw error
        }
        if repair {
            // Repairs can change what readers see: drop every cached location.
            store.shared.withLock { $0.slots = $0.slots.filter { if case .present = $0.value { false } else { true } } }
        }
    }

    /// Segment rows against segment files.
    private mutating func checkSegments(_ packs: String) throws {
        let rows = try index.segments()
        let files = Set(try PackDirectory.segmentIDs(in: packs))
        for row in rows {
            let path = packs + "/" + PackFormat.fileName(forSegment: row.id)
            guard files.contains(row.id), let size = SystemCall.fileSize(path) else {
                find(.missingSegment, "segment \(row.id) is in the index but \(path) is missing", segment: row.id)
                if repair {
                    report.entriesLost += try index.dropRecords(segment: row.id, beyond: 0).count
                    try index.deleteSegment(row.id)
                }
                continue
            }
            if UInt64(size) < row.indexedBytes {
                find(.truncatedSegment, "\(path) has \(size) bytes; the index reflects \(row.indexedBytes)", segment: row.id)
                if repair {
                    report.entriesLost += try index.dropRecords(segment: row.id, beyond: UInt64(size)).count
                    try index.setIndexedBytes(UInt64(size), segment: row.id)
                }
            }
        }
        let known = Set(rows.map(\.id))
        let active = store.appender.withLock { $0.pack.segment.id }
        for id in files.sorted() where !known.contains(id) && id != active {
            find(.orphanSegment, "\(packs)/\(PackFormat.fileName(forSegment: id)) is not in the index", segment: id)
            if repair {
                // Its records are judged like any others below (orphans get applied); then the
                // compactor reclaims what is dead.
                let size = UInt64(SystemCall.fileSize(packs + "/" + PackFormat.fileName(forSegment: id)) ?? 0)
                try index.insertSegment(id: id, indexedBytes: size)
                try index.sealSegment(id)
            }
        }
    }

    /// Every record the index references, read and verified.
    private mutating func checkIndexAgainstPacks() throws {
        for row in try index.entriesWithoutBlob() {
            find(.staleIndexRow, "\(row.key): the index links it to blob \(row.blobID), which it does not have")
            if repair {
                try index.removeEntry(digest: row.keyDigest)
                report.entriesLost += 1
            }
        }
        var total: Int64 = 0
        try index.forEachBlob { if $0.references > 0 { total += Int64($0.recordBytes) } }
        var damaged: [BlobRow] = []
        var done: Int64 = 0
        try index.forEachBlob { blob in
            guard blob.references > 0 else { return }
            do {
                let file = try store.segmentFile(blob.segment)
                _ = try file.readBlob(at: blob.offset, payloadLength: blob.length, hash: blob.hash, id: UInt64(bitPattern: blob.id))
                report.recordsVerified += 1
                report.bytesVerified += Int64(blob.recordBytes)
            } catch {
                damaged.append(blob)
            }
            done += Int64(blob.recordBytes)
            progress(WorkProgress(phase: "verifying blobs", bytesDone: done, bytesTotal: total))
        }
        for blob in damaged {
            find(.corruptRecord, "blob \(blob.id) at segment \(blob.segment) offset \(blob.offset) does not verify", segment: blob.segment, offset: blob.offset)
            if repair { report.entriesLost += try index.dropBlob(blob.id).count }
        }
        // Each entry's link record must be the record the row describes.
        var stale: [(IndexedEntry, String)] = []
        try index.forEachEntry { indexed in
            let row = indexed.entry
            do {
                let file = try store.segmentFile(row.linkSegment)
                let (header, body) = try file.readRecord(at: row.linkOffset, limit: try file.size())
                report.recordsVerified += 1
                report.bytesVerified += Int64(row.linkLength)
                guard header.type == .link, let link = body.withUnsafeBytes({ RecordDecoder.link($0) }),
                    link.url == row.url, link.variant == row.variant, link.sequence == row.sequence,
                    Int64(bitPattern: link.blobID) == row.blobID
                else {
                    stale.append((indexed, "the record at segment \(row.linkSegment) offset \(row.linkOffset) is not its link"))
                    return true
                }
            } catch {
                stale.append((indexed, "its link record at segment \(row.linkSegment) offset \(row.linkOffset) is unreadable (\(error))"))
            }
            return true
        }
        for (indexed, reason) in stale {
            find(.staleIndexRow, "\(indexed.entry.key): \(reason)", segment: indexed.entry.linkSegment, offset: indexed.entry.linkOffset)
            if repair, try index.blob(id: indexed.blob.id) != nil { try rewriteLink(indexed) }
        }
    }

    /// Appends a fresh link record for an entry whose link record is damaged, so the packs can
    /// rebuild it again, and points the row at it.
    private mutating func rewriteLink(_ indexed: IndexedEntry) throws {
        let row = indexed.entry
        let (segment, offset, length, sequence) = try store.withAppender { (state) throws(StoreError) in
            let link = LinkRecord(
                url: row.url, variant: row.variant, blobHash: indexed.blob.hash, blobLength: indexed.blob.length,
                blobID: UInt64(bitPattern: indexed.blob.id), sequence: state.nextSequence, createdAt: row.createdAt,
                expiresAt: row.expiresAt, etag: row.etag, lastModified: row.lastModified)
            let length = PackWriter.linkRecordLength(link)
            if state.pack.needsRotation(forAppending: length) {
                try state.rotate(packs: store.packsDirectory, createdAt: store.configuration.clock())
            }
            let offset = try store.packCall { try state.pack.appendLink(link) }
            state.nextSequence += 1
            return (state.pack.segment.id, offset, length, link.sequence)
        }
        try store.segmentFile(segment).synchronize()
        try index.insertSegment(id: segment, indexedBytes: UInt64(PackFormat.segmentHeaderSize))
        try index.setLinkLocation(of: row.keyDigest, segment: segment, offset: offset, length: length, sequence: sequence)
    }

    /// Every segment scanned, past damage, for corrupt bytes and for intact records the index
    /// lost: a link newer than its key's entry (and not removed by a newer tombstone), or a
    /// tombstone newer than the entry it removes.
    private mutating func checkPacksAgainstIndex(_ packs: String) throws {
        var newestLink: [CacheKey: (record: ScannedRecord, segment: UInt32)] = [:]
        var newestTombstone: [CacheKey: UInt64] = [:]
        var blobs: [UInt64: (record: ScannedRecord, segment: UInt32)] = [:]
        let ids = try PackDirectory.segmentIDs(in: packs)
        var total: Int64 = 0
        for id in ids { total += SystemCall.fileSize(packs + "/" + PackFormat.fileName(forSegment: id)) ?? 0 }
        var done: Int64 = 0
        for id in ids {
            report.segmentsChecked += 1
            let file: SegmentFile
            do { file = try store.segmentFile(id) } catch {
                find(.corruptRecord, "segment \(id): \(error.message)", segment: id, offset: 0)
                continue
            }
            let damage = try SegmentScanner.scanAll(file) { record in
                switch record.content {
                case .blob(_, let blobID, _):
                    if blobs[blobID] == nil { blobs[blobID] = (record, id) }
                case .link(let link):
                    let key = CacheKey(url: link.url, variant: link.variant)
                    if case .link(let known)? = newestLink[key]?.record.content, known.sequence >= link.sequence { break }
                    newestLink[key] = (record, id)
                case .tombstone(let tombstone):
                    let key = CacheKey(url: tombstone.url, variant: tombstone.variant)
                    newestTombstone[key] = max(newestTombstone[key] ?? 0, tombstone.sequence)
                }
            }
            for range in damage {
                find(.corruptRecord, "segment \(id): bytes \(range.start)..<\(range.end) hold no valid record (\(range.reason))", segment: id, offset: range.start)
            }
            if !damage.isEmpty { damagedSegments.insert(id) }
            done += SystemCall.fileSize(file.path) ?? 0
            progress(WorkProgress(phase: "scanning segments", bytesDone: done, bytesTotal: total))
        }
        let applier = IndexApplier(index: index)
        for (key, newest) in newestLink.sorted(by: { $0.key < $1.key }) {
            guard case .link(let link) = newest.record.content else { continue }
            if let removed = newestTombstone[key], removed > link.sequence { continue }
            let entry = try index.entry(digest: key.digest)?.entry
            if let entry, entry.key != key || entry.sequence >= link.sequence { continue }
            // A link whose blob is gone (damaged, or reclaimed) is dead, not lost.
            guard try index.blob(id: Int64(bitPattern: link.blobID)) != nil || blobs[link.blobID] != nil else { continue }
            find(.orphanRecord, "\(key): the link at segment \(newest.segment) offset \(newest.record.offset) is newer than the index", segment: newest.segment, offset: newest.record.offset)
            if repair {
                if try index.blob(id: Int64(bitPattern: link.blobID)) == nil, let blob = blobs[link.blobID] {
                    try applier.apply(blob.record, segment: blob.segment)
                }
                try applier.apply(newest.record, segment: newest.segment)
            }
        }
        for (key, sequence) in newestTombstone.sorted(by: { $0.key < $1.key }) {
            guard let entry = try index.entry(digest: key.digest)?.entry, entry.key == key, entry.sequence < sequence else { continue }
            find(.orphanRecord, "\(key): a removal newer than the index entry was lost")
            if repair { try index.removeEntry(digest: key.digest) }
        }
    }
}
