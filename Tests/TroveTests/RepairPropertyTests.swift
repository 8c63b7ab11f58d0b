import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

@testable import TroveStore
@testable import TroveIndex
@testable import TrovePack

/// Repair and recovery tested by properties, the way SQLite's and LevelDB's corruption tests
/// do it: random stores (puts, overwrites, removes, shared contents, compactions, reopenings, a
/// value an attacker chose to look like records), random damage (byte flips, flips an attacker
/// would choose, truncations, deleted, swapped and duplicated segments, a lost, damaged or
/// edited index), then opening, `fsck --repair`, `--rebuild-index` and a compaction in random
/// order. After every step, for every key:
///
/// - the store serves the newest value acknowledged for it, or nothing (or a typed error);
/// - never another key's bytes;
/// - never an older or removed value — unless the damage destroyed every trace of the newer
///   write, in the index *and* in the packs, so that nothing on disk can tell (then the store
///   must have reported damage); these cases are counted separately;
/// - after `fsck --repair`, a second `fsck` is clean.
///
/// `TROVE_REPAIR_SEED=n` runs the cases of store `n` alone (to reproduce a failure);
/// `TROVE_REPAIR_KEEP=dir` keeps a copy of each failing case's damaged store in `dir`;
/// `TROVE_REPAIR_CASES` sets the number of damage cases (default 3000); the last line of the
/// test's output gives the counts.
@Suite struct RepairPropertyTests {
    static let cases = ProcessInfo.processInfo.environment["TROVE_REPAIR_CASES"].flatMap { Int($0) } ?? 3000
    static let casesPerStore = 15

    static let keys: [CacheKey] = (0..<8).flatMap { i in
        ["", "w64"].map { CacheKey(url: "https://prop.example/\(i).jpg", variant: $0) }
    }

    /// Every value acknowledged for each key, oldest first; nil for a removal.
    typealias Model = [CacheKey: [Data?]]

    struct Totals: Sendable {
        var cases = 0
        var steps = 0
        var keyChecks = 0
        var violations = 0
        var olderValuesWhereAllTraceWasLost = 0
        var casesWithIndexAndPackDamage = 0
    }

