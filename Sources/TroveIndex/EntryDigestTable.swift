public import TroveCore

/// Entry row ids by key digest, in memory (schema 7): how a lookup by key finds its row without
/// a digest index in SQLite, whose random-key B-tree cost every put about one written page
/// (Docs/Architecture.md, "Entry digest table").
///
/// **Candidates, never answers.** The table maps a 64-bit key made from the digest to row ids,
/// and may hold more than the committed rows: ids of rows written by a transaction still open
/// (or rolled back a moment ago), of rows being removed, and of other digests that share the
/// key. Whoever reads a candidate checks it against the row itself (`id` and `key_hash` both
/// match, in the reader's own snapshot), so an extra candidate costs one row lookup and never a
/// wrong answer. What the table must never do is miss a committed row: its writer adds an id
/// before the row is written and removes one only after the row's removal has committed
/// (``IndexDatabase`` does both, and nothing else writes entry rows).
///
/// The key is both digest words mixed with a seed chosen per table, so keys that share a
/// digest word — which XXH3, not a cryptographic hash, lets an attacker make — do not share a
/// probe sequence.
///
/// Memory: 16 bytes a slot, at most three quarters of the slots used: 21–43 bytes an entry
/// (~3 MB for 100 000 entries, ~32 MB for a million), in one allocation that doubles as it grows.
public final class EntryDigestTable: Sendable {
    private let slots: Locked<DigestSlots>
    private let seed: UInt64

    /// An empty table.
    public init() {
        slots = Locked(DigestSlots(capacity: 16))
        seed = UInt64.random(in: 1...UInt64.max)
    }

    /// The row ids that may hold `digest` (most often one; none for a digest no row has).
    public func candidates(_ digest: ContentHash) -> [Int64] {
        let key = key(of: digest)
        return slots.withLock { $0.ids(for: key) }
    }

    /// Whether any row may hold `digest` (false: none does, for certain).
    public func mayContain(_ digest: ContentHash) -> Bool {
        let key = key(of: digest)
        return slots.withLock { $0.contains(key) }
    }

    /// The number of ids held (committed rows, plus candidates not yet confirmed or removed).
    public var count: Int { slots.withLock { $0.count } }

    /// Bytes of the slot arrays (for the memory budget).
    public var byteCount: Int { slots.withLock { $0.capacity * 16 } }

    func insert(_ digest: ContentHash, id: Int64) {
        let key = key(of: digest)
        slots.withLock { $0.insert(key, id: id) }
    }

    func remove(_ pairs: [(digest: ContentHash, id: Int64)]) {
        guard !pairs.isEmpty else { return }
        let keys = pairs.map { (key(of: $0.digest), $0.id) }
        slots.withLock { slots in
            for (key, id) in keys { slots.remove(key, id: id) }
        }
    }

    /// Replaces the contents with `pairs` (a load), sized for them.
    func replace(with pairs: [(key: UInt64, id: Int64)]) {
        var fresh = DigestSlots(capacity: DigestSlots.capacity(for: pairs.count))
        for pair in pairs { fresh.insert(pair.key, id: pair.id) }
        slots.withLock { $0 = fresh }
    }

    func key(of digest: ContentHash) -> UInt64 {
        // A 64-bit finalizer (MurmurHash3's) over both words and the seed.
        var x = digest.high ^ (digest.low &* 0x9E37_79B9_7F4A_7C15) ^ seed
        x ^= x >> 33
        x &*= 0xFF51_AFD7_ED55_8CCD
        x ^= x >> 33
        x &*= 0xC4CE_B9FE_1A85_EC53
        x ^= x >> 33
        // 0 marks an empty slot.
        return x == 0 ? 1 : x
    }
}

/// An open-addressing multimap from nonzero 64-bit keys to row ids: linear probing, deletion by
/// shifting the rest of the run back (no tombstones), a power-of-two capacity at most three
/// quarters full. A key may appear more than once, and so may a (key, id) pair: ``remove(_:id:)``
/// takes one copy away.
struct DigestSlots {
    private var keys: [UInt64]
    private var ids: [Int64]
    private var mask: Int
    private(set) var count = 0

    init(capacity: Int) {
        precondition(capacity > 0 && capacity & (capacity - 1) == 0, "a power of two")
        keys = [UInt64](repeating: 0, count: capacity)
        ids = [Int64](repeating: 0, count: capacity)
        mask = capacity - 1
    }

    var capacity: Int { keys.count }

    /// The smallest capacity that holds `count` keys at most three quarters full.
    static func capacity(for count: Int) -> Int {
        var capacity = 16
        while capacity / 4 * 3 < count + 1 { capacity <<= 1 }
        return capacity
    }

    private func home(_ key: UInt64) -> Int { Int(truncatingIfNeeded: key) & mask }

    func ids(for key: UInt64) -> [Int64] {
        var found: [Int64] = []
        var i = home(key)
        while keys[i] != 0 {
            // A pair held twice (a row deleted and its id given again in one transaction) is
            // one candidate.
            if keys[i] == key && !found.contains(ids[i]) { found.append(ids[i]) }
            i = (i + 1) & mask
        }
        return found
    }

    func contains(_ key: UInt64) -> Bool {
        var i = home(key)
        while keys[i] != 0 {
            if keys[i] == key { return true }
            i = (i + 1) & mask
        }
        return false
    }

    mutating func insert(_ key: UInt64, id: Int64) {
        precondition(key != 0, "0 marks an empty slot")
        if (count + 1) > keys.count / 4 * 3 { grow() }
        var i = home(key)
        while keys[i] != 0 { i = (i + 1) & mask }
        keys[i] = key
        ids[i] = id
        count += 1
    }

    mutating func remove(_ key: UInt64, id: Int64) {
        var i = home(key)
        while keys[i] != 0 {
            if keys[i] == key && ids[i] == id {
                closeGap(at: i)
                count -= 1
                return
            }
            i = (i + 1) & mask
        }
    }

    /// Empties slot `gap` and moves back every later key of its run that may sit there: one
    /// whose home is not cyclically within (gap, its slot].
    private mutating func closeGap(at gap: Int) {
        var gap = gap
        var j = (gap + 1) & mask
        while keys[j] != 0 {
            let home = home(keys[j])
            if (j - home) & mask >= (j - gap) & mask {
                keys[gap] = keys[j]
                ids[gap] = ids[j]
                gap = j
            }
            j = (j + 1) & mask
        }
        keys[gap] = 0
        ids[gap] = 0
    }

    private mutating func grow() {
        var bigger = DigestSlots(capacity: keys.count * 2)
        for i in keys.indices where keys[i] != 0 { bigger.insert(keys[i], id: ids[i]) }
        self = bigger
    }
}
