import Foundation
import Testing
import TroveCore
@testable import TroveIndex
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

/// The entry digest table (schema 7) finds entry rows by key digest. It must never miss a
/// committed row, however that row got there; extra candidates only cost a lookup.
@Suite struct EntryDigestTableTests {
    /// A place's fingerprint tells apart every field it covers: each text absent, empty or
    /// changed, texts moved from one field to the next, every integer; and texts longer than
    /// the stack buffer its bytes usually go to hash as well.
    @Test func aFingerprintChangesWithEveryFieldItCovers() {
        struct Fields {
            var texts: [String?] = ["https://e/a.jpg", "w=320", "\"etag\"", nil, "max-age=60"]
            var integers: [Int64] = [7, 11, 12, 4096, 180, 1_700_000_000_000]
            var expiresAt: Int64? = nil
            var fingerprint: UInt64 {
                EntryPlace.fingerprint(
                    url: texts[0]!, variant: texts[1]!, etag: texts[2], lastModified: texts[3], cachePolicy: texts[4],
                    blobID: integers[0], blobHash: ContentHash(high: UInt64(integers[1]), low: UInt64(integers[2])),
                    blobLength: UInt64(integers[3]), linkLength: UInt64(integers[4]), createdAt: integers[5],
                    expiresAt: expiresAt)
            }
        }
        let base = Fields()
        var seen: Set<UInt64> = [base.fingerprint]
        func expectNew(_ fields: Fields, _ what: String) {
            #expect(fields.fingerprint == fields.fingerprint, "\(what): the same input, the same fingerprint")
            #expect(seen.insert(fields.fingerprint).inserted, "\(what)")
        }
        for i in 0..<5 {
            var changed = base
            changed.texts[i] = (changed.texts[i] ?? "") + "x"
            expectNew(changed, "text \(i) changed")
            if i >= 2 {
                changed.texts[i] = base.texts[i] == nil ? "" : nil
                expectNew(changed, "text \(i) absent or empty")
            }
        }
        var shifted = base
        shifted.texts[0] = "https://e/a.jpgw"
        shifted.texts[1] = "=320"
        expectNew(shifted, "bytes moved between texts")
        for i in 0..<6 {
            var changed = base
            changed.integers[i] &+= 1
            expectNew(changed, "integer \(i)")
        }
        var expiring = base
        expiring.expiresAt = 0
        expectNew(expiring, "an expiry of 0")
        var long = base
        long.texts[0] = "https://e/" + String(repeating: "long/", count: 2_000)
        expectNew(long, "a URL of 10 KB")
        long.texts[4] = String(repeating: "p", count: 9_000)
        expectNew(long, "and a long policy")
    }

    /// The slot multimap against a model multiset, with keys chosen to pile up on a few home
    /// slots (so runs wrap around the array and removals shift them back), pairs inserted twice,
    /// removals of absent pairs, and growth.
    @Test func slotsMatchAModelUnderCrowdedKeys() {
        var g = SeededGenerator(seed: 3)
        for round in 0..<40 {
            var slots = DigestSlots(capacity: 16)
            var model: [UInt64: [Int64]] = [:]
            // Keys whose low bits (the home slot at small capacities) fall on few values.
            let homes = UInt64(1 + round % 5)
            func randomKey() -> UInt64 { ((g.next() % 6) << 32) | (g.next() % homes) | 1 << 40 }
            for _ in 0..<600 {
                let key = randomKey()
                let id = Int64(g.next() % 8)
                if g.next() % 3 == 0 {
                    slots.remove(key, id: id)
                    if let at = model[key]?.firstIndex(of: id) { model[key]!.remove(at: at) }
                } else {
                    slots.insert(key, id: id)
                    model[key, default: []].append(id)
                }
                #expect(slots.count == model.values.reduce(0) { $0 + $1.count })
            }
            for k in 0..<6 {
                for h in 0..<homes {
                    let key = UInt64(k) << 32 | h | 1 << 40
                    // A pair held twice is one candidate.
                    #expect(slots.ids(for: key).sorted() == Set(model[key] ?? []).sorted(), "round \(round), key \(key)")
                    #expect(slots.contains(key) == !(model[key] ?? []).isEmpty)
                }
            }
        }
    }

