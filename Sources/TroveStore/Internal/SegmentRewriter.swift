import Foundation
import TroveCore
import TroveIndex
import TrovePack

/// One rewrite of a sealed segment: the compactor's (give space back) and repair's (salvage
/// what is intact past damage). Created and run under the committer lock, so no commit cycle
/// but its own runs meanwhile; puts go on, a few records at a time between its appends.
///
/// The steps, each a method (Docs/Compaction.md, "Rewriting a segment, step by step"):
/// 1. ``prepare()``: commit what is queued, check the segment is still there and (unless
///    salvaging) has no recorded damage, mark it *reclaiming* and note the blobs queued links name;
/// 2. ``openSegment()``: the file (by the store secret when its header is damaged and salvaging);
/// 3. ``liveRecords(in:)``: judge each record against the index, dropping a record only when
///    the packs bear the index out, else recording the damage and leaving the segment alone;
/// 4. ``copyForward(_:)``: append the live records to the active segment, sync;
/// 5. ``moveIndex(to:)``: one transaction moves rows to the copies and forgets the segment;
/// 6. ``publish(_:)``: the location map follows (and reports the moves);
/// 7. ``removeFile()``: unlink (or, salvaging, set aside) the old file.
struct SegmentRewriter {
    let store: Store
    let state: CommitState
    let id: UInt32
    let salvaging: Bool
    private var index: IndexDatabase { state.index }
    private var configuration: Store.Configuration { store.configuration }

    init(store: Store, state: CommitState, segment id: UInt32, salvaging: Bool) {
        self.store = store
        self.state = state
        self.id = id
        self.salvaging = salvaging
    }

    /// What a live record is, for moving its index row.
    enum Moved { case blob(Int64), link(CacheKey, from: UInt64), tombstone }
    /// A live record and its bytes, to copy.
    typealias Live = (record: MovableRecord, kind: Moved)
    /// Where a live record's copy went.
    typealias Copy = (kind: Moved, segment: UInt32, offset: UInt64, length: UInt64)

    /// Runs every step; returns the bytes copied (0 when the segment was already gone).
    func run() throws(StoreError) -> Int64 {
        guard let queuedBlobs = try prepare() else { return 0 }
        defer { _ = store.appender.withLock { $0.reclaiming.remove(id) } }
        let file = try openSegment()
        let live = try liveRecords(in: file, queuedBlobs: queuedBlobs)
        let (copies, copied) = try copyForward(live)
        let moved = try moveIndex(to: copies)
        publish(moved)
        try removeFile()
        return copied
    }

    // MARK: 1. Prepare

    /// Commits what is queued and marks the segment reclaiming. Returns the blob ids queued
    /// links name (live whatever the index says yet), or nil when the segment is gone already.
    private func prepare() throws(StoreError) -> Set<UInt64>? {
        // The index must reflect every queued write before liveness is judged.
        try store.commitCycle(state, flushReadTimes: false)
        // Another pass (the background one and an explicit one can interleave) may have
        // reclaimed the segment since this pass listed it.
        let stillThere: Bool
        do { stillThere = try index.segments().contains { $0.id == id && $0.isSealed } } catch {
            throw StoreError(index: error)
        }
        guard stillThere else { return nil }
        // Damage found in the segment (by a read, a pass, opening) is left to `trove fsck
        // --repair`, which judges it with every record in view: a rewrite would act on the
        // word of a row already caught disagreeing with the packs, and would delete the
        // record of that damage with the segment.
        if !salvaging {
            let damaged: Bool
            do { damaged = try index.damage().contains { $0.segment == id } } catch { throw StoreError(index: error) }
            if damaged {
                throw StoreError(
                    code: .corruptRecord, message: "segment \(id) has unrepaired damage; it is left to `trove fsck --repair`")
            }
        }
        // From here on a put does not deduplicate onto a blob of this segment.
        return store.appender.withLock { appender -> Set<UInt64> in
            appender.reclaiming.insert(id)
            var ids = Set<UInt64>()
            for write in appender.queue {
                if case .link(let link) = write.record.content { ids.insert(link.blobID) }
            }
            return ids
        }
    }

    // MARK: 2. Open

    private func openSegment() throws(StoreError) -> SegmentFile {
        do throws(StoreError) {
            return try store.segmentFile(id)
        } catch  where salvaging && error.code == .missingSegment {
            // A damaged header: the records are found with the store secret (fsck found them).
            let format = store.appender.withLock { $0.format }
            do {
                return try SegmentFile.openForSalvage(
                    id: id, in: store.packsDirectory, format: format, faults: configuration.faultInjector)
            } catch {
                throw StoreError(pack: error)
            }
        }
    }

    // MARK: 3. Judge

