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

/// The hole the active segment keeps ahead of its writes (`Configuration.warmAhead`,
/// ``WarmAheadPolicy``): it lies past the records while the store is open, takes no disk space
/// and counts against no capacity, is cut when a segment is sealed and when the store closes,
/// and is cut by opening as a torn tail after a crash — never read as records.
@Suite struct WarmAheadTests {
    static func value(_ i: Int) -> Data { Data(testBytes(seed: UInt64(i) &+ 0x5157, count: 3_000 + i % 900)) }

    /// Bytes of disk the file at `path` has allocated.
    static func allocated(_ path: String) -> UInt64 {
        var st = stat()
        guard stat(path, &st) == 0 else { return 0 }
        return UInt64(st.st_blocks) * 512
    }

    /// A store with small segments and 64 KiB holes: the active segment's file reaches past its
    /// records by a hole the disk has not allocated; usage counts the records only; sealed
    /// segments end with their last record; closing cuts the hole; every value reads back,
    /// before and after reopening, which finds nothing to report.
    @Test func aHoleLiesAheadOfTheWritesAndIsCutWhenSealedAndClosed() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let store = try openStore(dir, durability: .batched, segmentSize: 512 << 10) {
                    $0.warmAhead = 64 << 10
                    $0.compactionInterval = nil
                }
                var sawHole = false
                for i in 0..<400 {
                    try store.put(Self.value(i), for: key(i))
                    let a = try ZeroFillTests.active(store)
                    if a.size > a.end {
                        sawHole = true
                        #expect(a.size - a.end <= 64 << 10, "the hole is at most one chunk past the records")
                    }
                }
                #expect(sawHole, "the writer never made a hole ahead of its records")
                try store.flush()
                let a = try ZeroFillTests.active(store)
                #expect(a.size > a.end)
                // A hole: the disk holds the records' blocks only.
                let path = a.segment.path
                #expect(Self.allocated(path) < a.size, "\(Self.allocated(path)) bytes allocated of \(a.size)")
                // Usage: the files' sizes less the hole.
                let packs = dir + "/store/packs"
                let sizes = try PackDirectory.segmentIDs(in: packs).reduce(Int64(0)) {
                    $0 + Int64(PackDirectory.segmentSize($1, in: packs)!)
                }
                #expect(try store.statistics().packBytes == sizes - Int64(a.size - a.end))
                for i in 0..<400 { #expect(try store.data(for: key(i)) == Self.value(i)) }
                // Sealed segments end with their last record; the active one is intact to its end.
                let active = store.appender.withLock { (id: $0.pack.segment.id, end: $0.pack.end) }
                let reports = try ZeroFillTests.scans(dir, active: active)
                #expect(reports.count >= 2, "the writes rotated segments")
                for (id, report) in reports { #expect(report.damage.isEmpty, "segment \(id): \(report.damage)") }
                try store.close()
                for (id, report) in try ZeroFillTests.scans(dir) { #expect(report.damage.isEmpty, "segment \(id) after close") }
                let reopened = try openStore(dir, segmentSize: 512 << 10) { $0.compactionInterval = nil }
                #expect(reopened.recoveryReport.isClean)
                for i in 0..<400 { #expect(try reopened.data(for: key(i)) == Self.value(i)) }
                #expect(try reopened.fsck().isClean)
                try reopened.close()
            }
        }
    }

    /// The files as a crash leaves them (copied while the store is open, after a flush): the
    /// newest segment ends in the hole, which opening cuts as a torn tail, reported; every
    /// value reads back and the store keeps writing where the records end.
    @Test func openingAfterACrashCutsTheHoleAsATornTail() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let store = try openStore(dir, durability: .batched) { $0.compactionInterval = nil }
                for i in 0..<50 { try store.put(Self.value(i), for: key(i)) }
                try store.flush()
                let a = try ZeroFillTests.active(store)
                #expect(a.size > a.end, "the default keeps a hole ahead of the writes")
                try FileManager.default.createDirectory(atPath: dir + "/copy", withIntermediateDirectories: false)
                try FileManager.default.copyItem(atPath: dir + "/store", toPath: dir + "/copy/store")
                try? FileManager.default.removeItem(atPath: dir + "/copy/store/LOCK")
                try store.close()

                let copy = try openStore(dir + "/copy") { $0.compactionInterval = nil }
                let tails = copy.recoveryReport.truncatedTails
                #expect(tails.map(\.segment) == [a.segment.id])
                #expect(tails.map(\.validEnd) == [a.end])
                #expect(tails.map(\.bytesRemoved) == [a.size - a.end])
                for i in 0..<50 { #expect(try copy.data(for: key(i)) == Self.value(i)) }
                try copy.put(Self.value(99), for: key(99))
                #expect(try copy.data(for: key(99)) == Self.value(99))
                try copy.close()
                let again = try openStore(dir + "/copy") { $0.compactionInterval = nil }
                #expect(again.recoveryReport.isClean)
                #expect(try again.data(for: key(99)) == Self.value(99))
                try again.close()
            }
        }
    }

    /// A capacity smaller than the hole: usage does not count the 4 MiB that holds nothing, so a
    /// few hundred KiB of values leave the store under its capacity (counted, the store would
    /// look over it to every usage check, which starts compaction passes that seal and rewrite).
    @Test func theHoleCountsAgainstNoCapacity() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let store = try openStore(dir, durability: .batched) {
                    $0.capacity = 2 << 20
                    $0.compactionInterval = nil
                }
                for i in 0..<100 { try store.put(Self.value(i), for: key(i)) }
                try store.flush()
                let a = try ZeroFillTests.active(store)
                #expect(a.size - a.end > 2 << 20, "the default hole is larger than this capacity")
                let report = try store.compact()
                #expect(report.evictedEntries == 0)
                #expect(try store.statistics().diskBytes < 2 << 20)
                for i in 0..<100 { #expect(try store.data(for: key(i)) == Self.value(i)) }
                try store.close()
            }
        }
    }

    /// An extension that fails (a full disk refusing `ftruncate`) stops the warming of that
    /// segment: the put that made it succeeds, the writes go on appending, and every value
    /// reads back.
    @Test func aFailedExtensionLeavesTheWritesAppending() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let failures = Locked(0)
                let store = try openStore(dir, durability: .batched) { configuration in
                    configuration.warmAhead = 64 << 10
                    configuration.compactionInterval = nil
                    configuration.faultInjector = FaultInjector { called, path in
                        guard called == .truncate, path.hasSuffix(".pack") else { return nil }
                        return failures.withLock { count in
                            count += 1
                            return .error(ENOSPC)
                        }
                    }
                }
                for i in 0..<60 { try store.put(Self.value(i), for: key(i)) }
                #expect(failures.withLock { $0 } == 1, "one failed extension stops the warming of the segment")
                let a = try ZeroFillTests.active(store)
                #expect(a.size == a.end)
                for i in 0..<60 { #expect(try store.data(for: key(i)) == Self.value(i)) }
                try store.close()
                let reopened = try openStore(dir) { $0.compactionInterval = nil }
                #expect(reopened.recoveryReport.isClean)
                for i in 0..<60 { #expect(try reopened.data(for: key(i)) == Self.value(i)) }
                try reopened.close()
            }
        }
    }
}
