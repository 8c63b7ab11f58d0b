import Foundation
import Testing
import TroveCore
import TroveTestSupport

@testable import TrovePack

#if canImport(Glibc)
    import Glibc
#endif

/// glibc's `malloc_usable_size(3)` (its header is not in the Glibc module).
@_silgen_name("malloc_usable_size") private func mallocUsableSize(_ pointer: UnsafeMutableRawPointer?) -> Int

/// An outsider's attack on ``ReadBuffers`` alone: random takes and gives against a model at
/// budgets around powers of two, threads stamping the buffers they hold, and the `Data` it
/// makes, held, copied, mutated and bridged while the pool hands its buffer on.
@Suite struct ReadBuffersAttackTests {
    static let budgets = [
        0, 1, 65_535, 65_536, 65_537, 100_000, 131_071, 131_072, 131_073, 1 << 20, (1 << 20) - 1, (1 << 20) + 1,
        8 << 20, Int.max / 4, Int.max, -1, Int.min,
    ]

    /// Every buffer a holder has is its alone: stamped when taken, still stamped when given
    /// back; the pool never keeps more than its budget or 32 buffers, and a take's capacity
    /// covers what was asked and what `malloc` gave.
    @Test(arguments: budgets) func randomTakesAndGivesKeepTheBudgetAndNeverShareABuffer(budget: Int) {
        let pool = ReadBuffers(budget: budget)
        var generator = SeededGenerator(seed: UInt64(truncatingIfNeeded: budget) &+ 3)
        var held: [(base: UnsafeMutableRawPointer, capacity: Int, stamp: UInt64, size: Int)] = []
        let sizes = [
            0, 1, 4_096, 65_535, 65_536, 65_537, 100_000, 131_071, 131_072, 131_073, 300_000, 524_288, 600_000,
            1 << 20, (1 << 20) + 1, 3 << 20,
        ]
        for round in 0..<1_500 {
            if held.isEmpty || (held.count < 40 && Bool.random(using: &generator)) {
                let size = sizes.randomElement(using: &generator)! + Int.random(in: 0..<3, using: &generator)
                let buffer = pool.take(byteCount: size)
                #expect(buffer.capacity >= max(size, 1))
                #expect(mallocUsableSize(buffer.base) >= buffer.capacity)
                #expect(Int(bitPattern: buffer.base) % 16 == 0)
                #expect(!held.contains { $0.base == buffer.base }, "round \(round): a held buffer handed out again")
                let stamp = UInt64(round) &* 0x9E37_79B9_7F4A_7C15
                let used = max(size, 1)
                // Stamp its first and last words (what a read fills).
                if used >= 8 {
                    buffer.base.storeBytes(of: stamp, as: UInt64.self)
                    (buffer.base + used - 8).storeBytes(of: stamp, as: UInt64.self)
                }
                held.append((buffer.base, buffer.capacity, stamp, used))
            } else {
                let b = held.remove(at: Int.random(in: 0..<held.count, using: &generator))
                if b.size >= 8 {
                    #expect(b.base.load(as: UInt64.self) == b.stamp, "round \(round): a held buffer was written by another")
                    #expect((b.base + b.size - 8).loadUnaligned(as: UInt64.self) == b.stamp)
                }
                pool.giveBack(b.base, capacity: b.capacity)
            }
            #expect(pool.keptBytes <= max(0, budget))
            #expect(pool.keptCount <= ReadBuffers.maximumCount)
        }
        for b in held { pool.giveBack(b.base, capacity: b.capacity) }
        #expect(pool.keptBytes <= max(0, budget) && pool.keptCount <= ReadBuffers.maximumCount)
    }

    /// Four threads taking, stamping and giving back at once (the store's readers and whatever
    /// threads release its values): no buffer is ever held by two.
    @Test(arguments: [0, 200_000, 1 << 20, 8 << 20]) func threadsNeverShareABuffer(budget: Int) async throws {
        let pool = ReadBuffers(budget: budget)
        let wrong = Locked(0)
        try await offPool {
            DispatchQueue.concurrentPerform(iterations: 4) { thread in
                var generator = SeededGenerator(seed: UInt64(thread) + 100)
                var held: [(UnsafeMutableRawPointer, Int, Int, UInt8)] = []
                for round in 0..<1_000 {
                    if held.count < 4 && (held.isEmpty || Bool.random(using: &generator)) {
                        let size = Int.random(in: 60_000..<700_000, using: &generator)
                        let (base, capacity) = pool.take(byteCount: size)
                        let stamp = UInt8(truncatingIfNeeded: thread &* 64 &+ round)
                        memset(base, Int32(stamp), size)
                        held.append((base, capacity, size, stamp))
                    } else {
                        let (base, capacity, size, stamp) = held.removeFirst()
                        // Its first and last bytes and every 4 KiB page's: what another holder's
                        // fill would have changed.
                        let raw = UnsafeRawBufferPointer(start: base, count: size)
                        if raw[size - 1] != stamp || !stride(from: 0, to: size, by: 4_096).allSatisfy({ raw[$0] == stamp }) {
                            wrong.withLock { $0 += 1 }
                        }
                        pool.giveBack(base, capacity: capacity)
                    }
                }
                for (base, capacity, _, _) in held { pool.giveBack(base, capacity: capacity) }
            }
        }
        #expect(wrong.withLock { $0 } == 0)
        #expect(pool.keptBytes <= budget && pool.keptCount <= ReadBuffers.maximumCount)
    }

