import Foundation
import TroveCore
import TroveIndex
import TrovePack

extension Store {
    /// Rebuilds the index of the store in `directory` from its pack segments alone, for when
    /// index.sqlite is lost or damaged. The old index files are kept as
    /// `index.sqlite.damaged-<time>` (never deleted).
    ///
    /// Every segment is scanned past damage; every intact blob is indexed; for each key the
    /// newest link wins unless a newer tombstone removed the key, so removed keys stay removed.
    /// Keys, ETags, Last-Modified and expiry come back; read times restart from creation times.
    ///
    /// Takes the directory's process lock: no `Store` may have it open.
    ///
    /// - Returns: counts of what was found, as an ``FsckReport`` whose findings are the damaged
    ///   byte ranges.
    public static func rebuildIndex(
        directory: String, configuration: Configuration = Configuration(), progress: (WorkProgress) -> Void = { _ in }
    ) throws -> FsckReport {
        let lock = try ProcessLock(path: directory + "/LOCK")
        defer { withExtendedLifetime(lock) {} }
        let packs = directory + "/packs"
        let indexPath = directory + "/index.sqlite"
        let stamp = Int64(Date().timeIntervalSince1970)
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: indexPath + suffix) {
            try FileManager.default.moveItem(atPath: indexPath + suffix, toPath: indexPath + ".damaged-\(stamp)" + suffix)
        }
        var report = FsckReport()
        let index = try IndexDatabase(path: indexPath, readOnly: false)
        try index.begin()
        let ids = try PackDirectory.segmentIDs(in: packs)
        var total: Int64 = 0
        for id in ids { total += SystemCall.fileSize(packs + "/" + PackFormat.fileName(forSegment: id)) ?? 0 }
        var done: Int64 = 0
        var newestLink: [CacheKey: (record: ScannedRecord, segment: UInt32, sequence: UInt64)] = [:]
        var newestTombstone: [CacheKey: UInt64] = [:]
        var nextSequence: UInt64 = 0
        let applier = IndexApplier(index: index)
        for id in ids {
            let file: SegmentFile
            do {
                file = try SegmentFile.open(id: id, in: packs, writable: false)
            } catch let error as PackError where error.code == .notASegment {
                try PackDirectory.quarantineSegment(id, in: packs)
                report.findings.append(.init(kind: .corruptRecord, message: error.message, segment: id, offset: 0))
                continue
            }
            report.segmentsChecked += 1
            let size = try file.size()
            try index.insertSegment(id: id, indexedBytes: size)
            if id != ids.last { try index.sealSegment(id) }
            let damage = try SegmentScanner.scanAll(file) { record in
                report.recordsVerified += 1
                report.bytesVerified += Int64(record.length)
                switch record.content {
                case .blob(_, let blobID, _):
                    nextSequence = max(nextSequence, blobID + 1)
                    try applier.apply(record, segment: id)
                case .link(let link):
                    nextSequence = max(nextSequence, link.sequence + 1)
                    let key = CacheKey(url: link.url, variant: link.variant)
                    if (newestLink[key]?.sequence ?? 0) <= link.sequence || newestLink[key] == nil {
                        newestLink[key] = (record, id, link.sequence)
                    }
                case .tombstone(let tombstone):
                    nextSequence = max(nextSequence, tombstone.sequence + 1)
                    let key = CacheKey(url: tombstone.url, variant: tombstone.variant)
                    newestTombstone[key] = max(newestTombstone[key] ?? 0, tombstone.sequence)
                }
            }
            for range in damage {
                report.findings.append(
                    .init(
                        kind: .corruptRecord, message: "segment \(id): bytes \(range.start)..<\(range.end) hold no valid record",
                        segment: id, offset: range.start))
            }
            done += Int64(size)
            progress(WorkProgress(phase: "rebuilding the index", bytesDone: done, bytesTotal: total))
        }
        for (key, newest) in newestLink.sorted(by: { $0.value.sequence < $1.value.sequence }) {
            if let removed = newestTombstone[key], removed > newest.sequence { continue }
            try applier.apply(newest.record, segment: newest.segment)
        }
        try index.recomputeDerivedColumns()
        try index.setMeta("sequence", Int64(bitPattern: nextSequence))
        try index.commit()
        try index.checkpoint()
        return report
    }
}
