import Foundation
import Testing
import TroveCore
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@testable import TroveIndex
@_spi(Testing) @testable import TroveStore

/// A cold get (the key not in the location map) checks the row against its link record before
/// serving the blob. When the link record follows its blob — a put of new bytes appends both in
/// one write — the two are read and checked with one `pread`.
@Suite struct ColdReadTests {
    /// Counts the `pread`s a store makes on its segments.
    final class ReadCounter: Sendable {
        let reads = Locked(0)
        var injector: FaultInjector {
            FaultInjector { operation, _ in
                if operation == .read { self.reads.withLock { $0 += 1 } }
                return nil
            }
        }
        func count(_ body: () throws -> Void) rethrows -> Int {
            let before = reads.withLock { $0 }
            try body()
            return reads.withLock { $0 } - before
        }
    }

    @Test func aColdGetReadsANewBlobAndItsLinkWithOnePread() async throws {
        try await withTemporaryDirectory { dir in
            let dup = CacheKey(url: "https://cold.example/dup.jpg")
            do {
                let store = try openStore(dir)
                for i in 0..<6 { try store.put(value(i), for: key(i)) }
                try store.put(value(0), for: dup)  // the same bytes: a link to key 0's blob
                try store.close()
            }
            let counter = ReadCounter()
            let store = try openStore(dir) { $0.faultInjector = counter.injector }
            defer { try? store.close() }
            #expect(try store.data(for: key(5)) == value(5))  // opens the segment
            for i in 0..<5 {
                var served: Data?
                let reads = try counter.count { served = try store.data(for: key(i)) }
                #expect(served == value(i))
                #expect(reads == 1, "key \(i): \(reads) reads")
            }
            // A link whose blob is elsewhere is checked on its own: two reads.
            var served: Data?
            #expect(try counter.count { served = try store.data(for: dup) } == 2)
            #expect(served == value(0))
            // Warm: the location map has the checked row; the blob alone is read.
            #expect(try counter.count { served = try store.data(for: key(1)) } == 1)
            #expect(served == value(1))
        }
    }

    /// A cold get of an entry whose blob and link are neighbours reads them through the entry
    /// digest table's place, without SQLite, and returns what the index path would (bytes and
    /// info); deduplicated bytes and metadata updates (a link away from its blob) go through
    /// the index. Overwritten and removed keys never serve the older records still in the packs.
    @Test func coldGetsGoThroughPlacesAndServeOnlyTheNewestWrite() async throws {
        try await withTemporaryDirectory { dir in
            let dup = CacheKey(url: "https://cold.example/dup.jpg")
            let clock = Locked(Int64(1_000_000))
            let store = try openStore(dir) {
                $0.compactionInterval = nil
                $0.locationCacheLimit = 0
                $0.clock = { clock.withLock { $0 } }
            }
            defer { try? store.close() }
            func throughPlaces() -> Int { store.shared.withLock { $0.readsThroughPlaces } }
            /// The entry as the index path builds it (the row, joined), before any get fills the map.
            func viaIndex(_ k: CacheKey) throws -> EntryInfo? {
                try store.readIndex { try $0.entry(digest: k.digest) }.map { store.info($0) }
            }
            for i in 0..<4 { try store.put(value(i), for: key(i), metadata: EntryMetadata(etag: "e\(i)")) }
            try store.put(value(0), for: dup)
            try store.flush()
            for i in 0..<4 {
                let expected = try viaIndex(key(i))
                let before = throughPlaces()
                let entry = try store.entry(for: key(i))
                #expect(entry?.data == value(i))
                #expect(entry?.info == expected, "key \(i): the place-built info differs from the row's")
                #expect(throughPlaces() == before + 1, "key \(i) went through the index")
            }
            var before = throughPlaces()
            #expect(try store.data(for: dup) == value(0))
            #expect(throughPlaces() == before, "deduplicated bytes are read through the index")
            // Overwrites leave older records of the key in the packs; the newest is served.
            for round in 1...3 {
                clock.withLock { $0 += 10 }
                try store.put(value(10 * round), for: key(1))
                try store.flush()
                before = throughPlaces()
                #expect(try store.data(for: key(1)) == value(10 * round))
                #expect(throughPlaces() == before + 1)
            }
            // Read times flushed and read back through the place.
            clock.withLock { $0 += 10 }
            _ = try store.data(for: key(0))
            try store.flush()
            let readAt = try #require(try viaIndex(key(0))).accessedAt
            #expect(try store.entry(for: key(0))?.info.accessedAt == readAt)
            // Removed: nothing, though its records remain.
            #expect(try store.remove(key(2)))
            try store.flush()
            #expect(try store.data(for: key(2)) == nil)
            // A metadata update's link is not beside its blob: through the index, with the new ETag.
            #expect(try store.updateMetadata(EntryMetadata(etag: "updated"), for: key(3)))
            try store.flush()
            before = throughPlaces()
            #expect(try store.entry(for: key(3))?.info.metadata.etag == "updated")
            #expect(throughPlaces() == before)
            // Expired: not served through its place either.
            try store.put(value(7), for: key(7), metadata: EntryMetadata(expiresAt: Date(timeIntervalSince1970: 1_000.150)))
            try store.flush()
            clock.withLock { $0 = 1_000_200 }
            #expect(try store.data(for: key(7)) == nil)
        }
    }

