import Foundation
import Testing
import TroveCore
@testable import TroveIndex
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

@Suite struct RecoveryTests {
    @Test func aTornTailIsCutAndEntriesSurvive() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            try populate(dir, count: 10)
            let active = files.segment(try files.segmentIDs().last!)
            let goodSize = try files.size(active)
            // Half a record: a write that never completed (header and part of the body).
            let tombstone = RecordCodec.tombstoneBody(
                TombstoneRecord(url: String(repeating: "u", count: 80), variant: "", sequence: 1 << 40, removedAt: 0))
            try files.append(active, Array(("TRVR".utf8 + [3, 2, 0, 0] + tombstone).prefix(60)))
            do {
                let store = try openStore(dir)
                #expect(store.recoveryReport.truncatedTails.count == 1)
                #expect(store.recoveryReport.truncatedTails.first?.bytesRemoved == 60)
                #expect(store.recoveryReport.truncatedTails.first?.validEnd == UInt64(goodSize))
                #expect(try files.size(active) == goodSize)
                for i in 0..<10 { #expect(try store.data(for: key(i)) == value(i)) }
                try store.put(value(10), for: key(10))
                try store.close()
            }
            let store = try openStore(dir)
            #expect(store.recoveryReport.isClean)
            for i in 0..<11 { #expect(try store.data(for: key(i)) == value(i)) }
        }
    }

