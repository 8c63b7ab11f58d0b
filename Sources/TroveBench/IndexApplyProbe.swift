public import Foundation
public import TroveStore
@_spi(Testing) import TroveStore
import TroveCore

/// Measures the committer's cost of applying puts to the index (issue 11), for `trove bench`'s
/// scaling rows and the ordo benchmark alike: a store opened so that nothing commits in the
/// background (`none`, no timer, no batch wake-up), batches of new 4 KiB values put untimed
/// (``prepare()``), then the one commit cycle that applies them — the index transaction, no
/// fsync — run by ``commit()``, which is what a caller times; ``verify()`` checks the batch
/// after.
public final class IndexApplyProbe {
    /// Puts per commit cycle.
    public static let batch = 256

    public let store: Store
    private let pool: ContentPool
    /// The id of the next value put; far above any fill's, so keys never repeat.
    private var next: UInt64 = 1 << 40

    /// Opens (creating) the store at `directory` for probing.
    public init(directory: String, pool: ContentPool) throws {
        var configuration = Store.Configuration(durability: .none)
        configuration.batchInterval = .seconds(3_600)
        configuration.batchSize = 1 << 20
        configuration.compactionInterval = nil
        store = try Store(directory: directory, configuration: configuration)
        // The places a store loads after opening would share the cores and the digest table's
        // lock with the first cycles: the probe measures the apply alone, after them.
        store.waitForLoads()
        self.pool = pool
    }

    /// Puts `entries` values of 1 KiB (committed), so that the index holds that many more.
    public func fill(entries: Int) throws {
        for i in 0..<entries {
            try store.put(pool.value(id: UInt64(i), size: 1024), for: CacheKey(url: "fill-\(i)"))
            if i % 4096 == 4095 { try store.flush() }
        }
        try store.flush()
    }

    /// Puts one batch of new 4 KiB values; nothing is committed.
    public func prepare() throws {
        for _ in 0..<Self.batch {
            try store.put(pool.value(id: next, size: 4096), for: CacheKey(url: "apply-\(next)"))
            next += 1
        }
    }

    /// Runs the commit cycle that applies the prepared batch.
    public func commit() throws {
        try store.flush()
    }

    /// Checks that the last value put reads back (outside the timing).
    public func verify() throws {
        let last = CacheKey(url: "apply-\(next - 1)")
        guard try store.data(for: last) == pool.value(id: next - 1, size: 4096) else {
            throw BenchmarkError("index apply: \(last) does not read back after its commit")
        }
    }
}
