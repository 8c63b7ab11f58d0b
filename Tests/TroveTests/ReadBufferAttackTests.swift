import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore
@testable import TrovePack

#if canImport(Glibc)
    import Glibc
#endif

/// glibc's `malloc_usable_size(3)` (its header is not in the Glibc module).
@_silgen_name("malloc_usable_size") private func mallocUsableSize(_ pointer: UnsafeMutableRawPointer?) -> Int

/// An outsider's attack on the store's kept read buffers (``ReadBuffers``): values held, sliced,
/// copied, bridged and released on other threads; damage and truncation while the kept buffers
/// hold earlier values; budgets at and around powers of two; and what a held value costs in
/// memory.
@Suite struct ReadBufferAttackTests {
    /// The resident bytes of the read buffer under `data`: the `malloc` block that starts one
    /// record header before the value's first byte (where both of the store's readers put it),
    /// its pages in memory counted with `mincore(2)`.
    static func residentBytesOfBuffer(under data: Data) -> (allocated: Int, resident: Int) {
        data.withUnsafeBytes { raw -> (Int, Int) in
            let base = UnsafeMutableRawPointer(mutating: raw.baseAddress!) - PackFormat.Version2.recordHeaderSize
            let allocated = mallocUsableSize(base)
            let page = Int(sysconf(Int32(_SC_PAGESIZE)))
            let start = Int(bitPattern: base) & ~(page - 1)
            let end = Int(bitPattern: base) + allocated
            let pages = (end - start + page - 1) / page
            var vector = [UInt8](repeating: 0, count: pages)
            let result = vector.withUnsafeMutableBufferPointer {
                mincore(UnsafeMutableRawPointer(bitPattern: start), end - start, $0.baseAddress)
            }
            guard result == 0 else { return (allocated, -1) }
            return (allocated, vector.filter { $0 & 1 != 0 }.count * page)
        }
    }

    /// A small value read right after a large one was read and let go takes the large one's
    /// kept buffer (the smallest kept that fits is the only one): the caller's 80 KB value then
    /// holds a buffer of 8 MiB whose first 4 MiB the large read made resident. A caller that
    /// keeps such values (a memory tier, costing each `data.count`) holds 50 times what it
    /// counts; nothing bounds it, and Docs/Architecture.md ("Memory") says a read of N bytes
    /// costs N (1.00 × N), the process's memory for reads being the budget plus the values alive.
    @Test func aHeldSmallValueDoesNotPinALargeKeptBuffer() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let large = Data(testBytes(seed: 99, count: (4 << 20) + 100_000))
                let small = (0..<12).map { Data(testBytes(seed: 1_000 + UInt64($0), count: 80_000 + $0)) }
                let largeKey = CacheKey(url: "https://img.example/large.jpg", variant: "")
                do {
                    let store = try openStore(dir)
                    try store.put(large, for: largeKey)
                    for (i, value) in small.enumerated() { try store.put(value, for: key(i)) }
                    try store.close()
                }
                let store = try openStore(dir) { $0.readBufferRetention = 8 << 20 }
                defer { try? store.close() }
                var held: [Data] = []
                for i in small.indices {
                    // Read whole and let go: its 8 MiB buffer is kept, 4.1 MiB of it resident.
                    #expect(try store.data(for: largeKey) == large)
                    let value = try #require(try store.data(for: key(i)))
                    #expect(value == small[i])
                    held.append(value)
                }
                let heldBytes = held.reduce(0) { $0 + $1.count }
                let buffers = held.map(Self.residentBytesOfBuffer)
                let allocated = buffers.reduce(0) { $0 + $1.allocated }
                let resident = buffers.reduce(0) { $0 + $1.resident }
                // A value's buffer may round up to the next power of two (2×); its resident pages
                // should be about its own.
                #expect(
                    resident <= 2 * heldBytes,
                    "\(held.count) held values of \(heldBytes) bytes hold \(allocated) bytes of buffers, \(resident) resident"
                )
                #expect(store.readBuffers.keptBytes <= 8 << 20)
            }
        }
    }

    /// The same through a memory tier: a ``MemoryCache``-like holder that counts each value's
    /// `count` believes it holds under 1 MiB while the process's resident memory grows by tens
    /// of MiB. Measured as the process's resident growth while the values are held, against
    /// the same run with the budget 0.
    @Test func residentGrowthOfHeldSmallValuesFollowsTheirSize() async throws {
        @Sendable func statmResident() -> Int {
            guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
            let fields = text.split(separator: " ")
            return (Int(fields[1]) ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
        }
        try await withTemporaryDirectory { dir in
            try await offPool {
                let large = Data(testBytes(seed: 98, count: (4 << 20) + 100_000))
                let largeKey = CacheKey(url: "https://img.example/large.jpg", variant: "")
                let count = 24
                do {
                    let store = try openStore(dir)
                    try store.put(large, for: largeKey)
                    for i in 0..<count { try store.put(Data(testBytes(seed: 2_000 + UInt64(i), count: 70_000)), for: key(i)) }
                    try store.close()
                }
                let store = try openStore(dir) { $0.readBufferRetention = 8 << 20 }
                defer { try? store.close() }
                _ = try store.data(for: largeKey)
                let before = statmResident()
                var held: [Data] = []
                for i in 0..<count {
                    _ = try store.data(for: largeKey)
                    held.append(try #require(try store.data(for: key(i))))
                }
                let growth = statmResident() - before
                let heldBytes = held.reduce(0) { $0 + $1.count }
                // Generous: the held values, the budget, and 32 MiB for whatever else runs in this
                // process meanwhile (other suites run in parallel); the kept buffers' bug grew it
                // by 63–70 MiB.
                #expect(
                    growth <= heldBytes + (8 << 20) + (32 << 20),
                    "holding \(heldBytes) bytes of values grew resident memory by \(growth) bytes")
                withExtendedLifetime(held) {}
            }
        }
    }
}