    /// A damaged blob row (its hash or length) is judged the same with a place as through the
    /// index: the get throws and records the damage, and `contains` agrees — the place's
    /// fingerprint covers what the blob row says (found by an outside review: the place served
    /// the intact bytes and recorded nothing, while `contains` threw).
    @Test(arguments: ["hash = zeroblob(16)", "length = length + 1"])
    func aDamagedBlobRowIsRefusedWithAPlaceToo(edit: String) async throws {
        try await withTemporaryDirectory { dir in
            do {
                let store = try openStore(dir)
                for i in 0..<3 { try store.put(value(i), for: key(i)) }
                try store.close()
            }
            try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false).connection.execute(
                "UPDATE blobs SET \(edit) WHERE id = (SELECT blob FROM entries WHERE url = '\(key(1).url)')")
            let store = try openStore(dir) {
                $0.locationCacheLimit = 0
                $0.compactionInterval = nil
            }
            defer { try? store.close() }
            store.waitForLoads()
            let refused = #expect(throws: StoreError.self) { try store.data(for: key(1)) }
            #expect(refused?.code == .corruptRecord)
            #expect(try store.unrepairedDamage().count == 1)
            #expect(throws: StoreError.self) { try store.contains(key(1)) }
            for i in [0, 2] { #expect(try store.data(for: key(i)) == value(i)) }
            #expect(store.readsThroughPlaces == 2)
        }
    }

    /// A place whose span runs past its segment's end (a damaged row) is refused before its
    /// bytes are allocated; a get then reads through the index. A read racing close() does
    /// not leave segment files open in the closed store.
    @Test func aSpanPastTheSegmentIsRefusedAndCloseKeepsNoFiles() async throws {
        try await withTemporaryDirectory { dir in
            do {
                let store = try openStore(dir)
                try store.put(value(1), for: key(1))
                try store.close()
            }
            let file = try SegmentFile.open(id: 1, in: dir + "/store/packs", writable: false)
            let identity = RecordIdentity(type: .link, sequence: 1, digest: key(1).digest)
            #expect(file.readPlacedEntry(at: 0, span: 1 << 30, identity: identity) == nil)
            let store = try openStore(dir)
            try store.close()
            #expect(throws: StoreError.self) { try store.data(for: key(1)) }
            _ = try? store.segmentFile(1)
            #expect(store.shared.withLock { $0.segmentFiles.isEmpty })
        }
    }

