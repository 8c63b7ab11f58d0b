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