    @Test func repairNeverServesWrongOlderOrRemovedBytes() async throws {
        let stores = max(1, Self.cases / Self.casesPerStore)
        let totals = Locked(Totals())
        try await withTemporaryDirectory { dir in
            try await withThrowingTaskGroup(of: Void.self) { group in
                let width = max(2, ProcessInfo.processInfo.activeProcessorCount)
                let only = ProcessInfo.processInfo.environment["TROVE_REPAIR_SEED"].flatMap { Int($0) }
                for seed in only.map({ $0...$0 }) ?? 0...(stores - 1) {
                    if seed >= width { try await group.next() }
                    // Each store runs on a thread of its own, not on the cooperative pool: a
                    // minutes-long synchronous run there starves every other suite's tasks.
                    group.addTask {
                        let result = try await offPool { try Self.run(seed: UInt64(seed), in: dir + "/s\(seed)") }
                        totals.withLock {
                            $0.cases += result.cases
                            $0.steps += result.steps
                            $0.keyChecks += result.keyChecks
                            $0.violations += result.violations
                            $0.olderValuesWhereAllTraceWasLost += result.olderValuesWhereAllTraceWasLost
                            $0.casesWithIndexAndPackDamage += result.casesWithIndexAndPackDamage
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        let t = totals.withLock { $0 }
        print(
            "repair property: \(t.cases) cases, \(t.steps) steps, \(t.keyChecks) key checks, \(t.violations) violations; "
                + "\(t.casesWithIndexAndPackDamage) cases damaged both index and packs, in which "
                + "\(t.olderValuesWhereAllTraceWasLost) older values were served with every trace of the newer write gone")
        #expect(t.violations == 0)
        if ProcessInfo.processInfo.environment["TROVE_REPAIR_SEED"] == nil { #expect(t.cases >= stores * Self.casesPerStore) }
    }

    /// One generated store and its damage cases.
    static func run(seed: UInt64, in dir: String) throws -> Totals {
        var totals = Totals()
        let pristine = dir + "/pristine"
        let model = try makeStore(pristine, seed: seed)
        var generator = SeededGenerator(seed: seed &* 7919 &+ 13)
        for variant in 0..<casesPerStore {
            let work = dir + "/case\(variant)"
            try? FileManager.default.removeItem(atPath: work)
            try FileManager.default.copyItem(atPath: pristine, toPath: work)
            var damage = Damage()
            try damage.apply(to: work, model: model, using: &generator)
            let context = "seed \(seed) case \(variant) [\(damage.log.joined(separator: "; "))]"
            if ProcessInfo.processInfo.environment["TROVE_REPAIR_VERBOSE"] != nil { print("case: \(context)") }
            totals.cases += 1
            if damage.index && damage.packs { totals.casesWithIndexAndPackDamage += 1 }
            var checker = Checker(model: model, damage: damage, context: context)
            let keep = ProcessInfo.processInfo.environment["TROVE_REPAIR_KEEP"]
            if keep != nil { try FileManager.default.copyItem(atPath: work, toPath: work + "-damaged") }
            try checker.runSteps(on: work, using: &generator)
            if let keep {
                let damaged = work + "-damaged"
                if checker.violations > 0 {
                    let kept = keep + "/seed\(seed)-case\(variant)"
                    try? FileManager.default.removeItem(atPath: kept)
                    try FileManager.default.moveItem(atPath: damaged, toPath: kept)
                    print("kept: \(kept)")
                } else {
                    try? FileManager.default.removeItem(atPath: damaged)
                }
            }
            totals.steps += checker.steps
            totals.keyChecks += checker.keyChecks
            totals.violations += checker.violations
            totals.olderValuesWhereAllTraceWasLost += checker.excusedOlderValues
            try? FileManager.default.removeItem(atPath: work)
        }
        return totals
    }

    // MARK: The store

    static func configuration(seed: UInt64) -> Store.Configuration {
        var configuration = Store.Configuration(durability: Durability.allCases[Int(seed % 3)])
        configuration.segmentSize = Int64(3000 + (seed % 7) * 1500)
        configuration.compactionInterval = nil
        // Large values are read into kept buffers (ReadBuffers) unless the budget is 0; a small
        // budget keeps one buffer at a time.
        configuration.readBufferRetention = [8 << 20, 0, 300_000][Int(seed / 3 % 3)]
        return configuration
    }

    static func makeStore(_ path: String, seed: UInt64) throws -> Model {
        var g = SeededGenerator(seed: seed)
        var model = Model()
        let configuration = configuration(seed: seed)
        var store = try Store(directory: path, configuration: configuration)
        let shared = (0..<3).map { Data(testBytes(seed: 90_000 + UInt64($0), count: 700)) }
        let attack = attackerValue(victim: keys[0])
        var version: UInt64 = 0
        for _ in 0..<Int.random(in: 30...80, using: &g) {
            let key = keys.randomElement(using: &g)!
            let roll = Int.random(in: 0..<100, using: &g)
            if roll < 60 {
                version += 1
                let kind = Int.random(in: 0..<100, using: &g)
                let value: Data =
                    kind < 20
                    ? shared.randomElement(using: &g)!
                    : kind < 24
                        ? attack
                        // Large enough to be read into a kept buffer, whose last value's bytes a
                        // damaged read must never serve.
                        : kind < 30
                            ? Data(testBytes(seed: seed << 24 | version, count: Int.random(in: 65_536...140_000, using: &g)))
                            : Data(testBytes(seed: seed << 24 | version, count: Int.random(in: 0...2500, using: &g)))
                try store.put(value, for: key, metadata: EntryMetadata(etag: "v\(version)"))
                model[key, default: []].append(value)
            } else if roll < 75 {
                if try store.remove(key) { model[key, default: []].append(nil) }
            } else if roll < 80 {
                let removed = try store.removeAll(url: key.url)
                var count = 0
                for other in keys where other.url == key.url && model[other]?.last != nil && model[other]?.last != .some(nil) {
                    model[other, default: []].append(nil)
                    count += 1
                }
                #expect(removed == count, "seed \(seed): removeAll")
            } else if roll < 88 {
                try store.compact()
            } else if roll < 93 {
                try store.close()
                store = try Store(directory: path, configuration: configuration)
            } else {
                _ = try store.data(for: key)
            }
        }
        try store.close()
        return model
    }

    /// Bytes that carry well-formed records of another store: a blob, and a link for `victim`
    /// with a huge sequence that would win any replay — if a scan ever took them for records.
    static func attackerValue(victim: CacheKey) -> Data {
        let format = SegmentFormat.version2(secret: PackSecret(first: 0xBAD, second: 0xF00D))
        let payload = Array("attacker's bytes".utf8)
        let hash = ContentHash(hashing: payload)
        var bytes: [UInt8] = []
        for offset in stride(from: UInt64(48), to: 2000, by: 97) {
            let blobHeader = RecordCodec.header(
                identity: RecordIdentity(type: .blob, sequence: 1 << 41, digest: hash), bodyLength: payload.count,
                bodyChecksum: payload.withUnsafeBytes { XXH3.hash64($0, seed: format.bodySeed(.blob)) }, format: format,
                segment: 1, offset: offset)
            let link = LinkRecord(
                url: victim.url, variant: victim.variant, blobHash: hash, blobLength: UInt64(payload.count), blobID: 1 << 41,
                sequence: 1 << 42, createdAt: 0)
            let body = RecordCodec.linkBody(link)
            let linkHeader = RecordCodec.header(
                identity: RecordIdentity(type: .link, sequence: link.sequence, digest: victim.digest), bodyLength: body.count,
                bodyChecksum: body.withUnsafeBytes { XXH3.hash64($0, seed: format.bodySeed(.link)) }, format: format,
                segment: 1, offset: offset + 100)
            bytes += blobHeader + payload + linkHeader + body + Array("TRVR".utf8)
        }
        return Data(bytes)
    }

    // MARK: Damage

    struct Damage {
        var log: [String] = []
        /// The packs lost or damaged bytes (renamed and copied files lose nothing).
        var packs = false
        /// The index was lost or damaged as a file (deleted, bytes flipped): what it knew may be
        /// gone. An index whose rows were edited still knows what it committed.
        var index = false

        mutating func apply(to store: String, model: Model, using g: inout SeededGenerator) throws {
            let packsPath = store + "/packs"
            for _ in 0..<Int.random(in: 1...3, using: &g) {
                let ids = try PackDirectory.segmentIDs(in: packsPath)
                guard let id = ids.randomElement(using: &g) else { return }
                let path = packsPath + "/" + PackFormat.fileName(forSegment: id)
                let size = Int(PackDirectory.segmentSize(id, in: packsPath) ?? 0)
                switch Int.random(in: 0..<100, using: &g) {
                case 0..<30 where size > 0:
                    for _ in 0..<Int.random(in: 1...3, using: &g) {
                        let offset = Int.random(in: 0..<size, using: &g)
                        let mask = UInt8.random(in: 1...255, using: &g)
                        try flip(path, at: offset, mask: mask)
                        log.append("flip \(id):\(offset)^\(mask)")
                    }
                    packs = true
                case 30..<40:
                    // The attacker flips a byte of the header of the record holding their value.
                    if let target = try attackerRecord(in: packsPath) {
                        let offset = Int(target.offset) + Int.random(in: 0..<PackFormat.recordHeaderSize, using: &g)
                        try flip(PackDirectory.segmentPath(target.segment, in: packsPath), at: offset, mask: 0x20)
                        log.append("attacker flip \(target.segment):\(offset)")
                        packs = true
                    }
                case 40..<50:
                    let length = Int.random(in: 0..<max(1, size), using: &g)
                    try FileHandle(forUpdating: URL(fileURLWithPath: path)).truncate(atOffset: UInt64(length))
                    log.append("truncate \(id) to \(length)")
                    packs = true
                case 50..<57:
                    try FileManager.default.removeItem(atPath: path)
                    log.append("delete \(id)")
                    packs = true
                case 57..<64 where ids.count > 1:
                    let other = ids.filter { $0 != id }.randomElement(using: &g)!
                    let otherPath = packsPath + "/" + PackFormat.fileName(forSegment: other)
                    try FileManager.default.moveItem(atPath: path, toPath: path + ".swap")
                    try FileManager.default.moveItem(atPath: otherPath, toPath: path)
                    try FileManager.default.moveItem(atPath: path + ".swap", toPath: otherPath)
                    log.append("swap \(id) \(other)")
                case 64..<70:
                    let copy = (ids.max() ?? 0) + UInt32.random(in: 1...3, using: &g)
                    try FileManager.default.copyItem(
                        atPath: path, toPath: packsPath + "/" + PackFormat.fileName(forSegment: copy))
                    log.append("duplicate \(id) as \(copy)")
                case 70..<78:
                    for suffix in ["", "-wal", "-shm"] {
                        try? FileManager.default.removeItem(atPath: store + "/index.sqlite" + suffix)
                    }
                    log.append("delete index")
                    index = true
                case 78..<84:
                    let indexPath = store + "/index.sqlite"
                    let indexSize = (try? FileManager.default.attributesOfItem(atPath: indexPath)[.size] as? Int) ?? 0
                    if indexSize > 0 {
                        for _ in 0..<Int.random(in: 1...4, using: &g) {
                            let offset = Int.random(in: 0..<indexSize, using: &g)
                            try flip(indexPath, at: offset, mask: UInt8.random(in: 1...255, using: &g))
                            log.append("index flip \(offset)")
                        }
                        index = true
                    }
                default:
                    if let edit = try editIndex(store + "/index.sqlite", using: &g) {
                        log.append("index: \(edit)")
                        // A digest cell lost from its index is a lost page write — damage to the
                        // file, like a flip (with schema 5's table it lost the row itself), which
                        // lookups cannot see past; fsck's integrity check reports it.
                        if edit.contains("WHERE key_hash != x'") { index = true }
                    }
                }
            }
        }

        func flip(_ path: String, at offset: Int, mask: UInt8) throws {
            try StoreFiles(root: "").flip(path, at: offset, mask: mask)
        }

        /// Where the blob record holding the attacker's value is.
        func attackerRecord(in packs: String) throws -> (segment: UInt32, offset: UInt64)? {
            let hash = ContentHash(hashing: [UInt8](attackerValue(victim: RepairPropertyTests.keys[0])))
            for id in try PackDirectory.segmentIDs(in: packs) {
                guard let file = try? SegmentFile.open(id: id, in: packs, writable: false) else { continue }
                var found: UInt64?
                _ = try? SegmentScanner.scan(file) { record in
                    if case .blob(let h, _, _) = record.content, h == hash { found = record.offset }
                }
                if let found { return (id, found) }
            }
            return nil
        }

        /// One edit of the index an attacker or a bad sector could make; nil when none applied.
        func editIndex(_ path: String, using g: inout SeededGenerator) throws -> String? {
            guard FileManager.default.fileExists(atPath: path), let index = try? IndexDatabase(path: path, readOnly: false)
            else { return nil }
            let rows = (try? index.entryRows()) ?? []
            guard let row = rows.randomElement(using: &g) else { return nil }
            let hex = row.keyDigest.bytes.map { String(format: "%02x", $0) }.joined()
            let other = rows.randomElement(using: &g)!
            let otherHex = other.keyDigest.bytes.map { String(format: "%02x", $0) }.joined()
            let edits = [
                "UPDATE entries SET blob = \(other.blobID) WHERE key_hash = x'\(hex)'",
                "UPDATE entries SET url = url || 'x' WHERE key_hash = x'\(hex)'",
                "UPDATE entries SET sequence = sequence + 1000 WHERE key_hash = x'\(hex)'",
                "UPDATE entries SET sequence = sequence - 1 WHERE key_hash = x'\(hex)'",
                "DELETE FROM entries WHERE key_hash = x'\(hex)'",
                "UPDATE entries SET key_hash = randomblob(16) WHERE key_hash = x'\(hex)'",
                "UPDATE entries SET link_offset = link_offset + 7 WHERE key_hash = x'\(hex)'",
                "UPDATE blobs SET offset = offset + 1 WHERE id = \(row.blobID)",
                "UPDATE blobs SET hash = randomblob(16) WHERE id = \(row.blobID)",
                "DELETE FROM segments WHERE id = (SELECT min(id) FROM segments)",
                "UPDATE meta SET value = 0 WHERE key = 'sequence'",
                "UPDATE meta SET value = value + 100000 WHERE key = 'sequence.copy'",
                "DELETE FROM meta WHERE key LIKE 'sequence%'",
                "UPDATE meta SET value = value + 1 WHERE key = 'secret.first'",
                "UPDATE entries SET sequence = sequence + 64 WHERE key_hash = x'\(hex)'",
                "UPDATE entries SET link_length = -1 WHERE key_hash = x'\(hex)'",
                "UPDATE blobs SET offset = -100 WHERE id = \(row.blobID)",
                "UPDATE segments SET indexed_bytes = indexed_bytes - 60 WHERE id = (SELECT max(id) FROM segments)",
                "UPDATE segments SET sealed = 0, indexed_bytes = 100 WHERE id = (SELECT min(id) FROM segments)",
                "UPDATE blobs SET refs = 0 WHERE id = \(row.blobID)",
                "UPDATE blobs SET refs = 0 WHERE id = \(row.blobID); "
                    + "UPDATE entries SET blob = \(other.blobID) WHERE key_hash = x'\(hex)'",
                "UPDATE segments SET live_bytes = 0",
                // Schema 7: one row per key is the writer's to keep. A row takes another key's
                // digest (two rows share it), an older copy of a row is put back beside it, a
                // row's digest loses a byte (no lookup finds it), a row moves to another id.
                "UPDATE entries SET key_hash = x'\(otherHex)' WHERE key_hash = x'\(hex)'",
                """
                INSERT INTO entries(key_hash, url, variant, url_hash, blob, link_segment, link_offset, link_length,
                    sequence, etag, last_modified, expires_at, created_at, accessed_at, cost, cache_policy)
                SELECT key_hash, url, variant, url_hash, \(other.blobID), link_segment, link_offset, link_length,
                    sequence - 1, etag, last_modified, expires_at, created_at, accessed_at, cost, cache_policy
                FROM entries WHERE key_hash = x'\(hex)'
                """,
                "UPDATE entries SET key_hash = x'5a' || substr(key_hash, 2) WHERE key_hash = x'\(hex)'",
                "UPDATE entries SET id = id + 1000000 WHERE key_hash = x'\(hex)'",
            ]
            let edit = edits.randomElement(using: &g)!
            // An index already too damaged (by flips) to take the edit stays as it is.
            do { try index.connection.execute(edit) } catch { return nil }
            return edit
        }
    }

    // MARK: Steps and checks

    struct Checker {
        let model: Model
        let damage: Damage
        let context: String
        var steps = 0
        var keyChecks = 0
        var violations = 0
        var excusedOlderValues = 0
        /// Whether the store has reported any damage so far (an older value may only ever be
        /// served where nothing on disk could tell, and then not silently).
        var reported = false

        mutating func runSteps(on path: String, using g: inout SeededGenerator) throws {
            var plan = (0..<Int.random(in: 1...3, using: &g)).map { _ in Int.random(in: 0..<4, using: &g) }
            var rebuilds = 0
            while !plan.isEmpty {
                let step = plan.removeFirst()
                steps += 1
                do {
                    try run(step, on: path, plan: &plan)
                } catch let error as StoreError {
                    // A typed error is allowed: it reports. An index too damaged to use is the
                    // operator's cue to rebuild it.
                    reported = true
                    if error.code == .indexCorrupt && rebuilds < 2 {
                        rebuilds += 1
                        plan.insert(2, at: 0)
                    } else if error.code != .indexCorrupt && error.code != .index && error.code != .corruptRecord {
                        violations += 1
                        Issue.record("\(context): step \(step) failed: \(error)")
                    }
                } catch {
                    violations += 1
                    Issue.record("\(context): step \(step) failed with an untyped error: \(error)")
                }
            }
        }

        mutating func run(_ step: Int, on path: String, plan: inout [Int]) throws {
            let configuration = RepairPropertyTests.configuration(seed: 0)
            if step == 2 {
                let rebuilt = try Store.rebuildIndex(directory: path, configuration: configuration)
                if !rebuilt.isClean { reported = true }
            }
            let store = try Store(directory: path, configuration: configuration)
            defer { try? store.close() }
            if !store.recoveryReport.isClean { reported = true }
            if step == 3 {
                // The compactor, on damage it has not been told about: it may skip segments, but
                // it never drops a record an entry needs.
                let report = try store.compact()
                if report.segmentsSkipped > 0 { reported = true }
            }
            if step == 1 {
                let report = try store.fsck(repair: true)
                if !report.isClean { reported = true }
                if report.findings.contains(where: { $0.kind == .indexIntegrity }) {
                    // Repair declined the damaged index: what it serves meanwhile is checked too.
                    check(store, step: "repair")
                    plan.insert(2, at: 0)
                    return
                }
                let again = try store.fsck()
                if !again.isClean {
                    violations += 1
                    Issue.record("\(context): fsck after repair is not clean: \(again.findings.prefix(3))")
                }
            }
            check(store, step: ["open", "repair", "rebuild", "compact"][step])
            try store.close()
        }

        mutating func check(_ store: Store, step: String) {
            for key in RepairPropertyTests.keys {
                keyChecks += 1
                let served: Data?
                do {
                    served = try store.data(for: key)
                } catch is StoreError {
                    reported = true
                    continue
                } catch {
                    violations += 1
                    Issue.record("\(context) \(step): \(key): an untyped error: \(error)")
                    continue
                }
                guard let served else { continue }
                let history = model[key] ?? []
                if let newest = history.last, newest == served { continue }
                guard history.contains(where: { $0 == served }) else {
                    violations += 1
                    Issue.record("\(context) \(step): \(key) served bytes it never held (\(served.count) bytes)")
                    continue
                }
                // An older or removed value: only where every trace of the newer write is gone.
                if damage.index && damage.packs && reported {
                    excusedOlderValues += 1
                    if ProcessInfo.processInfo.environment["TROVE_REPAIR_VERBOSE"] != nil {
                        print("excused: \(context) \(step): \(key)")
                    }
                } else {
                    violations += 1
                    Issue.record("\(context) \(step): \(key) served an older or removed value")
                }
            }
            // The store keeps working.
            let probe = CacheKey(url: "https://prop.example/probe")
            do {
                try store.put(Data("probe".utf8), for: probe)
                #expect(try store.data(for: probe) == Data("probe".utf8), "\(context)")
                try store.remove(probe)
            } catch let error as StoreError where error.code == .indexCorrupt {
                // A damaged index may refuse writes, saying to rebuild it.
                reported = true
            } catch {
                violations += 1
                Issue.record("\(context) \(step): the store does not work after repair: \(error)")
            }
        }
    }
}