/// Damage, truncation and failed reads under an open store whose kept buffers hold earlier
/// values, the pool at budgets around powers of two: every value served equals the one stored
/// for its key, byte for byte; anything else is nil or a typed error.
@Suite struct ReadBufferDamageAttackTests {
    /// Sizes at the pool's edges: a record (52-byte header) that just fits 64 KiB or 128 KiB, the
    /// value itself at those sizes, and large ones up to 4 MiB.
    static let sizes = [0, 1, 65_536 - 52 - 1, 65_536 - 52, 65_536, 131_072 - 200, 131_072, 300_000, 1 << 20, (4 << 20) - 1]

    static let values = (0..<2 * sizes.count).map { Data(testBytes(seed: 5_000 + UInt64($0), count: sizes[$0 % sizes.count])) }

    static func valueOf(_ i: Int) -> Data { values[i] }

    static func packs(_ dir: String) throws -> [String] {
        let packs = dir + "/store/packs"
        return try FileManager.default.contentsOfDirectory(atPath: packs).filter { $0.hasSuffix(".pack") }.sorted().map {
            packs + "/" + $0
        }
    }

    /// Reads every key in a random order, holding up to five values a while; counts values
    /// served that differ from the model.
    static func readAll(
        _ store: Store, count: Int, rounds: Int, using generator: inout SeededGenerator, holding held: inout [(Int, Data)]
    ) -> Int {
        var wrong = 0
        for _ in 0..<rounds {
            let i = Int.random(in: 0..<count, using: &generator)
            guard let data = try? store.data(for: key(i)) else { continue }
            if data != valueOf(i) { wrong += 1 }
            held.append((i, data))
            if held.count > 5 {
                let (j, released) = held.remove(at: Int.random(in: 0..<held.count, using: &generator))
                if released != valueOf(j) { wrong += 1 }
            }
        }
        return wrong
    }

