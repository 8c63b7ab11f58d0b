extension MemoryCache {
    /// A snapshot of a memory cache's counters and size.
    ///
    /// Each entry that leaves the cache is counted once, by why it left, so
    /// `count == inserts - replacements - evictions - invalidations - expirations` whenever
    /// nothing runs concurrently with the snapshot. Shards are read one after another, so a
    /// snapshot taken while other threads use the cache is a sum of per-shard moments.
    public struct Statistics: Hashable, Sendable {
        /// Lookups that returned an entry.
        public var hits = 0
        /// Lookups that returned nil, expired entries included.
        public var misses = 0
        /// Entries stored by an insert.
        public var inserts = 0
        /// Inserts not stored: refused by their token, expired already, or costing more than a
        /// shard's share of the cost limit.
        public var refusedInserts = 0
        /// Entries dropped because an insert for their key came, accepted or not.
        public var replacements = 0
        /// Entries dropped to make room, or by ``MemoryCache/trim(toCost:)``.
        public var evictions = 0
        /// Entries dropped because the store reported a change of their key, or by
        /// ``MemoryCache/remove(_:)``, ``MemoryCache/removeAll(url:)`` or ``MemoryCache/removeAll()``.
        public var invalidations = 0
        /// Entries dropped by a lookup that found their expiry passed.
        public var expirations = 0
        /// Entries held.
        public var count = 0
        /// Bytes held, as the cache counts them (data plus ``MemoryCache/itemOverhead`` each).
        public var cost = 0

        /// `hits / (hits + misses)`; 0 before the first lookup.
        public var hitRatio: Double {
            hits + misses == 0 ? 0 : Double(hits) / Double(hits + misses)
        }

        /// Zero counters.
        public init() {}

        /// Adds `other`'s counters and size to these.
        mutating func add(_ other: Statistics) {
            hits += other.hits
            misses += other.misses
            inserts += other.inserts
            refusedInserts += other.refusedInserts
            replacements += other.replacements
            evictions += other.evictions
            invalidations += other.invalidations
            expirations += other.expirations
            count += other.count
            cost += other.cost
        }
    }

    /// The counters since the cache was made, and its current size.
    ///
    /// Complexity: O(shards) — each shard's lock is taken once.
    public var statistics: Statistics {
        var total = Statistics()
        forEachShard { shard in
            var counters = shard.counters
            counters.count = shard.count
            counters.cost = shard.cost
            total.add(counters)
        }
        return total
    }

    /// The bytes held, as the cache counts them (see ``itemOverhead``).
    public var totalCost: Int {
        var total = 0
        forEachShard { total += $0.cost }
        return total
    }

    /// The entries held.
    public var count: Int {
        var total = 0
        forEachShard { total += $0.count }
        return total
    }
}
