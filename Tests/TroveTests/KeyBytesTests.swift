import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

/// Keys are their UTF-8 bytes (`CacheKey`): canonically equivalent spellings of a URL are two
/// keys with two digests, in the location map as in the index. An outside attack (helper-2,
/// 2026-11-28) found that while the map compared keys as Swift strings — equal — and the index
/// by digest — different —, a second spelling's put overwrote the first in memory and added a
/// second row, so the key served one value before a reopen and another after, and removing one
/// spelling brought the other's value back after the next commit.
@Suite struct KeyBytesTests {
    static let composed = CacheKey(url: "https://nfc.example/caf\u{E9}")
    static let decomposed = CacheKey(url: "https://nfc.example/cafe\u{301}")

    @Test func canonicallyEquivalentSpellingsAreTwoKeys() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.compactionInterval = nil
                $0.batchInterval = .seconds(3600)
                $0.batchSize = 100_000
            }
            try store.put(value(1), for: Self.composed)
            try store.put(value(2), for: Self.decomposed)
            #expect(try store.data(for: Self.composed) == value(1))
            #expect(try store.data(for: Self.decomposed) == value(2))
            try store.flush()
            #expect(try store.statistics().entries == 2)
            try store.close()
            let again = try openStore(dir) { $0.compactionInterval = nil }
            #expect(try again.data(for: Self.composed) == value(1), "the same bytes after a reopen")
            #expect(try again.data(for: Self.decomposed) == value(2))
            // Listings and removals by URL name the exact bytes given.
            #expect(try again.keys(url: Self.composed.url) == [Self.composed])
            #expect(try again.entries(url: Self.decomposed.url).map(\.key) == [Self.decomposed])
            #expect(try again.removeAll(url: Self.composed.url) == 1)
            #expect(try again.data(for: Self.decomposed) == value(2))
            #expect(try again.fsck().isClean)
            try again.close()
        }
    }

    /// Removing one spelling, before and after the commit, leaves the other's value alone and
    /// never brings the removed one back.
    @Test(arguments: [false, true])
    func removingOneSpellingLeavesTheOther(committedFirst: Bool) async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.compactionInterval = nil
                $0.batchInterval = .seconds(3600)
                $0.batchSize = 100_000
                $0.locationCacheLimit = committedFirst ? 0 : 100_000
            }
            try store.put(value(1), for: Self.composed)
            try store.put(value(2), for: Self.decomposed)
            if committedFirst { try store.flush() }
            #expect(try store.remove(Self.decomposed))
            #expect(try store.data(for: Self.decomposed) == nil)
            #expect(try store.data(for: Self.composed) == value(1))
            try store.flush()
            #expect(try store.data(for: Self.decomposed) == nil, "removed, then served after a commit")
            #expect(try store.data(for: Self.composed) == value(1))
            try store.close()
            let again = try openStore(dir) { $0.compactionInterval = nil }
            #expect(try again.data(for: Self.decomposed) == nil)
            #expect(try again.data(for: Self.composed) == value(1))
            #expect(try again.statistics().entries == 1)
            try again.close()
        }
    }

    /// Metadata round-trips byte for byte, and metadata equality sees bytes: a store that
    /// normalised an ETag would fail here (`==` of strings would not notice).
    @Test func metadataIsKeptAndComparedByBytes() async throws {
        let composed = EntryMetadata(etag: "\"caf\u{E9}\"", lastModified: "caf\u{E9}", cachePolicy: "caf\u{E9}")
        let decomposed = EntryMetadata(etag: "\"cafe\u{301}\"", lastModified: "cafe\u{301}", cachePolicy: "cafe\u{301}")
        #expect(composed != decomposed)
        #expect(EntryMetadata(etag: "\"caf\u{E9}\"") != EntryMetadata(etag: "\"cafe\u{301}\""))
        #expect(EntryMetadata(lastModified: "caf\u{E9}") != EntryMetadata(lastModified: "cafe\u{301}"))
        #expect(EntryMetadata(cachePolicy: "caf\u{E9}") != EntryMetadata(cachePolicy: "cafe\u{301}"))
        #expect(EntryMetadata(expiresAt: Date(timeIntervalSince1970: 1)) != EntryMetadata(expiresAt: nil))
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.compactionInterval = nil }
            try store.put(Data([1]), for: CacheKey(url: "https://k/1"), metadata: composed)
            try store.put(Data([2]), for: CacheKey(url: "https://k/2"), metadata: decomposed)
            try store.flush()
            #expect(try store.info(for: CacheKey(url: "https://k/1"))?.metadata == composed)
            #expect(try store.info(for: CacheKey(url: "https://k/2"))?.metadata == decomposed)
            #expect(try store.info(for: CacheKey(url: "https://k/1"))?.metadata != decomposed)
            try store.close()
        }
    }
}
