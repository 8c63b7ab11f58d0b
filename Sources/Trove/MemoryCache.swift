public import Foundation
public import TroveCore
public import TroveStore

/// The memory tier: encoded bytes (originals and variants) with their entry info, in front of
/// a ``Store``, keyed by ``CacheKey``.
///
/// Bounded by a byte cost and a count; evicts by S3-FIFO, so a one-time pass over many cold
/// keys does not flush the keys that are hit again and again. Entries whose
/// ``EntryInfo/expiresAt`` has passed are misses. Attached to a store's configuration
/// (``attach(to:)``), it drops every key the store stores anew or removes, by any path.
///
/// ```swift
/// let memory = MemoryCache()
/// var configuration = Store.Configuration()
/// memory.attach(to: &configuration)
/// let store = try Store(directory: path, configuration: configuration)
///
/// if let entry = memory.entry(for: key) { return entry }         // a hit: no I/O
/// let token = memory.insertionToken(for: key)                     // before the store read
/// if let entry = try store.entry(for: key) {
///     memory.insert(entry, for: key, ifUnchangedSince: token)     // refused if a put or a
///     return entry                                                 // removal came between
/// }
/// ```
///
/// ## Threads
/// `Sendable`: use one instance from any number of threads and tasks. Keys are spread over
/// shards by the hash of their URL, each shard with its own lock and its own share of the
/// limits, so hits on different cores rarely wait for each other. A hit hashes the key once,
/// takes one lock, probes one table and raises a frequency counter; it allocates nothing.
///
/// ## Cost
/// An entry costs `entry.data.count + ` ``itemOverhead`` bytes. Each shard holds at most its
/// share of ``Configuration/costLimit`` and ``Configuration/countLimit`` (the limits divided
/// by the shard count, the remainder spread over the first shards), so the totals never pass
/// the limits, and an entry costing more than a shard's share is not kept.
///
/// Docs/MemoryTier.md describes the design.
public final class MemoryCache: Sendable {
    /// The settings of a memory cache. Every property has a default.
    public struct Configuration: Sendable {
        /// The most bytes the cache holds, counted as ``MemoryCache/itemOverhead`` plus the
        /// data's length per entry. Default: 64 MiB.
        public var costLimit: Int = 64 << 20
        /// The most entries the cache holds. Default: 10 000.
        public var countLimit: Int = 10_000
        /// How many independently locked shards the keys are spread over: rounded up to a power
        /// of two, and lowered so that each shard may hold at least one entry. Default: 16.
        /// Fewer shards make eviction closer to one S3-FIFO over the whole cache and let one
        /// entry cost more (a shard's share of ``costLimit``); more shards let more cores hit
        /// at once.
        public var shardCount: Int = 16
        /// The time against which expiry is checked. Default: the system clock. Called only on
        /// a hit or an insert of an entry that has an expiry.
        public var clock: @Sendable () -> Date = { Date() }

        /// The default configuration.
        public init() {}

        /// A configuration with these limits and defaults otherwise.
        public init(costLimit: Int, countLimit: Int = 10_000) {
            self.costLimit = costLimit
            self.countLimit = countLimit
        }
    }

    /// What an entry costs besides its bytes: an estimate, in bytes, of the memory the cache
    /// spends on it — its slot in the shard's table (node and links, about 250 bytes, at 3/8 to
    /// 3/4 occupancy), its share of the ghost FIFO and URL index, and the heap text of a typical
    /// key and validators (Docs/MemoryTier.md § What it holds). 512.
    public static let itemOverhead = 512

    /// The configuration the cache was made with.
    public let configuration: Configuration

    /// The shards; a key's shard is picked by the hash of its URL, so all variants of a URL
    /// share one (``removeAll(url:)`` locks one shard).
    private let shards: [Locked<MemoryShard>]
    private let shardMask: Int
    private let clock: @Sendable () -> Date

    /// Makes an empty cache.
    public init(configuration: Configuration = Configuration()) {
        precondition(configuration.costLimit >= 0 && configuration.countLimit >= 0, "limits must not be negative")
        self.configuration = configuration
        clock = configuration.clock
        var count = 1
        while count < configuration.shardCount { count <<= 1 }
        while count > 1 && count > configuration.countLimit { count >>= 1 }
        shardMask = count - 1
        shards = (0..<count).map { i in
            func share(_ limit: Int) -> Int { limit / count + (i < limit % count ? 1 : 0) }
            return Locked(MemoryShard(costLimit: share(configuration.costLimit), countLimit: share(configuration.countLimit)))
        }
    }

    /// Makes an empty cache with these limits and defaults otherwise.
    public convenience init(costLimit: Int, countLimit: Int = 10_000) {
        self.init(configuration: Configuration(costLimit: costLimit, countLimit: countLimit))
    }

