public import TroveCore

/// Entry row ids by key digest, in memory (schema 7): how a lookup by key finds its row without
/// a digest index in SQLite, whose random-key B-tree cost every put about one written page
/// (Docs/Architecture.md, "Entry digest table"). With each id, where the row's records are
/// (``EntryPlace``), when the writer knows it: how a cold get reads an entry without SQLite.
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
/// **Places are never older than the committed row.** A place names the row's sequence and
/// the records of that write; a reader checks the records it names (the link's identity is the
/// key digest and that sequence) and serves them without asking SQLite. So a place must never
/// outlive a change of its row: the writer's connection reports every change of an entry row
/// (SQLite's update hook, whatever statement made it), and the places of the rows a transaction
/// changed go right before it commits (SQLite's commit hook), before any other connection can
/// see the change; a write that knows its new place sets it only when its transaction has
/// committed. Between the two the row has no place and readers ask SQLite. Places of rows whose blob and
/// link are not neighbours (deduplicated bytes, metadata updates) or that the compactor moved
/// are not kept: those rows are read through SQLite, as before. A place the compactor made
/// stale when it moved a blob still names intact records of that write (or a segment that is
/// gone, and the read falls back).
///
/// The key is both digest words mixed with a seed chosen per table — the seed into the first
/// word before the second joins — so digests that share a word, or any relation between their
/// words that an attacker could aim for (XXH3 is not a cryptographic hash), do not share a probe
/// sequence in every table.
///
/// Memory: 16 bytes a slot, at most three quarters of the slots used: 21–43 bytes an entry
/// (~3 MB for 100 000 entries, ~32 MB for a million), in 64 tables that each double as they grow
/// (``DigestShards``); and a place (40 bytes) in pages of 64 row ids (``PlaceTable``): ~41 bytes
/// an entry that has a place where ids are dense, as a burst of puts leaves them (~42 MB for a
/// million), up to ~140 where removals thinned a page out. ``byteCount`` counts both.
/// Neither grows all at once: growing one table of all the slots, or one dictionary of all the
/// places, under the lock stalled every lookup for up to a second at 1.5 million entries.
public final class EntryDigestTable: Sendable {
    private struct State {
        var slots: DigestShards
        var places = PlaceTable()
        /// While places load (``beginPlaceLoad()``): the rows whose place the writer changed
        /// since, which the load, reading an older snapshot, must leave alone.
        var loading = false
        var changedWhileLoading: Set<Int64> = []
        /// Read times committed while loading, by row: raised into the places the load sets
        /// (a read time changes nothing else of a row).
        var readWhileLoading: [Int64: Int64] = [:]

        mutating func changed(_ id: Int64) {
            if loading { changedWhileLoading.insert(id) }
        }
    }

    private let state: Locked<State>
    private let seed: UInt64

    /// An empty table.
    public init() {
        state = Locked(State(slots: DigestShards()))
        seed = UInt64.random(in: 1...UInt64.max)
    }

    /// The row ids that may hold `digest` (most often one; none for a digest no row has).
    public func candidates(_ digest: ContentHash) -> [Int64] {
        let key = key(of: digest)
        return state.withLock { $0.slots.ids(for: key) }
    }

    /// The candidates for `digest` that have a place (each still to be checked against the
    /// records it names).
    public func placedCandidates(_ digest: ContentHash) -> [(id: Int64, place: EntryPlace)] {
        let key = key(of: digest)
        // One pass over the run and one array (a get's first read takes this path).
        return state.withLock { state in
            var found: [(id: Int64, place: EntryPlace)] = []
            state.slots.forEachID(for: key) { id in
                if let place = state.places[id], !found.contains(where: { $0.id == id }) { found.append((id, place)) }
            }
            return found
        }
    }

    /// Whether any row may hold `digest` (false: none does, for certain).
    public func mayContain(_ digest: ContentHash) -> Bool {
        let key = key(of: digest)
        return state.withLock { $0.slots.contains(key) }
    }

    /// The number of ids held (committed rows, plus candidates not yet confirmed or removed).
    public var count: Int { state.withLock { $0.slots.count } }

    /// The number of rows with a place.
    public var placeCount: Int { state.withLock { $0.places.count } }

    /// Bytes of the slot arrays and of the places dictionary's buckets (for the memory budget).
    public var byteCount: Int {
        state.withLock { state in
            state.slots.capacity * 16 + state.places.byteCount
        }
    }

    /// Whether no row may hold any of `digests` (``mayContain(_:)`` of each, one hold of the lock).
    public func containsNone(of digests: [ContentHash]) -> Bool {
        let keys = digests.map(key(of:))
        return state.withLock { state in !keys.contains { state.slots.contains($0) } }
    }

