import Foundation
import Testing
import TroveCore
import TroveTestSupport

@testable import TroveIndex

@Suite struct IndexDatabaseTests {
    func entry(_ url: String, blob: Int64, sequence: UInt64 = 1, linkOffset: UInt64 = 100) -> EntryRow {
        let key = CacheKey(url: url)
        return EntryRow(
            keyDigest: key.digest, url: url, variant: "", blobID: blob, linkSegment: 1, linkOffset: linkOffset,
            linkLength: 90, sequence: sequence, etag: "e", lastModified: nil, expiresAt: nil, createdAt: 10,
            accessedAt: 10, cost: 1000)
    }

    /// Inserts a blob under the next test blob id and returns the id.
    func insert(
        _ index: IndexDatabase, hash: ContentHash, length: UInt64, segment: UInt32, offset: UInt64, recordBytes: UInt64
    ) throws -> Int64 {
        let id = Int64(offset) * 1000 + Int64(segment)
        try index.insertBlob(id: id, hash: hash, length: length, segment: segment, offset: offset, recordBytes: recordBytes)
        return id
    }

    /// A row equals only a row with the same fields and the same bytes in every text (fsck and
    /// the compactor compare rows; `String`'s `==` would call canonically equivalent spellings
    /// equal).
    @Test func rowsAreEqualByEveryFieldAndByBytes() {
        var base = entry("https://example.com/caf\u{E9}", blob: 1)
        base.cachePolicy = "p"
        base.lastModified = "m"
        base.expiresAt = 5
        #expect(Mirror(reflecting: base).children.count == 15, "a new field must join `==` and this test")
        let changes: [(inout EntryRow) -> Void] = [
            { $0.keyDigest = ContentHash(high: 0, low: 1) }, { $0.url += "x" }, { $0.variant = "v" },
            { $0.blobID += 1 }, { $0.linkSegment += 1 }, { $0.linkOffset += 1 }, { $0.linkLength += 1 },
            { $0.sequence += 1 }, { $0.etag = nil }, { $0.lastModified = nil }, { $0.cachePolicy = nil },
            { $0.expiresAt = nil }, { $0.createdAt += 1 }, { $0.accessedAt += 1 }, { $0.cost += 1 },
        ]
        for (i, change) in changes.enumerated() {
            var other = base
            change(&other)
            #expect(other != base, "field \(i)")
        }
        let spellings: [(inout EntryRow, String) -> Void] = [
            { $0.url = $1 }, { $0.variant = $1 }, { $0.etag = $1 }, { $0.lastModified = $1 }, { $0.cachePolicy = $1 },
        ]
        for (i, set) in spellings.enumerated() {
            var a = base
            var b = base
            set(&a, "caf\u{E9}")
            set(&b, "cafe\u{301}")
            #expect(a != b, "text \(i)")
            #expect(a == a)
        }
    }

