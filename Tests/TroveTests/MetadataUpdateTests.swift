import Foundation
import Testing
import TroveCore
import TroveIndex
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

/// `updateMetadata(_:for:)`: new validators and expiry for the same bytes, by one link record.
@Suite struct MetadataUpdateTests {
    /// Counts how often the store addresses content.
    final class HashCounter: Sendable {
        let count = Locked(0)
        var hasher: @Sendable (UnsafeRawBufferPointer) -> ContentHash {
            { bytes in
                self.count.withLock { $0 += 1 }
                return ContentHash(hashing: bytes)
            }
        }
    }

    func open(_ dir: String, _ counter: HashCounter, durability: Durability = .batched) throws -> Store {
        try openStore(dir, durability: durability, segmentSize: 64 << 10) {
            $0.compactionInterval = nil
            $0.contentHasher = counter.hasher
        }
    }

    @Test(arguments: Durability.allCases)
    func anUpdateAppendsOneLinkAndNoBytes(durability: Durability) async throws {
        try await withTemporaryDirectory { dir in
            let counter = HashCounter()
            let store = try open(dir, counter, durability: durability)
            let bytes = value(1, size: 20_000)
            try store.put(bytes, for: key(1), metadata: EntryMetadata(etag: "\"v1\"", lastModified: "Mon, 01 Jan 2024"))
            try store.flush()
            let hashed = counter.count.withLock { $0 }
            let before = try store.statistics()
            let expiry = Date(timeIntervalSince1970: 4_000_000_000)
            let metadata = EntryMetadata(etag: "\"v2\"", lastModified: "Tue, 02 Jan 2024", expiresAt: expiry)
            #expect(try store.updateMetadata(metadata, for: key(1)))
            #expect(counter.count.withLock { $0 } == hashed, "no hashing")
            #expect(try store.entry(for: key(1))?.info.metadata == metadata)
            #expect(try store.data(for: key(1)) == bytes)
            try store.flush()
            let after = try store.statistics()
            #expect(after.blobs == before.blobs)
            #expect(after.entries == before.entries)
            #expect(after.packBytes - before.packBytes < 300, "one link record, not the 20 KB")
        }
    }

    @Test func anUpdateLastsThroughReopenCompactionAndRebuild() async throws {
        try await withTemporaryDirectory { dir in
            let counter = HashCounter()
            let metadata = EntryMetadata(etag: "\"v2\"", cachePolicy: "v1;f=1700000000000;nc")
            do {
                let store = try open(dir, counter)
                try store.put(value(1), for: key(1), metadata: EntryMetadata(etag: "\"v1\""))
                try store.put(value(2), for: key(2))
                #expect(try store.updateMetadata(metadata, for: key(1)))
                try store.close()
            }
            do {
                let store = try open(dir, counter)
                #expect(try store.info(for: key(1))?.metadata == metadata)
                // Fill past a segment and make the first sparse: the compactor moves the blob.
                for i in 10..<40 { try store.put(value(i, size: 4_000), for: key(i)) }
                for i in 10..<40 { try store.remove(key(i)) }
                #expect(try store.compact().segmentsDeleted > 0)
                #expect(try store.info(for: key(1))?.metadata == metadata)
                #expect(try store.data(for: key(1)) == value(1))
                try store.close()
            }
            _ = try Store.rebuildIndex(directory: dir + "/store")
            let store = try open(dir, counter)
            #expect(try store.info(for: key(1))?.metadata == metadata)
            #expect(try store.data(for: key(1)) == value(1))
            #expect(try store.fsck().isClean)
        }
    }

    /// While the compactor judges the blob's segment, no link may be added to it unseen: the
    /// update copies the bytes with a put instead.
    @Test func anUpdateDuringARewriteOfTheBlobsSegmentCopiesTheBytes() async throws {
        try await withTemporaryDirectory { dir in
            let counter = HashCounter()
            let store = try open(dir, counter)
            try store.put(value(1), for: key(1))
            let segment = try #require(try store.locate(key(1), noteRead: false)).blob.segment
            store.appender.withLock { _ = $0.reclaiming.insert(segment) }
            let hashed = counter.count.withLock { $0 }
            #expect(try store.updateMetadata(EntryMetadata(etag: "\"v2\""), for: key(1)))
            #expect(counter.count.withLock { $0 } == hashed + 1, "a put")
            store.appender.withLock { _ = $0.reclaiming.remove(segment) }
            #expect(try store.info(for: key(1))?.etag == "\"v2\"")
            #expect(try store.data(for: key(1)) == value(1))
        }
    }

