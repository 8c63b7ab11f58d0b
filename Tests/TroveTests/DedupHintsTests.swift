import Dispatch
import Foundation
import Testing
import TroveCore
import TroveIndex
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

#if canImport(Glibc)
    import Glibc
#endif

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

    /// The hints' own bookkeeping: a slot keeps every blob that shares it, the newest first in
    /// line; a pass's forgets hand the slot back; a load merges with hints added before it.
    @Test func slotsKeepOlderBlobsForTheirForgets() {
        let h = ContentHash(high: 7, low: 1)
        let other = ContentHash(high: 7, low: 2)  // agrees with h in the 64 bits the slot uses
        var hints = DedupHints()
        hints.add(h, id: 10)
        hints.add(h, id: 20)  // equal bytes stored again
        hints.add(other, id: 30)
        #expect(hints.candidate(for: h) == 30)
        hints.forget([(30, other)])
        #expect(hints.candidate(for: h) == 20)
        hints.forget([(10, h)])  // an older one goes quietly
        #expect(hints.candidate(for: h) == 20)
        hints.forget([(20, h)])
        #expect(hints.candidate(for: h) == nil)
        #expect(hints.count == 0)
        #expect(hints.hintedIDs.isEmpty)
    }

    /// The slots, split in 64 dictionaries by the prefix's top bits, against a model: random adds
    /// (repeats and shared prefixes included) and forgets over prefixes spread across every
    /// dictionary, each prefix's candidate, the count and the ids hinted.
    @Test func slotsMatchAModelAcrossTheirDictionaries() {
        var g = SeededGenerator(seed: 9)
        var hints = DedupHints()
        var model: [UInt64: [Int64]] = [:]  // per prefix, every id still held, in adding order
        var added: [(id: Int64, hash: ContentHash)] = []
        var nextID: Int64 = 1
        for step in 0..<4_000 {
            if g.next() % 4 == 0, !added.isEmpty {
                let (id, hash) = added.remove(at: Int(g.next() % UInt64(added.count)))
                hints.forget([(id, hash)])
                model[hash.high]?.removeAll { $0 == id }
            } else {
                let prefix = (g.next() % 64) << 58 | g.next() % 40
                let hash = ContentHash(high: prefix, low: g.next() % 3)
                hints.add(hash, id: nextID)
                model[prefix, default: []].append(nextID)
                added.append((nextID, hash))
                nextID += 1
            }
            if step % 500 == 499 {
                for (prefix, ids) in model {
                    #expect(hints.candidate(for: ContentHash(high: prefix, low: 0)) == ids.last, "step \(step)")
                }
            }
        }
        #expect(hints.count == model.values.reduce(0) { $0 + $1.count })
        #expect(hints.hintedIDs == Set(model.values.joined()))
    }

    /// A load that close() stops leaves the hints unloaded (a put loads them itself later), and
    /// reads no further batch.
    @Test func aStoppedLoadLeavesTheHintsUnloaded() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.compactionInterval = nil }
            for i in 0..<5_000 { try store.put(Data(testBytes(seed: UInt64(i) &+ 1, count: 16)), for: key(i)) }
            try store.flush()
            let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: true)
            var asked = 0
            var hints = DedupHints()
            try hints.load(from: index) {
                asked += 1
                return asked > 1  // stop after the first batch of 4 096
            }
            #expect(asked == 2)
            #expect(!hints.isLoaded && hints.count == 0)
            #expect(!hints.loaded.withLock { $0 })
            try hints.load(from: index)
            #expect(hints.isLoaded && hints.count == 5_000)
            #expect(hints.loaded.withLock { $0 })
            try store.close()
        }
    }

    /// Two copies of one content can be live at once (a put during a rewrite of the first copy's
    /// segment stores the bytes anew). The newer copy holds the hint slot; when it dies and a
    /// pass deletes it, the older, live copy takes the slot back: content the index holds is
    /// still found without a reload (an outside review, helper-31, found it lost).
    @Test func aPassThatDeletesTheNewerCopyHandsTheHintToTheOlder() async throws {
        try await withTemporaryDirectory { dir in
            let box = Locked<Store?>(nil)
            let armed = Locked(false)
            let compactor = Locked<pthread_t?>(nil)
            let blocked = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            // Pauses the compactor at its first segment read once a segment is marked reclaiming.
            let faults = FaultInjector { op, _ in
                guard op == .read, let me = compactor.withLock({ $0 }), pthread_equal(me, pthread_self()) != 0,
                    armed.withLock({ $0 }), let store = box.withLock({ $0 }),
                    store.appender.withLockIfAvailable({ !$0.reclaiming.isEmpty }) == true
                else { return nil }
                armed.withLock { $0 = false }
                blocked.signal()
                release.wait()
                return nil
            }
            let store = try openStore(dir, segmentSize: 1 << 20) {
                $0.compactionInterval = nil
                $0.faultInjector = faults
            }
            box.withLock { $0 = store }
            defer { try? store.close() }
            let content = Data(testBytes(seed: 77, count: 4000))
            let hash = ContentHash(hashing: [UInt8](content))
            try store.put(content, for: key(1))  // blob Z
            try store.put(Data(testBytes(seed: 1, count: 100_000)), for: key(900))
            try store.remove(key(900))
            try store.flush()
            // A pass rewrites segment 1 (sparse); it is paused after marking it reclaiming.
            armed.withLock { $0 = true }
            let passDone = DispatchSemaphore(value: 0)
            let passError = Locked<(any Error)?>(nil)
            Thread.detachNewThread {
                compactor.withLock { $0 = pthread_self() }
                do { try store.compact() } catch { passError.withLock { $0 = error } }
                passDone.signal()
            }
            #expect(blocked.wait(timeout: .now() + 20) == .success, "the pass never paused")
            try store.put(content, for: key(2))  // during the rewrite: stored anew, blob X
            release.signal()
            #expect(passDone.wait(timeout: .now() + 20) == .success)
            #expect(passError.withLock { $0 } == nil)
            try store.flush()
            #expect(try store.statistics().blobs == 2, "setup: two live copies of one content")
            // X dies; a pass deletes it and forgets its hint.
            try store.remove(key(2))
            try store.put(Data(testBytes(seed: 2, count: 100_000)), for: key(901))
            try store.remove(key(901))
            try store.flush()
            try store.compact()
            let rows = try store.readIndex { try $0.blobRows() }
            #expect(rows.count == 1 && rows.first?.hash == hash, "setup: Z alone is left, holding the content")
            let hinted = store.dedupHints.withLock { $0.candidate(for: hash) }
            #expect(hinted != nil, "the index holds the content but no hint names it")
            try store.put(content, for: key(3))
            try store.flush()
            #expect(try store.statistics().blobs == 1, "a put of content the index holds stored a second copy")
            // A reopen (a reload) finds it again.
            try store.close()
            let reopened = try openStore(dir, segmentSize: 1 << 20) { $0.compactionInterval = nil }
            defer { try? reopened.close() }
            let before = try reopened.statistics().blobs
            try reopened.put(content, for: key(4))
            try reopened.flush()
            #expect(try reopened.statistics().blobs == before, "after a reopen the content is found")
        }
    }

    /// With the hints loaded and no back-pressure, a put without waiting is never refused, even
    /// while other puts hold the hints' lock for their lookups and adds (helper-31 saw 52 of
    /// 20 000 refused when any holder counted as a load).
    @Test func putWithoutWaitingIsNotRefusedByABusyHintLock() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) {
                $0.compactionInterval = nil
                $0.batchSize = 1_000_000  // back-pressure at 8 000 000 queued records: never here
                $0.batchInterval = .seconds(3600)
            }
            defer { try? store.close() }
            store.waitForLoads()
            #expect(store.dedupHints.withLock { $0.isLoaded })
            let stop = Locked(false)
            let otherDone = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                var i = 0
                while !stop.withLock({ $0 }) {
                    try? store.put(Data(testBytes(seed: UInt64(1_000_000 + i), count: 64)), for: key(1_000_000 + i))
                    i += 1
                }
                otherDone.signal()
            }
            var refused = 0
            let attempts = 20_000
            for i in 0..<attempts {
                if try store.putWithoutWaiting(Data(testBytes(seed: UInt64(i), count: 64)), for: key(i)) == nil {
                    refused += 1
                }
            }
            stop.withLock { $0 = true }
            otherDone.wait()
            #expect(store.dedupHints.withLock { $0.isLoaded })
            #expect(refused == 0, "\(refused) of \(attempts) puts without waiting refused, hints loaded, queue far from full")
        }
    }
}