    func insert(_ rows: [(digest: ContentHash, id: Int64)]) {
        guard !rows.isEmpty else { return }
        let keys = rows.map { (key(of: $0.digest), $0.id) }
        state.withLock { state in
            for (key, id) in keys { state.slots.insert(key, id: id) }
        }
    }

    func insert(_ digest: ContentHash, id: Int64) {
        let key = key(of: digest)
        state.withLock { $0.slots.insert(key, id: id) }
    }

    func remove(_ pairs: [(digest: ContentHash, id: Int64)]) {
        guard !pairs.isEmpty else { return }
        let keys = pairs.map { (key(of: $0.digest), $0.id) }
        state.withLock { state in
            for (key, id) in keys { state.slots.remove(key, id: id) }
        }
    }

    /// Rows `ids` changed (or went): their places, if any, no longer hold. A few hundred a hold
    /// of the lock, so that a put's lookup never waits for a whole commit's rows.
    func forgetPlaces(_ ids: [Int64]) {
        var start = ids.startIndex
        while start < ids.endIndex {
            let end = min(start + 256, ids.endIndex)
            state.withLock { state in
                for id in ids[start..<end] {
                    state.places.remove(id)
                    state.changed(id)
                }
            }
            start = end
        }
    }

    /// Committed writes' places, by row id.
    func setPlaces(_ places: [Int64: EntryPlace]) {
        guard !places.isEmpty else { return }
        state.withLock { state in
            for (id, place) in places {
                state.places.set(place, for: id)
                state.changed(id)
            }
        }
    }

    /// Committed read times: each row's place, if it has one, is read at `time` or later.
    func noteReads(_ times: [Int64: Int64]) {
        guard !times.isEmpty else { return }
        state.withLock { state in
            for (id, time) in times {
                state.places.raiseReadTime(of: id, to: time)
                if state.loading { state.readWhileLoading[id] = max(time, state.readWhileLoading[id] ?? time) }
            }
        }
    }

    // MARK: Loading places

    /// Starts a load of places from snapshots of the index that begin after this call
    /// (``IndexDatabase/places(after:limit:)``). Call it where no write transaction is
    /// open (the store: under its committer lock), so that every change the snapshot does not
    /// show is one the table hears of after this call — and the load skips those rows.
    public func beginPlaceLoad() {
        state.withLock { state in
            state.loading = true
            state.changedWhileLoading.removeAll()
            state.readWhileLoading.removeAll()
        }
    }

    /// Places read by the load: each is set unless its row changed since ``beginPlaceLoad()``
    /// (the snapshot may predate the change) or already has one (set by a newer write); a read
    /// time committed since is raised into it.
    public func fillLoadedPlaces(_ batch: [(id: Int64, place: EntryPlace)]) {
        state.withLock { state in
            for (id, place) in batch where !state.changedWhileLoading.contains(id) && !state.places.contains(id) {
                var place = place
                if let read = state.readWhileLoading[id] { place.accessedAt.raise(to: read) }
                state.places.set(place, for: id)
            }
        }
    }

    /// The load ended (done or stopped).
    public func endPlaceLoad() {
        state.withLock { state in
            state.loading = false
            state.changedWhileLoading = []
            state.readWhileLoading = [:]
        }
    }

    /// Replaces the ids with `pairs` (a load), sized for them; places are loaded apart.
    func replace(with pairs: [(key: UInt64, id: Int64)]) {
        let fresh = DigestShards(loading: pairs)
        state.withLock { $0 = State(slots: fresh) }
    }

    func key(of digest: ContentHash) -> UInt64 {
        // The high word is mixed with the seed before the low word joins, then both again: which
        // digests share a key depends on the seed. (Until 2026-12-02 the words were combined
        // first, `high ^ low × constant`, and the seed XORed in after, so digests that agreed in
        // that combination shared a key in every table, whatever its seed: an outside review
        // found a set of them piling into one probe run, each lookup walking all of them.)
        let x = Self.mix(Self.mix(digest.high ^ seed) ^ digest.low)
        // 0 marks an empty slot.
        return x == 0 ? 1 : x
    }

    /// MurmurHash3's 64-bit finalizer: a bijection whose every output bit depends on every input bit.
    private static func mix(_ value: UInt64) -> UInt64 {
        var x = value
        x ^= x >> 33
        x &*= 0xFF51_AFD7_ED55_8CCD
        x ^= x >> 33
        x &*= 0xC4CE_B9FE_1A85_EC53
        x ^= x >> 33
        return x
    }
}

