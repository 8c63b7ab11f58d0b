import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport
import TrovePack

@testable import TroveStore

/// A store written by the last build with pack format version 1 (`Fixtures/v1-store`, see its
/// README) opens, serves what it held, repairs cleanly, and is rewritten to version 2 by the
/// compactor — with or without its index.
@Suite struct FormatVersionTests {
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures/v1-store").path

    func value(_ name: String, _ count: Int) -> Data { Data(String(repeating: "v1 fixture \(name);", count: count).utf8) }

    /// What the fixture's commands left: key → bytes.
    var expected: [CacheKey: Data] {
        [
            CacheKey(url: "https://v1.example/a.jpg"): value("a2", 25),
            CacheKey(url: "https://v1.example/b.jpg"): value("b", 30),
            CacheKey(url: "https://v1.example/c.jpg"): value("a1", 20),
            CacheKey(url: "https://v1.example/a.jpg", variant: "w64-h64-fit-webp-q80"): value("w", 10),
            CacheKey(url: "https://v1.example/d.jpg"): value("d", 12),
            CacheKey(url: "https://v1.example/small.txt"): Data("hello v1\n".utf8),
        ]
    }

    func copyFixture(to dir: String) throws {
        try FileManager.default.copyItem(atPath: Self.fixture, toPath: dir + "/store")
    }

    func expectServed(_ store: Store, _ context: String) throws {
        for (key, bytes) in expected {
            #expect(try store.data(for: key) == bytes, Comment(rawValue: "\(context): \(key)"))
        }
        #expect(try store.data(for: CacheKey(url: "https://v1.example/e.jpg")) == nil, "\(context): a removed key")
        #expect(try store.info(for: CacheKey(url: "https://v1.example/a.jpg"))?.etag == "\"a2\"", Comment(rawValue: context))
        #expect(
            try store.info(for: CacheKey(url: "https://v1.example/b.jpg"))?.lastModified == "Wed, 21 Oct 2015 07:28:00 GMT",
            Comment(rawValue: context))
        #expect(try store.info(for: CacheKey(url: "https://v1.example/d.jpg"))?.expiresAt != nil, Comment(rawValue: context))
    }

    func versions(_ dir: String) throws -> [UInt8] {
        let packs = dir + "/store/packs"
        return try FileManager.default.contentsOfDirectory(atPath: packs).filter { $0.hasSuffix(".pack") }.sorted()
            .compactMap { SegmentFile.header(atPath: packs + "/" + $0)?.format.version }
    }

    @Test func aVersion1StoreOpensAndIsRewrittenByTheCompactor() async throws {
        try await withTemporaryDirectory { dir in
            try copyFixture(to: dir)
            #expect(try versions(dir) == [1])
            let store = try openStore(dir)
            try expectServed(store, "opened")
            #expect(try store.fsck().isClean)
            // New writes go to a version-2 segment; the version-1 one is sealed.
            try store.put(Data("new".utf8), for: CacheKey(url: "https://v1.example/new"))
            #expect(try versions(dir).contains(2))
            let report = try store.compact()
            #expect(report.segmentsRewritten + report.segmentsDeleted >= 1)
            let rewritten = try versions(dir)
            #expect(rewritten.allSatisfy { $0 == 2 }, "\(rewritten)")
            try expectServed(store, "compacted")
            #expect(try store.fsck().isClean)
            try store.close()
            let reopened = try openStore(dir)
            try expectServed(reopened, "reopened")
            #expect(try reopened.data(for: CacheKey(url: "https://v1.example/new")) == Data("new".utf8))
        }
    }

    @Test func aVersion1StoreWithoutItsIndexIsRebuilt() async throws {
        try await withTemporaryDirectory { dir in
            try copyFixture(to: dir)
            try FileManager.default.removeItem(atPath: dir + "/store/index.sqlite")
            let store = try openStore(dir)
            #expect(store.recoveryReport.rebuiltIndex)
            try expectServed(store, "rebuilt")
            _ = try store.compact()
            try expectServed(store, "compacted")
            let findings = try store.fsck().findings
            #expect(findings.map(\.kind) == [.rebuiltIndex], "\(findings)")
        }
    }

    /// A version-1 segment with a damaged record: repair drops what the damage took and keeps
    /// the rest (version 1 has no resynchronisation, so what follows the damage is salvaged
    /// from the records the index names).
    @Test func aDamagedVersion1SegmentIsRepaired() async throws {
        try await withTemporaryDirectory { dir in
            try copyFixture(to: dir)
            let segment = dir + "/store/packs/00000001.pack"
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: segment))
            let size = try handle.seekToEnd()
            try handle.seek(toOffset: size / 2)
            try handle.write(contentsOf: Data(repeating: 0xEE, count: 16))
            try handle.close()
            let store = try openStore(dir)
            var served = 0
            for (key, bytes) in expected {
                do {
                    if let data = try store.data(for: key) {
                        #expect(data == bytes, "\(key) served wrong bytes")
                        served += 1
                    }
                } catch is StoreError {}
            }
            let report = try store.fsck(repair: true)
            #expect(!report.isClean)
            #expect(try store.fsck().isClean)
            for (key, bytes) in expected {
                if let data = try store.data(for: key) { #expect(data == bytes, "\(key) served wrong bytes after repair") }
            }
            #expect(served >= 1)
        }
    }
}
