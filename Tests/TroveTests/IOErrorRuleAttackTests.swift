import Foundation
import Testing
import TroveCore
@testable import TroveIndex
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

#if canImport(Glibc)
    import Glibc
#endif

/// An outside review of the rule "opening (and fsck) never decides on a failed read"
/// (5a7c203, f8f414d): an I/O error other than ENOENT on a file of `packs/` stops the opening or
/// the check with `.io`, changing nothing; the newest segment after a kill is no longer
/// rewritten below `indexed_bytes`.
@Suite(.serialized) struct IOErrorRuleAttackTests {
    static let segmentSize: Int64 = 16 << 10

    static func execute(_ dir: String, _ sql: String) throws {
        let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
        try index.connection.execute(sql)
    }

    static func copyStore(_ files: StoreFiles, to dir: String) throws {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try files.copyStore(to: dir + "/store")
    }

    /// The soft limit on open files, set to `limit` (nil: back to `original`).
    final class FileLimit: Sendable {
        let original: rlimit
        private let lowered = Locked(false)

        init() {
            var limit = rlimit()
            precondition(getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0)
            original = limit
        }

        /// Every open(2) of the process fails with EMFILE until ``restore()``.
        func exhaust() {
            lowered.withLock { $0 = true }
            var limit = original
            limit.rlim_cur = 0
            precondition(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0)
        }

        func restore() {
            guard
                lowered.withLock({ was in
                    defer { was = false }; return was
                })
            else { return }
            var limit = original
            precondition(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0)
        }
    }

    // MARK: 1. Opening with a lost sequence counter

    /// Both copies of the committed sequence lost: opening reads every segment to learn which
    /// numbers the tombstones took (they leave no row). An open of one of those segments that
    /// fails for a passing I/O error (Recovery.run, `try? SegmentFile.open`) is taken for an
    /// unreadable segment: opening goes on, deciding the counter without it.
    @Test func aLostCounterIsNotRecoveredPastASegmentThatFailedToOpen() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            do {
                let store = try openStore(dir)
                for i in 0..<6 { try store.put(value(i), for: key(i)) }
                // Removals: the newest numbers, in tombstones only.
                for i in 3..<6 { _ = try store.remove(key(i)) }
                try store.close()
            }
            try Self.execute(dir, "DELETE FROM meta WHERE key LIKE 'sequence%'")
            let control = dir + "/control"
            try Self.copyStore(files, to: control)
            let expected = try {
                let store = try openStore(control)
                defer { try? store.close() }
                return store.appender.withLock { $0.nextSequence }
            }()