/// Where a committed entry row's records are, for a get that reads them without SQLite: the
/// blob record and, right after it, the link record of the write with ``sequence`` — one
/// `pread` of ``span`` bytes at ``blobOffset`` of ``segment``. The link states the rest (key,
/// blob id, hash and length, metadata); the reader checks both records before serving, and
/// checks that the link says what the row says (``fingerprint``), as a read through SQLite
/// compares the row with its link: a row damaged to name an older link of its key is refused
/// either way, unless the damage made it say everything that link says (its creation time,
/// metadata, blob and length too) — then neither path can tell it from the newest write, and
/// `trove fsck`, which folds the packs by sequence, reports it.
public struct EntryPlace: Hashable, Sendable {
    /// The sequence of the write (the link record's).
    public var sequence: UInt64
    /// Where the blob record starts.
    public var blobOffset: UInt64
    /// The row's read time (milliseconds), as last committed.
    public var accessedAt: Int64
    /// ``fingerprint(url:variant:etag:lastModified:cachePolicy:blobID:linkLength:createdAt:expiresAt:)``
    /// of the row.
    public var fingerprint: UInt64
    /// The segment holding both records.
    public var segment: UInt32
    /// Bytes from the blob record's start to the link record's end.
    public var span: UInt32

    /// Makes a place.
    public init(
        sequence: UInt64, blobOffset: UInt64, accessedAt: Int64, fingerprint: UInt64, segment: UInt32, span: UInt32
    ) {
        self.sequence = sequence
        self.blobOffset = blobOffset
        self.accessedAt = accessedAt
        self.fingerprint = fingerprint
        self.segment = segment
        self.span = span
    }

    /// The place of `row`, whose blob (`blob`: its hash and payload length, the record's place
    /// and length) has its record right before the link record; nil when it is not.
    init?(_ row: EntryRow, blob: BlobPlace) {
        guard row.linkSegment == blob.segment, blob.recordBytes <= UInt64(UInt32.max),
            row.linkOffset == blob.offset &+ blob.recordBytes, row.linkLength <= UInt64(UInt32.max),
            let span = UInt32(exactly: blob.recordBytes + row.linkLength)
        else { return nil }
        let fingerprint = Self.fingerprint(
            url: row.url, variant: row.variant, etag: row.etag, lastModified: row.lastModified,
            cachePolicy: row.cachePolicy, blobID: row.blobID, blobHash: blob.hash, blobLength: blob.length,
            linkLength: row.linkLength, createdAt: row.createdAt, expiresAt: row.expiresAt)
        self.init(
            sequence: row.sequence, blobOffset: blob.offset, accessedAt: row.accessedAt, fingerprint: fingerprint,
            segment: blob.segment, span: span)
    }

    /// A 64-bit hash of what a row and its blob row say of the write besides the sequence and
    /// places: the key, the blob's id, content hash and length, the link record's length and the
    /// metadata. A reader computes it from the link record it read; equal values mean the rows
    /// describe that link (what a read through SQLite compares, field by field).
    public static func fingerprint(
        url: String, variant: String, etag: String?, lastModified: String?, cachePolicy: String?, blobID: Int64,
        blobHash: ContentHash, blobLength: UInt64, linkLength: UInt64, createdAt: Int64, expiresAt: Int64?
    ) -> UInt64 {
        let texts = [url, variant, etag, lastModified, cachePolicy].reduce(0) { $0 + ($1?.utf8.count ?? 0) }
        return FingerprintBuilder.hash(textBytes: texts) { builder in
            // Field by field: a commit computes this for every put.
            builder.text(url)
            builder.text(variant)
            builder.text(etag)
            builder.text(lastModified)
            builder.text(cachePolicy)
            builder.finish(
                blobID: blobID, blobHash: blobHash, blobLength: Int64(bitPattern: blobLength),
                linkLength: Int64(bitPattern: linkLength), createdAt: createdAt, expiresAt: expiresAt)
        }
    }
}

/// What the writer knows of a blob when it writes a row linking to it: enough for the row's
/// ``EntryPlace``.
struct BlobPlace {
    var hash: ContentHash
    var length: UInt64
    var segment: UInt32
    var offset: UInt64
    var recordBytes: UInt64
}

/// The bytes ``EntryPlace/fingerprint(url:variant:etag:lastModified:cachePolicy:blobID:linkLength:createdAt:expiresAt:)``
/// hashes, in its order: five texts (URL, variant, ETag, Last-Modified, policy), each absent or
/// length-prefixed, then the integers (the blob's hash as two). The index's load feeds it column
/// bytes directly. The bytes go to a temporary buffer (on the stack for the usual short texts),
/// not an array: a commit computes a fingerprint for every put. The hash is not stored
/// anywhere: only these computations compare it.
struct FingerprintBuilder {
    private let buffer: UnsafeMutableRawBufferPointer
    private var count = 0

    private init(_ buffer: UnsafeMutableRawBufferPointer) { self.buffer = buffer }

