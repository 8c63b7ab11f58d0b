import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore
@testable import TrovePack

#if canImport(Glibc)
    import Glibc
#endif

/// File I/O that fails: ENOSPC, EIO and short writes injected at every step of puts, commit
/// cycles, compaction, fsck's repair and rebuilds, through the pack layer's fault seam; and a
/// real file system that fills up (a small tmpfs, when running as root) for SQLite's writes.
///
/// At every injected fault: the failing call throws a typed `StoreError`; nothing acknowledged
/// is lost; no wrong bytes are served; reads go on; the store works again once the fault clears.
@Suite(.serialized) struct FaultInjectionTests {
    /// Fails the `target`-th call of `operation` (and, with `sticky`, every one after it) until
    /// `clear()`.
    final class Schedule: Sendable {
        struct State {
            var count = 0
            var target = 0
            var sticky = false
            var cleared = false
            var injected = 0
        }
        let operation: FaultInjector.Operation
        let fault: FaultInjector.Fault
        let state = Locked(State())

        init(_ operation: FaultInjector.Operation, _ fault: FaultInjector.Fault, target: Int, sticky: Bool) {
            self.operation = operation
            self.fault = fault
            state.withLock {
                $0.target = target
                $0.sticky = sticky
            }
        }

        var injector: FaultInjector {
            FaultInjector { [self] operation, _ in
                guard operation == self.operation else { return nil }
                return state.withLock { s in
                    s.count += 1
                    guard !s.cleared, s.target > 0, s.count == s.target || (s.sticky && s.count > s.target) else { return nil }
                    s.injected += 1
                    return fault
                }
            }
        }

        func clear() { state.withLock { $0.cleared = true } }
        var calls: Int { state.withLock { $0.count } }
        var injected: Int { state.withLock { $0.injected } }
    }

    static let keys = (0..<12).map { CacheKey(url: "https://faults.example/\($0)") }

    /// The workload: puts (some large enough to rotate segments), removes, a compaction, a
    /// repair; in the middle the store is closed, two sealed segment files are swapped and
    /// garbage is appended to the active one (a torn write), so that reopening renames and
    /// truncates. Records what was acknowledged in `model`; every error must be a StoreError.
    static func workload(
        _ path: String, _ configure: (inout Store.Configuration) -> Void, model: inout [CacheKey: Data?], seed: UInt64
    ) -> [String] {
        var g = SeededGenerator(seed: seed)
        var untyped: [String] = []
        func open() -> Store? {
            do {
                return try openStore(path, segmentSize: 16 << 10) {
                    $0.compactionInterval = nil
                    configure(&$0)
                }
            } catch is StoreError {
                return nil
            } catch {
                untyped.append("\(error)")
                return nil
            }
        }
        guard var store = open() else { return untyped }
        for n in 0..<40 {
            let key = keys.randomElement(using: &g)!
            do {
                switch n % 10 {
                case 7:
                    if try store.remove(key) { model[key] = .some(nil) }
                case 8 where n == 18: try store.compact()
                case 9 where n == 29: _ = try store.fsck(repair: true)
                case 9 where n == 19:
                    try? store.close()
                    let files = StoreFiles(root: path)
                    let ids = try files.segmentIDs()
                    if let last = ids.last { try files.append(files.segment(last), Array(repeating: 0x5A, count: 40)) }
                    if ids.count >= 2 {
                        let (a, b) = (files.segment(ids[0]), files.segment(ids[1]))
                        try FileManager.default.moveItem(atPath: a, toPath: a + ".x")
                        try FileManager.default.moveItem(atPath: b, toPath: a)
                        try FileManager.default.moveItem(atPath: a + ".x", toPath: b)
                    }
                    guard let reopened = open() else { return untyped }
                    store = reopened
                default:
                    let value = Data(testBytes(seed: seed &* 1000 &+ UInt64(n), count: n % 5 == 0 ? 7000 : 600))
                    try store.put(value, for: key)
                    model[key] = .some(value)
                }
            } catch is StoreError {
                // Typed: allowed. The operation may or may not have taken effect (a put whose
                // record reached the pack is replayed later): drop the key from what is known.
                model[key] = nil
            } catch {
                untyped.append("\(error)")
            }
        }
        try? store.close()
        return untyped
    }

