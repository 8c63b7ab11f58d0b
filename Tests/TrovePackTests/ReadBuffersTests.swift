import Foundation
import Testing
import TroveCore
import TroveTestSupport

@testable import TrovePack

#if canImport(Glibc)
    import Glibc
#endif

/// The read-buffer pool against a model: what it keeps, what it hands out, and that a buffer
/// is never handed to two holders at once.
@Suite struct ReadBuffersTests {
    static let minimum = ReadBuffers.minimumSize

    @Test func newBuffersAreRoundedToAPowerOfTwoWhenTheyCouldBeKept() {
        let pool = ReadBuffers(budget: 1 << 20)
        #expect(pool.capacity(for: 300_000) == 1 << 19)
        #expect(pool.capacity(for: 1 << 17) == 1 << 17)
        #expect(pool.capacity(for: (1 << 17) + 1) == 1 << 18)
        #expect(pool.capacity(for: Self.minimum) == Self.minimum)
        #expect(pool.capacity(for: Self.minimum - 1) == Self.minimum - 1)
        #expect(pool.capacity(for: 0) == 1)
        // Rounded past the budget, or past it already: as asked (never kept).
        #expect(pool.capacity(for: (1 << 20) + 1) == (1 << 20) + 1)
        #expect(ReadBuffers(budget: 900_000).capacity(for: 600_000) == 600_000)
        #expect(ReadBuffers(budget: 0).capacity(for: 600_000) == 600_000)
    }

    @Test func keepsLargeBuffersWithinItsBudgetAndHandsOneOfTheSamePowerOfTwo() {
        let pool = ReadBuffers(budget: 1 << 20)
        let a = pool.take(byteCount: 300_000)
        let b = pool.take(byteCount: 100_000)
        #expect(a.capacity == 1 << 19 && b.capacity == 1 << 17)
        pool.giveBack(a.base, capacity: a.capacity)
        pool.giveBack(b.base, capacity: b.capacity)
        #expect(pool.keptCount == 2 && pool.keptBytes == (1 << 19) + (1 << 17))
        // Each read its own power of two: b for 90 000, a for 400 000.
        let c = pool.take(byteCount: 90_000)
        #expect(c.base == b.base && c.capacity == 1 << 17)
        let d = pool.take(byteCount: 400_000)
        #expect(d.base == a.base && d.capacity == 1 << 19)
        #expect(pool.keptCount == 0 && pool.keptBytes == 0)
        let e = pool.take(byteCount: 500_000)
        #expect(e.base != a.base && e.base != b.base && e.capacity == 1 << 19)
        // c and d kept; e needs room, which c, given back first, makes.
        for buffer in [c, d, e] { pool.giveBack(buffer.base, capacity: buffer.capacity) }
        #expect(pool.keptBytes == 1 << 20 && pool.keptCount == 2)
        // Never a larger one: 64 KiB gets a new buffer, though 512 KiB ones are kept.
        let small = pool.take(byteCount: Self.minimum)
        #expect(small.capacity == Self.minimum && pool.keptCount == 2)
        pool.giveBack(small.base, capacity: small.capacity)
    }

    @Test func smallBuffersAndANoBudgetPoolKeepNothing() {
        let pool = ReadBuffers(budget: 1 << 20)
        let small = pool.take(byteCount: Self.minimum - 1)
        pool.giveBack(small.base, capacity: small.capacity)
        #expect(pool.keptCount == 0)
        let none = ReadBuffers(budget: 0)
        let large = none.take(byteCount: 1 << 19)
        none.giveBack(large.base, capacity: large.capacity)
        #expect(none.keptCount == 0 && none.keptBytes == 0)
        let negative = ReadBuffers(budget: -5)
        #expect(negative.budget == 0)
    }