    /// The XXH3-64 of what `body` adds, given the texts' total length in bytes.
    static func hash(textBytes: Int, _ body: (inout FingerprintBuilder) -> Void) -> UInt64 {
        // Five texts' marks and 8-byte lengths; six integers, then the expiry's mark and value
        // (seven integers) — eight counted, a spare.
        let capacity = textBytes + 5 * 9 + 8 * 8 + 1
        return withUnsafeTemporaryAllocation(byteCount: capacity, alignment: 8) { raw in
            var builder = FingerprintBuilder(raw)
            body(&builder)
            return XXH3.hash64(UnsafeRawBufferPointer(rebasing: raw[..<builder.count]))
        }
    }

    mutating func absent() { byte(0) }

    mutating func text(_ raw: UnsafeRawBufferPointer) {
        byte(1)
        integer(Int64(raw.count))
        precondition(count + raw.count <= buffer.count, "the texts fit the length given")
        UnsafeMutableRawBufferPointer(rebasing: buffer[count..<(count + raw.count)]).copyMemory(from: raw)
        count += raw.count
    }

    mutating func text(_ field: String?) {
        guard var field else { return absent() }
        field.withUTF8 { text(UnsafeRawBufferPointer($0)) }
    }

    private mutating func byte(_ value: UInt8) {
        precondition(count < buffer.count, "room for a byte")
        buffer[count] = value
        count += 1
    }

    private mutating func integer(_ value: Int64) {
        precondition(count + 8 <= buffer.count, "room for an integer")
        buffer.storeBytes(of: value.littleEndian, toByteOffset: count, as: Int64.self)
        count += 8
    }

    mutating func finish(
        blobID: Int64, blobHash: ContentHash, blobLength: Int64, linkLength: Int64, createdAt: Int64, expiresAt: Int64?
    ) {
        integer(blobID)
        integer(Int64(bitPattern: blobHash.high))
        integer(Int64(bitPattern: blobHash.low))
        integer(blobLength)
        integer(linkLength)
        integer(createdAt)
        if let expiresAt {
            byte(1)
            integer(expiresAt)
        } else {
            byte(0)
        }
    }
}

extension Int64 {
    fileprivate mutating func raise(to value: Int64) { if value > self { self = value } }
}

/// ``DigestSlots`` in 64 tables, chosen by a key's top six bits (a slot's home is its low bits).
/// A table grows by doubling and moving every key it holds, under the digest table's lock (as one
/// table, the growth at 1.57 million keys held a commit cycle for ~150 ms: Benchmarks.md,
/// "nothing grows all at once"). Split in 64, a growth moves a 64th of the keys, and the tables,
/// filling at about the same pace, grow one insert at a time rather than all at once.
struct DigestShards {
    static let shardCount = 64
    private var shards: [DigestSlots]

    /// Empty tables.
    init() {
        shards = Array(repeating: DigestSlots(capacity: 16), count: Self.shardCount)
    }

    /// Tables holding `pairs`, each sized for its share.
    init(loading pairs: [(key: UInt64, id: Int64)]) {
        var counts = [Int](repeating: 0, count: Self.shardCount)
        for pair in pairs { counts[Self.shard(pair.key)] += 1 }
        shards = counts.map { DigestSlots(capacity: DigestSlots.capacity(for: $0)) }
        for pair in pairs { shards[Self.shard(pair.key)].insert(pair.key, id: pair.id) }
    }

    private static func shard(_ key: UInt64) -> Int { Int(truncatingIfNeeded: key >> 58) }

    /// The number of pairs held.
    var count: Int { shards.reduce(0) { $0 + $1.count } }

    /// The slots of all the tables.
    var capacity: Int { shards.reduce(0) { $0 + $1.capacity } }

    func ids(for key: UInt64) -> [Int64] { shards[Self.shard(key)].ids(for: key) }

    func forEachID(for key: UInt64, _ body: (Int64) -> Void) { shards[Self.shard(key)].forEachID(for: key, body) }

    func contains(_ key: UInt64) -> Bool { shards[Self.shard(key)].contains(key) }

    mutating func insert(_ key: UInt64, id: Int64) { shards[Self.shard(key)].insert(key, id: id) }

    mutating func remove(_ key: UInt64, id: Int64) { shards[Self.shard(key)].remove(key, id: id) }
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
        // A pair held twice (a row deleted and its id given again in one transaction) is one
        // candidate.
        forEachID(for: key) { id in if !found.contains(id) { found.append(id) } }
        return found
    }

    /// Calls `body` with each id held under `key`, a pair held twice twice.
    func forEachID(for key: UInt64, _ body: (Int64) -> Void) {
        var i = home(key)
        while keys[i] != 0 {
            if keys[i] == key { body(ids[i]) }
            i = (i + 1) & mask
        }
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