    /// Damage to the link beside the blob: the blob's bytes are intact and in the same read,
    /// but the row is not proven, so nothing is served and the damage is recorded — as when the
    /// link is read on its own.
    @Test func aDamagedLinkBesideItsBlobServesNothing() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            let k = CacheKey(url: "https://cold.example/k.jpg")
            do {
                let store = try openStore(dir)
                try store.put(value(1), for: k)
                try store.put(value(2), for: k)
                try store.close()
            }
            let row = try #require(
                try IndexDatabase(path: files.store + "/index.sqlite", readOnly: true).entryRows().first {
                    $0.keyDigest == k.digest
                })
            for offset in [0, 20, 51] {
                try files.flip(files.segment(row.linkSegment), at: Int(row.linkOffset) + offset)
                let store = try openStore(dir)
                #expect(throws: StoreError.self) { try store.data(for: k) }
                #expect(try store.fsck().findings.contains { $0.offset == row.linkOffset }, "offset \(offset)")
                try store.close()
                try files.flip(files.segment(row.linkSegment), at: Int(row.linkOffset) + offset)
            }
            let store = try openStore(dir)
            #expect(try store.data(for: k) == value(2))
            try store.close()
        }
    }

    /// A row that names another place for its link, with the blob's record-bytes count edited
    /// to match (found by an outside attack): where the blob record ends is the segment file's
    /// to say, so the row is checked against what it names — not served, damage recorded — as
    /// when the link is read on its own. (Before the fix, the one read checked the link after
    /// the blob and served the key with nothing recorded.)
    @Test func aRowNamingAnotherPlaceForItsLinkIsNotServed() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            let a = CacheKey(url: "https://cold.example/a.jpg")
            let b = CacheKey(url: "https://cold.example/b.jpg")
            do {
                let store = try openStore(dir)
                try store.put(value(1), for: a)
                try store.put(value(2), for: b)
                try store.put(value(3), for: a)
                try store.close()
            }
            let path = files.store + "/index.sqlite"
            let rows = try IndexDatabase(path: path, readOnly: true).entryRows()
            let rowA = try #require(rows.first { $0.keyDigest == a.digest })
            let rowB = try #require(rows.first { $0.keyDigest == b.digest })
            do {
                let index = try IndexDatabase(path: path, readOnly: false)
                // a: its link said to be 42 bytes later, its blob's record 42 bytes longer.
                // b: its link said to be a's (the record right after a's blob), its blob's
                // record as long as that takes.
                try index.connection.execute(
                    """
                    UPDATE entries SET link_offset = link_offset + 42 WHERE key_hash = x'\(a.digest.description)';
                    UPDATE blobs SET record_bytes = record_bytes + 42 WHERE id = \(rowA.blobID);
                    UPDATE entries SET link_offset = \(rowA.linkOffset) WHERE key_hash = x'\(b.digest.description)';
                    UPDATE blobs SET record_bytes = \(rowA.linkOffset) - offset WHERE id = \(rowB.blobID);
                    """)
            }
            let store = try openStore(dir)
            defer { try? store.close() }
            for k in [a, b] {
                let error = #expect(throws: StoreError.self, "\(k)") { try store.data(for: k) }
                #expect(error?.code == .corruptRecord)
            }
            let findings = try store.fsck().findings
            #expect(findings.contains { $0.kind == .staleIndexRow }, "\(findings)")
        }
    }

    /// Damage to the blob's payload read with its link: the read falls back to checking the two
    /// apart, which drops the damaged blob's entries as before.
    @Test func aDamagedBlobReadWithItsLinkIsDropped() async throws {
        try await withTemporaryDirectory { dir in
            let files = StoreFiles(root: dir)
            do {
                let store = try openStore(dir)
                for i in 0..<3 { try store.put(value(i), for: key(i)) }
                try store.close()
            }
            let row = try #require(
                try IndexDatabase(path: files.store + "/index.sqlite", readOnly: true).entryRows().first {
                    $0.keyDigest == key(1).digest
                })
            // The payload ends where the link starts: flip its last byte.
            try files.flip(files.segment(row.linkSegment), at: Int(row.linkOffset) - 1)
            let store = try openStore(dir)
            defer { try? store.close() }
            let error = #expect(throws: StoreError.self) { try store.data(for: key(1)) }
            #expect(error?.code == .corruptRecord)
            #expect(try store.data(for: key(1)) == nil)
            #expect(try store.data(for: key(0)) == value(0))
            #expect(try store.data(for: key(2)) == value(2))
        }
    }
}
