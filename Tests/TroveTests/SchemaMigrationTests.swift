import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

@testable import TroveIndex
@testable import TroveStore

#if canImport(Glibc)
    import Glibc
#endif

/// Index schemas 5 and 6 (issue 11) are reached in place: stores written by the last builds with
/// schema 4 and schema 5 (`Fixtures/v4-store`, `Fixtures/v5-store`, see their README) open, are
/// migrated and serve what they held; a kill at any moment of the migration leaves a store that
/// opens and finishes it; and a build that reads an older schema refuses this one with the error
/// it always gave.
@Suite(.serialized) struct SchemaMigrationTests {
    /// The fixture store written with schema `version`.
    static func fixture(_ version: Int) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/v\(version)-store").path
    }

    func value(_ version: Int, _ name: String, _ count: Int) -> Data {
        Data(String(repeating: "v\(version) fixture \(name);", count: count).utf8)
    }

    /// What the fixture's commands left (the same for each fixture): key → bytes.
    func expected(_ v: Int) -> [CacheKey: Data] {
        [
            CacheKey(url: "https://v\(v).example/a.jpg"): value(v, "a2", 25),
            CacheKey(url: "https://v\(v).example/b.jpg"): value(v, "b", 30),
            CacheKey(url: "https://v\(v).example/c.jpg"): value(v, "a1", 20),
            CacheKey(url: "https://v\(v).example/a.jpg", variant: "w64-h64-fit-webp-q80"): value(v, "w", 10),
            CacheKey(url: "https://v\(v).example/d.jpg"): value(v, "d", 12),
            CacheKey(url: "https://v\(v).example/small.txt"): Data("hello v\(v)\n".utf8),
        ]
    }

    /// The schema version, the index names and the entries table's SQL of the index at `path`,
    /// read without migrating.
    static func schema(_ path: String) throws -> (version: Int, indexes: Set<String>, tables: [String: String]) {
        let index = try IndexDatabase(path: path, readOnly: true)
        var names = Set<String>()
        var tables: [String: String] = [:]
        try index.connection.statement("SELECT type, name, sql FROM sqlite_master").query { (r) throws(IndexError) in
            if r.text(0) == "index" { names.insert(r.text(1)) }
            if r.text(0) == "table" { tables[r.text(1)] = r.text(2) }
            return true
        }
        return (try index.schemaVersion(), names, tables)
    }

    /// Makes the schema-6 index at `path` a schema-5 one again: the entries back in a
    /// `WITHOUT ROWID` table keyed by digest, with schema 5's indexes.
    static func downgradeToSchema5(_ path: String) throws {
        let index = try IndexDatabase(path: path, readOnly: false)
        let columns = """
            key_hash, url, variant, url_hash, blob, link_segment, link_offset, link_length, sequence, etag,
                last_modified, expires_at, created_at, accessed_at, cost, cache_policy
            """
        try index.connection.execute(
            """
            BEGIN;
            CREATE TABLE entries_v5(
                key_hash BLOB PRIMARY KEY, url TEXT NOT NULL, variant TEXT NOT NULL, url_hash INTEGER NOT NULL,
                blob INTEGER NOT NULL, link_segment INTEGER NOT NULL, link_offset INTEGER NOT NULL,
                link_length INTEGER NOT NULL, sequence INTEGER NOT NULL, etag TEXT, last_modified TEXT,
                expires_at INTEGER, created_at INTEGER NOT NULL, accessed_at INTEGER NOT NULL, cost INTEGER NOT NULL,
                cache_policy TEXT
            ) WITHOUT ROWID;
            INSERT INTO entries_v5(\(columns)) SELECT \(columns) FROM entries;
            DROP TABLE entries;
            ALTER TABLE entries_v5 RENAME TO entries;
            CREATE INDEX entries_by_url ON entries(url_hash) WHERE variant != '';
            CREATE INDEX entries_by_access ON entries(accessed_at);
            CREATE INDEX entries_by_expiry ON entries(expires_at) WHERE expires_at IS NOT NULL;
            CREATE INDEX entries_by_blob ON entries(blob);
            PRAGMA user_version = 5;
            COMMIT;
            """)
    }

    /// Whether the schema read by ``schema(_:)`` has the entries of its version from 6 on: a
    /// rowid table in write order with no copy left behind, its digest in a unique index at 6
    /// and in no index from 7 on (the writer's digest table finds the rows).
    static func hasSchema6Entries(_ schema: (version: Int, indexes: Set<String>, tables: [String: String])) -> Bool {
        guard let entries = schema.tables["entries"] else { return false }
        guard entries.contains("id INTEGER PRIMARY KEY") && !entries.contains("WITHOUT ROWID"),
            schema.tables["entries_v6"] == nil
        else { return false }
        return schema.indexes.contains("entries_by_key") == (schema.version == 6)
    }

    /// The fixture of `version` opens with this build, is migrated in place (schema 5 drops the
    /// blob-hash index; schema 6 moves the entries into a rowid table in write order), serves
    /// what it held and keeps deduplicating.
    @Test(arguments: [4, 5])
    func anOlderStoreIsMigratedInPlaceAndKeepsDeduplicating(version v: Int) async throws {
        try await withTemporaryDirectory { dir in
            try FileManager.default.copyItem(atPath: Self.fixture(v), toPath: dir + "/store")
            let before = try Self.schema(dir + "/store/index.sqlite")
            #expect(before.version == v)
            #expect(before.indexes.contains("blobs_by_hash") == (v == 4))
            #expect(before.tables["entries"]?.contains("WITHOUT ROWID") == true)
            let sequences = try Self.sequences(dir + "/store/index.sqlite")

            let store = try openStore(dir)
            let after = try Self.schema(dir + "/store/index.sqlite")
            #expect(after.version == IndexSchema.currentVersion)
            #expect(!after.indexes.contains("blobs_by_hash"))
            #expect(
                after.indexes.isSuperset(of: ["entries_by_url", "entries_by_access", "entries_by_expiry", "entries_by_blob"]))
            #expect(Self.hasSchema6Entries(after), "\(after.tables)")
            // Every row came over, in write order.
            #expect(try Self.sequences(dir + "/store/index.sqlite") == sequences.sorted())
            let expected = expected(v)
            for (key, bytes) in expected {
                #expect(try store.data(for: key) == bytes, "\(key)")
            }
            #expect(try store.data(for: CacheKey(url: "https://v\(v).example/e.jpg")) == nil)
            // A URL's keys: the original by its digest, the variant through the partial index.
            #expect(
                try store.keys(url: "https://v\(v).example/a.jpg").map(\.variant).sorted() == ["", "w64-h64-fit-webp-q80"])
            #expect(try store.keys(url: "https://v\(v).example/b.jpg").map(\.variant) == [""])
            #expect(try store.info(for: CacheKey(url: "https://v\(v).example/a.jpg"))?.etag == "\"a2\"")
            #expect(try store.fsck().isClean)

            // Content stored before the migration is still found for dedup (through the hints
            // loaded from the migrated index): equal bytes under a new key add no blob.
            let statsBefore = try store.statistics()
            try store.put(value(v, "b", 30), for: CacheKey(url: "https://v\(v).example/b-again.jpg"))
            // A migrated row is replaced in place, and a removed one is gone.
            try store.put(value(v, "a3", 7), for: CacheKey(url: "https://v\(v).example/a.jpg"))
            try store.remove(CacheKey(url: "https://v\(v).example/d.jpg"))
            try store.flush()
            let statsAfter = try store.statistics()
            // b-again shares b's blob; a3 is new; a2 and d lose their only entries.
            #expect(statsAfter.blobs == statsBefore.blobs - 1)
            #expect(statsAfter.dedupSavedBytes == statsBefore.dedupSavedBytes + Int64(value(v, "b", 30).count))
            #expect(statsAfter.entries == statsBefore.entries)
            try store.close()

            var now = expected
            now[CacheKey(url: "https://v\(v).example/a.jpg")] = value(v, "a3", 7)
            now[CacheKey(url: "https://v\(v).example/b-again.jpg")] = value(v, "b", 30)
            now[CacheKey(url: "https://v\(v).example/d.jpg")] = nil
            let reopened = try openStore(dir)
            for (key, bytes) in now { #expect(try reopened.data(for: key) == bytes, "reopened: \(key)") }
            #expect(try reopened.data(for: CacheKey(url: "https://v\(v).example/d.jpg")) == nil)
            #expect(try reopened.fsck().isClean)
        }
    }

    /// The `sequence` column of every entry row of the index at `path`, in table order.
    static func sequences(_ path: String) throws -> [Int64] {
        let index = try IndexDatabase(path: path, readOnly: true)
        var out: [Int64] = []
        let order = try schema(path).tables["entries"]?.contains("WITHOUT ROWID") == true ? "" : " ORDER BY id"
        try index.connection.statement("SELECT sequence FROM entries\(order)").query { (r) throws(IndexError) in
            out.append(r.int64(0))
            return true
        }
        return out
    }

    /// A child opens (and so migrates) a schema-5 store and is killed with SIGKILL at random
    /// moments of its start; after every kill the store is at schema 5, 6 or 7 — never between
    /// two: no half-copied table — and the last open finishes the migration and serves every
    /// entry.
    @Test func aKillDuringMigrationLeavesAStoreThatOpensAndFinishesIt() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir + "/store"
            let count = 20_000
            do {
                let store = try openStore(dir, durability: .none)
                for i in 0..<count { try store.put(Data(testBytes(seed: UInt64(i), count: 48)), for: key(i)) }
                try store.close()
            }
            var rng = SeededGenerator(seed: 0x5C4E_4D41)
            var outcomes: [Int: Int] = [:]
            // How long a child takes to open (and migrate) here: the kills are spread over that.
            try Self.downgradeToSchema5(path + "/index.sqlite")
            let started = ContinuousClock.now
            let first = try CrashTests.launch(store: path, seed: 99, durability: .batched, segmentSize: 1 << 20)
            #expect(CrashTests.waitForReady(first) != nil)
            let opening = ContinuousClock.now - started
            CrashTests.kill(first)
            let window = max(
                UInt64(opening.components.seconds) * 1_000_000 + UInt64(opening.components.attoseconds / 1_000_000_000_000),
                20_000)
            for round in 0..<12 {
                try Self.downgradeToSchema5(path + "/index.sqlite")
                let child = try CrashTests.launch(store: path, seed: UInt64(round), durability: .batched, segmentSize: 1 << 20)
                // Spread the kills over the child's start: before, inside and after the migration.
                usleep(UInt32(rng.next() % (window + window / 5)))
                CrashTests.kill(child)
                let schema = try Self.schema(path + "/index.sqlite")
                // Each migration is one transaction: a kill leaves 5, 6 or 7, never a step half made.
                #expect([5, 6, IndexSchema.currentVersion].contains(schema.version), "round \(round): \(schema.version)")
                #expect(
                    Self.hasSchema6Entries(schema) == (schema.version >= 6),
                    "round \(round): version \(schema.version), tables \(schema.tables)")
                // Every row is there (the child's own puts may have added more once it opened).
                #expect(try Self.sequences(path + "/index.sqlite").count >= count, "round \(round)")
                outcomes[schema.version, default: 0] += 1
            }
            print(
                "SchemaMigrationTests: after the kills, the index was at version 5 \(outcomes[5] ?? 0) times, at 6 \(outcomes[6] ?? 0), "
                    + "at 7 \(outcomes[7] ?? 0)"
            )
            let store = try openStore(dir)
            let schema = try Self.schema(path + "/index.sqlite")
            #expect(schema.version == IndexSchema.currentVersion)
            #expect(Self.hasSchema6Entries(schema))
            for i in 0..<count {
                guard try store.data(for: key(i)) == Data(testBytes(seed: UInt64(i), count: 48)) else {
                    Issue.record("key \(i) does not read back after the migration")
                    return
                }
            }
            let report = try store.fsck()
            #expect(report.isClean, "\(report.findings.map(\.message))")
        }
    }

    /// A build that reads schemas up to N refuses an index of N + 1 with `.schemaTooNew`, so
    /// builds before schema 6 refuse a migrated store the same way.
    @Test func aNewerSchemaIsRefusedWithTheClearError() async throws {
        try await withTemporaryDirectory { dir in
            try FileManager.default.copyItem(atPath: Self.fixture(5), toPath: dir + "/store")
            try openStore(dir).close()
            let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
            try index.connection.execute("PRAGMA user_version = \(IndexSchema.currentVersion + 1)")
            let error = #expect(throws: StoreError.self) { try openStore(dir) }
            #expect(error?.code == .schemaTooNew)
            #expect(error?.message.contains("Use a newer Trove") == true, "\(String(describing: error))")
        }
    }
}
