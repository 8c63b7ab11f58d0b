import Foundation
import TroveCore
import TroveIndex
import TrovePack

extension Store {
    /// Rebuilds the index of the store in `directory` from its pack segments, for when
    /// index.sqlite is lost or damaged. The old index files are kept as
    /// `index.sqlite.damaged-<time>` (never deleted).
    ///
    /// Every segment is scanned past damage and folded the way opening and fsck fold records:
    /// for each key the newest intact link, unless a newer write is known — a newer tombstone, a
    /// damaged record of the key, or a row of the old index, which is read (as far as it can be)
    /// for that evidence and for read times, but never as a source of an entry. When the old
    /// index passes SQLite's integrity check, a link older than what it committed and absent
    /// from it is not restored either, so rebuilding a sound index changes nothing.
    ///
    /// Takes the directory's process lock: no `Store` may have it open.
    ///
    /// - Returns: what was found, as an ``FsckReport`` whose findings are the damage seen, the
    ///   files moved and the entries dropped.
    public static func rebuildIndex(
        directory: String, configuration: Configuration = Configuration(), progress: (WorkProgress) -> Void = { _ in }
    ) throws(StoreError) -> FsckReport {
        do {
            return try rebuild(directory: directory, configuration: configuration, progress: progress)
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(index: error)
        }
    }

    private static func rebuild(
        directory: String, configuration: Configuration, progress: (WorkProgress) -> Void
    ) throws -> FsckReport {
        guard SystemCall.fileKind(directory) == S_IFDIR else {
            throw StoreError(code: .notAStore, message: "there is no Trove store at \(directory)")
        }
        let lock = try ProcessLock(path: directory + "/LOCK")
        let indexPath = directory + "/index.sqlite"
        let evidence = Self.evidence(fromIndexAt: indexPath)
        // Set the old files aside under one new name (never replacing an earlier one).
        let stamp = configuration.clock()
        var name = indexPath + ".damaged-\(stamp)"
        var n = 2
        while ["", "-wal", "-shm"].contains(where: { SystemCall.fileKind(name + $0) != nil }) {
            name = indexPath + ".damaged-\(stamp)-\(n)"
            n += 1
        }
        for suffix in ["", "-wal", "-shm"] where SystemCall.fileKind(indexPath + suffix) != nil {
            try SystemCall.rename(indexPath + suffix, to: name + suffix)
        }
        let store: Store
        do {
            store = try Store(
                directory: directory, configuration: configuration, rebuilding: evidence, lock: lock, progress: progress)
        } catch let failure {
            // A rebuild that fails (a full disk, say) leaves the old index where it was: the new
            // one is removed (it is written in one transaction, so it is empty or whole) and
            // the old files are put back.
            do throws(StoreError) {
                for suffix in ["", "-wal", "-shm"] {
                    try SystemCall.removeFile(indexPath + suffix)
                    if SystemCall.fileKind(name + suffix) != nil { try SystemCall.rename(name + suffix, to: indexPath + suffix) }
                }
            } catch {
                throw StoreError(
                    code: error.code,
                    message: "the rebuild failed (\(failure)), and putting the old index back failed too: "
                        + "\(error.message); the old index files are \(name)*", underlying: error)
            }
            throw failure
        }
        defer { try? store.close() }
        var report = FsckReport()
        let recovery = store.recoveryReport
        report.segmentsChecked = try PackDirectory.segmentIDs(in: store.packsDirectory).count
        if evidence.committedSequence == nil {
            report.findings.append(
                .init(
                    kind: .rebuiltIndex,
                    message: "the old index was \(evidence.claims.isEmpty ? "missing or unreadable" : "damaged"), so the packs "
                        + "were read without it: a write whose records are lost too cannot be known, and its key may show "
                        + "its previous value", repaired: true))
        }
        for damage in recovery.damage {
            report.findings.append(
                .init(kind: damage.kind, message: damage.message, segment: damage.segment, offset: damage.offset))
        }
        for moved in recovery.renamedFiles {
            report.findings.append(
                .init(kind: .renamedSegment, message: "packs/\(moved.from) renamed to packs/\(moved.to)", repaired: true))
        }
        for tail in recovery.truncatedTails {
            report.findings.append(
                .init(
                    kind: .truncatedSegment,
                    message: "segment \(tail.segment): a torn tail of \(tail.bytesRemoved) bytes was cut",
                    segment: tail.segment, offset: tail.validEnd, repaired: true))
        }
        // What fsck reports of the same links (found by an outside attack: a deleted row's key
        // went unmentioned by the rebuild).
        for link in recovery.unrestoredLinks {
            report.findings.append(
                .init(
                    kind: .unreflectedRecord,
                    message: "\(link.key): the link at segment \(link.segment) offset \(link.offset) is older than what "
                        + "the index committed and the index had no entry for it; not restored",
                    segment: link.segment, offset: link.offset))
        }
        for key in recovery.droppedEntries {
            report.findings.append(.init(kind: .lostWrite, message: "\(key): its newest write is lost; not served"))
        }
        report.entriesLost = recovery.droppedEntries.count
        try store.close()
        return report
    }

    /// What the index at `path` can still tell: its rows' sequences and read times, and — when
    /// it passes SQLite's integrity check — the sequence it committed. Empty when it cannot be
    /// read at all.
    static func evidence(fromIndexAt path: String) -> IndexEvidence {
        var evidence = IndexEvidence()
        guard SystemCall.fileKind(path) == S_IFREG, let index = try? IndexDatabase(path: path, readOnly: true) else {
            return evidence
        }
        let sound = (try? index.integrityCheck()) == ["ok"]
        if sound, let committed = try? index.committedSequence() { evidence.committedSequence = committed.higher }
        if sound { evidence.recordedSequence = try? index.recordedSequence() }
        for row in (try? index.entryRows()) ?? [] {
            guard row.key.digest == row.keyDigest else {
                // Damage to its digest or its key columns: it speaks for the link it points at,
                // once the packs are read (a damaged digest used to hide the row's write).
                evidence.unkeyedRows.append(
                    ((row.linkSegment, row.linkOffset), row.sequence, UInt64(bitPattern: row.blobID), row.accessedAt))
                continue
            }
            evidence.claim(
                row.keyDigest, sequence: row.sequence, at: (row.linkSegment, row.linkOffset),
                blob: UInt64(bitPattern: row.blobID))
            evidence.accessTimes[row.keyDigest] = row.accessedAt
        }
        return evidence
    }
}