    /// Every key serves its acknowledged value; keys whose last operation failed serve one of
    /// the values it ever had or nothing — never wrong bytes. With `allowingReadErrors` (the
    /// fault is in opening or reading files), a read may instead fail with a typed I/O error.
    static func check(_ store: Store, model: [CacheKey: Data?], context: String, allowingReadErrors: Bool = false) -> Int {
        var problems = 0
        for key in keys {
            let served: Data?
            do { served = try store.data(for: key) } catch {
                if allowingReadErrors, let error = error as? StoreError, error.code == .io { continue }
                if model[key] != nil {
                    Issue.record("\(context): \(key) cannot be read: \(error)")
                    problems += 1
                }
                continue
            }
            if let expected = model[key], served != expected {
                Issue.record("\(context): \(key) served \(served?.count ?? -1) bytes, expected \(expected?.count ?? -1)")
                problems += 1
            }
        }
        return problems
    }

    @Test(arguments: [
        (FaultInjector.Operation.write, FaultInjector.Fault.error(ENOSPC)),
        (.write, .shortWrite(17, ENOSPC)),
        (.write, .error(EIO)),
        (.sync, .error(EIO)),
        (.sync, .error(ENOSPC)),
        (.open, .error(EMFILE)),
        (.rename, .error(EIO)),
        (.unlink, .error(EIO)),
        (.truncate, .error(EIO)),
        (.read, .error(EIO)),
    ])
    func aFaultAtEveryStepLosesNothingAcknowledged(operation: FaultInjector.Operation, fault: FaultInjector.Fault) async throws {
        try await withTemporaryDirectory { dir in
            // A clean run counts the calls of this kind.
            let counting = Schedule(operation, fault, target: 0, sticky: false)
            var cleanModel: [CacheKey: Data?] = [:]
            #expect(Self.workload(dir + "/clean", { $0.faultInjector = counting.injector }, model: &cleanModel, seed: 1).isEmpty)
            let calls = counting.calls
            #expect(calls > 0, "the workload never does \(operation)")
            var runs = 0
            // Every step (capped at 60, evenly spread), once failing once, once failing on.
            let step = max(1, calls / 60)
            for target in stride(from: 1, through: calls, by: step) {
                for sticky in [false, true] {
                    runs += 1
                    let path = dir + "/run"
                    try? FileManager.default.removeItem(atPath: path)
                    let schedule = Schedule(operation, fault, target: target, sticky: sticky)
                    var model: [CacheKey: Data?] = [:]
                    let context = "\(operation) \(fault) at call \(target)\(sticky ? " and after" : "")"
                    let untyped = Self.workload(path, { $0.faultInjector = schedule.injector }, model: &model, seed: 1)
                    #expect(untyped.isEmpty, "\(context): untyped errors \(untyped)")
                    // Reads go on while the fault is in place, in a store that has it.
                    if let faulted = try? openStore(path, segmentSize: 16 << 10, { $0.faultInjector = schedule.injector }) {
                        _ = Self.check(
                            faulted, model: model, context: context + ", faulted",
                            allowingReadErrors: [.open, .read].contains(operation))
                        // The fault clears: the store works again without reopening — unless a
                        // segment failed a sync, or the opening could not write the replayed
                        // tails again and sync them, after which it refuses writes until reopened
                        // (a retried sync could report bytes the disk lost as durable).
                        schedule.clear()
                        let after = Data("after \(target)".utf8)
                        let openedUnsynced = faulted.appender.withLock { $0.unsyncedTails != nil }
                        do {
                            try faulted.put(after, for: Self.keys[0])
                            model[Self.keys[0]] = .some(after)
                        } catch let error as StoreError
                            where (operation == .sync || openedUnsynced) && error.code == .syncFailed
                        {
                            let again = #expect(throws: StoreError.self, "\(context): a second put after a failed sync") {
                                try faulted.put(after, for: Self.keys[1])
                            }
                            #expect(again?.code == .syncFailed, "\(context)")
                        } catch {
                            Issue.record("\(context): a put after the fault cleared failed: \(error)")
                        }
                        _ = Self.check(faulted, model: model, context: context + ", cleared")
                        try? faulted.close()
                    }
                    // Reopened without faults: everything acknowledged is there.
                    let reopened = try openStore(path, segmentSize: 16 << 10) { $0.compactionInterval = nil }
                    _ = Self.check(reopened, model: model, context: context + ", reopened")
                    _ = try reopened.fsck(repair: true)
                    #expect(try reopened.fsck().isClean, "\(context)")
                    _ = Self.check(reopened, model: model, context: context + ", repaired")
                    try reopened.close()
                }
            }
            #expect(runs >= 2)
        }
    }

    /// A rebuild of the index that meets a fault fails with a typed error and leaves nothing
    /// half done: the next rebuild (or open) brings every entry back.
    @Test func aRebuildThatFailsCanBeRunAgain() async throws {
        try await withTemporaryDirectory { dir in
            var model: [CacheKey: Data?] = [:]
            #expect(Self.workload(dir, { _ in }, model: &model, seed: 2).isEmpty)
            for operation in [FaultInjector.Operation.write, .sync, .open, .read, .truncate, .rename] {
                let schedule = Schedule(operation, .error(EIO), target: 1, sticky: true)
                var configuration = Store.Configuration()
                configuration.faultInjector = schedule.injector
                do {
                    _ = try Store.rebuildIndex(directory: dir + "/store", configuration: configuration)
                } catch is StoreError {
                    // Typed.
                }
                let store = try openStore(dir, segmentSize: 16 << 10) { $0.compactionInterval = nil }
                _ = Self.check(store, model: model, context: "rebuild with \(operation) failing")
                try store.close()
            }
        }
    }

    // MARK: A real full disk

    static var isRoot: Bool { getuid() == 0 }

    /// Mounts a tmpfs of `megabytes` at `path` for `body`.
    static func withTmpfs(_ path: String, megabytes: Int, _ body: () throws -> Void) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let mount = try runProcessBlocking("/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", path])
        guard mount.status == 0 else {
            Issue.record("cannot mount a tmpfs: \(mount.stderrText)")
            return
        }
        defer { _ = try? runProcessBlocking("/bin/umount", [path]) }
        try body()
    }

    /// Fills the file system of `path` until at most `free` bytes remain.
    static func fill(_ path: String, leaving free: Int) throws {
        var st = statvfs()
        guard statvfs(path, &st) == 0 else { return }
        let available = Int(st.f_bavail) * Int(st.f_frsize)
        let size = max(0, available - free)
        let fd = open(path + "/ballast", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        defer { close(fd) }
        let chunk = [UInt8](repeating: 0xAA, count: 1 << 16)
        var written = 0
        while written < size {
            let n = chunk.withUnsafeBytes { write(fd, $0.baseAddress, min($0.count, size - written)) }
            if n <= 0 { break }
            written += n
        }
    }

    /// Reads keep working on a full disk; writes fail with a typed error; a put whose index
    /// commit failed (its record in the pack: a `full` put is acknowledged once it is synced,
    /// before the index catches up) takes effect once there is room again — the rule
    /// Docs/Architecture.md states — and everything acknowledged is kept.
    @Test(.enabled(if: isRoot, "mounting a tmpfs needs root"))
    func aFullDiskKeepsReadsAndLosesNothing() async throws {
        try await withTemporaryDirectory { dir in
            let mount = dir + "/fs"
            try Self.withTmpfs(mount, megabytes: 8) {
                var model: [CacheKey: Data?] = [:]
                var outcomes: [String] = []
                for free in [0, 4 << 10, 16 << 10, 32 << 10, 48 << 10, 64 << 10, 96 << 10, 300 << 10] {
                    var failedAt: StoreError.Code?
                    let storePath = mount + "/store"
                    try? FileManager.default.removeItem(atPath: storePath)
                    try? FileManager.default.removeItem(atPath: mount + "/ballast")
                    model = [:]
                    let store = try Store(directory: storePath, configuration: Store.Configuration(durability: .full))
                    for (i, key) in Self.keys.enumerated() {
                        let value = Data(testBytes(seed: UInt64(i), count: 20_000))
                        try store.put(value, for: key)
                        model[key] = .some(value)
                    }
                    try store.close()
                    try Self.fill(mount, leaving: free)
                    let context = "\(free) bytes free"
                    // Opening, reading and closing need no space.
                    do {
                        let full = try Store(directory: storePath, configuration: Store.Configuration(durability: .full))
                        #expect(Self.check(full, model: model, context: context) == 0)
                        // A put fails with a typed error — or, when its record fits, succeeds.
                        let late = Data(testBytes(seed: 99, count: 40_000))
                        do {
                            try full.put(late, for: Self.keys[1])
                            model[Self.keys[1]] = .some(late)
                            // Acknowledged once its record is synced: the index catches up
                            // after, and its commit is what the full disk refuses.
                            do {
                                try full.flush()
                            } catch let error as StoreError {
                                #expect(error.code == .index, "\(context): \(error)")
                                failedAt = .index
                            }
                        } catch let error as StoreError {
                            #expect([.io, .index].contains(error.code), "\(context): \(error)")
                            failedAt = error.code
                            model[Self.keys[1]] = nil  // checked below, by the rule
                        }
                        // Reads still work after the failed write, in the same store.
                        #expect(Self.check(full, model: model, context: context + ", after the put") == 0)
                        try? full.close()
                    } catch {
                        Issue.record("\(context): opening on a full disk failed: \(error)")
                    }
                    // Opened again while the disk is still full: a replay that cannot be written
                    // waits in memory — reads see it — for the first commit that finds space.
                    do {
                        let again = try Store(directory: storePath)
                        #expect(Self.check(again, model: model, context: context + ", reopened full") == 0)
                        if failedAt == .index {
                            #expect(try again.data(for: Self.keys[1]) == Data(testBytes(seed: 99, count: 40_000)), "\(context)")
                            outcomes.append("\(free): reopened full, the replay waits in memory")
                        }
                        try? again.close()
                    } catch {
                        Issue.record("\(context): reopening on a full disk failed: \(error)")
                    }
                    // Room again: everything acknowledged is there, and the store works.
                    try FileManager.default.removeItem(atPath: mount + "/ballast")
                    let roomy = try Store(directory: storePath)
                    #expect(Self.check(roomy, model: model, context: context + ", space freed") == 0)
                    // The rule for a put that failed: if its record never reached the pack (the
                    // pack write failed), it has no effect; if it did (the index commit failed),
                    // it takes effect once the index catches up.
                    let served = try roomy.data(for: Self.keys[1])
                    switch failedAt {
                    case .io?:
                        #expect(served == Data(testBytes(seed: 1, count: 20_000)), "\(context)")
                        outcomes.append("\(free): pack write failed, no effect")
                    case .index?:
                        #expect(served == Data(testBytes(seed: 99, count: 40_000)), "\(context)")
                        outcomes.append("\(free): index commit failed, took effect later")
                    default:
                        #expect(served == Data(testBytes(seed: 99, count: 40_000)), "\(context)")
                        outcomes.append("\(free): stored")
                    }
                    try roomy.put(Data("works".utf8), for: Self.keys[2])
                    #expect(try roomy.data(for: Self.keys[2]) == Data("works".utf8))
                    #expect(try roomy.fsck().findings.allSatisfy(\.repaired))
                    try roomy.close()
                }
                print("full disk: " + outcomes.joined(separator: "; "))
                // Both kinds of failure happened (otherwise the rule above went untested).
                #expect(outcomes.contains { $0.contains("pack write failed") })
                #expect(outcomes.contains { $0.contains("index commit failed") })
                #expect(outcomes.contains { $0.contains("the replay waits in memory") })
            }
        }
    }

    /// On a full disk, a put and a removal whose index commit failed are seen by every way of
    /// looking at the store — reads, `forEachEntry`, `entries(url:)` — in the store that made
    /// them and after reopening while the disk is still full (the replay waits in memory);
    /// `statistics()` and a check without repair run there too.
    @Test(.enabled(if: isRoot, "mounting a tmpfs needs root"))
    func aFullDiskKeepsListingsTrue() async throws {
        try await withTemporaryDirectory { dir in
            let mount = dir + "/fs"
            try Self.withTmpfs(mount, megabytes: 8) {
                var sawIndexFailure = false
                for free in [0, 4 << 10, 8 << 10, 16 << 10, 24 << 10, 32 << 10, 48 << 10, 64 << 10] {
                    let storePath = mount + "/store"
                    try? FileManager.default.removeItem(atPath: storePath)
                    try? FileManager.default.removeItem(atPath: mount + "/ballast")
                    var model: [CacheKey: Data] = [:]
                    do {
                        let store = try Store(directory: storePath, configuration: Store.Configuration(durability: .full))
                        for (i, key) in Self.keys.prefix(6).enumerated() {
                            let value = Data(testBytes(seed: UInt64(i), count: 3_000))
                            try store.put(value, for: key)
                            model[key] = value
                        }
                        try store.close()
                    }
                    try Self.fill(mount, leaving: free)
                    let context = "\(free) bytes free"
                    let full = try Store(directory: storePath, configuration: Store.Configuration(durability: .full))
                    var pending = false
                    let late = Data("late".utf8)
                    do {
                        try full.put(late, for: Self.keys[1])
                        model[Self.keys[1]] = late
                    } catch let error as StoreError where error.code == .index {
                        model[Self.keys[1]] = late  // its record is in the pack: it takes effect
                        pending = true
                    } catch is StoreError {
                        continue  // not even the record fit: nothing to see here
                    }
                    do {
                        #expect(try full.remove(Self.keys[2]))
                        model[Self.keys[2]] = nil
                    } catch let error as StoreError where error.code == .index {
                        model[Self.keys[2]] = nil
                        pending = true
                    } catch is StoreError {}
                    // Acknowledged once synced: the index commit the full disk refuses is the
                    // flush's (or a back-pressured write's, above).
                    do {
                        try full.flush()
                    } catch let error as StoreError where error.code == .index {
                        pending = true
                    } catch is StoreError {}
                    guard pending else {
                        try? full.close()
                        continue
                    }
                    sawIndexFailure = true
                    func expectListed(_ store: Store, _ when: String) throws {
                        for key in Self.keys.prefix(6) {
                            #expect(try store.data(for: key) == model[key], "\(context), \(when): \(key)")
                        }
                        var listed: [CacheKey: Int] = [:]
                        try store.forEachEntry { listed[$0.key] = $0.cost }
                        #expect(Set(listed.keys) == Set(model.keys), "\(context), \(when): forEachEntry")
                        #expect(listed[Self.keys[1]] == late.count, "\(context), \(when): the late put's entry")
                        #expect(try store.entries(url: Self.keys[2].url).isEmpty, "\(context), \(when): entries(url:)")
                        _ = try store.statistics()
                        _ = try store.fsck()
                    }
                    try expectListed(full, "in the store that wrote")
                    try? full.close()
                    let again = try Store(directory: storePath)
                    try expectListed(again, "reopened full")
                    try? again.close()
                    try FileManager.default.removeItem(atPath: mount + "/ballast")
                    let roomy = try Store(directory: storePath)
                    try expectListed(roomy, "space freed")
                    #expect(try roomy.fsck().findings.allSatisfy(\.repaired), "\(context)")
                    try roomy.close()
                }
                #expect(sawIndexFailure, "no index commit failed: the listings on a full disk went untested")
            }
        }
    }

    /// `--rebuild-index` on a full disk fails with a typed error and leaves the old index in
    /// place: the store opens and serves everything as before.
    @Test(.enabled(if: isRoot, "mounting a tmpfs needs root"))
    func aRebuildOnAFullDiskKeepsTheOldIndex() async throws {
        try await withTemporaryDirectory { dir in
            let mount = dir + "/fs"
            try Self.withTmpfs(mount, megabytes: 8) {
                let storePath = mount + "/store"
                var model: [CacheKey: Data?] = [:]
                do {
                    let store = try Store(directory: storePath)
                    for (i, key) in Self.keys.enumerated() {
                        let value = Data(testBytes(seed: UInt64(i), count: 5_000))
                        try store.put(value, for: key)
                        model[key] = .some(value)
                    }
                    try store.close()
                }
                try Self.fill(mount, leaving: 0)
                do {
                    _ = try Store.rebuildIndex(directory: storePath)
                    Issue.record("the rebuild succeeded on a full disk")
                } catch let error as StoreError {
                    #expect([.io, .index].contains(error.code), "\(error)")
                }
                #expect(FileManager.default.fileExists(atPath: storePath + "/index.sqlite"))
                let names = try FileManager.default.contentsOfDirectory(atPath: storePath)
                #expect(!names.contains { $0.contains(".damaged-") }, "\(names)")
                let store = try Store(directory: storePath)
                #expect(!store.recoveryReport.rebuiltIndex)
                #expect(Self.check(store, model: model, context: "after the failed rebuild") == 0)
                try store.close()
                try FileManager.default.removeItem(atPath: mount + "/ballast")
                _ = try Store.rebuildIndex(directory: storePath)
                let rebuilt = try Store(directory: storePath)
                #expect(Self.check(rebuilt, model: model, context: "rebuilt with room") == 0)
            }
        }
    }
}
