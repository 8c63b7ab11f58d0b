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

/// An outside review of the hole kept ahead of the writes (`warmAhead`) and of recovery's
/// unreported cut of a trailing hole (`PreparedTail`).
@Suite struct WarmAheadAttackTests {
    static func value(_ i: Int) -> Data { Data(testBytes(seed: UInt64(i) &+ 0xA77A, count: 3_000 + (i * 37) % 2_000)) }

    enum Outcome: Equatable { case same, absent, threw, wrong }

    static func outcome(_ store: Store, _ i: Int) -> Outcome {
        do {
            guard let d = try store.data(for: key(i)) else { return .absent }
            return d == value(i) ? .same : .wrong
        } catch { return .threw }
    }

    /// `fallocate(PUNCH_HOLE | KEEP_SIZE)` over `range` of the file at `path`.
    static func punch(_ path: String, _ range: Range<UInt64>) {
        let fd = open(path, O_RDWR)
        precondition(fd >= 0)
        defer { close(fd) }
        typealias Fallocate = @convention(c) (Int32, Int32, off_t, off_t) -> Int32
        let symbol = dlsym(nil, "fallocate")
        let fallocate = unsafeBitCast(symbol!, to: Fallocate.self)
        let rc = fallocate(fd, 0x02 | 0x01, off_t(range.lowerBound), off_t(range.count))
        precondition(rc == 0, "fallocate: \(errno)")
    }

    static func setSize(_ path: String, _ size: UInt64) {
        precondition(truncate(path, off_t(size)) == 0)
    }

    static func writeBytes(_ path: String, _ bytes: [UInt8], at offset: UInt64) {
        let fd = open(path, O_RDWR)
        precondition(fd >= 0)
        defer { close(fd) }
        precondition(pwrite(fd, bytes, bytes.count, off_t(offset)) == bytes.count)
    }

    static func fileSize(_ path: String) -> UInt64 {
        var st = stat()
        precondition(stat(path, &st) == 0)
        return UInt64(st.st_size)
    }

    /// Puts `count` values one at a time; returns each record's [start, end) in the newest
    /// segment, the segment's path, and the closed store's directory.
    static func populate(_ dir: String, count: Int, durability: Durability = .full) throws -> (
        path: String, records: [Range<UInt64>]
    ) {
        let store = try openWarmStore(dir, durability: durability) { $0.compactionInterval = nil }
        var records: [Range<UInt64>] = []
        for i in 0..<count {
            let before = store.appender.withLock { $0.pack.end }
            try store.put(value(i), for: key(i))
            let after = store.appender.withLock { $0.pack.end }
            records.append(before..<after)
        }
        try store.flush()
        let path = store.appender.withLock { $0.pack.segment.path }
        try store.close()
        return (path, records)
    }

    /// Every committed value reads back exactly, or its loss is reported (recovery report or
    /// fsck). Returns (lost, reported).
    static func audit(_ store: Store, count: Int, _ note: String) throws -> (lost: [Int], reported: Bool) {
        var lost: [Int] = []
        for i in 0..<count {
            let o = outcome(store, i)
            #expect(o != .wrong, "\(note): wrong bytes served for \(i)")
            if o != .same { lost.append(i) }
        }
        let fsck = try store.fsck()
        let reported = !store.recoveryReport.isClean || !fsck.isClean
        return (lost, reported)
    }

    // MARK: 1. A hole punched over committed records, after a kill left the writer's hole

