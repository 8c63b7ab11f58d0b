import TroveCore
import TroveIndex

/// Where a put looks for stored content it may share: blob ids by the first 64 bits of their
/// content hash, in memory, so that finding a dedup candidate costs a dictionary lookup — not
/// a 16-byte B-tree that every new blob would have to be inserted into (index schema 5 dropped
/// that index; Docs/Architecture.md, "Deduplication").
///
/// A hint, never an answer: the put reads the named blob's row by id and compares its full
/// hash, its length and then its bytes before linking to it. So a hint may be stale (the blob
/// was reclaimed), missing (two contents share 64 bits: the later one wins the slot), or
/// absent: each costs at most a missed dedup — a second copy of the bytes — never a wrong link.
///
/// Loaded from the index (one pass over the blobs table, in short batches by id) by the store's
/// loader thread right after opening, and again after a repair or rebuild emptied them; a put
/// that finds them not loaded yet loads them itself, or waits for the load running under this
/// lock, so that content the index holds is always found. A compaction pass forgets exactly the
/// blobs it deleted (``forget(_:)``), so a pass costs the next put nothing. Memory: about 40
/// bytes per blob (Docs/Architecture.md, "Memory").
///
/// Lives in `Store.dedupHints` (a `Locked`), never held around another store lock: a put adds
/// the blob it appended after it released the appender. A load reads the index under it (a put
/// asking meanwhile waits); a compaction pass and a repair take it under `committer` to forget
/// blobs, so they may wait for a load, which never waits for `committer`.
struct DedupHints {
    /// The newest blob id by the first 64 bits of its content hash: the candidate.
    private var ids = Slots()
    /// Older blobs whose hash shares a slot's 64 bits (equal bytes stored twice, when a put raced
    /// a rewrite of the first copy's segment, or contents that agree in 64 bits), oldest first:
    /// when a pass deletes the slot's blob, the newest of them takes the slot, so content the
    /// index still holds stays findable. Empty for almost every slot.
    private var older: [UInt64: [Int64]] = [:]
    private(set) var isLoaded = false {
        didSet { loaded.withLock { $0 = isLoaded } }
    }
    /// `isLoaded`, readable without this value's lock (a load holds that lock for its whole
    /// pass): what a put that must not wait asks first. A reference, shared with the store.
    let loaded = Locked(false)

    /// How many hints are held (tests check it stays bounded by the blobs).
    var count: Int { ids.count + older.values.reduce(0) { $0 + $1.count } }

    /// The blob ids hinted (tests check that they name blob rows).
    var hintedIDs: Set<Int64> { Set(ids.values).union(older.values.joined()) }

    /// The blob id hinted for `hash`, if any.
    func candidate(for hash: ContentHash) -> Int64? { ids[hash.high] }

    /// A put appended blob `id` with `hash`.
    mutating func add(_ hash: ContentHash, id: Int64) {
        let key = hash.high
        // One lookup (every put of new bytes adds): the slot's previous blob, if another, is older.
        if let previous = ids.updateValue(id, forKey: key), previous != id {
            older[key, default: []].append(previous)
        }
    }

    /// Blob rows a compaction pass deleted: their hints go; a slot whose blob went passes to the
    /// newest older blob sharing it, if any.
    mutating func forget(_ deleted: [(id: Int64, hash: ContentHash)]) {
        for (id, hash) in deleted {
            let key = hash.high
            var chain = older[key] ?? []
            if ids[key] == id {
                ids[key] = chain.popLast()
            } else if let at = chain.firstIndex(of: id) {
                chain.remove(at: at)
            }
            older[key] = chain.isEmpty ? nil : chain
        }
    }

    /// Loads every blob of `index`, keeping hints added meanwhile. Reads batches by id, each its
    /// own short snapshot (one snapshot held for a whole pass would keep a TRUNCATE checkpoint
    /// waiting), and gives up — leaving them unloaded — when `stopped` says so between batches.
    mutating func load(from index: IndexDatabase, stopped: () -> Bool = { false }) throws(IndexError) {
        var read = DedupHints()
        var after: Int64 = .min
        while true {
            if stopped() { return }
            let (batch, last) = try index.blobHashes(after: after, limit: 4_096)
            guard let last else { break }
            for (id, hash) in batch { read.add(hash, id: id) }
            after = last
        }
        if ids.isEmpty {
            ids = read.ids
            older = read.older
        } else {
            // Puts added hints while the load ran (or before it): every id either side knows of
            // stays, the newest in the slot.
            for (key, id) in read.ids {
                guard let mine = ids[key] else {
                    ids[key] = id
                    older[key] = read.older[key]
                    continue
                }
                let all = Set((read.older[key] ?? []) + [id] + (older[key] ?? []) + [mine])
                let sorted = all.sorted()
                ids[key] = sorted.last
                older[key] = sorted.count > 1 ? Array(sorted.dropLast()) : nil
            }
        }
        isLoaded = true
    }

    /// Forgets everything; the store loads them again.
    mutating func reset() {
        ids = Slots()
        older = [:]
        isLoaded = false
    }

    /// Blob ids by 64-bit hash prefix in 64 dictionaries, chosen by the prefix's top six bits. A
    /// dictionary grows by doubling and moving every key, under the hints' lock, which every put
    /// of new bytes takes: as one dictionary, the put that crossed 1.5 million blobs waited
    /// ~80 ms for it; split in 64, each growth moves a 64th, one put at a time.
    private struct Slots: Sequence {
        private var shards = [[UInt64: Int64]](repeating: [:], count: 64)

        private static func shard(_ key: UInt64) -> Int { Int(truncatingIfNeeded: key >> 58) }

        subscript(key: UInt64) -> Int64? {
            get { shards[Self.shard(key)][key] }
            set { shards[Self.shard(key)][key] = newValue }
        }

        /// Sets `id` for `key`; the id it replaced, if any.
        mutating func updateValue(_ id: Int64, forKey key: UInt64) -> Int64? {
            shards[Self.shard(key)].updateValue(id, forKey: key)
        }

        var count: Int { shards.reduce(0) { $0 + $1.count } }
        var isEmpty: Bool { shards.allSatisfy(\.isEmpty) }
        var values: [Int64] { shards.flatMap(\.values) }

        func makeIterator() -> FlattenSequence<[[UInt64: Int64]]>.Iterator { shards.joined().makeIterator() }
    }
}
