import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

@testable import TroveIndex
@testable import TrovePack
@_spi(Testing) @testable import TroveStore

#if canImport(Glibc)
    import Glibc
#endif

/// Tracks, through the fault injector, what a sync has made durable: for a segment file, its
/// size when a sync of it began (the tracker runs its own fdatasync first); for the packs
/// directory, the names listed when an fsync of it began. Only syncs not failed by the
/// injector count.
final class DurabilityTracker: Sendable {
    struct State {
        var size: [String: UInt64] = [:]
        var names: Set<String> = []
        var segmentSyncs = 0
        var directorySyncs = 0
        var failedSegmentAt: Int? = nil
        var failedDirectoryAt: Int? = nil
    }
    let state = Locked(State())
    let packs: String
    /// Fail this segment sync (1-based), once.
    let failSegmentSync: Int?
    /// Fail this directory sync (1-based), once.
    let failDirectorySync: Int?
    let delayMicros: UInt32

    init(packs: String, failSegmentSync: Int? = nil, failDirectorySync: Int? = nil, delayMicros: UInt32 = 0) {
        self.packs = packs
        self.failSegmentSync = failSegmentSync
        self.failDirectorySync = failDirectorySync
        self.delayMicros = delayMicros
    }

    var injector: FaultInjector {
        FaultInjector { [self] operation, path in
            guard operation == .sync else { return nil }
            if delayMicros > 0 { usleep(delayMicros) }
            if path.hasSuffix(".pack") {
                let n = state.withLock {
                    $0.segmentSyncs += 1; return $0.segmentSyncs
                }
                if n == failSegmentSync {
                    state.withLock { $0.failedSegmentAt = n }
                    return .error(EIO)
                }
                var info = stat()
                guard stat(path, &info) == 0 else { return nil }
                let fd = open(path, O_RDONLY)
                guard fd >= 0 else { return nil }
                defer { close(fd) }
                guard fdatasync(fd) == 0 else { return nil }
                state.withLock { $0.size[path] = max($0.size[path] ?? 0, UInt64(info.st_size)) }
                return nil
            } else {
                let n = state.withLock {
                    $0.directorySyncs += 1; return $0.directorySyncs
                }
                if n == failDirectorySync {
                    state.withLock { $0.failedDirectoryAt = n }
                    return .error(EIO)
                }
                let names = Set((try? FileManager.default.contentsOfDirectory(atPath: packs)) ?? [])
                state.withLock { $0.names.formUnion(names) }
                return nil
            }
        }
    }

    /// Seeds what opening made durable (it syncs before it returns).
    func seed() {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: packs)) ?? []
        state.withLock { s in
            for name in names where name.hasSuffix(".pack") {
                let path = packs + "/" + name
                var info = stat()
                if stat(path, &info) == 0 { s.size[path] = max(s.size[path] ?? 0, UInt64(info.st_size)) }
                s.names.insert(name)
            }
        }
    }

    /// nil when bytes before `end` of `segment` are durable and its directory entry is; else why not.
    func problem(segment: UInt32, end: UInt64) -> String? {
        let path = PackDirectory.segmentPath(segment, in: packs)
        let name = (path as NSString).lastPathComponent
        return state.withLock { s in
            if (s.size[path] ?? 0) < end { return "segment \(segment) durable to \(s.size[path] ?? 0), needs \(end)" }
            if !s.names.contains(name) { return "segment \(segment)'s directory entry never synced" }
            return nil
        }
    }
}