    /// The cache policy is bounded and, like every text field, holds no NUL.
    @Test func aCachePolicyIsCheckedBeforeAnythingIsWritten() async throws {
        try await withTemporaryDirectory { dir in
            let store = try open(dir, HashCounter())
            let longest = String(repeating: "p", count: EntryMetadata.maximumCachePolicyLength)
            try store.put(value(1), for: key(1), metadata: EntryMetadata(cachePolicy: longest))
            #expect(try store.info(for: key(1))?.cachePolicy == longest)
            for bad in [longest + "p", "a\u{0}b"] {
                #expect(throws: StoreError.self) {
                    try store.put(value(2), for: key(2), metadata: EntryMetadata(cachePolicy: bad))
                }
                #expect(throws: StoreError.self) { try store.updateMetadata(EntryMetadata(cachePolicy: bad), for: key(1)) }
            }
            #expect(try store.info(for: key(2)) == nil)
            #expect(try store.info(for: key(1))?.cachePolicy == longest)
        }
    }

    /// With an expected content hash, the update is made only while the entry holds those bytes.
    @Test func anUpdateForOtherBytesIsNotMade() async throws {
        try await withTemporaryDirectory { dir in
            let store = try open(dir, HashCounter())
            try store.put(value(1), for: key(1), metadata: EntryMetadata(etag: "\"v1\""))
            let old = try #require(try store.info(for: key(1))).contentHash
            try store.put(value(2), for: key(1), metadata: EntryMetadata(etag: "\"v2\""))
            #expect(try !store.updateMetadata(EntryMetadata(etag: "\"v1-refreshed\""), for: key(1), ifContentHash: old))
            #expect(try store.info(for: key(1))?.etag == "\"v2\"")
            let current = try #require(try store.info(for: key(1))).contentHash
            #expect(try store.updateMetadata(EntryMetadata(etag: "\"v2-refreshed\""), for: key(1), ifContentHash: current))
            #expect(try store.info(for: key(1))?.etag == "\"v2-refreshed\"")
            #expect(try store.data(for: key(1)) == value(2))
        }
    }

    @Test func noEntryNoWrite() async throws {
        try await withTemporaryDirectory { dir in
            let store = try open(dir, HashCounter())
            try store.put(value(1), for: key(1))
            try store.remove(key(1))
            try store.flush()
            let before = try store.statistics().packBytes
            #expect(try !store.updateMetadata(EntryMetadata(etag: "x"), for: key(1)))
            #expect(try !store.updateMetadata(EntryMetadata(etag: "x"), for: key(2)))
            try store.flush()
            #expect(try store.statistics().packBytes == before)
            #expect(try store.data(for: key(1)) == nil)
        }
    }

    @Test func anUpdateMakesAnExpiredEntryFreshAndIsReported() async throws {
        try await withTemporaryDirectory { dir in
            let clock = TestClock(start: 1_000_000)
            let changes = Locked<[KeyChange]>([])
            let store = try openStore(dir) {
                $0.clock = clock.now
                $0.compactionInterval = nil
                $0.keyChanges = { change in changes.withLock { $0.append(change) } }
            }
            try store.put(value(1), for: key(1), metadata: EntryMetadata(expiresAt: Date(timeIntervalSince1970: 1_010)))
            clock.advance(by: 20_000)
            #expect(try store.data(for: key(1)) == nil)  // expired: a miss
            changes.withLock { $0 = [] }
            #expect(try store.updateMetadata(EntryMetadata(expiresAt: Date(timeIntervalSince1970: 2_000)), for: key(1)))
            #expect(try store.data(for: key(1)) == value(1))
            #expect(try store.info(for: key(1))?.createdAt == Date(timeIntervalSince1970: 1_020))
            #expect(changes.withLock { $0 } == [KeyChange(key: key(1), kind: .stored)])
        }
    }
}
