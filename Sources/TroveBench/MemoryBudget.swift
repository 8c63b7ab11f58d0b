import Foundation
import TroveCore
import TroveStore

/// The store's memory budget, measured (issue 11): resident growth per entry read once (its
/// location-map slot, plus the index pages the lookup mapped in), and of
/// reading one large value — `VmRSS` and `VmHWM` deltas in this process, measured before any
/// other workload has grown the heap (freed memory the allocator keeps would absorb growth).
enum MemoryBudget {
    struct Figures {
        /// Resident growth per entry after reading every key once: its location-map slot, plus
        /// the index pages the lookups mapped in (file-backed, reclaimable, but resident).
        var bytesPerMapEntry: Double
        /// Peak resident growth of one `data(for:)` of a `largeValue`-byte value, ÷ its size.
        var peakPerValueByte: Double
        /// The timings of the first reads and of the large read (the rows' latencies).
        var reads = Measurement()
        var largeRead = Measurement()
        static let largeValue = 32 << 20
    }

    static func residentBytes() -> Int { ResidentMemory.currentBytes() ?? 0 }

    static func measure(directory: String, entries: Int, pool: ContentPool) throws -> Figures {
        var configuration = Store.Configuration(durability: .none)
        configuration.compactionInterval = nil
        do {
            let store = try Store(directory: directory, configuration: configuration)
            for i in 0..<entries {
                try store.put(pool.value(id: 9_000_000 + UInt64(i), size: 64), for: CacheKey(url: "budget-\(i)"))
            }
            var large = Data(capacity: Figures.largeValue)
            for part in 0..<Figures.largeValue / (4 << 20) { large.append(pool.value(id: UInt64(part), size: 4 << 20)) }
            try store.put(large, for: CacheKey(url: "budget-large"))
            try store.close()
        }
        // A fresh store: an empty location map.
        let store = try Store(directory: directory, configuration: configuration)
        defer { try? store.close() }
        _ = try store.data(for: CacheKey(url: "budget-0"))  // readers opened, statements prepared
        let before = residentBytes()
        let clock = ContinuousClock()
        var reads = Measurement()
        for i in 0..<entries {
            let t0 = clock.now
            guard try store.data(for: CacheKey(url: "budget-\(i)")) != nil else {
                throw BenchmarkError("memory budget: budget-\(i) is missing")
            }
            reads.add(clock.now - t0)
        }
        let afterReads = residentBytes()
        ResidentMemory.resetPeak()
        let start = ResidentMemory.currentBytes() ?? 0
        var largeRead = Measurement()
        let t0 = clock.now
        guard let large = try store.data(for: CacheKey(url: "budget-large")), large.count == Figures.largeValue else {
            throw BenchmarkError("memory budget: the large value does not read back")
        }
        largeRead.add(clock.now - t0)
        let peak = (ResidentMemory.peakBytes() ?? 0) - start
        return Figures(
            bytesPerMapEntry: Double(afterReads - before) / Double(entries),
            peakPerValueByte: Double(peak) / Double(Figures.largeValue), reads: reads, largeRead: largeRead)
    }
}