    @Test func writesWhoseIndexCommitWasLostAreReplayed() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            do {
                let store = try openStore(dir)
                try store.put(value(1), for: key(1))
                try store.put(value(2), for: key(2))
                try store.close()
            }
            // Keep the index as it was, then write more, then put the old index back: the
            // packs now hold records the index never committed.
            let saved = dir + "/saved-index"
            try FileManager.default.copyItem(atPath: files.store + "/index.sqlite", toPath: saved)
            do {
                let store = try openStore(dir)
                try store.put(value(3), for: key(3))
                try store.put(value(1, size: 10), for: key(1))  // replaced
                try store.put(value(2), for: key(4))  // deduplicated
                try store.remove(key(2))
                try store.close()
            }
            for suffix in ["", "-wal", "-shm"] {
                try? FileManager.default.removeItem(atPath: files.store + "/index.sqlite" + suffix)
            }
            try FileManager.default.copyItem(atPath: saved, toPath: files.store + "/index.sqlite")
            let store = try openStore(dir)
            #expect(store.recoveryReport.replayedRecords >= 4)
            #expect(store.recoveryReport.isClean)
            #expect(try store.data(for: key(1)) == value(1, size: 10))
            #expect(try store.data(for: key(2)) == nil)
            #expect(try store.data(for: key(3)) == value(3))
            #expect(try store.data(for: key(4)) == value(2))
            let stats = try store.statistics()
            #expect(stats.entries == 3)
            #expect(stats.blobs == 3)
            // Replaying again changes nothing (replay is idempotent).
            try store.close()
            let again = try openStore(dir)
            #expect(again.recoveryReport.replayedRecords == 0)
            var after = try again.statistics()
            after.indexBytes = stats.indexBytes  // the index file's size moves with checkpoints
            #expect(after == stats)
        }
    }

    @Test func aLostIndexIsRebuiltFromThePacks() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            do {
                let store = try openStore(dir, segmentSize: 32 << 10)
                for i in 0..<30 { try store.put(value(i), for: key(i), metadata: EntryMetadata(etag: "e\(i)")) }
                try store.remove(key(5))
                try store.close()
            }
            for suffix in ["", "-wal", "-shm"] {
                try? FileManager.default.removeItem(atPath: files.store + "/index.sqlite" + suffix)
            }
            let store = try openStore(dir, segmentSize: 32 << 10)
            for i in 0..<30 where i != 5 {
                let entry = try store.entry(for: key(i))
                #expect(entry?.data == value(i))
                #expect(entry?.etag == "e\(i)")
            }
            #expect(try store.data(for: key(5)) == nil)
            #expect(try store.readIndex { try $0.segments() }.filter { !$0.isSealed }.count == 1)
        }
    }

    /// A missing segment loses nothing more than it held, and not even that until the
    /// operator says so: its entries stay in the index (not served, reported by every open)
    /// until the file is restored — then they are back — or `fsck --repair` drops them.
    @Test func aMissingSealedSegmentIsReportedUntilRestoredOrRepaired() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            try populate(dir, count: 30, segmentSize: 16 << 10)
            #expect(try files.segmentIDs().count >= 4)
            let saved = dir + "/saved.pack"
            try FileManager.default.moveItem(atPath: files.segment(2), toPath: saved)
            var inSegment2: [Int] = []
            do {
                let store = try openStore(dir, segmentSize: 16 << 10)
                #expect(store.recoveryReport.missingSegments == [2])
                #expect(!store.recoveryReport.isClean)
                #expect(try store.unrepairedDamage().contains { $0.kind == .missingSegment && $0.segment == 2 })
                for i in 0..<30 {
                    do {
                        #expect(try store.data(for: key(i)) == value(i))
                    } catch let error as StoreError {
                        #expect(error.code == .missingSegment)
                        #expect(error.message.contains("fsck --repair"))
                        inSegment2.append(i)
                    }
                }
                #expect(!inSegment2.isEmpty)
                let found = try store.fsck()
                #expect(found.findings.contains { $0.kind == .missingSegment && !$0.repaired })
                try store.close()
            }
            // Restored: everything is back, and no longer reported.
            try FileManager.default.moveItem(atPath: saved, toPath: files.segment(2))
            do {
                let store = try openStore(dir, segmentSize: 16 << 10)
                #expect(store.recoveryReport.missingSegments.isEmpty)
                #expect(try store.unrepairedDamage().isEmpty)
                #expect(try store.fsck().isClean)
                for i in 0..<30 { #expect(try store.data(for: key(i)) == value(i)) }
                try store.close()
            }
            // Lost for good: repair drops those entries, and the store stops reporting it.
            try FileManager.default.removeItem(atPath: files.segment(2))
            let store = try openStore(dir, segmentSize: 16 << 10)
            let repaired = try store.fsck(repair: true)
            #expect(repaired.isRepaired)
            #expect(try store.fsck().isClean)
            #expect(try store.unrepairedDamage().isEmpty)
            for i in 0..<30 {
                #expect(try store.data(for: key(i)) == (inSegment2.contains(i) ? nil : value(i)))
            }
            try store.close()
            #expect(try openStore(dir, segmentSize: 16 << 10).recoveryReport.isClean)
        }
    }

    /// A file of `packs/` that is there but cannot be read for an I/O error stops the opening
    /// with `.io`, changing nothing, until it reads again or is moved out: sealed, unsealed, or
    /// made since the index's last commit. (Taken for a file with no valid header, a segment
    /// was set aside for another file; taken for a missing one, a tail's writes were never
    /// replayed, the numbers they took were handed out again, and the writer's hole was never
    /// cut.)
    @Test func anUnreadableSegmentStopsOpeningUntilItReadsOrIsMovedOut() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            try populate(dir, count: 30, segmentSize: 16 << 10)
            let ids = try files.segmentIDs()
            let newest = try #require(ids.last)
            #expect(ids.count >= 3)
            let failing = Locked<Set<String>>([])
            let injector = FaultInjector { op, path in op == .read && failing.withLock { $0.contains(path) } ? .error(EIO) : nil }
            func open() throws -> Store { try openStore(dir, segmentSize: 16 << 10) { $0.faultInjector = injector } }

            try Data("not yet a segment".utf8).write(to: URL(fileURLWithPath: files.segment(newest + 1)))
            for path in [files.segment(ids[0]), files.segment(newest), files.segment(newest + 1)] {
                failing.withLock { $0 = [path] }
                let names = try FileManager.default.contentsOfDirectory(atPath: files.packs).sorted()
                let sizes = try names.map { try files.size(files.packs + "/" + $0) }
                for _ in 0..<2 {
                    #expect {
                        _ = try open()
                    } throws: { error in
                        let error = try #require(error as? StoreError)
                        return error.code == .io && error.message.contains(path.split(separator: "/").last!)
                            && error.message.contains("move the file out of packs/")
                    }
                }
                #expect(try FileManager.default.contentsOfDirectory(atPath: files.packs).sorted() == names)
                #expect(try names.map { try files.size(files.packs + "/" + $0) } == sizes)
            }
            // Readable again: nothing lost. (The file that is no segment is reported, not used.)
            failing.withLock { $0 = [] }
            do {
                let store = try open()
                #expect(store.recoveryReport.missingSegments.isEmpty, "\(store.recoveryReport)")
                for i in 0..<30 { #expect(try store.data(for: key(i)) == value(i)) }
                try store.close()
            }
            try FileManager.default.removeItem(atPath: files.segment(newest + 1))
            // Failing for good: moved out as the error says, the store opens without them.
            failing.withLock { $0 = [files.segment(ids[0]), files.segment(newest)] }
            try FileManager.default.moveItem(atPath: files.segment(ids[0]), toPath: dir + "/moved-first.pack")
            try FileManager.default.moveItem(atPath: files.segment(newest), toPath: dir + "/moved-newest.pack")
            let store = try open()
            #expect(store.recoveryReport.missingSegments == [ids[0], newest])
            try store.put(value(99), for: key(99))
            #expect(try store.data(for: key(99)) == value(99))
            try store.close()
        }
    }

    /// fsck, too, decides nothing on a failed read: a segment file it cannot open for an I/O
    /// error (here `EMFILE`) fails the check with `.io`; a repair never drops the entries of a
    /// segment that is whole.
    @Test func fsckStopsOnASegmentItCannotOpen() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            try populate(dir, count: 30, segmentSize: 16 << 10)
            let first = try #require(try files.segmentIDs().first)
            let failing = Locked(false)
            let injector = FaultInjector { op, path in
                op == .open && path == files.segment(first) && failing.withLock { $0 } ? .error(EMFILE) : nil
            }
            let store = try openStore(dir, segmentSize: 16 << 10) { $0.faultInjector = injector }
            failing.withLock { $0 = true }
            for repair in [false, true] {
                #expect {
                    _ = try store.fsck(repair: repair)
                } throws: { error in
                    (error as? StoreError)?.code == .io
                }
            }
            failing.withLock { $0 = false }
            #expect(try store.fsck().isClean)
            for i in 0..<30 { #expect(try store.data(for: key(i)) == value(i)) }
            try store.close()
        }
    }

    /// The same for a segment whose header is damaged, which fsck opens again to salvage its
    /// records: a failed open of that stops the check too, rather than drop what it holds.
    @Test func fsckStopsOnASegmentToSalvageItCannotOpen() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            try populate(dir, count: 30, segmentSize: 16 << 10)
            let first = try #require(try files.segmentIDs().first)
            try files.flip(files.segment(first), at: 9)
            // Once armed, the second open of the file: fsck's to salvage it, after its first
            // open found no valid header.
            let failing = Locked<Int?>(nil)
            let injector = FaultInjector { op, path in
                guard op == .open, path == files.segment(first) else { return nil }
                return failing.withLock { count in
                    guard let n = count else { return false }
                    count = n + 1
                    return n == 1
                } ? .error(EMFILE) : nil
            }
            let store = try openStore(dir, segmentSize: 16 << 10) { $0.faultInjector = injector }
            #expect(store.recoveryReport.missingSegments == [first])
            for repair in [false, true] {
                failing.withLock { $0 = 0 }
                #expect {
                    _ = try store.fsck(repair: repair)
                } throws: { error in
                    (error as? StoreError)?.code == .io
                }
            }
            failing.withLock { $0 = nil }
            _ = try store.fsck(repair: true)
            #expect(try store.fsck().isClean)
            for i in 0..<30 { #expect(try store.data(for: key(i)) == value(i), "value \(i)") }
            try store.close()
        }
    }

    /// With the index's sequence counter lost, opening reads every segment for the numbers
    /// taken: one it cannot read for an I/O error stops the opening (unread, its numbers could
    /// be handed out again).
    @Test func aLostCounterStopsOpeningOnASegmentItCannotRead() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            try populate(dir, count: 30, segmentSize: 16 << 10)
            let first = try #require(try files.segmentIDs().first)
            let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
            try index.connection.execute("DELETE FROM meta WHERE key LIKE 'sequence%'")
            // The first read of the file is placement's of its header; the second, the count's.
            let reads = Locked(0)
            let injector = FaultInjector { op, path in
                guard op == .read, path == files.segment(first) else { return nil }
                return reads.withLock {
                    $0 += 1; return $0
                } == 2 ? .error(EIO) : nil
            }
            #expect {
                _ = try openStore(dir, segmentSize: 16 << 10) { $0.faultInjector = injector }
            } throws: { error in
                (error as? StoreError)?.code == .io
            }
            let store = try openStore(dir, segmentSize: 16 << 10)
            for i in 0..<30 { #expect(try store.data(for: key(i)) == value(i)) }
            try store.put(value(30), for: key(30))
            try store.close()
        }
    }

    @Test func aTruncatedSealedSegmentServesWhatIsLeftAndRepairDropsTheRest() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            try populate(dir, count: 30, segmentSize: 32 << 10)
            try files.truncate(files.segment(1), to: try files.size(files.segment(1)) / 2)
            let store = try openStore(dir, segmentSize: 32 << 10)
            #expect(store.recoveryReport.missingSegments == [1])
            var cut: [Int] = []
            for i in 0..<30 {
                do {
                    #expect(try store.data(for: key(i)) == value(i))
                } catch let error as StoreError {
                    #expect(error.code == .corruptRecord)
                    cut.append(i)
                }
            }
            #expect(!cut.isEmpty && !cut.contains(0))
            #expect(try store.fsck(repair: true).isRepaired)
            #expect(try store.fsck().isClean)
            // Gone: every key whose blob or link record was cut (an entry is served only while
            // its link record proves it). Kept: everything else, byte for byte.
            var kept = 0
            for i in 0..<30 {
                let data = try store.data(for: key(i))
                if cut.contains(i) { #expect(data == nil) }
                if let data {
                    #expect(data == value(i))
                    kept += 1
                }
            }
            #expect(kept >= 30 - cut.count - 1 && kept < 30)
        }
    }

    /// A segment whose header is damaged is not thrown away: its records are bound to the store
    /// and their place, so repair finds them with the store secret and salvages every one.
    @Test func aSegmentWithADamagedHeaderIsSalvagedByRepair() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            try populate(dir, count: 20, segmentSize: 16 << 10)
            try files.flip(files.segment(1), at: 3)
            let store = try openStore(dir, segmentSize: 16 << 10)
            #expect(store.recoveryReport.missingSegments == [1])
            let error = #expect(throws: StoreError.self) { try store.data(for: key(0)) }
            #expect(error?.code == .missingSegment)
            #expect(try store.data(for: key(19)) == value(19))
            #expect(try store.fsck(repair: true).isRepaired)
            for i in 0..<20 { #expect(try store.data(for: key(i)) == value(i)) }
            #expect(FileManager.default.fileExists(atPath: files.segment(1) + ".damaged"))
            #expect(try store.fsck().isClean)
        }
    }

    @Test func openNeverScansSealedSegments() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            try populate(dir, count: 20, segmentSize: 16 << 10)
            // Damage the payload of the first blob of sealed segment 1: open cannot notice it
            // without reading the segment, and must not.
            try files.flip(files.segment(1), at: PackFormat.segmentHeaderSize + 100)
            let store = try openStore(dir, segmentSize: 16 << 10)
            #expect(store.recoveryReport.isClean)
            #expect(store.recoveryReport.replayedRecords == 0)
            // The damage is found by the read, reported, and the entry is no longer served.
            let error = #expect(throws: StoreError.self) { try store.data(for: key(0)) }
            #expect(error?.code == .corruptRecord)
            #expect(error?.key == key(0))
            #expect(try store.data(for: key(0)) == nil)
            #expect(try store.data(for: key(1)) == value(1))
            try store.close()
            let reopened = try openStore(dir, segmentSize: 16 << 10)
            #expect(try reopened.data(for: key(0)) == nil)
        }
    }

    @Test func anInterruptedSegmentCreationIsCleanedUp() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            do {
                let store = try openStore(dir)
                try store.put(value(1), for: key(1))
                try store.close()
            }
            // A crash between creating the next segment and writing its header.
            #expect(FileManager.default.createFile(atPath: files.segment(2), contents: Data([0x54, 0x52])))
            let store = try openStore(dir)
            #expect(try store.data(for: key(1)) == value(1))
            try store.put(value(2), for: key(2))
            #expect(try store.data(for: key(2)) == value(2))
        }
    }
}
