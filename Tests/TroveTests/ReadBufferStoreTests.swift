import Foundation
import Testing
import TroveCore
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

#if canImport(Glibc)
    import Glibc
#endif

/// Gets of large values through the store's kept read buffers (``ReadBuffers``): a buffer holds
/// the last value read into it, which no later read may serve, and a value a caller still holds
/// is never overwritten.
@Suite struct ReadBufferStoreTests {
    static func large(_ i: Int) -> Data { Data(testBytes(seed: 7_000 + UInt64(i), count: 100_000 + i * 4_099)) }

    /// A value read whole leaves its bytes in a kept buffer; the next value, of the same size,
    /// cut short on disk, reads short into that buffer — whose tail still holds the first
    /// value's payload and link record. The get must fail, typed, and serve none of them.
    @Test func aShortReadIntoAKeptBufferServesNothingOfTheValueBefore() async throws {
        try await withTemporaryDirectory { dir in
            let first = Data(testBytes(seed: 1, count: 500_000))
            let second = Data(testBytes(seed: 2, count: 500_000))
            do {
                let store = try openStore(dir)
                try store.put(first, for: key(1))
                try store.put(second, for: key(2))
                try store.close()
            }
            let store = try openStore(dir) { $0.readBufferRetention = 8 << 20 }
            defer { try? store.close() }
            #expect(try store.data(for: key(1)) == first)
            #expect(store.readBuffers.keptCount == 1)
            // Cut the second value's record in the middle of its payload.
            let packs = dir + "/store/packs"
            let segment = try #require(
                try FileManager.default.contentsOfDirectory(atPath: packs).filter { $0.hasSuffix(".pack") }.sorted().last)
            let path = packs + "/" + segment
            let size = try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
            #expect(truncate(path, off_t(size - 300_000)) == 0)
            // Nothing, or the typed error: never bytes.
            let served = try? store.data(for: key(2))
            #expect(served == nil)
            // The first value is still served right, from the same kept buffer.
            #expect(try store.data(for: key(1)) == first)
        }
    }

    /// Values a caller holds while it reads more: each still equals what was stored when it is
    /// let go, whatever the budget (none, one buffer, the default).
    @Test(arguments: [0, 300_000, 8 << 20]) func heldValuesAreNeverOverwritten(budget: Int) async throws {
        try await withTemporaryDirectory { dir in
            let count = 24
            do {
                let store = try openStore(dir)
                for i in 0..<count { try store.put(Self.large(i), for: key(i)) }
                try store.close()
            }
            let store = try openStore(dir) { $0.readBufferRetention = budget }
            defer { try? store.close() }
            var generator = SeededGenerator(seed: UInt64(budget) + 5)
            var held: [(Int, Data)] = []
            for round in 0..<600 {
                let i = Int.random(in: 0..<count, using: &generator)
                let data = try #require(try store.data(for: key(i)))
                held.append((i, data))
                if held.count > 5 || (round % 3 == 0 && !held.isEmpty) {
                    let (j, released) = held.remove(at: Int.random(in: 0..<held.count, using: &generator))
                    #expect(released == Self.large(j), "key \(j) changed while held (round \(round))")
                }
                #expect(store.readBuffers.keptBytes <= budget)
            }
            for (j, data) in held { #expect(data == Self.large(j)) }
        }
    }
}

/// Threads reading large values at once through one store's kept buffers (also run under
/// ThreadSanitizer): every value read equals what was stored, also after being held a while.
@Suite struct ReadBufferConcurrencyTests {
    @Test func threadsReadingLargeValuesGetTheirOwnBytes() async throws {
        try await withTemporaryDirectory { dir in
            let count = 16
            do {
                let store = try openStore(dir)
                for i in 0..<count { try store.put(ReadBufferStoreTests.large(i), for: key(i)) }
                try store.close()
            }
            let store = try openStore(dir) { $0.readBufferRetention = 1 << 20 }
            defer { try? store.close() }
            let values = (0..<count).map(ReadBufferStoreTests.large)
            let wrong = Locked(0)
            let rounds = runningUnderThreadSanitizer ? 40 : 300
            try await offPool {
                DispatchQueue.concurrentPerform(iterations: 4) { thread in
                    var generator = SeededGenerator(seed: UInt64(thread) + 11)
                    var held: [(Int, Data)] = []
                    for _ in 0..<rounds {
                        let i = Int.random(in: 0..<count, using: &generator)
                        guard let data = try? store.data(for: key(i)), data == values[i] else {
                            wrong.withLock { $0 += 1 }
                            continue
                        }
                        held.append((i, data))
                        if held.count > 3 {
                            let (j, released) = held.removeFirst()
                            if released != values[j] { wrong.withLock { $0 += 1 } }
                        }
                    }
                }
            }
            #expect(wrong.withLock { $0 } == 0)
            #expect(store.readBuffers.keptBytes <= 1 << 20)
        }
    }
}
