import Foundation
import Testing
import TroveCore
@testable import TroveIndex
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@testable import TroveStore

#if canImport(Glibc)
    import Glibc
#endif

/// Every typed error a store reports, provoked for real.
@Suite struct ErrorTests {
    /// The engine's throwing API throws `StoreError` and nothing else, in its types: this
    /// compiles only while every signature says `throws(StoreError)`.
    @Test func theEngineThrowsStoreErrorInItsTypes() async throws {
        try await withTemporaryDirectory { dir in
            let open: (String, Store.Configuration) throws(StoreError) -> Store = { path, configuration throws(StoreError) in
                try Store(directory: path, configuration: configuration)
            }
            let store = try open(dir + "/store", Store.Configuration())
            let put: (Data, CacheKey, EntryMetadata) throws(StoreError) -> Void = store.put
            let update: (EntryMetadata, CacheKey, ContentHash?) throws(StoreError) -> Bool = store.updateMetadata
            let data: (CacheKey) throws(StoreError) -> Data? = store.data(for:)
            let entry: (CacheKey) throws(StoreError) -> Entry? = store.entry(for:)
            let info: (CacheKey) throws(StoreError) -> EntryInfo? = store.info(for:)
            let contains: (CacheKey) throws(StoreError) -> Bool = store.contains
            let entries: (String) throws(StoreError) -> [EntryInfo] = store.entries(url:)
            let remove: (CacheKey) throws(StoreError) -> Bool = store.remove
            let removeAll: (String) throws(StoreError) -> Int = store.removeAll(url:)
            let statistics: () throws(StoreError) -> Store.Statistics = store.statistics
            let damage: () throws(StoreError) -> [StoreDamage] = store.unrepairedDamage
            let flush: () throws(StoreError) -> Void = store.flush
            let compact: () throws(StoreError) -> CompactionReport = { () throws(StoreError) in try store.compact() }
            let fsck: () throws(StoreError) -> FsckReport = { () throws(StoreError) in try store.fsck(repair: true) }
            let close: () throws(StoreError) -> Void = store.close
            let rebuild: (String) throws(StoreError) -> FsckReport = { path throws(StoreError) in
                try Store.rebuildIndex(directory: path)
            }
            try put(Data("v".utf8), key(1), EntryMetadata())
            #expect(try update(EntryMetadata(etag: "e"), key(1), nil))
            #expect(try data(key(1)) == Data("v".utf8))
            #expect(try entry(key(1))?.etag == "e")
            #expect(try info(key(1))?.etag == "e")
            #expect(try contains(key(1)))
            #expect(try entries(key(1).url).count == 1)
            #expect(try statistics().entries == 1)
            #expect(try damage().isEmpty)
            try flush()
            _ = try compact()
            #expect(try fsck().isClean)
            #expect(try remove(key(1)))
            #expect(try removeAll(key(1).url) == 0)
            try close()
            #expect(try rebuild(dir + "/store").isClean)
        }
    }

    @Test func aKeyDigestCollisionIsRefusedAndNeverServesTheOtherKey() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir)
            try store.put(Data("mine".utf8), for: key(1))
            try store.flush()
            // Plant a row for another URL under key(2)'s digest, as a crafted collision would.
            try store.committer.withLock { state in
                let index = try #require(state).index
                var row = try #require(try index.entry(digest: key(1).digest)).entry
                row.keyDigest = key(2).digest
                row.url = "https://attacker.example/collides"
                try index.begin()
                try index.link(row)
                try index.commit()
            }
            // A get for key(2) finds the digest but not its key: nothing is served.
            #expect(try store.data(for: key(2)) == nil)
            #expect(try !store.contains(key(2)))
            let error = #expect(throws: StoreError.self) { try store.put(Data("yours".utf8), for: key(2)) }
            #expect(error?.code == .keyCollision)
            #expect(error?.key == key(2))
            #expect(try store.data(for: key(1)) == Data("mine".utf8))
        }
    }

    @Test func aValueOverTheLimitIsRefusedBeforeItIsRead() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir)
            // Address space only: mapped zero pages, never touched, since the size is checked first.
            let count = Store.maximumValueLength + 1
            let mapping = try #require(mmap(nil, count, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))
            #expect(mapping != MAP_FAILED)
            defer { munmap(mapping, count) }
            let error = #expect(throws: StoreError.self) {
                try store.put(UnsafeRawBufferPointer(start: mapping, count: count), for: key(1))
            }
            #expect(error?.code == .valueTooLarge)
            #expect(try store.statistics().entries == 0)
        }
    }

    @Test func aDamagedIndexIsReportedWithWhatToDo() async throws {
        try await withTemporaryDirectory { dir in
            try populate(dir, count: 3)
            let index = dir + "/store/index.sqlite"
            for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: index + suffix) }
            try Data(repeating: 0xEE, count: 4096).write(to: URL(fileURLWithPath: index))
            let error = #expect(throws: StoreError.self) { try openStore(dir) }
            #expect(error?.code == .indexCorrupt)
            #expect(error?.message.contains("trove fsck --rebuild-index") == true)
            #expect(error?.underlying is IndexError)
            // Nothing was lost: the packs are untouched.
            #expect(try PackDirectory.segmentIDs(in: dir + "/store/packs") == [1])
        }
    }

    @Test func anIndexFromANewerTroveIsRefused() async throws {
        try await withTemporaryDirectory { dir in
            try populate(dir, count: 1)
            do {
                let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
                try index.connection.execute("PRAGMA user_version = 42")
            }
            let error = #expect(throws: StoreError.self) { try openStore(dir) }
            #expect(error?.code == .schemaTooNew)
            #expect(error?.message.contains("schema version 42") == true)
        }
    }
}
