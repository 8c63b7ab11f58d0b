import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

@testable import TroveIndex
@testable import TrovePack
@testable import TroveStore

/// Damage aimed at how an entry row is found by its key: schema 6's digest index
/// `entries_by_key` (found by an outside attack on it), and since schema 7 the row's own digest,
/// from which the writer's digest table is loaded — and the migrations to both.
@Suite struct Schema6AttackTests {
    func value(_ name: String) -> Data { Data(String(repeating: "\(name);", count: 40).utf8) }

    /// Changes the first byte of the key digest of every row `lost` selects, leaving the rest of
    /// the row: a lookup by key no longer finds it (the damage schema 6 knew as a lost cell of
    /// its digest index; schema 7 has no such index).
    static func loseDigestCells(_ path: String, where lost: String) throws {
        let index = try IndexDatabase(path: path, readOnly: false)
        try index.connection.execute(
            "UPDATE entries SET key_hash = x'5A' || substr(key_hash, 2) WHERE \(lost)")
    }

    /// The index row of `key` (read from the table).
    static func row(_ path: String, _ key: CacheKey) throws -> EntryRow? {
        try IndexDatabase(path: path, readOnly: true).entryRows().first { $0.keyDigest == key.digest }
    }

    /// A key replaced (v1, then v2) whose row's digest is damaged and whose newest link record
    /// is destroyed: nothing may serve v1 — not the open (no lookup finds the row), not
    /// `fsck --repair`, not the rebuild (the row still says a write after v1 was committed).
    @Test func aLostDigestCellAndALostNewestLinkNeverServeTheOlderValue() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            let k = CacheKey(url: "https://s6.example/k.jpg")
            do {
                let store = try openStore(dir)
                try store.put(value("k-v1"), for: k)
                for i in 0..<3 { try store.put(value("other-\(i)"), for: key(i)) }
                try store.put(value("k-v2"), for: k)
                try store.close()
            }
            let indexPath = files.store + "/index.sqlite"
            let row = try #require(try Self.row(indexPath, k))
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: files.segment(row.linkSegment)))
            try handle.seek(toOffset: row.linkOffset)
            try handle.write(contentsOf: [UInt8](repeating: 0xA5, count: Int(row.linkLength)))
            try handle.close()
            try Self.loseDigestCells(indexPath, where: "key_hash = x'\(row.keyDigest.description)'")

            func expectNotOld(_ store: Store, _ step: String) {
                let served = try? store.data(for: k)
                #expect(served != value("k-v1"), "\(step): the replaced value is served")
                for i in 0..<3 { #expect((try? store.data(for: key(i))) == value("other-\(i)"), "\(step): key \(i)") }
            }
            do {
                let store = try openStore(dir)
                expectNotOld(store, "open")
                let report = try store.fsck(repair: true)
                #expect(!report.isClean, "\(report.findings)")
                expectNotOld(store, "fsck --repair")
                try store.close()
            }
            _ = try Store.rebuildIndex(directory: files.store, configuration: Store.Configuration())
            let store = try openStore(dir)
            expectNotOld(store, "rebuild")
            #expect(try store.data(for: k) == nil)
            #expect(try store.fsck().isClean)
            try store.close()
        }
    }

    /// A damaged row digest makes the link's lookup find nothing, which would judge the link
    /// dead; the row that still points at it stops the rewrite before anything is copied (it
    /// used to copy the segment's live records and then fail on the stranded row, every pass,
    /// growing the disk), fsck reports the row, and the rebuild serves the link it points at
    /// (it used to leave the key out: the damaged row's write went unclaimed).
    @Test func aLostDigestCellStopsCompactionBeforeItCopies() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            let a = CacheKey(url: "https://s6.example/a.jpg")
            let configure = { (configuration: inout Store.Configuration) in configuration.compactionInterval = nil }
            do {
                let store = try openStore(dir, segmentSize: 16 << 10, configure)
                try store.put(value("a-v1"), for: a)
                for i in 0..<24 { try store.put(Data(testBytes(seed: UInt64(i), count: 2_000)), for: key(i)) }
                for i in 0..<24 where i % 4 != 0 { try store.remove(key(i)) }
                try store.close()
            }
            let indexPath = files.store + "/index.sqlite"
            let row = try #require(try Self.row(indexPath, a))
            try Self.loseDigestCells(indexPath, where: "key_hash = x'\(row.keyDigest.description)'")
            let store = try openStore(dir, segmentSize: 16 << 10, configure)
            let before = store.diskUsage()
            let first = try store.compact()
            #expect(first.segmentsSkipped >= 1, "\(first)")
            let second = try store.compact()
            #expect(store.diskUsage() <= before, "\(first) \(second)")
            #expect(try store.fsck().findings.contains { $0.kind == .staleIndexRow })
            try store.close()
            _ = try Store.rebuildIndex(directory: files.store, configuration: Store.Configuration())
            let rebuilt = try openStore(dir, segmentSize: 16 << 10, configure)
            #expect(try rebuilt.data(for: a) == value("a-v1"))
            for i in stride(from: 0, to: 24, by: 4) {
                #expect(try rebuilt.data(for: key(i)) == Data(testBytes(seed: UInt64(i), count: 2_000)))
            }
            try rebuilt.close()
        }
    }

    /// A row deleted from a sound index: the rebuild cannot tell its link from one whose
    /// removal the packs no longer show, and does not restore it — but says so, as fsck does
    /// (found by an outside attack: the rebuild reported the store clean).
    @Test func aLinkTheRebuildDoesNotRestoreIsReported() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            do {
                let store = try openStore(dir)
                for i in 0..<3 { try store.put(value("v\(i)"), for: key(i)) }
                try store.close()
            }
            try IndexDatabase(path: files.store + "/index.sqlite", readOnly: false).connection.execute(
                "DELETE FROM entries WHERE url = '\(key(1).url)'")
            let report = try Store.rebuildIndex(directory: files.store, configuration: Store.Configuration())
            #expect(
                report.findings.contains { $0.kind == .unreflectedRecord && $0.message.contains(key(1).url) },
                "\(report.findings)")
            let store = try openStore(dir)
            #expect(try store.data(for: key(1)) == nil)
            for i in [0, 2] { #expect(try store.data(for: key(i)) == value("v\(i)")) }
            try store.close()
        }
    }

    /// A row whose sequence column claims a write the store has not made (here -1, read as the
    /// largest sequence) cannot be removed by a tombstone, whose sequence is lower: expiring it
    /// appended a tombstone per batch forever, growing the pack (found by an outside attack).
    /// The pass ends, records the row as damage, and `fsck --repair` lets the next pass expire it.
    @Test func aRowClaimingAFutureSequenceDoesNotMakeEvictionLoop() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            let configure = { (configuration: inout Store.Configuration) in configuration.compactionInterval = nil }
            do {
                let store = try openStore(dir, configure)
                for i in 0..<3 { try store.put(value("v\(i)"), for: key(i)) }
                try store.close()
            }
            try IndexDatabase(path: files.store + "/index.sqlite", readOnly: false).connection.execute(
                "UPDATE entries SET sequence = -1, created_at = 1000 WHERE url = '\(key(1).url)'")
            let store = try openStore(dir, configure)
            let packs = PackDirectory.totalSize(in: files.store + "/packs")
            let report = try store.compact(timeToLive: .seconds(86_400))
            #expect(report.expiredEntries == 0, "\(report)")
            #expect(PackDirectory.totalSize(in: files.store + "/packs") == packs, "no tombstone for the row")
            #expect(try store.unrepairedDamage().contains { $0.kind == .staleIndexRow && $0.message.contains(key(1).url) })
            _ = try store.fsck(repair: true)
            #expect(try store.data(for: key(1)) == value("v1"))
            for i in [0, 2] { #expect(try store.data(for: key(i)) == value("v\(i)")) }
            try store.close()
        }
    }

    /// Two rows for one digest (an older row put back): the store refuses to
    /// open with `indexCorrupt` rather than pick one, fsck of the file reports it, and the
    /// rebuild serves the newest value.
    @Test func twoRowsForOneDigestAreRefusedUntilTheIndexIsRebuilt() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            let a = CacheKey(url: "https://s6.example/a.jpg")
            let indexPath = files.store + "/index.sqlite"
            do {
                let store = try openStore(dir)
                try store.put(value("a-v1"), for: a)
                try store.flush()
                try store.put(value("a-v2"), for: a)
                try store.close()
            }
            // The old row, as it was before the replace, put back beside the new one.
            let index = try IndexDatabase(path: indexPath, readOnly: false)
            try index.connection.execute(
                """
                INSERT INTO entries(key_hash, url, variant, url_hash, blob, link_segment, link_offset, link_length,
                    sequence, etag, last_modified, expires_at, created_at, accessed_at, cost, cache_policy)
                SELECT key_hash, url, variant, url_hash, blob - 1, link_segment, 32, link_length,
                    sequence - 2, etag, last_modified, expires_at, created_at, accessed_at, cost, cache_policy
                FROM entries;
                """)
            #expect(try index.digestFindings().contains("1 key digests have more than one entry row"))
            let error = #expect(throws: StoreError.self) { try openStore(dir) }
            #expect(error?.code == .indexCorrupt)
            #expect(error?.message.contains("--rebuild-index") == true, "\(String(describing: error))")
            _ = try Store.rebuildIndex(directory: files.store, configuration: Store.Configuration())
            let store = try openStore(dir)
            #expect(try store.data(for: a) == value("a-v2"))
            #expect(try store.fsck().isClean)
            try store.close()
        }
    }

    /// A schema-5 row that schema 6's table refuses (a URL made NULL by damage) fails the
    /// migration with `indexCorrupt` and the rebuild advice, leaves schema 5, and the rebuild
    /// brings the store back.
    @Test func aMigrationThatARowRefusesAsksForTheRebuild() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir + "/store"
            try FileManager.default.copyItem(atPath: SchemaMigrationTests.fixture(5), toPath: path)
            // A raw connection: an IndexDatabase writer would migrate the index. The NOT NULL is
            // taken out of the schema text to let the damage in (read by the next connection).
            do {
                let connection = try SQLiteConnection(path: path + "/index.sqlite", readOnly: false)
                var sql = ""
                try connection.statement("SELECT sql FROM sqlite_schema WHERE name = 'entries'").query {
                    (r) throws(IndexError) in
                    sql = r.text(0)
                    return false
                }
                let loose = sql.replacingOccurrences(of: "url TEXT NOT NULL", with: "url TEXT")
                #expect(loose != sql)
                try connection.execute(
                    """
                    PRAGMA writable_schema = ON;
                    UPDATE sqlite_schema SET sql = '\(loose.replacingOccurrences(of: "'", with: "''"))' WHERE name = 'entries';
                    PRAGMA writable_schema = OFF;
                    """)
            }
            let connection = try SQLiteConnection(path: path + "/index.sqlite", readOnly: false)
            try connection.execute("UPDATE entries SET url = NULL WHERE url = 'https://v5.example/c.jpg'")
            let error = #expect(throws: StoreError.self) { try openStore(dir) }
            #expect(error?.code == .indexCorrupt)
            #expect(error?.message.contains("--rebuild-index") == true, "\(String(describing: error))")
            #expect(try SchemaMigrationTests.schema(path + "/index.sqlite").version == 5)
            _ = try Store.rebuildIndex(directory: path, configuration: Store.Configuration())
            let store = try openStore(dir)
            #expect(try store.data(for: CacheKey(url: "https://v5.example/b.jpg")) != nil)
            #expect(try store.fsck().isClean)
            try store.close()
        }
    }

    /// The migration leaves the old entries table's pages free in the index file. Eviction
    /// counts only pages in use (it cannot give free ones back), so a store under its capacity
    /// once they are set aside evicts nothing — it used to evict every entry chasing them.
    @Test func freePagesTheMigrationLeavesDoNotDriveEviction() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir + "/store"
            let long = String(repeating: "u", count: 1_500)
            do {
                let store = try openStore(dir) { $0.compactionInterval = nil }
                for i in 0..<600 {
                    try store.put(Data("value \(i)".utf8), for: CacheKey(url: "https://s6.example/\(long)/\(i)"))
                }
                try store.close()
            }
            try SchemaMigrationTests.downgradeToSchema5(path + "/index.sqlite")
            // The first open migrates (its close checkpoints the log away); the second measures.
            try openStore(dir) { $0.compactionInterval = nil }.close()
            var disk: Int64 = 0
            do {
                let store = try openStore(dir) { $0.compactionInterval = nil }
                disk = store.diskUsage()
                try store.close()
            }
            let free =
                try IndexDatabase(path: path + "/index.sqlite", readOnly: true).connection.statement(
                    "PRAGMA freelist_count"
                ).first { $0.int64(0) } ?? 0
            #expect(free > 200, "the migration left \(free) free pages")
            // Over the high watermark on disk; under the low one without the free pages.
            let capacity = Int64(Double(disk - free * 4096) / 0.85 * 1.05)
            #expect(Double(disk) > Double(capacity) * 0.95, "disk \(disk), free pages \(free)")
            let store = try openStore(dir) { configuration in
                configuration.compactionInterval = nil
                configuration.capacity = capacity
            }
            let report = try store.compact()
            #expect(report.evictedEntries == 0)
            #expect(report.segmentsRewritten == 0, "\(report)")
            // The trigger counts like the target: free pages are not usage it can act on.
            #expect(store.diskUsage() - store.chargeableUsage() >= 200 * 4096)
            #expect(try store.statistics().entries == 600)
            try store.close()
        }
    }
}
