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
    private var ids: [UInt64: Int64] = [:]
    private(set) var isLoaded = false

    /// How many hints are held (tests check it stays bounded by the blobs).
    var count: Int { ids.count }

    /// The blob ids hinted (tests check that they name blob rows).
    var hintedIDs: Set<Int64> { Set(ids.values) }

    /// The blob id hinted for `hash`, if any.
    func candidate(for hash: ContentHash) -> Int64? { ids[hash.high] }

    /// A put appended blob `id` with `hash`.
    mutating func add(_ hash: ContentHash, id: Int64) { ids[hash.high] = id }

    /// Blob rows a compaction pass deleted: their hints go (a newer blob's, which took the slot
    /// since, stays).
    mutating func forget(_ deleted: [(id: Int64, hash: ContentHash)]) {
        for (id, hash) in deleted where ids[hash.high] == id { ids[hash.high] = nil }
    }

    /// Loads every blob of `index`, keeping hints added meanwhile (they are newer). Reads
    /// batches by id, each its own short snapshot: one snapshot held for a whole pass would
    /// keep a TRUNCATE checkpoint waiting.
    mutating func load(from index: IndexDatabase) throws(IndexError) {
        var loaded: [UInt64: Int64] = [:]
        var after: Int64 = .min
        while true {
            let (batch, last) = try index.blobHashes(after: after, limit: 4_096)
            guard let last else { break }
            // Ids only grow: the newest blob wins a shared 64-bit prefix.
            for (id, hash) in batch { loaded[hash.high] = id }
            after = last
        }
        ids.merge(loaded) { added, _ in added }
        isLoaded = true
    }

    /// Forgets everything; the store loads them again.
    mutating func reset() {
        ids = [:]
        isLoaded = false
    }
}
