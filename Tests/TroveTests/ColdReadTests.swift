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
