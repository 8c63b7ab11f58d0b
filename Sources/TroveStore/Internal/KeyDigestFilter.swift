import TroveCore
import TroveIndex

/// Which key digests the committed index may hold: a Bloom filter, so that a put of a new key —
/// what an image cache mostly writes — learns without an index lookup that no entry has its
/// digest (the put's collision check; Docs/Architecture.md, "Key filter"). The lookup it saves
/// costs ~12 µs on a reader connection while the committer writes: every commit resets the
/// reader's page cache, and pages still in the log are read with `pread`.
///
/// **No false negatives.** It is loaded by the committer, after a commit, from its own connection
/// while it holds the committer lock (so no transaction is in flight and none starts during the
/// scan), and from then on hears of every entry row that connection writes
/// (``IndexDatabase/entryLinked``, called by the one statement that inserts entry rows, before it
/// runs). Nothing else writes entry rows while the store is open: readers are read-only, a rebuild
/// opens the store anew. A digest that is not in the filter is therefore not in the committed
/// index — the answer the lookup would give. A removed entry or a rolled-back insert leaves its
/// digest behind, and about 1 % of absent digests test positive at capacity: each costs only the
/// lookup the filter would have saved. Until it is loaded it answers "maybe" to everything.
///
/// A put never waits for it: the first put asks for it (``mayContain(_:)``) and the next commit
/// cycle loads it, building the bits without this lock and swapping them in.
///
/// Memory: 10 bits per key of capacity, which is twice the entries at load (at least 65 536
/// keys): ~250 KB for a 100 000-entry store, ~2.5 MB for a million. Past capacity it is emptied
/// and the next cycle loads it again, larger (a scan of the entries' digests on the committer
/// thread: ~30 ms per 100 000 entries).
///
/// Lives in `Store.keyFilter` (a `Locked`, held for bit operations only). Lock order:
/// `committer`, then `keyFilter`.
struct KeyDigestFilter {
    private var words: [UInt64] = []
    private var mask = 0
    private var capacity = 0
    private var inserted = 0
    private(set) var isLoaded = false
    /// A put asked and got "maybe" because the filter was not loaded: the next cycle loads it.
    private(set) var isWanted = false

    static let bitsPerKey = 10
    static let probes = 7
    static let minimumCapacity = 1 << 16

    /// Whether `digest` may be in the committed index (always true before the filter is loaded,
    /// which asks for it to be loaded).
    mutating func mayContain(_ digest: ContentHash) -> Bool {
        guard isLoaded else {
            isWanted = true
            return true
        }
        return holds(digest)
    }

    /// ``mayContain(_:)`` without asking for a load.
    func holds(_ digest: ContentHash) -> Bool {
        guard isLoaded else { return true }
        return bits(of: digest).allSatisfy { words[$0 >> 6] & (1 << UInt64($0 & 63)) != 0 }
    }

    /// The bits `digest` sets: ``probes`` positions stepping through the array by its high word
    /// (odd, so every step size is coprime with the power-of-two length) from its low word. The
    /// digest is already a uniform hash: no further hashing.
    private func bits(of digest: ContentHash) -> some Sequence<Int> {
        let (start, step, mask) = (digest.low, digest.high | 1, mask)
        return (0..<UInt64(Self.probes)).lazy.map { Int(truncatingIfNeeded: start &+ $0 &* step) & mask }
    }

    /// The committer's connection is about to write an entry row with `digest`. Before the filter
    /// is loaded nothing needs doing: the load reads the committed index, after this transaction.
    mutating func insert(_ digest: ContentHash) {
        guard isLoaded else { return }
        inserted += 1
        guard inserted <= capacity else {
            // Past capacity false positives climb: the next cycle loads it again, larger.
            reset()
            isWanted = true
            return
        }
        for bit in bits(of: digest) { words[bit >> 6] |= 1 << UInt64(bit & 63) }
    }

    /// A filter of every entry digest of `index` (held: the committer lock, `index` its
    /// connection, no transaction open).
    static func loaded(from index: IndexDatabase) throws(IndexError) -> KeyDigestFilter {
        var filter = KeyDigestFilter()
        try filter.load(from: index)
        return filter
    }

    private mutating func load(from index: IndexDatabase) throws(IndexError) {
        let entries = try index.entryCount()
        capacity = max(2 * entries, Self.minimumCapacity)
        // A power of two of bits, so that a probe is a mask.
        var bits = 64
        while bits < capacity * Self.bitsPerKey { bits <<= 1 }
        words = [UInt64](repeating: 0, count: bits / 64)
        mask = bits - 1
        inserted = 0
        isLoaded = true
        do {
            try index.forEachEntryDigest { insert($0) }
        } catch {
            reset()
            throw error
        }
    }

    /// Forgets everything; until the next load every digest may be present.
    mutating func reset() {
        words = []
        mask = 0
        capacity = 0
        inserted = 0
        isLoaded = false
        isWanted = false
    }

    /// Bytes of the bit array (for the memory budget).
    var byteCount: Int { words.count * 8 }
}