    /// How many shards the keys are spread over.
    public var shardCount: Int { shards.count }

    // MARK: Reading

    /// The entry stored for `key`, or nil: a miss, or an entry whose expiry has passed (it is
    /// dropped).
    ///
    /// Complexity: O(1) — one hash of the key, one lock, one table probe.
    public func entry(for key: CacheKey) -> Entry? {
        let hashes = Self.hashes(of: key)
        return shards[shardIndex(hashes.urlHash)].withLock { shard in
            shard.entry(for: key, hashes) { clock().timeIntervalSinceReferenceDate }
        }
    }

    /// The bytes stored for `key`, or nil (see ``entry(for:)``).
    public func data(for key: CacheKey) -> Data? {
        entry(for: key)?.data
    }

    // MARK: Inserting

    /// Stores `entry` under `key`, replacing what the key had, and evicts by S3-FIFO until the
    /// limits hold.
    ///
    /// Use it for bytes nobody else can be writing, else the guarded forms:
    /// ``insert(_:for:ifUnchangedSince:)`` after a store read, ``insert(_:for:afterWriteSince:)``
    /// after a put.
    ///
    /// - Returns: false when the entry is not kept: it costs more than a shard's share of the
    ///   cost limit, or its expiry has passed. (What `key` had is dropped then too.)
    @discardableResult
    public func insert(_ entry: Entry, for key: CacheKey) -> Bool {
        let hashes = Self.hashes(of: key)
        let (expiresAt, isExpired) = expiry(of: entry)
        let cost = entry.data.count + Self.itemOverhead
        return shards[shardIndex(hashes.urlHash)].withLock { shard in
            shard.insert(entry, for: key, hashes, cost: cost, expiresAt: expiresAt, refuse: isExpired)
        }
    }

    /// Stores `entry` under `key` only if `key` was not invalidated since `token` was taken:
    /// no store change reported for it (a put, an ``Store/updateMetadata(_:for:)``, a removal,
    /// expiry or eviction by the compactor, a repair) and no ``remove(_:)``, ``removeAll(url:)``
    /// or ``removeAll()``.
    ///
    /// This closes the race of a fill: a caller reads bytes from the store, a put replaces them
    /// meanwhile (its change drops the key from memory), then the caller inserts the bytes it
    /// read — which are no longer the store's. Take the token *before* the store read:
    ///
    /// ```swift
    /// let token = memory.insertionToken(for: key)
    /// if let entry = try store.entry(for: key) {
    ///     memory.insert(entry, for: key, ifUnchangedSince: token)
    /// }
    /// ```
    ///
    /// It errs on the side of refusing: each shard remembers its last 64 invalidations, and a
    /// token older than those is refused even if its key was not among them.
    ///
    /// - Returns: whether the entry was stored.
    @discardableResult
    public func insert(_ entry: Entry, for key: CacheKey, ifUnchangedSince token: InsertionToken) -> Bool {
        insert(entry, for: key, token: token, allowing: 0)
    }

    /// Stores `entry`, which this caller has just written to the store under `key`, only if
    /// that write is the one change of `key` since `token` was taken (before the write).
    ///
    /// A plain insert after a put is not safe when two callers put the same key: A puts, B
    /// puts, B inserts, A inserts — memory serves A's bytes, the store B's. With a token taken
    /// before the put, an insert is accepted only when at most one invalidation of the key
    /// happened since — its own put's — so any other put or removal in between refuses it:
    ///
    /// ```swift
    /// let token = memory.insertionToken(for: key)
    /// try store.put(data, for: key, metadata: metadata)
    /// if let entry = try store.entry(for: key) {   // or an Entry made from what was put
    ///     memory.insert(entry, for: key, afterWriteSince: token)
    /// }
    /// ```
    ///
    /// Take the token before the write *and* before getting the bytes you insert: after a
    /// revalidation, whose `Store.updateMetadata` keeps the bytes read earlier, take it before
    /// that read — a put between the read and a later token would otherwise go unseen, and the
    /// old bytes would be accepted with the new metadata.
    ///
    /// Use it only after a write that reports a change (a put, or an `updateMetadata` that
    /// returned true); after a mere read, use ``insert(_:for:ifUnchangedSince:)``.
    ///
    /// - Returns: whether the entry was stored.
    @discardableResult
    public func insert(_ entry: Entry, for key: CacheKey, afterWriteSince token: InsertionToken) -> Bool {
        insert(entry, for: key, token: token, allowing: 1)
    }