    @Test func theBuffersGivenBackLongestAgoMakeRoom() {
        let pool = ReadBuffers(budget: 1 << 20)
        func buffer(_ capacity: Int) -> UnsafeMutableRawPointer {
            UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
        }
        pool.giveBack(buffer(1 << 18), capacity: 1 << 18)
        pool.giveBack(buffer(1 << 17), capacity: 1 << 17)
        // 384 KiB kept; 768 KiB more needs 128 KiB of room: the 256 KiB one, given back first, goes.
        pool.giveBack(buffer(3 << 18), capacity: 3 << 18)
        #expect(pool.keptBytes == (1 << 17) + (3 << 18) && pool.keptCount == 2)
        // A large kept buffer does not lock smaller ones out: given back earlier, it makes room.
        pool.giveBack(buffer(1 << 16), capacity: 1 << 16)
        #expect(pool.keptBytes == (1 << 17) + (3 << 18) + (1 << 16) && pool.keptCount == 3)
        pool.giveBack(buffer(1 << 18), capacity: 1 << 18)
        #expect(pool.keptBytes == (1 << 16) + (1 << 18) && pool.keptCount == 2)
        // One over the budget is never kept, and displaces nothing.
        let huge = pool.take(byteCount: (1 << 20) + 1)
        #expect(huge.capacity == (1 << 20) + 1)
        pool.giveBack(huge.base, capacity: huge.capacity)
        #expect(pool.keptBytes == (1 << 16) + (1 << 18) && pool.keptCount == 2)
    }

    @Test func keepsAtMostItsCountOfBuffers() {
        let pool = ReadBuffers(budget: 1 << 30)
        for _ in 0..<(ReadBuffers.maximumCount + 5) {
            pool.giveBack(UnsafeMutableRawPointer.allocate(byteCount: Self.minimum, alignment: 16), capacity: Self.minimum)
        }
        #expect(pool.keptCount == ReadBuffers.maximumCount)
        // At the count, the oldest makes room.
        pool.giveBack(UnsafeMutableRawPointer.allocate(byteCount: 1 << 17, alignment: 16), capacity: 1 << 17)
        #expect(pool.keptCount == ReadBuffers.maximumCount)
        #expect(pool.keptBytes == (ReadBuffers.maximumCount - 1) * Self.minimum + (1 << 17))
    }

    /// Random takes and gives against a model of what is kept (in the order given back) and what is held: the budget is
    /// never exceeded, what is kept is what the model says, and no buffer is handed out while
    /// a holder has it.
    @Test(arguments: [0, 1, 2, 3, 4]) func matchesAModelOverRandomTakesAndGives(seed: UInt64) {
        var generator = SeededGenerator(seed: 0xB0FF + seed)
        let budget = [0, 200_000, 1 << 20, 5 << 20][Int(seed % 4)]
        let pool = ReadBuffers(budget: budget)
        var held: [(base: UnsafeMutableRawPointer, capacity: Int, stamp: UInt8)] = []
        var kept: [Int] = []  // capacities, in the order given back
        for step in 0..<3_000 {
            if held.isEmpty || (held.count < 12 && Bool.random(using: &generator)) {
                let size = [1, 4_096, Self.minimum - 1, Self.minimum, 100_000, 700_000, 2_000_000].randomElement(
                    using: &generator)!
                let byteCount = size + Int.random(in: 0..<4_096, using: &generator)
                let (base, capacity) = pool.take(byteCount: byteCount)
                #expect(capacity >= max(byteCount, 1))
                #expect(!held.contains { $0.base == base }, "a buffer handed out twice")
                // The model: a kept buffer of the request's power of two, else a new one of it.
                #expect(capacity == pool.capacity(for: byteCount))
                if let index = kept.lastIndex(of: capacity) {
                    #expect(capacity >= Self.minimum)
                    kept.remove(at: index)
                }
                let stamp = UInt8(truncatingIfNeeded: step)
                Self.stamp(base, capacity: capacity, with: stamp)
                held.append((base, capacity, stamp))
            } else {
                let buffer = held.remove(at: Int.random(in: 0..<held.count, using: &generator))
                // Nobody wrote into it while it was held.
                #expect(Self.isStamped(buffer.base, capacity: buffer.capacity, with: buffer.stamp))
                pool.giveBack(buffer.base, capacity: buffer.capacity)
                modelGiveBack(buffer.capacity, kept: &kept, budget: budget)
            }
            #expect(pool.keptBytes == kept.reduce(0, +) && pool.keptCount == kept.count)
            #expect(pool.keptBytes <= budget)
        }
        for buffer in held { pool.giveBack(buffer.base, capacity: buffer.capacity) }
    }

