import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

/// Deduplication through the in-memory hints (index schema 5): equal bytes are stored once
/// whether the earlier copy is queued, committed, from before a reopen or moved by the
/// compactor; and hints that are wrong — stale, or shared by contents that agree in the 64
/// bits they are keyed by — cost a copy at most, never a wrong link.
@Suite struct DedupHintsTests {
    func value(_ id: Int) -> Data { Data(testBytes(seed: UInt64(id) &* 7919, count: 3000)) }

    @Test func repeatsAreStoredOnceAcrossCommitsReopensAndCompaction() async throws {
        try await withTemporaryDirectory { dir in
            var rng = SeededGenerator(seed: 11)
            var model: [CacheKey: Int] = [:]
            var distinct = Set<Int>()
            func check(_ store: Store, _ context: String) throws {
                for (key, id) in model {
                    #expect(try store.data(for: key) == value(id), "\(context): \(key)")
                }
                try store.flush()
                #expect(try store.statistics().blobs == distinct.count, "\(context)")
            }
            var store = try openStore(dir, segmentSize: 256 << 10)
            for round in 0..<4 {
                for i in 0..<300 {
                    // One in three repeats an earlier value (often committed, sometimes queued).
                    let id = i > 3 && rng.next() % 3 == 0 ? Int(rng.next() % UInt64(i)) + 1000 * round : i + 1000 * round
                    let key = CacheKey(url: "https://dedup.example/\(round)/\(i)")
                    try store.put(value(id), for: key)
                    model[key] = id
                    distinct.insert(id)
                    if rng.next() % 40 == 0 { try store.flush() }
                }
                try check(store, "round \(round)")
                switch round {
                case 0:
                    try store.close()
                    store = try openStore(dir, segmentSize: 256 << 10)
                case 1:
                    // Free some segments so that the compactor rewrites them (and resets the hints).
                    for i in stride(from: 0, to: 300, by: 2) {
                        let key = CacheKey(url: "https://dedup.example/1/\(i)")
                        try store.remove(key)
                        model[key] = nil
                    }
                    distinct = Set(model.values)
                    try store.compact()
                default: break
                }
                // Every value again under new keys: all of them deduplicate.
                for (n, id) in Set(model.values).enumerated() where n < 50 {
                    let key = CacheKey(url: "https://dedup.example/again/\(round)/\(n)")
                    try store.put(value(id), for: key)
                    model[key] = id
                }
                try check(store, "round \(round), again")
            }
            #expect(try store.fsck().isClean)
        }
    }

    /// Contents chosen to share their hash's first 64 bits (an attacker can make XXH3 collide):
    /// both are stored and each key reads its own bytes.
    @Test func contentsSharingAHintAreBothKeptAndServed() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.contentHasher = { bytes in
                    ContentHash(high: 0xC0FFEE, low: XXH3.hash128(bytes).low)
                }
            }
            let a = Data(repeating: 0xAA, count: 5000)
            let b = Data(repeating: 0xBB, count: 5000)
            try store.put(a, for: CacheKey(url: "a"))
            try store.flush()
            try store.put(b, for: CacheKey(url: "b"))
            try store.flush()
            try store.put(a, for: CacheKey(url: "a2"))
            try store.put(b, for: CacheKey(url: "b2"))
            try store.flush()
            #expect(try store.data(for: CacheKey(url: "a")) == a)
            #expect(try store.data(for: CacheKey(url: "a2")) == a)
            #expect(try store.data(for: CacheKey(url: "b")) == b)
            #expect(try store.data(for: CacheKey(url: "b2")) == b)
            // The hint names the newer content: the other one is stored again, never linked wrongly.
            #expect((2...4).contains(try store.statistics().blobs))
            #expect(try store.fsck().isClean)
        }
    }

    /// Equal hash and length but other bytes (a full 128-bit collision): never linked.
    @Test func aFullHashCollisionIsStoredApart() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.contentHasher = { _ in ContentHash(high: 1, low: 2) } }
            let a = Data(repeating: 1, count: 4000)
            let b = Data(repeating: 2, count: 4000)
            try store.put(a, for: CacheKey(url: "a"))
            try store.flush()
            try store.put(b, for: CacheKey(url: "b"))
            try store.flush()
            #expect(try store.data(for: CacheKey(url: "a")) == a)
            #expect(try store.data(for: CacheKey(url: "b")) == b)
            #expect(try store.statistics().blobs == 2)
        }
    }
}