    /// The live records of `file`, with their bytes.
    private func liveRecords(in file: SegmentFile, queuedBlobs: Set<UInt64>) throws(StoreError) -> [Live] {
        var live: [Live] = []
        // The offsets of links that index rows point at, read from the table (one scan) when a
        // link's digest lookup first finds nothing.
        var linked: Set<UInt64>?
        let rowPointsAt = { (offset: UInt64) throws -> Bool in
            if linked == nil { linked = Set(try index.linkOffsets(inSegment: id)) }
            return linked!.contains(offset)
        }
        do {
            let size = try file.size()
            let visit: (ScannedRecord) throws -> Void = { record in
                guard let kind = try judge(record, queuedBlobs: queuedBlobs, rowPointsAt: rowPointsAt) else { return }
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
                        segment: id, start: first.start, end: first.end, kind: FsckReport.Finding.Kind.corruptRecord.rawValue,
                        message: "segment \(id) bytes \(first.start)..<\(first.end): \(first.reason); the compactor "
                            + "leaves the segment alone — run `trove fsck --repair`",
                        foundAt: configuration.clock()))
                throw StoreError(
                    code: .corruptRecord, message: "segment \(id) cannot be compacted: \(first.reason); run `trove fsck --repair`"
                )
            }
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(index: error)
        }
        return live
    }

    /// Whether `record` is live (and what to move for it), or nil when it is dead. A record is
    /// dead only when the index says so in a way the packs bear out; a disagreement throws
    /// (``uncorroborated(_:offset:)``) and leaves the segment alone.
    private func judge(
        _ record: ScannedRecord, queuedBlobs: Set<UInt64>, rowPointsAt: (UInt64) throws -> Bool
    ) throws -> Moved? {
        switch record.content {
        case .blob(let hash, let blobID, _):
            // Dead only when no entry links it: a damaged count must not drop it.
            let row = try index.blob(id: Int64(bitPattern: blobID))
            var live = queuedBlobs.contains(blobID)
            if let row, !live { live = try row.references > 0 || index.isLinked(blobID: row.id) }
            guard let row, live else { return nil }
            if row.segment == id && row.offset == record.offset { return .blob(row.id) }
            if row.hash == hash, try holdsBlob(row) { return nil }  // a copy the index moved past (an interrupted compaction's)
            throw uncorroborated(
                "the index row of blob \(blobID) points at segment \(row.segment) offset \(row.offset), where that blob is not",
                offset: record.offset)
        case .link(let link):
            // A link is dropped only when the index says so in a way the packs bear out: a
            // damaged row must not make the compactor delete the record the entry still needs.
            let key = link.key
            guard let found = try index.entry(digest: key.digest) else {
                // Removed (a tombstone has it) or never committed — unless a row points at this
                // very record and its digest cell is lost from the index (damage lookups cannot
                // see past): then nothing is judged, before anything is copied.
                if try rowPointsAt(record.offset) {
                    throw uncorroborated(
                        "an index row points at the link of \(key) at segment \(id) offset \(record.offset), but a "
                            + "lookup of its digest finds no row; the index is damaged — run `trove fsck --rebuild-index`",
                        offset: record.offset)
                }
                return nil
            }
            let entry = found.entry
            if entry.key == key && entry.linkSegment == id && entry.linkOffset == record.offset {
                // The row must describe this record exactly (as a read requires): a row damaged
                // to point at an older link of its key must not keep that link alive, nor one
                // whose blob the row does not name.
                guard found.describedLink == link else {
                    throw uncorroborated(
                        "the index row of \(key) points at its link at segment \(id) offset \(record.offset) but disagrees with it",
                        offset: record.offset)
                }
                return .link(key, from: record.offset)
            }
            if entry.key == key, entry.sequence > link.sequence, try holdsItsLink(found, key: key) {
                return nil  // superseded by the newer link the row points at
            }
            throw uncorroborated(
                "the index row of \(key) does not point at its link at segment \(id) offset \(record.offset), "
                    + "nor at a newer intact one", offset: record.offset)
        case .tombstone(let tombstone):
            // Kept until a newer entry for the key supersedes it, so that a rebuild from the
            // packs never brings a removed key back.
            let key = tombstone.key
            let found = try index.entry(digest: key.digest)
            if let found, found.entry.key == key, found.entry.sequence > tombstone.sequence,
                try holdsItsLink(found, key: key)
            {
                return nil
            }
            return .tombstone
        }
    }

    /// Whether the blob record `row` names is where it says (its header, checked alone).
    private func holdsBlob(_ row: BlobRow) throws -> Bool {
        let opened: SegmentFile?
        do throws(StoreError) {
            opened = try store.segmentFile(row.segment)
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
    ///
    /// - Throws: `.io` when the link could not be read (which says nothing about it, and must
    ///   not be recorded as the index's damage).
    private func holdsItsLink(_ found: IndexedEntry, key: CacheKey) throws(StoreError) -> Bool {
        do {
            try store.verifyLink(of: found, key: key)
            return true
        } catch {
            if error.code == .io { throw error }
            return false
        }
    }

    /// The error that leaves the segment alone because the index disagrees with the packs
    /// about a record in it: recorded as damage for `trove fsck --repair`, which settles it.
    private func uncorroborated(_ what: String, offset: UInt64) -> StoreError {
        store.recordDamage(.staleIndexRow, segment: id, offset: offset, end: offset, what, in: index)
        return StoreError(code: .corruptRecord, message: "segment \(id) cannot be compacted: \(what); run `trove fsck --repair`")
    }

    // MARK: 4. Copy

    /// Appends `live` to the active segment, a few records per hold of the appender lock so
    /// puts interleave, then commits the rows of segments rotation created and syncs.
    private func copyForward(_ live: [Live]) throws(StoreError) -> ([Copy], Int64) {
        var copies: [Copy] = []
        var touched: [UInt32: SegmentFile] = [:]
        var copied: Int64 = 0
        for chunk in stride(from: 0, to: live.count, by: 64).map({ live[$0..<min($0 + 64, live.count)] }) {
            try store.withAppender { (appender) throws(StoreError) in
                for record in chunk {
                    let length = UInt64(PackFormat.recordHeaderSize + record.record.body.count)
                    if appender.pack.needsRotation(forAppending: length) {
                        touched[appender.pack.segment.id] = appender.pack.segment
                        try appender.rotate(packs: store.packsDirectory, createdAt: configuration.clock())
                    }
                    let offset = try store.packCall { try appender.pack.append(record.record) }
                    copies.append((record.kind, appender.pack.segment.id, offset, length))
                    touched[appender.pack.segment.id] = appender.pack.segment
                }
            }
            copied += chunk.reduce(0) { $0 + Int64(PackFormat.recordHeaderSize + $1.record.body.count) }
        }
        for file in touched.values { store.shared.withLock { $0.segmentFiles[file.id] = file } }
        // Segments created by rotation get their rows (and everything gets synced) first.
        try store.commitCycle(state, flushReadTimes: false)
        if configuration.durability != .none {
            do { for file in touched.values { try file.synchronize() } } catch { throw StoreError(pack: error) }
        }
        return (copies, copied)
    }

    // MARK: 5. Move the index

    /// What moved: blobs by id to their new place, and the keys whose records moved (collected
    /// only when someone observes key changes); and the dead blobs deleted, for the dedup hints.
    typealias Moves = (
        blobs: [Int64: (segment: UInt32, offset: UInt64, recordBytes: UInt64)], keys: Set<CacheKey>,
        deleted: [(id: Int64, hash: ContentHash)]
    )

    /// One transaction: the index moves to the copies and forgets the segment. Rolled back,
    /// changing nothing, if any entry would still point into the segment.
    private func moveIndex(to copies: [Copy]) throws(StoreError) -> Moves {
        var moves: Moves = ([:], [], [])
        let observed = configuration.keyChanges != nil
        do {
            try index.writing {
                for copy in copies {
                    switch copy.kind {
                    case .blob(let blobID):
                        try index.moveBlob(blobID, to: copy.segment, offset: copy.offset, recordBytes: copy.length)
                        moves.blobs[blobID] = (copy.segment, copy.offset, copy.length)
                        // Reported to the observer: the keys whose bytes moved.
                        if observed { moves.keys.formUnion(try index.entries(blobID: blobID).map(\.key)) }
                    case .link(let key, let from):
                        let moved = try index.moveLink(
                            of: key.digest, from: (id, from), to: copy.segment, offset: copy.offset, length: copy.length)
                        if moved && observed { moves.keys.insert(key) }
                    case .tombstone: break
                    }
                }
                moves.deleted = try index.deleteDeadBlobs(in: id)
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
        return moves
    }

    // MARK: 6–7. Publish, remove

    /// Readers that hold the old file finish from it; new reads go to the copies.
    private func publish(_ moves: Moves) {
        store.shared.withLock { shared in
            shared.segmentFiles[id] = nil
            shared.map.moved(blobs: moves.blobs, keys: moves.keys)
        }
        // The pass deleted the segment's dead blob rows: their hints go (stale ones would cost
        // a row read and memory, never a wrong link).
        store.dedupHints.withLock { $0.forget(moves.deleted) }
    }

    /// Unlinks the old file (salvaging: sets it aside, damaged bytes kept for inspection).
    private func removeFile() throws(StoreError) {
        do {
            if salvaging {
                try PackDirectory.quarantine(
                    PackFormat.fileName(forSegment: id), suffix: "damaged", in: store.packsDirectory,
                    faults: configuration.faultInjector)
            } else {
                try PackDirectory.removeSegment(id, in: store.packsDirectory, faults: configuration.faultInjector)
            }
            if configuration.durability != .none {
                try PackDirectory.synchronize(store.packsDirectory, faults: configuration.faultInjector)
            }
        } catch {
            throw StoreError(pack: error)
        }
    }
}