    /// A store whose writer was killed leaves its hole past the records (simulated: the file is
    /// extended as the writer extends it). Then the last committed records are punched into a
    /// hole (an attacker, or a file system that lost their blocks) from the start of one record:
    /// opening must not cut committed records silently.
    @Test func holePunchedOverCommittedRecordsIsNotCutSilently() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let (path, records) = try Self.populate(dir, count: 40)
                let size = Self.fileSize(path)
                #expect(size == records.last!.upperBound)
                Self.setSize(path, size + (4 << 20))  // the kill's hole
                Self.punch(path, records[30].lowerBound..<size + (4 << 20))
                let store = try openWarmStore(dir) { $0.compactionInterval = nil }
                let (lost, reported) = try Self.audit(store, count: 40, "punched")
                // The cut went below what the index reflected (records 30..<40 were committed):
                // opening itself must say so, not leave it to an fsck someone may never run.
                #expect(!store.recoveryReport.isClean, "opening cut committed records \(lost) and reported nothing")
                #expect(lost.allSatisfy { Self.outcome(store, $0) != .wrong })
                #expect(lost.allSatisfy { $0 >= 30 })
                #expect(lost.isEmpty || reported, "committed values \(lost) lost, nothing reported: \(store.recoveryReport)")
                try store.close()
            }
        }
    }

    /// The same with the records punched and the file not extended (a clean close, then the
    /// punch): zeros over committed records that the index reflects.
    @Test func holePunchedOverCommittedRecordsWithoutAKill() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let (path, records) = try Self.populate(dir, count: 40)
                let size = Self.fileSize(path)
                Self.punch(path, records[30].lowerBound..<size)
                let store = try openWarmStore(dir) { $0.compactionInterval = nil }
                let (lost, reported) = try Self.audit(store, count: 40, "punched, no kill")
                #expect(lost.allSatisfy { $0 >= 30 })
                #expect(lost.isEmpty || reported, "committed values \(lost) lost, nothing reported: \(store.recoveryReport)")
                try store.close()
            }
        }
    }

    // MARK: 3. Rebuild

    /// The index lost and the last records punched: the rebuild reports what it cut, as it does
    /// for the same bytes written as zeros.
    @Test func rebuildReportsPunchedTailLikeZeros() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                var reports: [Bool] = []
                for punch in [false, true] {
                    let sub = dir + "/\(punch)"
                    let (path, records) = try Self.populate(sub, count: 40)
                    let size = Self.fileSize(path)
                    if punch {
                        Self.punch(path, records[30].lowerBound..<size)
                    } else {
                        Self.writeBytes(
                            path, [UInt8](repeating: 0, count: Int(size - records[30].lowerBound)), at: records[30].lowerBound)
                    }
                    for f in ["index.sqlite", "index.sqlite-wal", "index.sqlite-shm"] {
                        try? FileManager.default.removeItem(atPath: sub + "/store/" + f)
                    }
                    let store = try openWarmStore(sub) { $0.compactionInterval = nil }
                    #expect(store.recoveryReport.rebuiltIndex)
                    for i in 0..<40 { #expect(Self.outcome(store, i) != .wrong) }
                    reports.append(!store.recoveryReport.truncatedTails.isEmpty)
                    try store.close()
                }
                #expect(
                    reports == [true, true],
                    "zeros reported as a torn tail: \(reports[0]); the same range as a hole: \(reports[1])")
            }
        }
    }

    /// A hole left past the records of a NON-newest segment (a rotation whose cut was lost):
    /// opening and a rebuild serve every value and crash on nothing; the hole is reported or cut.
    @Test func holeInASealedSegment() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                var store = try openWarmStore(dir, segmentSize: 256 << 10) { $0.compactionInterval = nil }
                for i in 0..<200 { try store.put(Self.value(i), for: key(i)) }
                try store.close()
                let packs = dir + "/store/packs"
                let ids = try PackDirectory.segmentIDs(in: packs).sorted()
                #expect(ids.count >= 3)
                let sealed = packs + "/" + PackFormat.fileName(forSegment: ids[ids.count - 2])
                let size = Self.fileSize(sealed)
                Self.setSize(sealed, size + (1 << 20))
                store = try openWarmStore(dir, segmentSize: 256 << 10) { $0.compactionInterval = nil }
                for i in 0..<200 { #expect(Self.outcome(store, i) == .same, "\(i)") }
                _ = try store.fsck()
                _ = try store.compact()
                for i in 0..<200 { #expect(Self.outcome(store, i) == .same, "\(i) after compact") }
                try store.close()
                for f in ["index.sqlite", "index.sqlite-wal", "index.sqlite-shm"] {
                    try? FileManager.default.removeItem(atPath: dir + "/store/" + f)
                }
                store = try openWarmStore(dir, segmentSize: 256 << 10) { $0.compactionInterval = nil }
                for i in 0..<200 { #expect(Self.outcome(store, i) == .same, "\(i) after rebuild") }
                try store.close()
            }
        }
    }

    // MARK: 1. Random damage around the tail

    /// Random damage over the newest segment's last records and past them, after a clean
    /// close or a simulated kill (the writer's hole left): no wrong bytes, and every committed
    /// value lost is reported.
    @Test func randomDamageNeverServesWrongBytesOrHidesLoss() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                var silent: [String] = []
                for seed in 0..<36 {
                    var g = SeededGenerator(seed: UInt64(seed) &+ 991)
                    let sub = dir + "/\(seed)"
                    let n = 30
                    let (path, records) = try Self.populate(sub, count: n)
                    let size = Self.fileSize(path)
                    let killed = Bool.random(using: &g)
                    if killed { Self.setSize(path, size + (4 << 20)) }
                    let full = Self.fileSize(path)
                    let from =
                        records[Int.random(in: 20..<n, using: &g)].lowerBound
                        + (Bool.random(using: &g) ? 0 : UInt64.random(in: 0..<500, using: &g))
                    let kind = seed % 6
                    var what = ""
                    switch kind {
                    case 0: Self.punch(path, from..<full); what = "punch to EOF"
                    case 1: Self.setSize(path, from); what = "truncate"
                    case 2:
                        let len = UInt64.random(in: 1..<9_000, using: &g)
                        Self.writeBytes(path, [UInt8](repeating: 0, count: Int(min(len, full - from))), at: from);
                        what = "zero \(len)"
                    case 3:
                        Self.punch(path, from..<min(full, from + 8_192))
                        what = "punch middle"
                    case 4:
                        Self.setSize(path, full + (1 << 20))
                        Self.writeBytes(path, [1, 2, 3, 4], at: full + (1 << 20) - 4); what = "hole then data"
                    default:
                        Self.punch(path, from..<full)
                        Self.setSize(path, full + (2 << 20)); what = "punch + extend"
                    }
                    let store = try openWarmStore(sub) { $0.compactionInterval = nil }
                    let (lost, reported) = try Self.audit(store, count: n, "seed \(seed) \(what)")
                    if !lost.isEmpty && !reported {
                        silent.append("seed \(seed) killed=\(killed) \(what) from \(from): lost \(lost)")
                    }
                    try store.close()
                }
                #expect(silent.isEmpty, "committed values lost without a report:\n\(silent.joined(separator: "\n"))")
            }
        }
    }

    // MARK: 4. Statistics, compaction and fsck with the hole open

    @Test func compactionAndFsckWithTheHoleOpen() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let store = try openWarmStore(dir, durability: .batched, segmentSize: 1 << 20) {
                    $0.warmAhead = 512 << 10
                    $0.compactionInterval = nil
                }
                for i in 0..<300 { try store.put(Self.value(i), for: key(i)) }
                for i in stride(from: 0, to: 300, by: 2) { try store.remove(key(i)) }
                try store.flush()
                var a = try ZeroFillTests.active(store)
                #expect(a.size > a.end)
                #expect(try store.fsck().isClean)
                _ = try store.compact()
                for i in 0..<300 { #expect(Self.outcome(store, i) == (i % 2 == 0 ? .absent : .same), "\(i)") }
                a = try ZeroFillTests.active(store)
                let packs = dir + "/store/packs"
                let sizes = try PackDirectory.segmentIDs(in: packs).reduce(Int64(0)) {
                    $0 + Int64(PackDirectory.segmentSize($1, in: packs)!)
                }
                #expect(try store.statistics().packBytes == sizes - Int64(a.size - a.end))
                #expect(try store.fsck().isClean)
                try store.close()
                let reopened = try openWarmStore(dir, segmentSize: 1 << 20) { $0.compactionInterval = nil }
                #expect(reopened.recoveryReport.isClean)
                for i in 0..<300 { #expect(Self.outcome(reopened, i) == (i % 2 == 0 ? .absent : .same), "\(i)") }
                try reopened.close()
            }
        }
    }

}