    /// Random byte flips in the packs while the store is open, between rounds of reads that fill
    /// the kept buffers with the values before.
    @Test(arguments: [0, 65_536, 100_000, 131_071, 131_072, 8 << 20, Int.max])
    func flipsUnderAnOpenStoreServeNoWrongBytes(budget: Int) async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let count = Self.sizes.count * 2
                do {
                    let store = try openStore(dir)
                    for i in 0..<count { try store.put(Self.valueOf(i), for: key(i)) }
                    try store.close()
                }
                let store = try openStore(dir) { $0.readBufferRetention = budget }
                defer { try? store.close() }
                var generator = SeededGenerator(seed: UInt64(truncatingIfNeeded: budget) &+ 77)
                var held: [(Int, Data)] = []
                var wrong = Self.readAll(store, count: count, rounds: 60, using: &generator, holding: &held)
                for _ in 0..<30 {
                    for path in try Self.packs(dir) {
                        let fd = open(path, O_RDWR)
                        defer { close(fd) }
                        let size = Int(lseek(fd, 0, SEEK_END))
                        for _ in 0..<3 {
                            var byte: UInt8 = 0
                            let at = off_t(Int.random(in: 0..<size, using: &generator))
                            _ = pread(fd, &byte, 1, at)
                            byte ^= UInt8.random(in: 1...255, using: &generator)
                            _ = pwrite(fd, &byte, 1, at)
                        }
                    }
                    wrong += Self.readAll(store, count: count, rounds: 40, using: &generator, holding: &held)
                    #expect(store.readBuffers.keptBytes <= budget)
                    #expect(store.readBuffers.keptCount <= ReadBuffers.maximumCount)
                }
                for (j, data) in held where data != Self.valueOf(j) { wrong += 1 }
                #expect(wrong == 0)
                // Not vacuous: by now the flips damaged some values and left others.
                let served = (0..<count).filter { (try? store.data(for: key($0))) != nil }.count
                #expect(served > 0 && served < count, "\(served) of \(count) still served")
            }
        }
    }

    /// The pack cut shorter and shorter under an open store, each value read before the cut
    /// (so a kept buffer holds its intact bytes when the cut read comes short).
    @Test(arguments: [131_072, 8 << 20]) func truncationUnderAnOpenStoreServesNoStaleBytes(budget: Int) async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let count = Self.sizes.count
                do {
                    let store = try openStore(dir)
                    for i in 0..<count { try store.put(Self.valueOf(i), for: key(i)) }
                    try store.close()
                }
                let store = try openStore(dir) { $0.readBufferRetention = budget }
                defer { try? store.close() }
                var generator = SeededGenerator(seed: 4)
                let path = try #require(try Self.packs(dir).last)
                var wrong = 0
                var size = try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
                while size > 0 {
                    // Every key read whole first: the kept buffers hold them all.
                    for i in 0..<count { _ = try? store.data(for: key(i)) }
                    size -= Int.random(in: 1..<400_000, using: &generator)
                    size = max(0, size)
                    #expect(truncate(path, off_t(size)) == 0)
                    for i in (0..<count).shuffled(using: &generator) {
                        if let data = try? store.data(for: key(i)), data != Self.valueOf(i) { wrong += 1 }
                    }
                }
                #expect(wrong == 0)
            }
        }
    }

    /// Failed preads (EIO) on a random third of the reads, between good ones.
    @Test func failedReadsBetweenGoodOnesServeNoWrongBytes() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let count = Self.sizes.count
                do {
                    let store = try openStore(dir)
                    for i in 0..<count { try store.put(Self.valueOf(i), for: key(i)) }
                    try store.close()
                }
                let failing = Locked(SeededGenerator(seed: 9))
                let injector = FaultInjector { operation, path in
                    guard operation == .read, path.hasSuffix(".pack") else { return nil }
                    return failing.withLock { Int.random(in: 0..<3, using: &$0) == 0 } ? .error(EIO) : nil
                }
                let store = try openStore(dir) {
                    $0.readBufferRetention = 1 << 20
                    $0.faultInjector = injector
                }
                defer { try? store.close() }
                var generator = SeededGenerator(seed: 10)
                var held: [(Int, Data)] = []
                let wrong = Self.readAll(store, count: count, rounds: 300, using: &generator, holding: &held)
                #expect(wrong == 0)
            }
        }
    }

    /// The dedup check (`holds`) reads the candidate blob into a kept buffer that held the same
    /// bytes, intact, from a get before; the blob is damaged on disk since. The put must not
    /// take the damaged blob for the value: the new key must serve the value.
    @Test func dedupAgainstADamagedBlobReadIntoAKeptBufferOfItsOwnBytes() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let value = Data(testBytes(seed: 31, count: 600_000))
                let store = try openStore(dir) { $0.readBufferRetention = 8 << 20 }
                defer { try? store.close() }
                try store.put(value, for: key(0))
                try store.flush()
                let path = try #require(try Self.packs(dir).last)
                // The value's payload is the middle of the pack.
                let size = try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
                for round in 0..<3 {
                    let got = try? store.data(for: key(0))
                    #expect(round == 0 ? got == value : (got == nil || got == value))
                    if round == 0 {
                        let fd = open(path, O_RDWR)
                        var byte: UInt8 = 0
                        _ = pread(fd, &byte, 1, off_t(size / 2))
                        byte ^= 0x40
                        _ = pwrite(fd, &byte, 1, off_t(size / 2))
                        close(fd)
                    }
                    try store.put(value, for: key(10 + round))
                    #expect(try store.data(for: key(10 + round)) == value)
                }
            }
        }
    }

    /// Values held past `close()` and past the store's deinit, then read again from a store
    /// opened anew; and a value released on another thread after its store is gone.
    @Test func valuesHeldPastCloseAndDeinit() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let count = Self.sizes.count
                do {
                    let store = try openStore(dir)
                    for i in 0..<count { try store.put(Self.valueOf(i), for: key(i)) }
                    try store.close()
                }
                var held: [(Int, Data)] = []
                for _ in 0..<3 {
                    do {
                        let store = try openStore(dir) { $0.readBufferRetention = 1 << 20 }
                        for i in 0..<count { held.append((i, try #require(try store.data(for: key(i))))) }
                        try store.close()
                        // Closed: reads refuse, held values stay.
                        #expect(held.allSatisfy { $0.1 == Self.valueOf($0.0) })
                    }
                    #expect(held.allSatisfy { $0.1 == Self.valueOf($0.0) })
                }
                let values = held
                DispatchQueue.concurrentPerform(iterations: 4) { t in
                    for (i, data) in values.enumerated() where i % 4 == t {
                        if data.1 != Self.valueOf(data.0) { Issue.record("key \(data.0) changed") }
                    }
                }
                held.removeAll()
            }
        }
    }

    /// Readers on three threads while a fourth flips bytes in the pack and cuts it shorter;
    /// values are released on whichever thread drops them last. Every value served is the one
    /// stored for its key.
    @Test(arguments: [65_536, 131_073, 1 << 20]) func readersWhileAThreadDamagesThePack(budget: Int) async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let count = Self.values.count
                do {
                    let store = try openStore(dir)
                    for i in 0..<count { try store.put(Self.valueOf(i), for: key(i)) }
                    try store.close()
                }
                let store = try openStore(dir) { $0.readBufferRetention = budget }
                defer { try? store.close() }
                let path = try #require(try Self.packs(dir).last)
                let wrong = Locked(0)
                let handOff = Locked([Data]())
                DispatchQueue.concurrentPerform(iterations: 4) { thread in
                    var generator = SeededGenerator(seed: UInt64(thread) + 40)
                    if thread == 3 {
                        let fd = open(path, O_RDWR)
                        defer { close(fd) }
                        var size = Int(lseek(fd, 0, SEEK_END))
                        for step in 0..<60 {
                            var byte: UInt8 = 0
                            let at = off_t(Int.random(in: 0..<size, using: &generator))
                            _ = pread(fd, &byte, 1, at)
                            byte ^= 0x10
                            _ = pwrite(fd, &byte, 1, at)
                            if step % 20 == 19 {
                                size = size * 3 / 4
                                _ = ftruncate(fd, off_t(size))
                            }
                            usleep(2_000)
                        }
                        return
                    }
                    var held: [(Int, Data)] = []
                    for _ in 0..<150 {
                        let i = Int.random(in: 0..<count, using: &generator)
                        guard let data = try? store.data(for: key(i)) else { continue }
                        if data != Self.valueOf(i) { wrong.withLock { $0 += 1 } }
                        held.append((i, data))
                        if held.count > 3 {
                            let (j, released) = held.removeFirst()
                            if released != Self.valueOf(j) { wrong.withLock { $0 += 1 } }
                            // Let another thread drop it.
                            handOff.withLock { $0.append(released) }
                        }
                        if Bool.random(using: &generator) { _ = handOff.withLock { $0.popLast() } }
                    }
                }
                #expect(wrong.withLock { $0 } == 0)
                #expect(store.readBuffers.keptBytes <= budget)
            }
        }
    }

    /// Empty and one-byte values whose records still fill a kept buffer: a key (URL) of 70 000
    /// bytes makes the blob and link records' span pass 64 KiB.
    @Test func tinyValuesUnderLongKeysThroughKeptBuffers() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                let long = String(repeating: "a", count: 70_000)
                let keys = (0..<6).map { CacheKey(url: "https://img.example/\($0)/" + long, variant: "") }
                let values = [
                    Data(), Data([7]), Data(testBytes(seed: 3, count: 14)), Data(testBytes(seed: 4, count: 15)),
                    Data(testBytes(seed: 5, count: 100_000)), Data(),
                ]
                do {
                    let store = try openStore(dir)
                    for (k, v) in zip(keys, values) { try store.put(v, for: k) }
                    try store.close()
                }
                let store = try openStore(dir) { $0.readBufferRetention = 1 << 20 }
                defer { try? store.close() }
                var held: [Data] = []
                for round in 0..<30 {
                    for (k, v) in zip(keys, values) {
                        let got = try store.data(for: k)
                        #expect(got == v, "round \(round)")
                        if let got, round % 2 == 0 { held.append(got) }
                    }
                }
                for (i, h) in held.enumerated() { #expect(h == values[i % values.count]) }
                #expect(store.readBuffers.keptBytes <= 1 << 20)
            }
        }
    }
}
