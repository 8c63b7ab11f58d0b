public import Foundation
import TroveCore

/// Large read buffers kept for the next read, up to a byte budget.
///
/// A value is read into a buffer of its own, which the `Data` handed to the caller owns. Freed
/// with it, a large buffer's pages go back to the kernel sooner or later (glibc unmaps large
/// blocks, and trims the top of a heap past a threshold it moves as it goes), and the next large
/// read pays for fresh ones: a fault and a zeroed page every 4 KiB, which is where most of a
/// fresh process's page faults went when it read an image catalog once (Docs/Benchmarks.md,
/// "read buffers kept for the next read"). A buffer kept here is already backed: the next read
/// of its size copies into pages that are there.
///
/// Only buffers of at least ``minimumSize`` are kept (smaller ones are the allocator's business),
/// at most ``budget`` bytes of them counted by capacity and at most ``maximumCount``; the buffers
/// given back longest ago make room. A buffer comes back when the last `Data` sharing it is
/// released; a buffer a caller still holds is the caller's, not counted. New buffers are rounded
/// up to a power of two, and a read reuses a kept buffer of its own power of two only, so a
/// value held keeps under twice its size resident.
///
/// Thread safety: any thread may take and give back (a `Data` is released wherever its last
/// holder lets go). The kept buffers are guarded by a lock that is a leaf: nothing else is
/// locked while it is held, and nothing freed but in `deinit`, when no one else can hold it.
public final class ReadBuffers: Sendable {
    /// The least capacity a buffer must have to be kept: 64 KiB.
    public static let minimumSize = 64 * 1_024

    /// The most buffers kept at once.
    public static let maximumCount = 32

    /// The most bytes of kept buffers, counted by capacity; 0 keeps none.
    public let budget: Int

    /// The kept buffers, in the order they were given back, and their total capacity.
    private struct Kept {
        var buffers: [(capacity: Int, base: UnsafeMutableRawPointer)] = []
        var bytes = 0
    }

    // `UnsafeMutableRawPointer` is not Sendable; the pointers are owned by this object and
    // touched only under the lock.
    private struct Guarded: @unchecked Sendable { var kept = Kept() }
    private let state = Locked(Guarded())

    /// Makes a pool keeping at most `budget` bytes of buffers.
    public init(budget: Int) {
        self.budget = max(0, budget)
    }

    deinit {
        state.withLock { state in
            for buffer in state.kept.buffers { buffer.base.deallocate() }
            state.kept = Kept()
        }
    }

    /// How many bytes of buffers are kept now (their capacities).
    public var keptBytes: Int { state.withLock { $0.kept.bytes } }

    /// How many buffers are kept now.
    public var keptCount: Int { state.withLock { $0.kept.buffers.count } }

    /// A buffer of at least `byteCount` bytes, aligned to 16, and its capacity: a kept one of
    /// the size a new one would have (``capacity(for:)``) when there is one, else a new one. Its
    /// bytes are whatever was there: the reader must fill what it uses. Hand it back with
    /// ``giveBack(_:capacity:)`` or free it with `deallocate()`.
    ///
    /// Only a buffer of the same power of two is reused, never a larger one: a kept buffer's
    /// pages were touched by earlier reads, and a value its caller holds (a memory tier's, say)
    /// keeps them all resident — at most twice its size so, as a new buffer's untouched pages
    /// cost nothing.
    public func take(byteCount: Int) -> (base: UnsafeMutableRawPointer, capacity: Int) {
        let capacity = capacity(for: byteCount)
        if capacity >= Self.minimumSize, capacity <= budget {
            let found = state.withLock { state -> UnsafeMutableRawPointer? in
                guard let index = state.kept.buffers.lastIndex(where: { $0.capacity == capacity }) else { return nil }
                state.kept.bytes -= capacity
                return state.kept.buffers.remove(at: index).base
            }
            if let found { return (found, capacity) }
        }
        return (UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16), capacity)
    }

    /// The capacity of a new buffer for `byteCount` bytes: one that could be kept gets the next
    /// power of two, so that a later read of a like size (within 2×) finds it — its pages past
    /// what a read fills are never touched, so they cost no memory; any other, `byteCount`.
    func capacity(for byteCount: Int) -> Int {
        let wanted = max(byteCount, 1)
        // Past 2^62 the next power of two is not an Int (and no budget that large is kept).
        guard wanted >= Self.minimumSize, wanted <= budget, wanted <= 1 << 62 else { return wanted }
        let rounded = 1 << (Int.bitWidth - (wanted - 1).leadingZeroBitCount)
        return rounded <= budget ? rounded : wanted
    }

    /// Takes back a buffer ``take(byteCount:)`` gave: kept when it is large enough and not
    /// larger than the budget — the buffers given back longest ago making room for it — freed
    /// otherwise.
    public func giveBack(_ base: UnsafeMutableRawPointer, capacity: Int) {
        guard capacity >= Self.minimumSize, capacity <= budget else {
            base.deallocate()
            return
        }
        let freed = state.withLock { state -> [UnsafeMutableRawPointer] in
            // Room is made by the buffers given back longest ago.
            var dropped = 0
            while state.kept.bytes + capacity > budget || state.kept.buffers.count - dropped >= Self.maximumCount {
                state.kept.bytes -= state.kept.buffers[dropped].capacity
                dropped += 1
            }
            let freed = state.kept.buffers[..<dropped].map(\.base)
            state.kept.buffers.removeFirst(dropped)
            state.kept.buffers.append((capacity, base))
            state.kept.bytes += capacity
            return freed
        }
        // Freed outside the lock: an `munmap` takes a while.
        for base in freed { base.deallocate() }
    }

    /// `count` bytes at `offset` in the buffer `base` of `capacity` bytes (from
    /// ``take(byteCount:)``) as `Data` that gives the buffer back when released.
    public func data(_ base: UnsafeMutableRawPointer, capacity: Int, offset: Int, count: Int) -> Data {
        Data(
            bytesNoCopy: base + offset, count: count,
            deallocator: .custom { [self] pointer, _ in giveBack(pointer - offset, capacity: capacity) })
    }

    // For readers whose pool is optional: without one, a buffer of its own, freed with its `Data`.

    static func take(byteCount: Int, from pool: ReadBuffers?) -> (base: UnsafeMutableRawPointer, capacity: Int) {
        if let pool { return pool.take(byteCount: byteCount) }
        let capacity = max(byteCount, 1)
        return (UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16), capacity)
    }

    static func giveBack(_ base: UnsafeMutableRawPointer, capacity: Int, to pool: ReadBuffers?) {
        if let pool { pool.giveBack(base, capacity: capacity) } else { base.deallocate() }
    }

    static func data(
        _ base: UnsafeMutableRawPointer, capacity: Int, offset: Int, count: Int, from pool: ReadBuffers?
    ) -> Data {
        if let pool { return pool.data(base, capacity: capacity, offset: offset, count: count) }
        return Data(
            bytesNoCopy: base + offset, count: count, deallocator: .custom { pointer, _ in (pointer - offset).deallocate() })
    }
}
