import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

@testable import TroveStore
@testable import TroveIndex
@testable import TrovePack

/// Opening a store (replaying what the index had not committed), rebuilding the index from the
/// packs, and `fsck --repair` fold the same records with one rule for "newest": on the same
/// packs they must give the same index, record for record — including where the compactor left
/// two copies of a record (equal sequence numbers in two places).
@Suite struct ReplayEquivalenceTests {
    /// What an index says of a key, without read times (which only reads change).
    struct Row: Hashable, CustomStringConvertible {
        var key: CacheKey
        var sequence: UInt64
        var blobID: Int64
        var etag: String?
        var createdAt: Int64
        var link: String?
        var description: String { "\(key)@\(sequence) blob \(blobID) etag \(etag ?? "-") \(link ?? "")" }
    }

    static func rows(_ store: Store, locations: Bool) throws -> Set<Row> {
        try store.flush()
        return Set(
            try store.readIndex { try $0.entryRows() }.map {
                Row(
                    key: $0.key, sequence: $0.sequence, blobID: $0.blobID, etag: $0.etag, createdAt: $0.createdAt,
                    link: locations ? "\($0.linkSegment):\($0.linkOffset)" : nil)
            })
    }

    static func copyIndex(from: String, to: String) throws {
        for suffix in ["", "-wal", "-shm"] {
            try? FileManager.default.removeItem(atPath: to + suffix)
            if FileManager.default.fileExists(atPath: from + suffix) {
                try FileManager.default.copyItem(atPath: from + suffix, toPath: to + suffix)
            }
        }
    }

    /// A history in two phases, with the index saved between them: the second phase's records
    /// are what the saved index never committed.
    static func makeStore(_ dir: String, seed: UInt64, leaveCopies: Bool) throws -> (store: String, savedIndex: String) {
        var g = SeededGenerator(seed: seed)
        let path = dir + "/store"
        var configuration = Store.Configuration(durability: .batched)
        configuration.segmentSize = 4096
        configuration.compactionInterval = nil
        let keys = (0..<12).map { CacheKey(url: "https://eq.example/\($0)", variant: $0 % 3 == 0 ? "w64" : "") }
        func operate(_ store: Store, _ count: Int, compacting: Bool) throws {
            for n in 0..<count {
                let key = keys.randomElement(using: &g)!
                switch Int.random(in: 0..<10, using: &g) {
                case 0..<6:
                    let size = Int.random(in: 0...1500, using: &g)
                    let shared = Int.random(in: 0..<4, using: &g) == 0
                    try store.put(
                        Data(testBytes(seed: shared ? 7 : seed << 16 | UInt64(n), count: shared ? 300 : size)), for: key,
                        metadata: EntryMetadata(etag: "e\(n)"))
                case 6..<8: try store.remove(key)
                case 8 where compacting: try store.compact()
                default: _ = try store.data(for: key)
                }
            }
        }
        do {
            let store = try Store(directory: path, configuration: configuration)
            try operate(store, 40, compacting: false)
            try store.close()
        }
        if leaveCopies {
            // A compaction whose old segments come back (as after a crash between copying
            // forward and unlinking, or a restore): two copies of records, equal sequences.
            let backup = dir + "/backup"
            try FileManager.default.copyItem(atPath: path + "/packs", toPath: backup)
            let store = try Store(directory: path, configuration: configuration)
            for key in keys.prefix(6) { try store.remove(key) }
            try store.compact()
            try store.close()
            for name in try FileManager.default.contentsOfDirectory(atPath: backup)
            where !FileManager.default.fileExists(atPath: path + "/packs/" + name) {
                try FileManager.default.copyItem(atPath: backup + "/" + name, toPath: path + "/packs/" + name)
            }
        }
        let saved = dir + "/saved-index.sqlite"
        try copyIndex(from: path + "/index.sqlite", to: saved)
        let store = try Store(directory: path, configuration: configuration)
        try operate(store, 40, compacting: false)
        try store.close()
        return (path, saved)
    }

