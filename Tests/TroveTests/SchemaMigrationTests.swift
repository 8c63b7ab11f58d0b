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

/// Index schema 5 (issue 11) is reached in place: a store written by the last build with schema
/// 4 (`Fixtures/v4-store`, see its README) opens, is migrated and serves what it held; a kill at
/// any moment of the migration leaves a store that opens and finishes it; and a build that
/// reads an older schema refuses this one with the error it always gave.
@Suite(.serialized) struct SchemaMigrationTests {
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures/v4-store").path

    func value(_ name: String, _ count: Int) -> Data { Data(String(repeating: "v4 fixture \(name);", count: count).utf8) }

    /// What the fixture's commands left: key → bytes.
    var expected: [CacheKey: Data] {
        [
            CacheKey(url: "https://v4.example/a.jpg"): value("a2", 25),
            CacheKey(url: "https://v4.example/b.jpg"): value("b", 30),
            CacheKey(url: "https://v4.example/c.jpg"): value("a1", 20),
            CacheKey(url: "https://v4.example/a.jpg", variant: "w64-h64-fit-webp-q80"): value("w", 10),
            CacheKey(url: "https://v4.example/d.jpg"): value("d", 12),
            CacheKey(url: "https://v4.example/small.txt"): Data("hello v4\n".utf8),
        ]
    }

    /// The schema version and the index names of the index at `path`, read without migrating.
    static func schema(_ path: String) throws -> (version: Int, indexes: Set<String>) {
        let index = try IndexDatabase(path: path, readOnly: true)
        var names = Set<String>()
        try index.connection.statement("SELECT name FROM sqlite_master WHERE type = 'index'").query { (r) throws(IndexError) in
            names.insert(r.text(0))
            return true
        }
        return (try index.schemaVersion(), names)
    }

    /// Makes the schema-5 index at `path` a schema-4 one again (version 5 changed indexes only).
    static func downgradeToSchema4(_ path: String) throws {
        let index = try IndexDatabase(path: path, readOnly: false)
        try index.connection.execute(
            """
            BEGIN;
            CREATE INDEX blobs_by_hash ON blobs(hash);
            DROP INDEX entries_by_url;
            CREATE INDEX entries_by_url ON entries(url_hash);
            PRAGMA user_version = 4;
            COMMIT;
            """)
    }

    @Test func aSchema4StoreIsMigratedInPlaceAndKeepsDeduplicating() async throws {
        try await withTemporaryDirectory { dir in
            try FileManager.default.copyItem(atPath: Self.fixture, toPath: dir + "/store")
            let before = try Self.schema(dir + "/store/index.sqlite")
            #expect(before.version == 4)
            #expect(before.indexes.contains("blobs_by_hash"))

            let store = try openStore(dir)
            let after = try Self.schema(dir + "/store/index.sqlite")
            #expect(after.version == IndexSchema.currentVersion)
            #expect(!after.indexes.contains("blobs_by_hash"))
            #expect(
                after.indexes.isSuperset(of: ["entries_by_url", "entries_by_access", "entries_by_expiry", "entries_by_blob"]))
            for (key, bytes) in expected {
                #expect(try store.data(for: key) == bytes, "\(key)")
            }
            #expect(try store.data(for: CacheKey(url: "https://v4.example/e.jpg")) == nil)
            // A URL's keys: the original by its digest, the variant through the partial index.
            #expect(
                try store.keys(url: "https://v4.example/a.jpg").map(\.variant).sorted() == ["", "w64-h64-fit-webp-q80"])
            #expect(try store.keys(url: "https://v4.example/b.jpg").map(\.variant) == [""])
            #expect(try store.info(for: CacheKey(url: "https://v4.example/a.jpg"))?.etag == "\"a2\"")
            #expect(try store.fsck().isClean)

            // Content stored before the migration is still found for dedup (through the hints
            // loaded from the migrated index): equal bytes under a new key add no blob.
            let statsBefore = try store.statistics()
            try store.put(value("b", 30), for: CacheKey(url: "https://v4.example/b-again.jpg"))
            try store.flush()
            let statsAfter = try store.statistics()
            #expect(statsAfter.blobs == statsBefore.blobs)
            #expect(statsAfter.dedupSavedBytes == statsBefore.dedupSavedBytes + Int64(value("b", 30).count))
            try store.close()

            let reopened = try openStore(dir)
            for (key, bytes) in expected { #expect(try reopened.data(for: key) == bytes, "reopened: \(key)") }
            #expect(try reopened.fsck().isClean)
        }
    }

    /// A child opens (and so migrates) a schema-4 store and is killed with SIGKILL at random
    /// moments of its start; after every kill the store is still schema 4 or already schema 5
    /// — never between — and the last open finishes the migration and serves every entry.
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
            try Self.downgradeToSchema4(path + "/index.sqlite")
            let started = ContinuousClock.now
            let first = try CrashTests.launch(store: path, seed: 99, durability: .batched, segmentSize: 1 << 20)
            #expect(CrashTests.waitForReady(first) != nil)
            let opening = ContinuousClock.now - started
            CrashTests.kill(first)
            let window = max(
                UInt64(opening.components.seconds) * 1_000_000 + UInt64(opening.components.attoseconds / 1_000_000_000_000),
                20_000)
            for round in 0..<12 {
                try Self.downgradeToSchema4(path + "/index.sqlite")
                let child = try CrashTests.launch(store: path, seed: UInt64(round), durability: .batched, segmentSize: 1 << 20)
                // Spread the kills over the child's start: before, inside and after the migration.
                usleep(UInt32(rng.next() % (window + window / 5)))
                CrashTests.kill(child)
                let version = try Self.schema(path + "/index.sqlite").version
                #expect(version == 4 || version == IndexSchema.currentVersion, "round \(round): version \(version)")
                outcomes[version, default: 0] += 1
            }
            print(
                "SchemaMigrationTests: after the kills, the index was at version 4 \(outcomes[4] ?? 0) times, at 5 \(outcomes[5] ?? 0) times"
            )
            let store = try openStore(dir)
            let schema = try Self.schema(path + "/index.sqlite")
            #expect(schema.version == IndexSchema.currentVersion)
            #expect(!schema.indexes.contains("blobs_by_hash"))
            for i in 0..<count {
                guard try store.data(for: key(i)) == Data(testBytes(seed: UInt64(i), count: 48)) else {
                    Issue.record("key \(i) does not read back after the migration")
                    return
                }
            }
            #expect(try store.fsck().isClean)
        }
    }

    /// A build that reads schemas up to N refuses an index of N + 1 with `.schemaTooNew`, so
    /// builds before schema 5 refuse a migrated store the same way.
    @Test func aNewerSchemaIsRefusedWithTheClearError() async throws {
        try await withTemporaryDirectory { dir in
            try FileManager.default.copyItem(atPath: Self.fixture, toPath: dir + "/store")
            try openStore(dir).close()
            let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
            try index.connection.execute("PRAGMA user_version = \(IndexSchema.currentVersion + 1)")
            let error = #expect(throws: StoreError.self) { try openStore(dir) }
            #expect(error?.code == .schemaTooNew)
            #expect(error?.message.contains("Use a newer Trove") == true, "\(String(describing: error))")
        }
    }
}
