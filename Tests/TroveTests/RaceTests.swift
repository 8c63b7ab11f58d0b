import Foundation
import Testing
import TroveCore
import TroveIndex
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

/// Races an outside review of issue 9 found, each made deterministic (the compaction runs inside
/// the racing call, through the clock or the fault injector) or repeated until it would show.
@Suite struct RaceTests {
    /// put dedupes onto a blob whose segment the compactor rewrites and deletes between the
    /// put's candidate lookup and its append (here: the compaction runs inside the put's clock call).
    @Test func putDedupeRacingCompaction() async throws {
        try await withTemporaryDirectory { dir in
            let armed = Locked(false)
            let box = Locked<Store?>(nil)
            let store = try openStore(dir, segmentSize: 64 << 10) {
                $0.compactionInterval = nil
                $0.clock = {
                    let fire = armed.withLock { a -> Bool in
                        defer { a = false }; return a
                    }
                    if fire, let s = box.withLock({ $0 }) {
                        _ = try? s.compact()
                    }
                    return wallClockMilliseconds()
                }
            }
            box.withLock { $0 = store }
            try store.put(value(1), for: key(1))
            for i in 10..<40 { try store.put(value(i, size: 4_000), for: key(i)) }
            for i in 10..<40 { try store.remove(key(i)) }
            try store.flush()
            armed.withLock { $0 = true }
            try store.put(value(1), for: key(2))
            var got: Data?
            got = try store.data(for: key(2))
            #expect(got == value(1))
            try store.flush()
            got = try store.data(for: key(2))
            #expect(got == value(1))
            #expect(try store.unrepairedDamage().isEmpty)
            #expect(try store.fsck().isClean)
            box.withLock { $0 = nil }
            try store.close()
        }
    }

    /// updateMetadata whose entry's blob is moved by a full compaction between its locate and
    /// its append (the compaction runs inside a read of locate's link check).
    @Test func updateMetadataRacingCompaction() async throws {
        try await withTemporaryDirectory { dir in
            do {
                let store = try openStore(dir, segmentSize: 64 << 10) { $0.compactionInterval = nil }
                try store.put(value(1), for: key(1), metadata: EntryMetadata(etag: "v1"))
                for i in 10..<40 { try store.put(value(i, size: 4_000), for: key(i)) }
                for i in 10..<40 { try store.remove(key(i)) }
                try store.close()
            }
            let armed = Locked(false)
            let reads = Locked(0)
            let box = Locked<Store?>(nil)
            let store = try openStore(dir, segmentSize: 64 << 10) {
                $0.compactionInterval = nil
                $0.faultInjector = FaultInjector { op, path in
                    guard op == .read, path.hasSuffix("00000001.pack") else { return nil }
                    let fire = armed.withLock { a -> Bool in
                        guard a else { return false }
                        let n = reads.withLock {
                            $0 += 1; return $0
                        }
                        if n == 2 { a = false; return true }
                        return false
                    }
                    if fire, let s = box.withLock({ $0 }) {
                        _ = try? s.compact()
                    }
                    return nil
                }
            }
            box.withLock { $0 = store }
            armed.withLock { $0 = true }
            let meta = EntryMetadata(etag: "v2")
            #expect(try store.updateMetadata(meta, for: key(1)))
            var info: EntryInfo?
            do {
                let e = try store.entry(for: key(1))
                #expect(e?.data == value(1))
                info = e?.info
            }
            #expect(info?.metadata == meta)
            try store.flush()
            let after = try store.info(for: key(1))
            #expect(after?.metadata == meta)
            #expect(try store.fsck().isClean)
            box.withLock { $0 = nil }
            try store.close()
            let again = try openStore(dir, segmentSize: 64 << 10) { $0.compactionInterval = nil }
            #expect(try again.info(for: key(1))?.metadata == meta)
            try again.close()
        }
    }

    /// removeAll(url:) after a put returned must remove it, even if the commit cycle moves the
    /// write out of the queue between removeAll's index read and its queue scan.
    @Test func removeAllRacingCommit() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.compactionInterval = nil
                $0.batchInterval = .microseconds(50)
            }
            let stop = Locked(false)
            let flusher = Thread {
                while !stop.withLock({ $0 }) { try? store.flush() }
            }
            flusher.start()
            var misses = 0
            for i in 0..<1500 {
                let k = CacheKey(url: "https://x/\(i % 7)", variant: "v\(i)")
                try store.put(value(i, size: 10), for: k)
                _ = try store.removeAll(url: k.url)
                if try store.contains(k) { misses += 1 }
            }
            stop.withLock { $0 = true }
            usleep(100_000)
            #expect(misses == 0)
            try store.close()
        }
    }
}

/// NUL characters never reach the index: SQLite's text would end there while the pack record
/// keeps the whole string.
@Suite struct TextTests {
    @Test(arguments: [
        (CacheKey(url: "https://x/a\u{0}b"), EntryMetadata()),
        (CacheKey(url: "https://x/a", variant: "w\u{0}"), EntryMetadata()),
        (CacheKey(url: "https://x/a"), EntryMetadata(etag: "\"a\u{0}b\"")),
        (CacheKey(url: "https://x/a"), EntryMetadata(lastModified: "Mon\u{0}")),
    ])
    func aNULIsRefused(key: CacheKey, metadata: EntryMetadata) async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.compactionInterval = nil }
            let error = #expect(throws: StoreError.self) { try store.put(value(1), for: key, metadata: metadata) }
            #expect(error?.code == .invalidArgument)
            try store.put(value(1), for: CacheKey(url: "https://x/a"))
            if key.url == "https://x/a" && key.variant.isEmpty {
                let update = #expect(throws: StoreError.self) { try store.updateMetadata(metadata, for: key) }
                #expect(update?.code == .invalidArgument)
            }
            try store.close()
            let reopened = try openStore(dir)
            #expect(try reopened.data(for: CacheKey(url: "https://x/a")) == value(1))
            #expect(try reopened.fsck().isClean)
        }
    }
}