    /// Writes `stamp` into every 509th byte of the buffer and its last one (a debug build
    /// filling megabytes byte by byte, thousands of times, takes minutes).
    static func stamp(_ base: UnsafeMutableRawPointer, capacity: Int, with stamp: UInt8) {
        for offset in stride(from: 0, to: capacity, by: 509) { base.storeBytes(of: stamp, toByteOffset: offset, as: UInt8.self) }
        base.storeBytes(of: stamp, toByteOffset: capacity - 1, as: UInt8.self)
    }

    static func isStamped(_ base: UnsafeMutableRawPointer, capacity: Int, with stamp: UInt8) -> Bool {
        stride(from: 0, to: capacity, by: 509).allSatisfy { base.load(fromByteOffset: $0, as: UInt8.self) == stamp }
            && base.load(fromByteOffset: capacity - 1, as: UInt8.self) == stamp
    }

    private func modelGiveBack(_ capacity: Int, kept: inout [Int], budget: Int) {
        guard capacity >= Self.minimum, capacity <= budget else { return }
        while kept.reduce(0, +) + capacity > budget || kept.count >= ReadBuffers.maximumCount { kept.removeFirst() }
        kept.append(capacity)
    }

    @Test func aValuesDataGivesItsBufferBackOnlyWhenItsLastHolderLetsGo() throws {
        let pool = ReadBuffers(budget: 1 << 20)
        let (base, capacity) = pool.take(byteCount: 200_000)
        base.initializeMemory(as: UInt8.self, repeating: 7, count: capacity)
        var data: Data? = pool.data(base, capacity: capacity, offset: 48, count: 100_000)
        var slice: Data? = data![data!.startIndex + 10..<data!.startIndex + 20]
        var copy: Data? = data
        data = nil
        #expect(pool.keptCount == 0)
        copy = nil
        #expect(pool.keptCount == 0, "a slice still shares the buffer")
        #expect(slice!.allSatisfy { $0 == 7 })
        slice = nil
        #expect(pool.keptCount == 1 && pool.keptBytes == capacity)
        _ = copy
        // A copy that was written to owns bytes of its own: the buffer comes back at once.
        let (again, size) = pool.take(byteCount: 150_000)
        #expect(again == base && size == capacity)
        var written: Data? = pool.data(again, capacity: size, offset: 0, count: 1_000)
        var mutated = written!
        mutated[mutated.startIndex] = 1
        written = nil
        #expect(pool.keptCount == 1)
        #expect(mutated.count == 1_000)
    }
}

/// Threads taking, filling, checking and giving back buffers at once (also run under
/// ThreadSanitizer): a buffer a thread holds is written by nobody else.
@Suite struct ReadBuffersConcurrencyTests {
    @Test func threadsNeverShareABuffer() async throws {
        let pool = ReadBuffers(budget: 4 << 20)
        let shared = Locked(0)
        let rounds = runningUnderThreadSanitizer ? 300 : 3_000
        try await offPool {
            DispatchQueue.concurrentPerform(iterations: 4) { thread in
                var generator = SeededGenerator(seed: UInt64(thread) + 99)
                for round in 0..<rounds {
                    let byteCount = Int.random(in: ReadBuffers.minimumSize..<600_000, using: &generator)
                    let stamp = UInt8(truncatingIfNeeded: thread * 61 + round)
                    let (base, capacity) = pool.take(byteCount: byteCount)
                    ReadBuffersTests.stamp(base, capacity: byteCount, with: stamp)
                    let data = pool.data(base, capacity: capacity, offset: 0, count: byteCount)
                    if round % 7 == 0 { usleep(50) }
                    let intact = data.withUnsafeBytes {
                        ReadBuffersTests.isStamped(
                            UnsafeMutableRawPointer(mutating: $0.baseAddress!), capacity: byteCount, with: stamp)
                    }
                    if !intact { shared.withLock { $0 += 1 } }
                }
            }
        }
        #expect(shared.withLock { $0 } == 0, "another thread wrote into a held buffer")
        #expect(pool.keptBytes <= 4 << 20)
    }
}
