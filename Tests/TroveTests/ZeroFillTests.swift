import Foundation
import Testing
import TroveCore
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

#if canImport(Glibc)
    import Glibc
#endif

/// Zeros kept ahead of the writes (`Configuration.zeroFill`, ``ZeroFill``): they are written
/// and synced off the write path, never land on a record, never count as damage, and are cut
/// when a segment is sealed, when the store closes, and when it opens after a crash.
@Suite struct ZeroFillTests {
    static func value(_ i: Int) -> Data { Data(testBytes(seed: UInt64(i), count: 2_500 + i % 700)) }

    /// The data end and file size of the active segment.
    static func active(_ store: Store) throws -> (segment: SegmentFile, end: UInt64, size: UInt64) {
        let (segment, end) = store.appender.withLock { ($0.pack.segment, $0.pack.end) }
        return (segment, end, try segment.size())
    }

    /// Every segment file of the store, scanned (the active one, `active`, up to its end):
    /// its report.
    static func scans(_ dir: String, active: (id: UInt32, end: UInt64)? = nil) throws -> [UInt32: ScanReport] {
        let packs = dir + "/store/packs"
        var reports: [UInt32: ScanReport] = [:]
        for id in try PackDirectory.segmentIDs(in: packs) {
            let file = try SegmentFile.open(id: id, in: packs, writable: false)
            reports[id] = try SegmentScanner.scan(file, upTo: id == active?.id ? active?.end : nil) { _ in }
        }
        return reports
    }