    /// `Data` over a pool buffer, used the ways a caller uses a value: sliced, copied, mutated
    /// (copy-on-write), grown, shrunk and grown back, bridged to NSData, released on another
    /// thread. The pool must get the buffer back only once, after the last holder lets go, and
    /// no holder may see another's bytes.
    @Test func dataOverAPoolBufferBehavesAsAValue() async throws {
        let pool = ReadBuffers(budget: 1 << 20)
        func make(_ byte: UInt8, count: Int = 200_000, offset: Int = 52) -> Data {
            let (base, capacity) = pool.take(byteCount: count + offset)
            memset(base, Int32(byte), count + offset)
            return pool.data(base, capacity: capacity, offset: offset, count: count)
        }
        // A slice outlives its whole.
        var slice: Data? = make(1)[1_000..<2_000]
        #expect(pool.keptCount == 0)
        let overwrite = make(2)
        #expect(slice!.allSatisfy { $0 == 1 })
        _ = overwrite
        slice = nil
        // A mutated copy leaves the original alone; the original's buffer is reused after both go.
        do {
            let original = make(3)
            var copy = original
            copy[0] = 9
            copy.append(7)
            #expect(original.allSatisfy { $0 == 3 } && original.count == 200_000)
            #expect(copy.count == 200_001 && copy[copy.startIndex] == 9)
            let again = make(4)
            #expect(original.allSatisfy { $0 == 3 } && again.allSatisfy { $0 == 4 })
        }
        #expect(pool.keptCount >= 1 && pool.keptBytes <= 1 << 20)
        // Shrunk then grown back: zeros, never the buffer's old bytes.
        do {
            var value = make(5)
            value.count = 10
            value.count = 200_000
            #expect(value[0..<10].allSatisfy { $0 == 5 })
            #expect(value[10...].allSatisfy { $0 == 0 })
            value.removeFirst(100)
            value.append(contentsOf: [1, 2, 3])
            #expect(value.count == 199_903)
        }
        // Bridged to NSData and released there, on another thread.
        let bridged: NSData = make(6) as NSData
        let filler = make(7)
        #expect(filler.allSatisfy { $0 == 7 })
        let bytes = Data(referencing: bridged)
        #expect(bytes.allSatisfy { $0 == 6 })
        let values = (0..<8).map { make(UInt8(10 + $0)) }
        try await offPool {
            DispatchQueue.concurrentPerform(iterations: values.count) { i in
                _ = values[i].count
            }
        }
        _ = (bytes, filler)
        // Empty and tiny values over a large buffer: given back at once (inline `Data`).
        let empty = make(8, count: 0, offset: 100_000)
        let tiny = make(9, count: 3, offset: 100_000)
        #expect(empty.isEmpty && tiny == Data([9, 9, 9]))
        #expect(pool.keptBytes <= 1 << 20 && pool.keptCount <= ReadBuffers.maximumCount)
    }

    /// A pool let go of while values it made are still held: they keep it alive, and give
    /// back into it when they go.
    @Test func valuesOutliveTheirPool() {
        var values: [Data] = []
        do {
            let pool = ReadBuffers(budget: 1 << 20)
            for i in 0..<4 {
                let (base, capacity) = pool.take(byteCount: 100_000)
                memset(base, Int32(i), 100_000)
                values.append(pool.data(base, capacity: capacity, offset: 0, count: 100_000))
            }
        }
        for (i, value) in values.enumerated() { #expect(value.allSatisfy { $0 == UInt8(i) }) }
        values.removeAll()
    }

    /// The rounding to a power of two, asked for more than half of `Int.max` with a budget that
    /// allows it: the capacity must still cover what was asked (a negative one would trap in
    /// `allocate`). `take(byteCount:)` is public; the store asks at most 2 GiB.
    @Test func roundingNeverOverflows() {
        let pool = ReadBuffers(budget: .max)
        for wanted in [(1 << 62) - 1, 1 << 62, (1 << 62) + 1, Int.max - 1, Int.max] {
            #expect(pool.capacity(for: wanted) >= wanted, "capacity(for: \(wanted)) = \(pool.capacity(for: wanted))")
        }
    }
}