    /// A token for a later guarded insert of `key`: take it before reading from (or writing to)
    /// the store, then pass it to ``insert(_:for:ifUnchangedSince:)`` or
    /// ``insert(_:for:afterWriteSince:)``. Valid for this key only.
    ///
    /// Complexity: O(1) — one hash of the key, one lock.
    public func insertionToken(for key: CacheKey) -> InsertionToken {
        let hashes = Self.hashes(of: key)
        let shard = shardIndex(hashes.urlHash)
        let epoch = shards[shard].withLock { $0.log.epoch }
        return InsertionToken(shard: shard, epoch: epoch, keyHash: hashes.hash)
    }

    /// The moment of a guarded insert: whether the key changed since a store read began.
    ///
    /// Opaque; get one from ``MemoryCache/insertionToken(for:)``.
    public struct InsertionToken: Hashable, Sendable {
        let shard: Int
        let epoch: UInt64
        let keyHash: Int
    }

    private func insert(_ entry: Entry, for key: CacheKey, token: InsertionToken, allowing allowed: Int) -> Bool {
        let hashes = Self.hashes(of: key)
        let (expiresAt, isExpired) = expiry(of: entry)
        let cost = entry.data.count + Self.itemOverhead
        let index = shardIndex(hashes.urlHash)
        return shards[index].withLock { shard in
            guard token.shard == index, shard.admits(hashes, token: token, allowing: allowed) else {
                shard.refused()
                return false
            }
            return shard.insert(entry, for: key, hashes, cost: cost, expiresAt: expiresAt, refuse: isExpired)
        }
    }

    /// The expiry of `entry` in seconds since the reference date (infinity for none), and
    /// whether it has passed. The clock is read only for an entry with an expiry, outside any lock.
    private func expiry(of entry: Entry) -> (expiresAt: Double, isExpired: Bool) {
        guard let date = entry.info.metadata.expiresAt else { return (.infinity, false) }
        let expiresAt = date.timeIntervalSinceReferenceDate
        return (expiresAt, expiresAt <= clock().timeIntervalSinceReferenceDate)
    }

    // MARK: Removing

    /// Drops `key`'s entry. A guarded insert of `key` with a token taken before is refused.
    ///
    /// - Returns: whether there was one.
    @discardableResult
    public func remove(_ key: CacheKey) -> Bool {
        let hashes = Self.hashes(of: key)
        return shards[shardIndex(hashes.urlHash)].withLock { $0.invalidate(key, hashes) }
    }

    /// Drops every entry of `url`: the original and all its variants. Guarded inserts of those
    /// keys with tokens taken before are refused.
    ///
    /// Complexity: O(entries of `url`) — all variants of a URL are in one shard, chained.
    ///
    /// - Returns: how many entries were dropped.
    @discardableResult
    public func removeAll(url: String) -> Int {
        let urlHash = url.hashValue
        return shards[shardIndex(urlHash)].withLock { $0.invalidateAll(url: url, urlHash: urlHash) }
    }

    /// Drops every entry; guarded inserts with tokens taken before are refused. Counted as
    /// invalidations.
    public func removeAll() {
        for shard in shards { shard.withLock { $0.invalidateAll() } }
    }

    /// Evicts entries, in the order S3-FIFO would, until the cache costs at most `cost` bytes:
    /// each shard down to its share of `cost`. Counted as evictions. For memory pressure.
    public func trim(toCost cost: Int) {
        let n = shards.count
        for (i, shard) in shards.enumerated() {
            let share = max(0, cost) / n + (i < max(0, cost) % n ? 1 : 0)
            shard.withLock { $0.trim(toCost: share) }
        }
    }

    // MARK: Hashing

    /// `key`'s hashes: the URL's (which picks the shard), and the key's — the URL's itself for
    /// an original, so an original's hit hashes its text once.
    static func hashes(of key: CacheKey) -> KeyHashes {
        let urlHash = key.url.hashValue
        guard !key.variant.isEmpty else { return KeyHashes(hash: urlHash, urlHash: urlHash) }
        var hasher = Hasher()
        hasher.combine(urlHash)
        hasher.combine(key.variant)
        return KeyHashes(hash: hasher.finalize(), urlHash: urlHash)
    }

    /// The shard of a URL with hash `urlHash`: from bits 40 and up, because a shard's table
    /// places keys by the low bits of the same hash (an original's key hash is its URL's), and
    /// keys sharing their low bits would crowd a fraction of the table.
    @inline(__always)
    private func shardIndex(_ urlHash: Int) -> Int {
        (urlHash >> 40) & shardMask
    }

    /// Runs `body` on every shard in turn, under its lock (tests and statistics).
    func forEachShard(_ body: (inout MemoryShard) -> Void) {
        for shard in shards { shard.withLock { body(&$0) } }
    }
}