extension WarmAheadAttackTests {
    /// 2. Kills with small segments (rotations every few dozen puts while a hole exists): no
    /// acknowledged write lost, no wrong bytes (the crash suite's model check).
    @Test func killsWithSmallSegmentsRotatingUnderAHole() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool { try CrashTests().runKillRounds(dir, rounds: 9, segmentSize: 96 << 10, compacting: false) }
        }
    }
}

extension WarmAheadAttackTests {
    /// 3. `fsck --rebuild-index` (Store.rebuildIndex) with the old index as evidence, after the
    /// last committed records were punched into a hole past which the kill's hole lies: the
    /// findings name the cut, as they do for zeros.
    @Test func rebuildIndexReportsPunchedCommittedRecords() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                var findings: [Int] = []
                for punch in [false, true] {
                    let sub = dir + "/\(punch)"
                    let (path, records) = try Self.populate(sub, count: 40)
                    let size = Self.fileSize(path)
                    if punch {
                        Self.setSize(path, size + (4 << 20))
                        Self.punch(path, records[30].lowerBound..<size + (4 << 20))
                    } else {
                        Self.writeBytes(
                            path, [UInt8](repeating: 0, count: Int(size - records[30].lowerBound)), at: records[30].lowerBound)
                    }
                    let report = try Store.rebuildIndex(directory: sub + "/store")
                    findings.append(report.findings.filter { $0.kind == .truncatedSegment }.count)
                    let store = try openWarmStore(sub) { $0.compactionInterval = nil }
                    for i in 0..<40 { #expect(Self.outcome(store, i) != .wrong) }
                    if punch {
                        let absent = (0..<40).filter { Self.outcome(store, $0) == .absent }
                        let fsckClean = try store.fsck().isClean
                        #expect(
                            absent.isEmpty || !fsckClean || !report.findings.isEmpty,
                            "committed \(absent) gone after the rebuild; rebuild findings \(report.findings.count), fsck clean \(fsckClean), open clean \(store.recoveryReport.isClean)"
                        )
                    }
                    try store.close()
                }
                #expect(findings[0] > 0)
                #expect(findings[1] > 0, "zeros: \(findings[0]) torn-tail findings; the same records as a hole: \(findings[1])")
            }
        }
    }

    /// 4. fsck with repair on an open store whose active segment has its hole: clean, nothing
    /// cut that holds a record, the writes go on.
    @Test func fsckRepairWithTheHoleOpen() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let store = try openWarmStore(dir, durability: .batched) { $0.compactionInterval = nil }
                for i in 0..<50 { try store.put(Self.value(i), for: key(i)) }
                try store.flush()
                #expect(try ZeroFillTests.active(store).size > ZeroFillTests.active(store).end)
                #expect(try store.fsck(repair: true).isClean)
                for i in 50..<100 { try store.put(Self.value(i), for: key(i)) }
                for i in 0..<100 { #expect(Self.outcome(store, i) == .same) }
                try store.close()
                let reopened = try openWarmStore(dir) { $0.compactionInterval = nil }
                #expect(reopened.recoveryReport.isClean)
                for i in 0..<100 { #expect(Self.outcome(reopened, i) == .same) }
                try reopened.close()
            }
        }
    }
}