    @Test func createsAndMigratesOnce() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir + "/index.sqlite"
            do {
                let index = try IndexDatabase(path: path, readOnly: false)
                #expect(try index.schemaVersion() == IndexSchema.currentVersion)
                try index.setMeta("x", 5)
            }
            let again = try IndexDatabase(path: path, readOnly: false)
            #expect(try again.meta("x") == 5)
            let reader = try IndexDatabase(path: path, readOnly: true)
            #expect(try reader.schemaVersion() == IndexSchema.currentVersion)
            #expect(try reader.integrityCheck() == ["ok"])
        }
    }

    @Test func refusesANewerSchema() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir + "/index.sqlite"
            do {
                let index = try IndexDatabase(path: path, readOnly: false)
                try index.connection.execute("PRAGMA user_version = 99")
            }
            let error = #expect(throws: IndexError.self) { try IndexDatabase(path: path, readOnly: false) }
            #expect(error?.code == .schemaTooNew)
        }
    }

    /// A negative schema version (a damaged header) is refused as damage, by writers and
    /// readers, not trapped on (found by an outside attack).
    @Test func refusesANegativeSchemaVersion() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir + "/index.sqlite"
            do {
                let index = try IndexDatabase(path: path, readOnly: false)
                try index.connection.execute("PRAGMA user_version = -1")
            }
            let error = #expect(throws: IndexError.self) { try IndexDatabase(path: path, readOnly: false) }
            #expect(error?.code == .corrupt)
            let readerError = #expect(throws: IndexError.self) { try IndexDatabase(path: path, readOnly: true) }
            #expect(readerError?.code == .corrupt)
        }
    }

    @Test func refusesAFileThatIsNotADatabase() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir + "/index.sqlite"
            try Data(repeating: 0x41, count: 8192).write(to: URL(fileURLWithPath: path))
            let error = #expect(throws: IndexError.self) { try IndexDatabase(path: path, readOnly: false) }
            #expect(error?.code == .corrupt)
            #expect(error?.resultCode == 26)  // SQLITE_NOTADB
        }
    }

    @Test func sqliteErrorsCarryCodesAndSQL() async throws {
        try await withTemporaryDirectory { dir in
            let index = try IndexDatabase(path: dir + "/i.sqlite", readOnly: false)
            try index.insertSegment(id: 1, indexedBytes: 32)
            try index.insertBlob(id: 7, hash: ContentHash(high: 1, low: 1), length: 1, segment: 1, offset: 32, recordBytes: 41)
            // The same blob id twice keeps the first row (a second copy the compactor made).
            #expect(
                try index.insertBlob(
                    id: 7, hash: ContentHash(high: 2, low: 2), length: 1, segment: 1, offset: 99, recordBytes: 41)
                    == false)
            #expect(try index.blob(id: 7)?.offset == 32)
            // A second row for one digest, claimed to be new, is refused by the writer (schema
            // 7: one row per key is its rule, not a unique index's), and nothing is written.
            try index.link(entry("a", blob: 7), replacing: nil)
            let error = #expect(throws: IndexError.self) {
                try index.link(entry("a", blob: 7, sequence: 2, linkOffset: 300), replacing: nil)
            }
            #expect(error?.code == .corrupt)
            #expect(error?.message.contains("written as new") == true)
            #expect(try index.entryRows().count == 1)
            // SQLite's own errors carry its codes and the statement.
            let sqlError = #expect(throws: IndexError.self) {
                try index.connection.execute("INSERT INTO segments(id, indexed_bytes) VALUES (1, 32)")
            }
            #expect(sqlError?.resultCode == 19)  // SQLITE_CONSTRAINT
            #expect(sqlError?.sql?.contains("segments") == true)
        }
    }

    /// The committer's `link(_:replacing:)` leaves exactly what `link(_:)` does.
    @Test func linkReplacingMatchesLink() async throws {
        try await withTemporaryDirectory { dir in
            let a = try IndexDatabase(path: dir + "/a.sqlite", readOnly: false)
            let b = try IndexDatabase(path: dir + "/b.sqlite", readOnly: false)
            for index in [a, b] {
                try index.insertSegment(id: 1, indexedBytes: 32)
                try index.insertBlob(
                    id: 1, hash: ContentHash(high: 1, low: 1), length: 10, segment: 1, offset: 32, recordBytes: 50)
                try index.insertBlob(
                    id: 2, hash: ContentHash(high: 2, low: 2), length: 20, segment: 1, offset: 82, recordBytes: 60)
            }
            let writes = [
                entry("x", blob: 1), entry("y", blob: 1, linkOffset: 200), entry("x", blob: 2, sequence: 3, linkOffset: 300),
                entry("y", blob: 1, sequence: 4, linkOffset: 400), entry("x", blob: 1, sequence: 5, linkOffset: 500),
            ]
            try a.writing { for row in writes { try a.link(row) } }
            try b.writing {
                for row in writes { try b.link(row, replacing: try b.entryRow(digest: row.keyDigest)) }
            }
            #expect(try a.entryRows() == b.entryRows())
            #expect(try a.blobRows() == b.blobRows())
            #expect(try a.segments() == b.segments())
        }
    }

    @Test func referenceCountsAndLiveBytes() async throws {
        try await withTemporaryDirectory { dir in
            let index = try IndexDatabase(path: dir + "/i.sqlite", readOnly: false)
            try index.begin()
            try index.insertSegment(id: 1, indexedBytes: 32)
            let blob = try insert(
                index, hash: ContentHash(high: 1, low: 2), length: 1000, segment: 1, offset: 32, recordBytes: 1040)
            #expect(try index.segments().first?.liveBytes == 0)
            try index.link(entry("a", blob: blob))
            try index.link(entry("b", blob: blob, linkOffset: 200))
            #expect(try index.blob(id: blob)?.references == 2)
            #expect(try index.segments().first?.liveBytes == 1040 + 90 + 90)
            // Re-linking a key to the blob it already has must not free the blob.
            try index.link(entry("a", blob: blob, sequence: 2, linkOffset: 300))
            #expect(try index.blob(id: blob)?.references == 2)
            #expect(try index.segments().first?.liveBytes == 1040 + 90 + 90)
            try index.removeEntry(digest: CacheKey(url: "a").digest)
            #expect(try index.blob(id: blob)?.references == 1)
            let removed = try index.removeEntry(digest: CacheKey(url: "b").digest)
            #expect(removed?.url == "b")
            // Dead, not gone: the row stays (for dedup) until the compactor reclaims its bytes.
            #expect(try index.blob(id: blob)?.references == 0)
            #expect(try index.segments().first?.liveBytes == 0)
            #expect(try index.removeEntry(digest: CacheKey(url: "b").digest) == nil)
            try index.commit()
            #expect(try index.totals().entries == 0)
            #expect(try index.totals().blobs == 0)
        }
    }

    @Test func entriesByURLAndVariants() async throws {
        try await withTemporaryDirectory { dir in
            let index = try IndexDatabase(path: dir + "/i.sqlite", readOnly: false)
            try index.insertSegment(id: 1, indexedBytes: 32)
            let blob = try insert(index, hash: ContentHash(high: 1, low: 2), length: 10, segment: 1, offset: 32, recordBytes: 50)
            for (i, variant) in ["", "w100", "w200"].enumerated() {
                var row = entry("https://x/a", blob: blob, linkOffset: UInt64(100 * i + 100))
                row.variant = variant
                row.keyDigest = CacheKey(url: row.url, variant: variant).digest
                try index.link(row)
            }
            try index.link(entry("https://x/b", blob: blob, linkOffset: 900))
            #expect(try index.entries(url: "https://x/a").map(\.entry.variant) == ["", "w100", "w200"])
            #expect(try index.entries(url: "https://x/b").count == 1)
            #expect(try index.entries(url: "https://x/c").isEmpty)
            let totals = try index.totals()
            #expect(totals.entries == 4)
            #expect(totals.blobs == 1)
            #expect(totals.entryPayloadBytes == 4000)
        }
    }

    @Test func dropRecordsBeyondALimit() async throws {
        try await withTemporaryDirectory { dir in
            let index = try IndexDatabase(path: dir + "/i.sqlite", readOnly: false)
            try index.insertSegment(id: 1, indexedBytes: 32)
            let early = try insert(index, hash: ContentHash(high: 1, low: 1), length: 10, segment: 1, offset: 32, recordBytes: 50)
            let late = try insert(index, hash: ContentHash(high: 2, low: 2), length: 10, segment: 1, offset: 500, recordBytes: 50)
            try index.link(entry("early", blob: early, linkOffset: 82))
            try index.link(entry("late", blob: late, linkOffset: 550))
            try index.link(entry("late-link", blob: early, linkOffset: 600))
            // Bytes up to 540 survive: "late"'s blob ends at 550, the others' links past 540.
            let dropped = try index.dropRecords(segment: 1, beyond: 540).map(\.url).sorted()
            #expect(dropped == ["late", "late-link"])
            #expect(try index.entry(digest: CacheKey(url: "early").digest) != nil)
            #expect(try index.blob(id: late) == nil)
            #expect(try index.dropRecords(segment: 1, beyond: 0).map(\.url) == ["early"])
            #expect(try index.totals().blobs == 0)
        }
    }

    @Test func touchKeepsTheLatestTime() async throws {
        try await withTemporaryDirectory { dir in
            let index = try IndexDatabase(path: dir + "/i.sqlite", readOnly: false)
            try index.insertSegment(id: 1, indexedBytes: 32)
            let blob = try insert(index, hash: ContentHash(high: 1, low: 1), length: 10, segment: 1, offset: 32, recordBytes: 50)
            try index.link(entry("a", blob: blob))
            try index.touch([(CacheKey(url: "a").digest, 500)])
            try index.touch([(CacheKey(url: "a").digest, 400)])
            #expect(try index.entry(digest: CacheKey(url: "a").digest)?.entry.accessedAt == 500)
        }
    }

    @Test func aRolledBackTransactionLeavesNoLiveBytesBehind() async throws {
        try await withTemporaryDirectory { dir in
            let index = try IndexDatabase(path: dir + "/i.sqlite", readOnly: false)
            try index.insertSegment(id: 1, indexedBytes: 32)
            try index.begin()
            let blob = try insert(index, hash: ContentHash(high: 1, low: 1), length: 10, segment: 1, offset: 32, recordBytes: 50)
            try index.link(entry("a", blob: blob))
            try index.rollback()
            // A later commit must not write the rolled-back transaction's accumulated deltas.
            try index.begin()
            try index.setIndexedBytes(64, segment: 1)
            try index.commit()
            #expect(try index.segments().first?.liveBytes == 0)
            #expect(try index.totals().entries == 0)
        }
    }

    @Test func aLinkMovesOnlyFromWhereTheEntryStillPoints() async throws {
        try await withTemporaryDirectory { dir in
            let index = try IndexDatabase(path: dir + "/i.sqlite", readOnly: false)
            try index.insertSegment(id: 1, indexedBytes: 32)
            try index.insertSegment(id: 2, indexedBytes: 32)
            let blob = try insert(index, hash: ContentHash(high: 1, low: 1), length: 10, segment: 1, offset: 32, recordBytes: 58)
            try index.begin()
            try index.link(entry("a", blob: blob, sequence: 1, linkOffset: 100))
            // A newer write for "a" was committed meanwhile: its link is at 300 now.
            try index.link(entry("a", blob: blob, sequence: 2, linkOffset: 300))
            // The compactor copied the old link (at 100) and must not move the entry onto it.
            #expect(try !index.moveLink(of: CacheKey(url: "a").digest, from: (1, 100), to: 2, offset: 40, length: 120))
            #expect(try index.entry(digest: CacheKey(url: "a").digest)?.entry.linkOffset == 300)
            #expect(try index.moveLink(of: CacheKey(url: "a").digest, from: (1, 300), to: 2, offset: 40, length: 120))
            let moved = try index.entry(digest: CacheKey(url: "a").digest)?.entry
            #expect(moved?.linkSegment == 2)
            #expect(moved?.linkOffset == 40)
            try index.commit()
            #expect(try index.wrongLiveBytes().isEmpty)
        }
    }
}