    @Test(arguments: 0..<24)
    func recoveryRebuildAndRepairAgree(seed: Int) async throws {
        try await withTemporaryDirectory { dir in
            let leaveCopies = seed % 2 == 1
            let (path, saved) = try Self.makeStore(dir, seed: UInt64(seed), leaveCopies: leaveCopies)
            var configuration = Store.Configuration()
            configuration.compactionInterval = nil
            func variant(_ name: String, _ prepare: (String) throws -> Void) throws -> Store {
                let copy = dir + "/" + name
                try FileManager.default.copyItem(atPath: path, toPath: copy)
                try prepare(copy)
                return try Store(directory: copy, configuration: configuration)
            }
            // fsck --repair on the store as it is.
            let repaired = try variant("repair") { _ in }
            _ = try repaired.fsck(repair: true)
            // Rebuilt by --rebuild-index (the sound index is evidence) and by opening with no index.
            let rebuilt = try variant("rebuild") { _ = try Store.rebuildIndex(directory: $0) }
            let reopened = try variant("lost") { copy in
                for suffix in ["", "-wal", "-shm"] {
                    try? FileManager.default.removeItem(atPath: copy + "/index.sqlite" + suffix)
                }
            }
            // Recovery on open: the index saved before the second phase, which opening replays.
            let recovered = try variant("recovered") { try Self.copyIndex(from: saved, to: $0 + "/index.sqlite") }
            #expect(recovered.recoveryReport.replayedRecords > 0)

            if leaveCopies {
                // The case is real: some write has two intact copies in the packs.
                var seen: [RecordIdentity: Int] = [:]
                for id in try PackDirectory.segmentIDs(in: path + "/packs") {
                    let file = try SegmentFile.open(id: id, in: path + "/packs", writable: false)
                    _ = try SegmentScanner.scan(file) { seen[$0.identity, default: 0] += 1 }
                }
                #expect(seen.values.contains { $0 > 1 })
            }
            let expected = try Self.rows(repaired, locations: !leaveCopies)
            #expect(!expected.isEmpty)
            for (name, store) in [("rebuild", rebuilt), ("lost index", reopened), ("recovery", recovered)] {
                let rows = try Self.rows(store, locations: !leaveCopies)
                #expect(
                    rows == expected, "\(name): \(rows.symmetricDifference(expected).sorted { $0.description < $1.description })")
            }
            // And the bytes each serves.
            for row in expected {
                let bytes = try repaired.data(for: row.key)
                for store in [rebuilt, reopened, recovered] { #expect(try store.data(for: row.key) == bytes) }
            }
            for store in [repaired, rebuilt, reopened, recovered] { try store.close() }
        }
    }

    /// The fold's result does not depend on the order records come in.
    @Test func theFoldIsOrderIndependent() async throws {
        try await withTemporaryDirectory { dir in
            let (path, _) = try Self.makeStore(dir, seed: 99, leaveCopies: true)
            var records: [(ScannedRecord, UInt32)] = []
            for id in try PackDirectory.segmentIDs(in: path + "/packs") {
                let file = try SegmentFile.open(id: id, in: path + "/packs", writable: false)
                _ = try SegmentScanner.scan(file) { records.append(($0, id)) }
            }
            func resolved(_ order: [(ScannedRecord, UInt32)]) -> [String] {
                var fold = RecordFold()
                for (record, segment) in order { fold.add(record, segment: segment) }
                let evidence = IndexEvidence()
                return fold.keys(evidence: evidence).sorted().map { "\(fold.resolve($0, evidence: evidence))" }
            }
            let reference = resolved(records)
            var g = SeededGenerator(seed: 5)
            for _ in 0..<20 { #expect(resolved(records.shuffled(using: &g)) == reference) }
        }
    }
}