/// An outside attack on `full`'s shared syncs (a `full` write returns once a sync of the pack
/// covers its records, not after the index commit): with 4 KiB segments (most writes rotate),
/// values repeated (most puts link to a blob in an older segment), compaction running beside,
/// failed syncs of segments and of the packs directory, and `close()` racing the writers, every
/// acknowledged put, removal and metadata update is durable as it returns — its bytes and its
/// segment's directory entry — and no committed row points at bytes that are not.
@Suite(.serialized) struct FullSyncAttackTests {
    /// Starts `count` writer threads, each running `body` with its number; the group ends when
    /// all have returned.
    static func startWriters(_ count: Int = 6, _ body: @escaping @Sendable (Int) -> Void) -> DispatchGroup {
        let group = DispatchGroup()
        for w in 0..<count {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                body(w)
            }
        }
        return group
    }

    /// Checks a just-acknowledged put: its link and its blob (which dedup may have put in an older segment).
    static func putProblem(_ store: Store, _ key: CacheKey, _ tracker: DurabilityTracker) -> String? {
        if let slot = store.shared.withLock({ $0.map.slot(for: key) }), case .present(let e) = slot {
            if let p = tracker.problem(segment: e.entry.linkSegment, end: e.entry.linkOffset + e.entry.linkLength) {
                return "link: \(p)"
            }
            if let p = tracker.problem(segment: e.blob.segment, end: e.blob.offset + e.blob.recordBytes) {
                return "blob: \(p)"
            }
            return nil
        }
        if let q = CommitCycleTests.queuedEnd(store, key) { return tracker.problem(segment: q.segment, end: q.end) }
        return nil
    }

    /// Every committed row points at durable bytes with a durable directory entry.
    static func indexProblems(_ dir: String, _ tracker: DurabilityTracker) -> [String] {
        guard let index = try? IndexDatabase(path: dir + "/store/index.sqlite", readOnly: true) else { return [] }
        var problems: [String] = []
        do {
            try index.reading {
                for row in try index.entryRows() {
                    if let p = tracker.problem(segment: row.linkSegment, end: row.linkOffset + row.linkLength) {
                        problems.append("committed link row \(row.key): \(p)")
                    }
                }
                for blob in try index.blobRows() {
                    if let p = tracker.problem(segment: blob.segment, end: blob.offset + blob.recordBytes) {
                        problems.append("committed blob row \(blob.id): \(p)")
                    }
                }
                for seg in try index.segments() {
                    if let p = tracker.problem(segment: seg.id, end: seg.indexedBytes) {
                        problems.append("committed segment row \(seg.id): \(p)")
                    }
                }
            }
        } catch {}
        return problems
    }

    /// Many full writers, small segments (rotation on most puts), dedup onto blobs in older
    /// segments, removals, metadata updates, and compaction passes all running at once.
    @Test(arguments: [false, true])
    func everyAcknowledgedFullWriteIsDurable(compacting: Bool) async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let tracker = DurabilityTracker(packs: dir + "/store/packs", delayMicros: 300)
                let store = try openStore(dir, durability: .full, segmentSize: 4096) { c in
                    c.compactionInterval = nil
                    c.batchInterval = .milliseconds(20)
                    c.faultInjector = tracker.injector
                }
                tracker.seed()
                let problems = Locked<[String]>([])
                let stop = Locked(false)
                let values = (0..<6).map { Data(testBytes(seed: UInt64(100 + $0), count: 700 + $0 * 150)) }
                let group = Self.startWriters { w in
                    for j in 0..<60 {
                        let k = key(w * 10_000 + j)
                        do {
                            try store.put(values[(w + j) % values.count], for: k)
                            if let p = Self.putProblem(store, k, tracker) {
                                problems.withLock { $0.append("put \(k): \(p)") }
                            }
                            if j % 4 == 3 {
                                try store.remove(k)
                                if let q = CommitCycleTests.queuedEnd(store, k),
                                    let p = tracker.problem(segment: q.segment, end: q.end)
                                {
                                    problems.withLock { $0.append("remove \(k): \(p)") }
                                }
                            } else if j % 4 == 1 {
                                try store.updateMetadata(EntryMetadata(etag: "\"e\(j)\""), for: k)
                                if let p = Self.putProblem(store, k, tracker) {
                                    problems.withLock { $0.append("update \(k): \(p)") }
                                }
                            }
                        } catch {
                            problems.withLock { $0.append("\(k): unexpected error \(error)") }
                        }
                    }
                }
                let side = DispatchGroup()
                side.enter()
                Thread.detachNewThread {
                    defer { side.leave() }
                    while !stop.withLock({ $0 }) {
                        let found = Self.indexProblems(dir, tracker)
                        if !found.isEmpty { problems.withLock { $0.append(contentsOf: found) } }
                        if compacting { _ = try? store.compact() }
                        usleep(2_000)
                    }
                }
                let finished = group.wait(timeout: .now() + 240) == .success
                stop.withLock { $0 = true }
                _ = side.wait(timeout: .now() + 60)
                #expect(finished, "writers hung (deadlock?)")
                let p = problems.withLock { $0 }
                #expect(p.isEmpty, "\(p.count) problems: \(p.prefix(10))")
                try store.close()
                let unsynced = 0
                _ = unsynced
            }
        }
    }

    /// After a failed segment fdatasync, no put that starts later succeeds, and every put that
    /// did succeed is durable; every error is a StoreError (later ones syncFailed).
    @Test(arguments: [3, 10, 25])
    func noSuccessAfterAFailedSync(failAt: Int) async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let tracker = DurabilityTracker(packs: dir + "/store/packs", failSegmentSync: failAt, delayMicros: 200)
                let store = try openStore(dir, durability: .full, segmentSize: 4096) { c in
                    c.compactionInterval = nil
                    c.batchInterval = .milliseconds(30)
                    c.faultInjector = tracker.injector
                }
                tracker.seed()
                let problems = Locked<[String]>([])
                let codes = Locked<[String: Int]>([:])
                let group = Self.startWriters { w in
                    for j in 0..<40 {
                        let k = key(w * 10_000 + j)
                        let failedBefore = tracker.state.withLock { $0.failedSegmentAt != nil }
                        do throws(StoreError) {
                            try store.put(Data(testBytes(seed: UInt64(w * 1000 + j), count: 900)), for: k)
                            if failedBefore {
                                problems.withLock { $0.append("put \(k) started after the failure and succeeded") }
                            }
                            if let p = Self.putProblem(store, k, tracker) {
                                problems.withLock { $0.append("put \(k): \(p)") }
                            }
                        } catch {
                            codes.withLock { $0["\(error.code)", default: 0] += 1 }
                            if failedBefore && error.code != .syncFailed {
                                problems.withLock { $0.append("put \(k) after failure: \(error.code) \(error)") }
                            }
                        }
                    }
                }
                #expect(group.wait(timeout: .now() + 240) == .success, "hung")
                let p = problems.withLock { $0 }
                #expect(p.isEmpty, "\(p.count): \(p.prefix(8))")
                #expect(tracker.state.withLock { $0.failedSegmentAt } != nil)
                print("codes after segment failure at \(failAt): \(codes.withLock { $0 })")
                try? store.close()
                let found = Self.indexProblems(dir, tracker)
                #expect(found.isEmpty, "\(found.prefix(5))")
            }
        }
    }

    /// A failed fsync of the packs directory: no put whose segment's entry was never synced returns success.
    @Test(arguments: [1, 2, 5])
    func aFailedDirectorySync(failAt: Int) async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let tracker = DurabilityTracker(packs: dir + "/store/packs", delayMicros: 200)
                // Fail the failAt-th directory sync after opening.
                let afterOpen = Locked(false)
                let dirSyncs = Locked(0)
                let base = tracker.injector
                let failures = Locked(0)
                let store = try openStore(dir, durability: .full, segmentSize: 4096) { c in
                    c.compactionInterval = nil
                    c.batchInterval = .milliseconds(30)
                    c.faultInjector = FaultInjector { op, path in
                        if op == .sync, !path.hasSuffix(".pack"), afterOpen.withLock({ $0 }) {
                            let n = dirSyncs.withLock {
                                $0 += 1; return $0
                            }
                            if n == failAt { failures.withLock { $0 += 1 }; return .error(EIO) }
                        }
                        return base.fault(op, path)
                    }
                }
                tracker.seed()
                afterOpen.withLock { $0 = true }
                let problems = Locked<[String]>([])
                let codes = Locked<[String: Int]>([:])
                let group = Self.startWriters { w in
                    for j in 0..<30 {
                        let k = key(w * 10_000 + j)
                        do throws(StoreError) {
                            try store.put(Data(testBytes(seed: UInt64(w * 1000 + j), count: 900)), for: k)
                            if let p = Self.putProblem(store, k, tracker) {
                                problems.withLock { $0.append("put \(k): \(p)") }
                            }
                        } catch {
                            codes.withLock { $0["\(error.code)", default: 0] += 1 }
                        }
                    }
                }
                #expect(group.wait(timeout: .now() + 240) == .success, "hung")
                let p = problems.withLock { $0 }
                #expect(p.isEmpty, "\(p.count): \(p.prefix(8))")
                print(
                    "dir failure at \(failAt): failures \(failures.withLock { $0 }), codes \(codes.withLock { $0 }), bg \(String(describing: store.backgroundError?.code))"
                )
                try? store.close()
            }
        }
    }

    /// close() racing full writers: no hang, every acknowledged put durable, errors are .closed.
    @Test func closeRacingFullWriters() async throws {
        for round in 0..<4 {
            try await withTemporaryDirectory { dir in
                try await offPool {
                    let tracker = DurabilityTracker(packs: dir + "/store/packs", delayMicros: 500)
                    let store = try openStore(dir, durability: .full, segmentSize: 4096) { c in
                        c.compactionInterval = nil
                        c.faultInjector = tracker.injector
                    }
                    tracker.seed()
                    let problems = Locked<[String]>([])
                    let acknowledged = Locked<[Int]>([])
                    let group = Self.startWriters { w in
                        for j in 0..<200 {
                            let i = w * 10_000 + j
                            do throws(StoreError) {
                                try store.put(value(i, size: 800), for: key(i))
                                acknowledged.withLock { $0.append(i) }
                                if let p = Self.putProblem(store, key(i), tracker) {
                                    problems.withLock { $0.append("put \(i): \(p)") }
                                }
                            } catch {
                                if error.code != .closed { problems.withLock { $0.append("\(i): \(error.code) \(error)") } }
                                return
                            }
                        }
                    }
                    usleep(UInt32(20_000 + round * 30_000))
                    try store.close()
                    #expect(group.wait(timeout: .now() + 120) == .success, "writers hung after close")
                    let p = problems.withLock { $0 }
                    #expect(p.isEmpty, "\(p.prefix(8))")
                    let reopened = try openStore(dir, durability: .full, segmentSize: 4096)
                    for i in acknowledged.withLock({ $0 }) {
                        #expect(try reopened.data(for: key(i)) == value(i, size: 800), "lost \(i)")
                    }
                    try reopened.close()
                }
            }
        }
    }

    /// `none` keeps no list of unsynced segments; `batched` lets a commit empty it.
    @Test(arguments: [Durability.none, .batched, .full])
    func noUnsyncedSegmentListGrowth(durability: Durability) async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let store = try openStore(dir, durability: durability, segmentSize: 4096) { c in
                    c.compactionInterval = nil
                }
                for i in 0..<300 { try store.put(value(i, size: 1500), for: key(i)) }
                try store.flush()
                let (sealed, creations) = store.appender.withLock { s in
                    let u = s.unsynced()
                    return (u.sealed.count, u.creations)
                }
                print("\(durability): sealed \(sealed) creations \(creations)")
                #expect(sealed == 0 && creations == 0, "\(durability) keeps \(sealed) unsynced segments")
                try store.close()
            }
        }
    }
}
