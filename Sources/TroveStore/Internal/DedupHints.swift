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
/// absent (loaded lazily): each costs at most a missed dedup — a second copy of the bytes —
/// never a wrong link.
///
/// Loaded from the index on first use (one pass over the blobs table) and emptied — to load
/// again — when the index changed under it in bulk (a compaction pass reclaimed blobs, a
/// repair or rebuild), which bounds what stale hints can hold. Memory: about 40 bytes per
/// blob (Docs/Architecture.md, "Memory").
///
/// Lives in `Store.dedupHints` (a `Locked`), which no other store lock is ever held around:
/// a put adds the blob it appended after it released the appender, so a load (which reads the
/// index under this lock) never stalls writers.
struct DedupHints {
    private var ids: [UInt64: Int64] = [:]
    private(set) var isLoaded = false

    /// How many hints are held (tests check it stays bounded by the blobs).
    var count: Int { ids.count }

    /// The blob id hinted for `hash`, if any.
    func candidate(for hash: ContentHash) -> Int64? { ids[hash.high] }

    /// A put appended blob `id` with `hash`.
    mutating func add(_ hash: ContentHash, id: Int64) { ids[hash.high] = id }

    /// Loads every blob of `index`, keeping hints added meanwhile (they are newer).
    mutating func load(from index: IndexDatabase) throws(IndexError) {
        var loaded: [UInt64: Int64] = [:]
        // Newest blob wins a shared 64-bit prefix: ids only grow.
        try index.forEachBlobHash { id, hash in
            if let other = loaded[hash.high], other > id { return }
            loaded[hash.high] = id
        }
        ids.merge(loaded) { added, _ in added }
        isLoaded = true
    }

    /// Forgets everything; the next lookup loads again.
    mutating func reset() {
        ids = [:]
        isLoaded = false
    }
}