            // The first open of segment 1 is placement's header read; the second, the counter's
            // fold over the packs. Only that one fails.
            let segment = try #require(try files.segmentIDs().first)
            let opens = Locked(0)
            let injector = FaultInjector { operation, path in
                guard operation == .open, path == files.segment(segment) else { return nil }
                return opens.withLock {
                    $0 += 1; return $0
                } == 2 ? .error(EIO) : nil
            }
            let store: Store
            do {
                store = try openStore(dir) { $0.faultInjector = injector }
            } catch {
                #expect((error as? StoreError)?.code == .io)
                return
            }
            Issue.record(
                "opening went on past segment \(segment), which it could not open (EIO) while recovering the lost counter")
            let next = store.appender.withLock { $0.nextSequence }
            #expect(next >= expected, "the next sequence number is \(next); the packs already used up to \(expected - 1)")
            // What a reused number costs: the key removed is written again with a number its
            // tombstone already holds; a rebuild from the packs must still serve the new value.
            try store.put(value(100), for: key(5))
            try store.close()
            _ = try Store.rebuildIndex(directory: files.store)
            let rebuilt = try openStore(dir)
            #expect(try rebuilt.data(for: key(5)) == value(100), "a write acknowledged after that opening is lost")
            try rebuilt.close()
        }
    }

    // MARK: 2. fsck's salvage of a segment whose header is damaged

    // (The salvage open's passing EMFILE, found here with a real descriptor limit, is fixed and
    // tested through the fault seam the open now goes through:
    // `RecoveryTests.fsckStopsOnASegmentToSalvageItCannotOpen`.)

    // MARK: 3. Compaction

    /// The compactor keeps a superseded link only when the newer link the index points at
    /// cannot be verified (`holdsItsLink` swallows every error). A passing read error on the
    /// newer segment is taken for an index that disagrees with the packs: the segment is
    /// skipped and `staleIndexRow` damage is recorded, reported by every command until
    /// `fsck --repair`.
    @Test func aPassingReadErrorDuringCompactionIsNotRecordedAsDamage() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            let failing = Locked(false)
            let newer = Locked<String?>(nil)
            let injector = FaultInjector { operation, path in
                operation == .read && failing.withLock { $0 } && path == newer.withLock({ $0 }) ? .error(EIO) : nil
            }
            let store = try openStore(dir, segmentSize: Self.segmentSize) {
                $0.compactionInterval = nil
                $0.faultInjector = injector
            }
            for i in 0..<20 { try store.put(value(i), for: key(i)) }
            // Every value of segment 1 written again: segment 1 is all dead.
            for i in 0..<5 { try store.put(value(i + 200), for: key(i)) }
            let active = store.appender.withLock { $0.pack.segment.id }
            newer.withLock { $0 = files.segment(active) }
            #expect(try store.unrepairedDamage().isEmpty)
            failing.withLock { $0 = true }
            let compacted = Result { () throws(StoreError) in try store.compact() }
            failing.withLock { $0 = false }
            let damage = try store.unrepairedDamage()
            #expect(
                damage.isEmpty,
                "a read error on segment \(active) (compaction \(compacted)) left damage: \(damage.map(\.message))")
            for i in 0..<5 { #expect(try store.data(for: key(i)) == value(i + 200)) }
            for i in 5..<20 { #expect(try store.data(for: key(i)) == value(i)) }
            try store.close()
        }
    }

    // MARK: 4. The way out the error message gives

    /// The error says: if the disk keeps failing, move the file out of `packs/` — the store
    /// opens without it — and "restore the file and they are back" (Operations.md). Done with
    /// the newest segment, holding writes past `indexed_bytes` (a kill before their commit):
    /// opening without it seals it, so once it is back those writes are never replayed, and
    /// the numbers they took were handed out again meanwhile. Operations.md now says that those
    /// writes are given up; the test holds what bringing them back would take as a known issue.
    @Test func movingTheNewestSegmentOutAndBackLosesItsUnreplayedWrites() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            let (name, s, bytes) = try HoleCutAttackTests.snapshotAndNextPuts(dir, [20, 21])
            let path = files.packs + "/" + name
            HoleCutAttackTests.write(path, bytes, at: s)
            try FileManager.default.moveItem(atPath: path, toPath: dir + "/held")
            do {
                let store = try openWarmStore(dir) { $0.compactionInterval = nil }
                #expect(store.recoveryReport.missingSegments.count == 1)
                try store.put(value(300), for: key(300))
                try store.close()
            }
            try FileManager.default.moveItem(atPath: dir + "/held", toPath: path)
            let store = try openWarmStore(dir) { $0.compactionInterval = nil }
            // What is promised: what the index reflected comes back, nothing is served wrong.
            func served() -> [Int] {
                (0..<22).filter { i in
                    guard let data = try? store.data(for: key(i)) else { return false }
                    #expect(data == HoleCutAttackTests.value(i), "key \(i) served wrong bytes")
                    return true
                }
            }
            var back = served()
            #expect(back.starts(with: 0..<20), "restored, the indexed keys are not all back: \(back)")
            #expect(try store.data(for: key(300)) == value(300))
            withKnownIssue("the writes past indexed_bytes of a segment moved out while it was the newest are given up") {
                #expect(back.count == 22, "restored, the segment does not serve keys \(Set(0..<22).subtracting(back))")
            }
            let repaired = try store.fsck(repair: true)
            back = served()
            #expect(back.starts(with: 0..<20), "after fsck --repair: \(back)")
            withKnownIssue("the writes past indexed_bytes of a segment moved out while it was the newest are given up") {
                #expect(back.count == 22, "after fsck --repair, keys are lost: \(repaired.findings.map(\.message))")
            }
            #expect(try store.data(for: key(300)) == value(300))
            #expect(try store.fsck().isClean)
            #expect(try store.unrepairedDamage().isEmpty)
            try store.close()
        }
    }

    // MARK: 5. What holds (found nothing)

    /// Two segments swapped by hand, and the header read of one failing (sticky for that file
    /// only): opening stops with `.io` and renames nothing; once the read passes, both are put
    /// back under their names and every value is served.
    @Test func swappedSegmentsWithAStickyFaultOnOneRenameNothing() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            try populate(dir, count: 20, segmentSize: Self.segmentSize)
            let ids = try files.segmentIDs()
            try #require(ids.count >= 3)
            let (a, b) = (files.segment(ids[0]), files.segment(ids[1]))
            try FileManager.default.moveItem(atPath: a, toPath: a + ".x")
            try FileManager.default.moveItem(atPath: b, toPath: a)
            try FileManager.default.moveItem(atPath: a + ".x", toPath: b)
            let before = try FileManager.default.contentsOfDirectory(atPath: files.packs).sorted()
            for operation in [FaultInjector.Operation.open, .read] {
                let injector = FaultInjector { op, path in op == operation && path == b ? .error(EIO) : nil }
                let error = #expect(throws: StoreError.self) {
                    try openStore(dir, segmentSize: Self.segmentSize) { $0.faultInjector = injector }
                }
                #expect(error?.code == .io)
                #expect(try FileManager.default.contentsOfDirectory(atPath: files.packs).sorted() == before)
            }
            let store = try openStore(dir, segmentSize: Self.segmentSize)
            #expect(store.recoveryReport.renamedFiles.count == 2)
            for i in 0..<20 { #expect(try store.data(for: key(i)) == value(i)) }
            try store.close()
        }
    }

    /// `Store.rebuildIndex` with a read of one segment failing: the rebuild stops with `.io`,
    /// the old index is put back, and the store opens as before.
    @Test func aRebuildStopsOnAReadErrorAndKeepsTheIndex() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            try populate(dir, count: 20, segmentSize: Self.segmentSize)
            let second = try files.segmentIDs()[1]
            for operation in [FaultInjector.Operation.open, .read] {
                let reads = Locked(0)
                var configuration = Store.Configuration()
                configuration.segmentSize = Self.segmentSize
                // Past the header: the rebuild's scan of the segment.
                configuration.faultInjector = FaultInjector { op, path in
                    guard op == operation, path == files.segment(second) else { return nil }
                    return reads.withLock {
                        $0 += 1; return $0
                    } >= (operation == .read ? 2 : 1) ? .error(EIO) : nil
                }
                let error = #expect(throws: StoreError.self) {
                    try Store.rebuildIndex(directory: files.store, configuration: configuration)
                }
                #expect(error?.code == .io)
            }
            let store = try openStore(dir, segmentSize: Self.segmentSize)
            #expect(store.recoveryReport.isClean)
            #expect(try store.unrepairedDamage().isEmpty)
            for i in 0..<20 { #expect(try store.data(for: key(i)) == value(i)) }
            #expect(try store.fsck().isClean)
            try store.close()
        }
    }

    /// fsck, repairing, with a read error in the middle of a sealed segment's scan (not its
    /// open): it stops with `.io`, drops nothing, records nothing.
    @Test func aRepairStopsOnAReadErrorInAScan() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            try populate(dir, count: 20, segmentSize: Self.segmentSize)
            let failing = Locked(false)
            let injector = FaultInjector { op, path in
                op == .read && path == files.segment(2) && failing.withLock { $0 } ? .error(EIO) : nil
            }
            let store = try openStore(dir, segmentSize: Self.segmentSize) { $0.faultInjector = injector }
            failing.withLock { $0 = true }
            for repair in [false, true] {
                let error = #expect(throws: StoreError.self) { try store.fsck(repair: repair) }
                #expect(error?.code == .io)
            }
            failing.withLock { $0 = false }
            #expect(try store.unrepairedDamage().isEmpty)
            #expect(try store.fsck().isClean)
            for i in 0..<20 { #expect(try store.data(for: key(i)) == value(i)) }
            try store.close()
        }
    }
}
