#if canImport(Glibc)
    import Glibc
#endif
import TroveCore
import TroveIndex
import TrovePack

// Opening a store: the index, then the segments it names, then the replay of unsealed
// segments. Sealed segments are never read here (only their sizes are checked), so open
// time does not grow with the number of entries.

extension Store {
    /// What opening a store produced: the index's write connection, the active segment, the
    /// next sequence number and the report.
    struct Opened {
        var index: IndexDatabase
        var pack: PackWriter
        var nextSequence: UInt64
        var report: RecoveryReport
    }

    static func recover(
        directory: String, packsDirectory: String, configuration: Configuration
    ) throws(StoreError) -> Opened {
        do {
            try PackDirectory.create(packsDirectory)
            let index = try IndexDatabase(path: directory + "/index.sqlite", readOnly: false)
            var recovery = Recovery(index: index, packs: packsDirectory, configuration: configuration)
            let pack = try recovery.run()
            return Opened(index: index, pack: pack, nextSequence: recovery.nextSequence, report: recovery.report)
        } catch let error as StoreError {
            throw error
        } catch {
            // IndexError and PackError map to their StoreError codes; anything else is I/O.
            throw StoreError(index: error)
        }
    }
}

/// One run of crash recovery over a store's index and packs.
struct Recovery {
    let index: IndexDatabase
    let packs: String
    let configuration: Store.Configuration
    var report = RecoveryReport()
    var nextSequence: UInt64 = 0

    init(index: IndexDatabase, packs: String, configuration: Store.Configuration) {
        self.index = index
        self.packs = packs
        self.configuration = configuration
    }

    mutating func run() throws -> PackWriter {
        nextSequence = UInt64(max(0, try index.meta("sequence") ?? 0))
        let headerSize = UInt64(PackFormat.segmentHeaderSize)
        let rows = try index.segments()
        let files = Set(try PackDirectory.segmentIDs(in: packs))
        try index.begin()
        var unsealed: [(id: UInt32, replayFrom: UInt64, file: SegmentFile)] = []

        // 1. The segments the index names.
        for row in rows {
            guard files.contains(row.id), let file = try openOrQuarantine(row.id, writable: !row.isSealed) else {
                try drop(segment: row.id, beyond: 0)
                try index.deleteSegment(row.id)
                report.missingSegments.append(row.id)
                continue
            }
            let size = try file.size()
            if size < row.indexedBytes {
                // Bytes the index relies on are gone: drop what pointed at them.
                try drop(segment: row.id, beyond: size)
            }
            if !row.isSealed {
                // A cut inside a record leaves no clean boundary to resume from: replay the
                // whole segment then (replay is idempotent).
                unsealed.append((row.id, size < row.indexedBytes ? headerSize : row.indexedBytes, file))
            } else if size < row.indexedBytes {
                try index.setIndexedBytes(size, segment: row.id)
            }
        }

        // 2. Segment files the index does not name: created just before a crash.
        let known = Set(rows.map(\.id))
        for id in files.sorted() where !known.contains(id) {
            let path = packs + "/" + PackFormat.fileName(forSegment: id)
            if let size = fileSize(path), size < headerSize {
                // Its creation was interrupted before the header was whole: nothing in it.
                try PackDirectory.removeSegment(id, in: packs)
                continue
            }
            guard let file = try openOrQuarantine(id, writable: true) else { continue }
            try index.insertSegment(id: id, indexedBytes: headerSize)
            unsealed.append((id, headerSize, file))
        }

        // 3. Replay unsealed segments past what the index reflects; cut torn tails.
        unsealed.sort { $0.id < $1.id }
        let applier = IndexApplier(index: index)
        for segment in unsealed {
            let outcome = try SegmentScanner.scan(segment.file, from: segment.replayFrom) { record in
                switch record.content {
                case .link(let link): nextSequence = max(nextSequence, link.sequence + 1)
                case .blob(_, let id, _): nextSequence = max(nextSequence, id + 1)
                case .tombstone(let tombstone): nextSequence = max(nextSequence, tombstone.sequence + 1)
                }
                if try applier.apply(record, segment: segment.id) == .applied { report.replayedRecords += 1 }
            }
            if let defect = outcome.defect {
                try segment.file.truncate(to: outcome.validEnd)
                report.truncatedTails.append(
                    .init(
                        segment: segment.id, validEnd: outcome.validEnd,
                        bytesRemoved: outcome.fileSize - outcome.validEnd, reason: defect.reason))
            }
            try index.setIndexedBytes(outcome.validEnd, segment: segment.id)
        }

        // 4. The active segment: the newest unsealed one. Older unsealed ones are sealed.
        let synchronize = configuration.durability != .none
        for segment in unsealed.dropLast() {
            if synchronize { try segment.file.synchronize() }
            try index.sealSegment(segment.id)
        }
        let active: SegmentFile
        let end: UInt64
        if let last = unsealed.last {
            active = last.file
            end = try last.file.size()
        } else {
            let id = (files.union(known).max() ?? 0) + 1
            active = try SegmentFile.create(id: id, in: packs, createdAt: configuration.clock(), synchronize: synchronize)
            try index.insertSegment(id: id, indexedBytes: headerSize)
            end = headerSize
        }
        try index.setMeta("sequence", Int64(bitPattern: nextSequence))
        try index.commit()
        return PackWriter(segment: active, end: end, segmentSizeLimit: UInt64(max(configuration.segmentSize, 4096)))
    }

    /// Opens a segment; a file whose header is not a valid segment header is renamed to
    /// `<name>.damaged` (kept for inspection, never deleted) and nil is returned.
    private mutating func openOrQuarantine(_ id: UInt32, writable: Bool) throws -> SegmentFile? {
        do {
            return try SegmentFile.open(id: id, in: packs, writable: writable)
        } catch let error as PackError where error.code == .notASegment {
            try PackDirectory.quarantineSegment(id, in: packs)
            return nil
        } catch let error as PackError where error.errno == ENOENT {
            return nil
        }
    }

    private mutating func drop(segment: UInt32, beyond limit: UInt64) throws {
        report.droppedEntries += try index.dropRecords(segment: segment, beyond: limit).map(\.key)
    }

    private func fileSize(_ path: String) -> UInt64? {
        SystemCall.fileSize(path).map { UInt64($0) }
    }
}