    /// Ids a transaction inserts are candidates at once and gone again after a rollback; ids it
    /// deletes stay candidates until it commits (readers still see the rows until then).
    @Test func transactionsAddAndRemoveCandidatesAtTheRightMoment() async throws {
        try await withTemporaryDirectory { dir in
            do {
                let store = try openStore(dir) { $0.compactionInterval = nil }
                for i in 0..<20 { try store.put(Data("v\(i)".utf8), for: key(i)) }
                try store.close()
            }
            let digests = EntryDigestTable()
            let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false, digests: digests)
            let reader = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: true, digests: digests)
            #expect(digests.count == 20)
            var row = try #require(try index.entryRow(digest: key(1).digest))
            // A new key, rolled back.
            row.keyDigest = key(100).digest
            row.url = key(100).url
            try index.begin()
            try index.link(row)
            #expect(digests.mayContain(key(100).digest))
            #expect(try reader.entry(digest: key(100).digest) == nil, "not committed: a candidate, not a row")
            try index.rollback()
            #expect(!digests.mayContain(key(100).digest))
            #expect(digests.count == 20)
            // A removal: still found by readers until it commits, then no candidate.
            try index.begin()
            #expect(try index.removeEntry(digest: key(2).digest) != nil)
            #expect(digests.mayContain(key(2).digest))
            #expect(try reader.entry(digest: key(2).digest)?.entry.key == key(2))
            #expect(try index.entry(digest: key(2).digest) == nil, "the writer's own transaction has no row")
            try index.commit()
            #expect(!digests.mayContain(key(2).digest))
            #expect(try reader.entry(digest: key(2).digest) == nil)
            // A removal rolled back keeps its candidate.
            try index.begin()
            _ = try index.removeEntry(digest: key(3).digest)
            try index.rollback()
            #expect(try reader.entry(digest: key(3).digest)?.entry.key == key(3))
            // A reader without the writer's table finds rows by scanning: it sees rows written
            // after it opened, and no removed ones.
            let alone = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: true)
            #expect(alone.digests == nil)
            #expect(try alone.entry(digest: key(4).digest)?.entry.key == key(4))
            #expect(try alone.entry(digest: key(2).digest) == nil)
            row.keyDigest = key(101).digest
            row.url = key(101).url
            try index.writing { try index.link(row) }
            #expect(try alone.entry(digest: key(101).digest)?.entry.key == key(101))
        }
    }

    /// Two rows whose digest is the same malformed value (no key's: no lookup matches it) do not
    /// count as two rows of one key, which would make fsck report damage that repair, which
    /// deletes malformed rows, is said not to fix.
    @Test func malformedDigestsAreNotSharedDigests() async throws {
        try await withTemporaryDirectory { dir in
            do {
                let store = try openStore(dir) { $0.compactionInterval = nil }
                for i in 0..<3 { try store.put(Data("v\(i)".utf8), for: key(i)) }
                try store.close()
            }
            let path = dir + "/store/index.sqlite"
            try IndexDatabase(path: path, readOnly: false).connection.execute(
                "UPDATE entries SET key_hash = x'00' WHERE id IN (SELECT id FROM entries LIMIT 2)")
            #expect(try IndexDatabase(path: path, readOnly: true).digestFindings().isEmpty)
            let store = try openStore(dir) { $0.compactionInterval = nil }
            let report = try store.fsck(repair: true)
            #expect(!report.findings.contains { $0.kind == .indexIntegrity }, "\(report.findings)")
            for i in 0..<3 { #expect(try store.data(for: key(i)) == Data("v\(i)".utf8)) }
            try store.close()
        }
    }

    /// A schema-6 index whose digest index lost a row's cell is refused by the migration to
    /// schema 7 (which drops that index), not migrated: the hidden row may be an older or removed
    /// value, and dropping the index would serve it (found by an outside attack). The rebuild
    /// brings the store back; an intact schema-6 index migrates.
    @Test func aSchema6IndexWithALostCellIsNotMigrated() async throws {
        try await withTemporaryDirectory { dir in
            do {
                let store = try openStore(dir) { $0.compactionInterval = nil }
                for i in 0..<5 { try store.put(Data("v\(i)".utf8), for: key(i)) }
                try store.close()
            }
            let path = dir + "/store/index.sqlite"
            let hex = key(1).digest.description
            func downgrade(losing lost: String?) throws {
                let index = try IndexDatabase(path: path, readOnly: false)
                try index.connection.execute(
                    """
                    CREATE UNIQUE INDEX entries_by_key ON entries(key_hash)\(lost.map { " WHERE NOT (\($0))" } ?? "");
                    PRAGMA writable_schema = ON;
                    UPDATE sqlite_schema SET sql = 'CREATE UNIQUE INDEX entries_by_key ON entries(key_hash)'
                        WHERE name = 'entries_by_key';
                    PRAGMA writable_schema = OFF;
                    PRAGMA user_version = 6;
                    """)
            }
            try downgrade(losing: "key_hash = x'\(hex)'")
            let error = #expect(throws: StoreError.self) { try openStore(dir) }
            #expect(error?.code == .indexCorrupt)
            #expect(error?.message.contains("not reached through the digest index") == true, "\(String(describing: error))")
            #expect(error?.message.contains("--rebuild-index") == true)
            #expect(try IndexDatabase(path: path, readOnly: true).schemaVersion() == 6)
            _ = try Store.rebuildIndex(directory: dir + "/store", configuration: Store.Configuration())
            do {
                let store = try openStore(dir)
                for i in 0..<5 { #expect(try store.data(for: key(i)) == Data("v\(i)".utf8)) }
                try store.close()
            }
            // Intact: migrated.
            try downgrade(losing: nil)
            let store = try openStore(dir)
            #expect(try IndexDatabase(path: path, readOnly: true).schemaVersion() == IndexSchema.currentVersion)
            for i in 0..<5 { #expect(try store.data(for: key(i)) == Data("v\(i)".utf8)) }
            try store.close()
        }
    }

    /// A writer refuses an index in which two entry rows share a key digest (one row per key is
    /// what its lookups and replacements rely on), and says how to get out.
    @Test func aWriterRefusesTwoRowsWithOneDigest() async throws {
        try await withTemporaryDirectory { dir in
            do {
                let store = try openStore(dir) { $0.compactionInterval = nil }
                for i in 0..<5 { try store.put(Data("v\(i)".utf8), for: key(i)) }
                try store.close()
            }
            let path = dir + "/store/index.sqlite"
            do {
                let index = try IndexDatabase(path: path, readOnly: false)
                try index.connection.execute(
                    """
                    INSERT INTO entries(key_hash, url, variant, url_hash, blob, link_segment, link_offset, link_length,
                        sequence, etag, last_modified, expires_at, created_at, accessed_at, cost, cache_policy)
                    SELECT key_hash, url || '#copy', variant, url_hash, blob, link_segment, link_offset, link_length,
                        sequence, etag, last_modified, expires_at, created_at, accessed_at, cost, cache_policy
                    FROM entries LIMIT 1
                    """)
            }
            let error = #expect(throws: IndexError.self) { try IndexDatabase(path: path, readOnly: false) }
            #expect(error?.code == .corrupt)
            #expect(error?.message.contains("1 key digests have more than one entry row") == true)
            #expect(try IndexDatabase(path: path, readOnly: true).digestFindings().count == 1)
            // The store gives the advice, once (an outside attack found it twice).
            let opening = #expect(throws: StoreError.self) { try openStore(dir) }
            #expect(opening?.code == .indexCorrupt)
            #expect(opening?.message.components(separatedBy: "--rebuild-index").count == 2, "\(String(describing: opening))")
        }
    }

    /// A row planted under another key's digest — as a crafted collision would make — through
    /// the committer's connection, or found by the load when the store opens: either way the put
    /// of the colliding key is refused, not skipped past.
    @Test func aCollidingRowIsFoundWrittenOrLoaded() async throws {
        try await withTemporaryDirectory { dir in
            func plant(_ store: Store, under victim: CacheKey) throws {
                try store.committer.withLock { state in
                    let index = try #require(state).index
                    var row = try #require(try index.entry(digest: key(1).digest)).entry
                    row.keyDigest = victim.digest
                    row.url = "https://attacker.example/\(victim.url.count)"
                    try index.writing { try index.link(row) }
                }
            }
            var store = try openStore(dir)
            try store.put(Data("mine".utf8), for: key(1))
            try store.close()
            store = try openStore(dir)
            try plant(store, under: key(2))
            #expect(store.entryDigests.mayContain(key(2).digest))
            var error = #expect(throws: StoreError.self) { try store.put(Data("yours".utf8), for: key(2)) }
            #expect(error?.code == .keyCollision)
            try store.close()
            // Loaded from the rows when the store opens again.
            store = try openStore(dir)
            error = #expect(throws: StoreError.self) { try store.put(Data("yours".utf8), for: key(2)) }
            #expect(error?.code == .keyCollision)
            try plant(store, under: key(3))
            error = #expect(throws: StoreError.self) { try store.put(Data("theirs".utf8), for: key(3)) }
            #expect(error?.code == .keyCollision)
            #expect(try store.data(for: key(1)) == Data("mine".utf8))
            try store.close()
        }
    }

    /// The committer skips the lookup of a key's current row when the table has no candidate. Keys put twice in one cycle (the second must find the first's row, written in the
    /// open transaction), overwritten across cycles, removed and put again: every value, count
    /// and check stays right, against a model.
    @Test func theCommitterSkipsOnlyLookupsTheTableRulesOut() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.compactionInterval = nil
                $0.batchInterval = .seconds(3600)
            }
            for i in 0..<100 { try store.put(Data("seed \(i)".utf8), for: key(i)) }
            try store.flush()
            var model: [Int: Data] = [:]
            for i in 0..<100 { model[i] = Data("seed \(i)".utf8) }
            var g = SeededGenerator(seed: 11)
            for round in 0..<20 {
                for _ in 0..<60 {
                    let i = Int(g.next() % 300)  // a third known, two thirds new at first
                    if g.next() % 5 == 0 {
                        _ = try store.remove(key(i))
                        model[i] = nil
                    } else {
                        let value = Data("r\(round) \(i) \(g.next() % 1000)".utf8)
                        try store.put(value, for: key(i))
                        model[i] = value
                    }
                }
                try store.flush()
            }
            for i in 0..<300 { #expect(try store.data(for: key(i)) == model[i], "\(key(i))") }
            #expect(try store.statistics().entries == model.count)
            #expect(try store.fsck().isClean)
            try store.close()
            let reopened = try openStore(dir)
            for i in 0..<300 { #expect(try reopened.data(for: key(i)) == model[i], "reopened: \(key(i))") }
            try reopened.close()
        }
    }

    /// Entries that reach the index without a put — here restored by `fsck --repair` after their
    /// rows' digests were damaged (TEXT instead of a BLOB: no lookup matches them and the table's
    /// load skipped them) — are in the table too, because repair writes them through the
    /// committer's connection: a put of a colliding key after them is still refused.
    @Test func rowsRestoredByRepairAreInTheTable() async throws {
        try await withTemporaryDirectory { dir in
            do {
                let store = try openStore(dir) { $0.compactionInterval = nil }
                for i in 0..<200 { try store.put(Data("v\(i)".utf8), for: key(i)) }
                try store.close()
            }
            do {
                let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
                try index.connection.execute("UPDATE entries SET key_hash = CAST(key_hash AS TEXT) WHERE url LIKE '%/1__.jpg'")
                #expect(index.connection.changes == 100)
            }
            let store = try openStore(dir) { $0.compactionInterval = nil }
            let damaged = (100..<200).filter { i in !store.entryDigests.mayContain(key(i).digest) }
            #expect(damaged.count > 90, "the load skipped the damaged digests")
            _ = try store.fsck(repair: true)
            var restored = 0
            for i in 0..<200 {
                guard let data = try store.data(for: key(i)) else { continue }
                #expect(data == Data("v\(i)".utf8))
                restored += 1
                #expect(store.entryDigests.mayContain(key(i).digest), "\(key(i)) restored without the table hearing")
            }
            #expect(restored == 200)
            try store.close()
        }
    }

    // MARK: Places

    /// A row's place (what a cold get reads without SQLite) is never older than the committed
    /// row: every statement that changes the row — the writer's own, and one nobody announced,
    /// since SQLite reports each changed row — takes the place away before its transaction
    /// commits (a statement outside one commits itself), and until then the place still
    /// describes the committed row, the only one another connection sees; a write sets the new
    /// place only when its transaction has committed; a rollback leaves none. Read times raise a place
    /// without taking it away. Loaded places describe their rows exactly as written ones do.
    @Test func placesAreNeverOlderThanTheirRows() async throws {
        try await withTemporaryDirectory { dir in
            let dup = CacheKey(url: "https://places.example/dup")
            var written: [CacheKey: EntryPlace] = [:]
            do {
                let store = try openStore(dir) { $0.compactionInterval = nil }
                for i in 0..<10 { try store.put(value(i), for: key(i)) }
                try store.put(value(0), for: dup)  // deduplicated: its link is not beside its blob
                try store.flush()
                for i in 0..<10 { written[key(i)] = store.entryDigests.placedCandidates(key(i).digest).first?.place }
                try store.close()
            }
            let digests = EntryDigestTable()
            let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false, digests: digests)
            #expect(digests.placeCount == 0, "opening loads the ids alone")
            try Self.loadPlaces(into: digests, from: dir + "/store/index.sqlite")
            func place(_ k: CacheKey) -> EntryPlace? {
                let placed = digests.placedCandidates(k.digest)
                #expect(placed.count <= 1)
                return placed.first?.place
            }
            func row(_ k: CacheKey) throws -> EntryRow { try #require(try index.entryRow(digest: k.digest)) }
            // Loaded: each put of new bytes has the place its commit set, fingerprint and all.
            for i in 0..<10 {
                #expect(place(key(i)) != nil && place(key(i)) == written[key(i)], "key \(i)")
                #expect(place(key(i))?.sequence == (try row(key(i))).sequence)
            }
            #expect(place(dup) == nil)
            #expect(digests.placeCount == 10)

            // A replacement: the committed row's place until the commit (what a reader connection
            // still reads), then the new write's.
            let reader = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: true, digests: digests)
            var replacement = try row(key(1))
            replacement.sequence += 1_000
            replacement.etag = "replaced"
            try index.begin()
            try index.link(replacement)
            #expect(place(key(1)) == written[key(1)], "an uncommitted write has no place, and the old one stays")
            #expect(try reader.entryRow(digest: key(1).digest)?.sequence == written[key(1)]?.sequence)
            try index.commit()
            #expect(place(key(1))?.sequence == replacement.sequence)
            #expect(place(key(1))?.fingerprint != written[key(1)]?.fingerprint)
            // Rolled back: neither the new place nor, once the statement ran, the old one.
            var rolledBack = replacement
            rolledBack.sequence += 1_000
            try index.begin()
            try index.link(rolledBack)
            try index.rollback()
            #expect(place(key(1)) == nil)
            #expect((try row(key(1))).sequence == replacement.sequence)

            // A statement nobody announced — as a repair or a future statement might run — through
            // the writer's connection: SQLite reports the row, the place goes.
            try index.connection.execute("UPDATE entries SET etag = 'edited' WHERE url = '\(key(2).url)'")
            #expect(place(key(2)) == nil)
            try index.connection.execute("UPDATE entries SET cost = cost WHERE url = '\(key(3).url)'")
            #expect(place(key(3)) == nil, "even an update that changes no value")

            // A removal: the place stays while the removal is uncommitted, and goes when the
            // transaction ends, whether or not it commits.
            try index.begin()
            #expect(try index.removeEntry(digest: key(4).digest) != nil)
            #expect(place(key(4)) == written[key(4)])
            try index.rollback()
            #expect(place(key(4)) == nil)
            try index.writing { try index.removeEntry(digest: key(5).digest) }
            #expect(place(key(5)) == nil)

            // A link moved by the compactor, a row deleted by repair.
            let moved = try row(key(6))
            #expect(
                try index.moveLink(
                    of: key(6).digest, from: (moved.linkSegment, moved.linkOffset), to: moved.linkSegment,
                    offset: moved.linkOffset + 1_000_000, length: moved.linkLength))
            #expect(place(key(6)) == nil)
            try index.writing { try index.deleteEntryRow(digest: key(7).digest) }
            #expect(place(key(7)) == nil)

            // Read times keep the place and raise its time when they commit.
            let before = try #require(place(key(8)))
            try index.writing { try index.touch([(key(8).digest, before.accessedAt + 5_000)]) }
            var raised = before
            raised.accessedAt += 5_000
            #expect(place(key(8)) == raised)
            try index.begin()
            try index.touch([(key(8).digest, before.accessedAt + 9_000)])
            try index.rollback()
            #expect(place(key(8)) == raised)

            // A new key: a candidate at once, a place only once committed.
            var fresh = try row(key(9))
            fresh.keyDigest = key(100).digest
            fresh.url = key(100).url
            try index.begin()
            try index.link(fresh)
            #expect(digests.mayContain(key(100).digest) && place(key(100)) == nil)
            try index.commit()
            #expect(place(key(100))?.sequence == fresh.sequence)
            #expect(place(key(9)) == written[key(9)], "a row sharing its blob keeps its own place")

            // Loaded again, every place is what the rows say now.
            let reloaded = EntryDigestTable()
            _ = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false, digests: reloaded)
            try Self.loadPlaces(into: reloaded, from: dir + "/store/index.sqlite")
            for k in (0..<10).map { key($0) } + [dup, key(100)] {
                #expect(reloaded.placedCandidates(k.digest).first?.place == place(k) || place(k) == nil, "\(k)")
            }
        }
    }

    /// Loads `digests`' places from the index at `path`, as a store does after opening.
    static func loadPlaces(into digests: EntryDigestTable, from path: String) throws {
        digests.beginPlaceLoad()
        defer { digests.endPlaceLoad() }
        let reader = try IndexDatabase(path: path, readOnly: true)
        var after: Int64 = .min
        while case (let batch, let last?) = try reader.places(after: after, limit: 3) {
            digests.fillLoadedPlaces(batch)
            after = last
        }
    }

    /// Places load after opening, from a snapshot that may be older than what the writer
    /// commits meanwhile: a row the writer changed after the load began keeps what the writer
    /// left (the new place, or none), never the snapshot's older place — here the snapshot is
    /// read before a replacement, a removal and a metadata-only change commit, and filled after.
    @Test func aLoadNeverPutsBackAPlaceTheWriterChanged() async throws {
        try await withTemporaryDirectory { dir in
            do {
                let store = try openStore(dir) { $0.compactionInterval = nil }
                for i in 0..<6 { try store.put(value(i), for: key(i)) }
                try store.close()
            }
            let path = dir + "/store/index.sqlite"
            let digests = EntryDigestTable()
            let index = try IndexDatabase(path: path, readOnly: false, digests: digests)
            let reader = try IndexDatabase(path: path, readOnly: true)
            digests.beginPlaceLoad()
            let snapshot = try reader.places(after: .min, limit: 100).places
            #expect(snapshot.count == 6)
            // The writer, after the load began and after its snapshot was read.
            var replacement = try #require(try index.entryRow(digest: key(1).digest))
            replacement.sequence += 1_000
            try index.writing { try index.link(replacement) }
            try index.writing { try index.removeEntry(digest: key(2).digest) }
            try index.connection.execute("UPDATE entries SET etag = 'edited' WHERE url = '\(key(3).url)'")
            try index.writing { try index.touch([(key(4).digest, 9_999_999_999_999)]) }
            digests.fillLoadedPlaces(snapshot)
            digests.endPlaceLoad()
            #expect(digests.placedCandidates(key(1).digest).first?.place.sequence == replacement.sequence)
            #expect(digests.placedCandidates(key(2).digest).isEmpty)
            #expect(digests.placedCandidates(key(3).digest).isEmpty)
            #expect(
                digests.placedCandidates(key(4).digest).first?.place.accessedAt == 9_999_999_999_999,
                "a read time committed since is raised into the loaded place")
            for i in [0, 5] { #expect(digests.placedCandidates(key(i).digest).count == 1) }
            #expect(digests.placeCount == 4)
        }
    }
}