    /// Eight writers at `full` with small fills and segments: zeros lie ahead of the active
    /// segment's records while the store is open; every sealed segment ends with its last
    /// record; closing cuts the zeros; every value reads back before and after reopening.
    @Test func zerosLieAheadOfTheWritesAndAreCutWhenSealedAndClosed() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let store = try openStore(dir, durability: .full, segmentSize: 512 << 10) {
                    $0.zeroFill = 32 << 10
                    $0.compactionInterval = nil
                }
                let sawZeros = Locked(false)
                let group = DispatchGroup()
                for w in 0..<8 {
                    group.enter()
                    Thread.detachNewThread {
                        defer { group.leave() }
                        for j in 0..<60 {
                            let i = w * 1_000 + j
                            try? store.put(Self.value(i), for: key(i))
                            if let a = try? Self.active(store), a.size > a.end { sawZeros.withLock { $0 = true } }
                        }
                    }
                }
                group.wait()
                #expect(sawZeros.withLock { $0 }, "no fill ever got ahead of the writes")
                for w in 0..<8 {
                    for j in 0..<60 { #expect(try store.data(for: key(w * 1_000 + j)) == Self.value(w * 1_000 + j)) }
                }
                // Sealed segments end with their last record (zeros would be damage); the
                // active one holds intact records up to its end.
                let active = store.appender.withLock { (id: $0.pack.segment.id, end: $0.pack.end) }
                let reports = try Self.scans(dir, active: active)
                #expect(reports.count >= 3, "the writes rotated segments")
                for (id, report) in reports { #expect(report.damage.isEmpty, "segment \(id): \(report.damage)") }
                try store.close()
                for (id, report) in try Self.scans(dir) { #expect(report.damage.isEmpty, "segment \(id) after close") }
                let reopened = try openStore(dir) { $0.compactionInterval = nil }
                #expect(reopened.recoveryReport.isClean)
                for w in 0..<8 {
                    for j in 0..<60 { #expect(try reopened.data(for: key(w * 1_000 + j)) == Self.value(w * 1_000 + j)) }
                }
                #expect(try reopened.fsck().isClean)
                try reopened.close()
            }
        }
    }

    /// A store that stopped with zeros ahead of its writes (here: the files as a crash leaves
    /// them, zeros appended after close) opens with them cut from the newest segment as a torn
    /// tail — reported, like any bytes past the last record — and keeps writing. Zeros where the
    /// index reflects records are reported the same way and never served.
    @Test func openingCutsZerosAsATornTail() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                var store = try openStore(dir, durability: .batched, segmentSize: 64 << 10) { $0.compactionInterval = nil }
                for i in 0..<80 { try store.put(Self.value(i), for: key(i)) }
                let newest = store.appender.withLock { $0.pack.segment.id }
                try store.close()
                let packs = dir + "/store/packs"
                var file = try SegmentFile.open(id: newest, in: packs, writable: true)
                let size = try file.size()
                try file.writeZeros(size..<size + 100_000)
                store = try openStore(dir, durability: .batched, segmentSize: 64 << 10) { $0.compactionInterval = nil }
                #expect(store.recoveryReport.truncatedTails.map(\.validEnd) == [size])
                #expect(try Self.active(store).size == Self.active(store).end)
                for i in 0..<80 { #expect(try store.data(for: key(i)) == Self.value(i)) }
                #expect(try store.fsck().findings.allSatisfy(\.repaired))
                try store.put(Self.value(500), for: key(500))
                let current = store.appender.withLock { $0.pack.segment.id }
                try store.close()

                // Now zeros over the newest segment's last records, which the index reflects.
                file = try SegmentFile.open(id: current, in: packs, writable: true)
                let end = try file.size()
                var last: UInt64 = 0
                _ = try SegmentScanner.scan(file) { last = $0.offset }
                try file.writeZeros(last..<end + 10_000)
                store = try openStore(dir, durability: .batched, segmentSize: 64 << 10) { $0.compactionInterval = nil }
                #expect(store.recoveryReport.truncatedTails.contains { $0.segment == current && $0.validEnd == last })
                // Nothing is served from the zeros: the values are either intact or gone.
                for i in [500] + Array(0..<80) {
                    let served = try? store.data(for: key(i))
                    #expect(served == nil || served == Self.value(i), "\(key(i))")
                }
                try store.close()
            }
        }
    }

    /// A `full` store with 32 KiB fills whose `operation` on a pack, run by the preparer's
    /// thread, fails with `errno` (counted in `failures`); the writers' own calls succeed.
    static func openFailingFills(_ dir: String, _ operation: FaultInjector.Operation, _ errno: Int32, _ failures: Locked<Int>)
        throws -> Store
    {
        try openStore(dir, durability: .full, segmentSize: 1 << 20) { configuration in
            configuration.zeroFill = 32 << 10
            configuration.compactionInterval = nil
            configuration.faultInjector = FaultInjector { called, path in
                guard called == operation, path.hasSuffix(".pack"), onThread(named: "trove-preparer") else { return nil }
                failures.withLock { $0 += 1 }
                return .error(errno)
            }
        }
    }

    /// A fill whose zeros cannot be written (a full disk) ends the filling of that segment;
    /// the writes go on, appending, and every one reads back.
    @Test func aFailedFillLeavesTheWritesAppending() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let failures = Locked(0)
                // The fills write their zeros from the preparer's thread: fail those, not the records.
                let store = try Self.openFailingFills(dir, .write, ENOSPC, failures)
                for i in 0..<200 { try store.put(Self.value(i), for: key(i)) }
                #expect(failures.withLock { $0 } >= 1)
                for i in 0..<200 { #expect(try store.data(for: key(i)) == Self.value(i)) }
                try store.close()
                let reopened = try openStore(dir) { $0.compactionInterval = nil }
                #expect(reopened.recoveryReport.isClean)
                for i in 0..<200 { #expect(try reopened.data(for: key(i)) == Self.value(i)) }
                try reopened.close()
            }
        }
    }

    /// A fill's sync that fails is the segment's failed sync: the writes it may have lost are
    /// never acknowledged — the store refuses every write until reopened, like after any
    /// failed sync — and reopening serves only what was acknowledged or nothing.
    @Test func aFailedFillSyncRefusesWritesUntilReopened() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let store = try Self.openFailingFills(dir, .sync, EIO, Locked(0))
                var acknowledged: [Int] = []
                var refusal: StoreError?
                for i in 0..<300 {
                    do {
                        try store.put(Self.value(i), for: key(i))
                        acknowledged.append(i)
                    } catch let error as StoreError {
                        refusal = error
                        break
                    }
                }
                #expect(refusal?.code == .syncFailed, "the fill's failed sync was not the store's")
                #expect(throws: StoreError.self) { try store.put(Data("late".utf8), for: key(9_999)) }
                try? store.close()
                let reopened = try openStore(dir) { $0.compactionInterval = nil }
                for i in acknowledged { #expect(try reopened.data(for: key(i)) == Self.value(i), "\(key(i))") }
                try reopened.close()
            }
        }
    }
}
