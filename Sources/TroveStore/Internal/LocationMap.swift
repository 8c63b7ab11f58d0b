import TroveCore
import TroveIndex

/// The key → location map: what this process last wrote, read or found for each key, in front
/// of the index. It owns the rule that keeps it right, and it reports every change of a key's
/// value or place to the store's one observer (``Store/Configuration/keyChanges``).
///
/// The rule: a `.present` slot is never older than the index.
/// - A write (put or removal) sets its key's slot as soon as its records are appended, before
///   its index row is committed: a get that finds a slot gets this process's latest write
///   (read-your-writes) without waiting for a commit.
/// - A get that misses reads the index and may ``fill(_:for:readAt:)`` the slot only if no
///   mutation happened since its read began (``generation``): it can never put back a row that a
///   concurrent write replaced or removed, or that the compactor moved.
/// - Slots are dropped only where the index answers for them: after a commit (those of
///   committed writes: a slot's write is numbered below the committed sequence, a queued
///   write's at or above it), after a repair (every slot but those of queued writes and
///   removals).
///
/// Every mutation that can make an index row read earlier stale bumps ``generation``. Lives inside `Store.shared` (a `Locked`); the observer
/// is called with that lock held, in the order the map changed, so it must not call the store.
struct LocationMap {
    enum Slot: Sendable {
        /// The entry as last written or read.
        case present(IndexedEntry)
        /// Removed, possibly not yet committed: readers must not look in the index.
        case removed
    }

    /// How the table holds a slot: the entry in a box of its own. An `IndexedEntry` is ~250
    /// bytes, and a table's buckets are a quarter to five eighths empty and all moved each time
    /// it grows: held inline, a process that had put 100 000 keys peaked 50 MB higher, and a
    /// key read once cost 1.3–1.6 KB of resident memory against 0.85 KB boxed
    /// (Docs/Benchmarks.md, "the location map's drop and slots"). Boxed, a bucket is the key
    /// and one reference.
    fileprivate enum Held: Sendable {
        case present(Box)
        /// Removed by the tombstone with this sequence number.
        case removed(UInt64)

        var slot: Slot {
            switch self {
            case .present(let box): .present(box.entry)
            case .removed: .removed
            }
        }

        /// The sequence number of the write the slot holds (of the row, for a slot a read
        /// filled): below the store's committed sequence, the index answers for the slot.
        var sequence: UInt64 {
            switch self {
            case .present(let box): box.entry.entry.sequence
            case .removed(let sequence): sequence
            }
        }
    }

    fileprivate final class Box: Sendable {
        let entry: IndexedEntry
        /// Where the slot's key is in ``arrivals``.
        let position: ArrivalOrder.Position
        init(_ entry: IndexedEntry, at position: ArrivalOrder.Position) {
            self.entry = entry
            self.position = position
        }
    }

    /// Recently written or read keys.
    private var slots: [CacheKey: Held] = [:]
    /// The keys of the present slots, least recently written or filled first (a queued write
    /// an eviction passes over goes to the back): the order in which the map lets go of them
    /// over its limit. Each present slot's box holds its key's position; removed slots are not
    /// in it (they go when their removal is committed).
    private var arrivals = ArrivalOrder()
    /// The keys whose slot is `.removed`: what a commit may drop, found without walking every
    /// slot (a commit cycle must cost what it commits, not what the map holds).
    private var removedKeys: Set<CacheKey> = []
    /// Keys whose state opening found in the packs but could not write to the index (a full
    /// disk): looked up after `slots` and before the index, until the commit cycle that
    /// applies that replay calls ``unpin()``.
    private var pinned: [CacheKey: Slot] = [:]
    /// Incremented by every mutation but a fill.
    private(set) var generation: UInt64 = 0
    /// Incremented each time the compactor moves records. A writer that found a blob (to link
    /// to) before taking the appender lock and sees this moved by then must not use the place
    /// it found: the blob may be elsewhere, its old segment gone.
    private(set) var relocations: UInt64 = 0
    /// Told of every key whose value changed, went away or moved.
    private let observer: (@Sendable (KeyChange) -> Void)?

    init(observer: (@Sendable (KeyChange) -> Void)?) {
        self.observer = observer
    }

    /// The slot for `key`, if the map knows it.
    func slot(for key: CacheKey) -> Slot? {
        slots[key]?.slot ?? pinned[key]
    }

    /// Every slot, the pinned ones under the others: what the index may not show yet.
    var pending: [CacheKey: Slot] {
        var pending = pinned
        for (key, held) in slots { pending[key] = held.slot }
        return pending
    }

    /// How many keys have a slot (pinned ones aside).
    var count: Int { slots.count }

    /// The keys of the present slots, least recently written or filled first: the order in
    /// which they go over the limit (O(n): for tests).
    var order: [CacheKey] { arrivals.keys }

    /// Every slot but the pinned ones, unboxed: for tests that check the map's own sets
    /// against each other (O(n): not for the store's paths).
    var table: [CacheKey: Slot] { slots.mapValues(\.slot) }

    // MARK: Writes

    /// A put of `key` appended `entry`'s records.
    mutating func stored(_ entry: IndexedEntry, for key: CacheKey) {
        if let index = slots.index(forKey: key) {
            let position: ArrivalOrder.Position
            switch slots.values[index] {
            case .present(let box):
                position = box.position
                arrivals.moveToBack(position)
            case .removed:
                // `removedKeys` holds the key only when its slot was `.removed`.
                removedKeys.remove(key)
                position = arrivals.append(key)
            }
            slots.values[index] = .present(Box(entry, at: position))
        } else {
            slots[key] = .present(Box(entry, at: arrivals.append(key)))
        }
        changed(key, .stored)
    }

    /// A tombstone for `key`, with sequence number `sequence`, was appended.
    mutating func removed(_ key: CacheKey, sequence: UInt64) {
        if case .present(let box)? = slots.updateValue(.removed(sequence), forKey: key) {
            _ = arrivals.remove(box.position)
        }
        removedKeys.insert(key)
        changed(key, .removed)
    }

    // MARK: Reads

    /// A get that missed found `entry` in the index, having read ``generation`` as `readAt`
    /// before it looked: cached only if nothing changed since and no slot appeared.
    mutating func fill(_ entry: IndexedEntry, for key: CacheKey, readAt: UInt64) {
        guard generation == readAt else { return }
        // One lookup where the key has no slot (a get's first read): insert, and put back the
        // slot that was there in the rare case there was one.
        let box = Box(entry, at: arrivals.append(key))
        if let held = slots.updateValue(.present(box), forKey: key) {
            slots[key] = held
            _ = arrivals.remove(box.position)
        }
    }

    // MARK: Moves

    /// The compactor moved blobs (by id, to their new place) and the link records of `keys`:
    /// cached entries follow their blobs, and every key whose records moved is reported.
    mutating func moved(blobs: [Int64: (segment: UInt32, offset: UInt64, recordBytes: UInt64)], keys: Set<CacheKey>) {
        var touched = keys
        for (key, held) in slots {
            guard case .present(let box) = held, let place = blobs[box.entry.blob.id] else { continue }
            var entry = box.entry
            (entry.blob.segment, entry.blob.offset, entry.blob.recordBytes) = place
            slots[key] = .present(Box(entry, at: box.position))
            touched.insert(key)
        }
        generation &+= 1
        relocations &+= 1
        guard let observer else { return }
        for key in touched.sorted(by: Self.order) { observer(KeyChange(key: key, kind: .relocated)) }
    }

    /// A read found `key`'s blob at `place` (the compactor moved it since the slot was filled):
    /// the slot's blob follows, if it still names that blob. Only the blob's place changes —
    /// the slot's link, sequence and metadata may be newer than the index's.
    mutating func blobMoved(for key: CacheKey, to place: BlobRow) {
        guard case .present(let box) = slots[key], box.entry.blob.id == place.id else { return }
        var entry = box.entry
        entry.blob = place
        slots[key] = .present(Box(entry, at: box.position))
        changed(key, .relocated)
    }

    // MARK: Replays and repair

    /// Opening could not write its replay (a full disk): its result answers for these keys
    /// until the replay is committed.
    mutating func pin(_ replay: [CacheKey: Slot]) {
        pinned = replay
        generation &+= 1
    }

    /// The replay opening deferred is committed: the index answers for those keys.
    mutating func unpin() {
        guard !pinned.isEmpty else { return }
        pinned.removeAll()
        generation &+= 1
    }

    /// Records were applied to the index from the packs (a repair, a rebuild, opening's
    /// replay): every slot but those of `queued` keys and uncommitted removals is dropped, so
    /// that the index answers, and each change is reported.
    mutating func indexChanged(_ changes: [KeyChange], keeping queued: Set<CacheKey>) {
        (slots, arrivals) = rebuilt(capacity: queued.count + removedKeys.count) { key, _ in queued.contains(key) }
        generation &+= 1
        for change in changes { observer?(change) }
    }

    /// Slots the map let go of when it went over its limit, handed back by
    /// ``committed(limit:through:atMost:continuing:)`` so that the caller frees them after its locks — rows, keys
    /// and, when most of the map went, the old table's buckets: freeing thousands of them takes
    /// milliseconds, which no lock that puts wait for may hold (``Store``'s `Reclaimer`).
    struct Dropped: Sendable {
        /// Slots let go of in place, and their keys (whose text goes with them).
        fileprivate var slots: [Held] = []
        fileprivate var keys: [CacheKey] = []
        /// The old table, when most of the map went: it still holds the `keptInTable` slots
        /// that moved to the new one (their entries shared, not freed with it).
        fileprivate var table: [CacheKey: Held] = [:]
        /// The old table's arrival order, with it.
        fileprivate var order = ArrivalOrder()
        fileprivate var keptInTable = 0
        /// How many slots there are to free.
        var count: Int { slots.count + table.count - keptInTable }

        /// Adds what a later call of an eviction let go of (only a first call hands a table back).
        mutating func merge(_ later: Dropped) {
            precondition(later.table.isEmpty, "only the first call of an eviction hands its table back")
            slots += later.slots
            keys += later.keys
        }
    }

    /// The number of slots a map over `limit` is brought down to: a sixteenth below it, so that
    /// the slots let go of at a time are few (what came in since, plus a sixteenth of the limit)
    /// and what a commit frees stays proportional to what was written and read. Emptying the
    /// whole map at the limit instead freed 100 000 slots at once — ~40 ms of a core, which a
    /// burst of puts on two cores lost a third of its speed to (Docs/Benchmarks.md, "the
    /// location map evicts a sixteenth").
    static func evictionTarget(limit: Int) -> Int {
        limit - limit / 16
    }

    /// After a commit: every write numbered below `committed` (the store's committed sequence)
    /// is in the index, which answers for its key from now on. Drops the slots of committed
    /// removals; and when the map holds more than `limit` keys — or, `continuing` an eviction an
    /// earlier call left unfinished, more than ``evictionTarget(limit:)`` — lets go of slots of
    /// committed writes and of reads, never of a write numbered `committed` or above (one still
    /// queued), until it holds the target (or only such slots), handing back those it let go of
    /// for the caller to free after its locks. The least recently written or filled slots go
    /// first (``arrivals``), wherever their keys hash; a waiting slot the eviction passes moves
    /// to the back of the order.
    ///
    /// A slot's own sequence number says whether it may go, so the caller needs no view of the
    /// write queue: it holds the map's lock only, not the appender's, and with `atMost` it lets
    /// go a few hundred slots per hold of that lock, so that puts and gets interleave with an
    /// eviction (a sixteenth of a 100 000-key map took 3.2–3.7 ms under both locks when the
    /// queue said which slots waited: Docs/Benchmarks.md, "where a burst's puts stall").
    ///
    /// - Returns: the slots let go of, and whether the eviction stopped at `atMost` with more to
    ///   go (call again with `continuing`).
    /// - Complexity: nothing when the map is under `limit` and holds no removal; else
    ///   O(removals in the map), plus, evicting, O(slots let go of) and the table walk that
    ///   finds them — or, when more go than stay (a first call only, whatever `atMost`),
    ///   O(slots).
    mutating func committed(limit: Int, through committed: UInt64, atMost: Int = .max, continuing: Bool = false)
        -> (dropped: Dropped, more: Bool)
    {
        var dropped = Dropped()
        let target = Self.evictionTarget(limit: limit)
        let over = slots.count > limit || (continuing && slots.count > target)
        guard over || !removedKeys.isEmpty else { return (dropped, false) }
        // A removed slot's last write is its tombstone: committed once its number is below.
        if !removedKeys.isEmpty {
            var waiting = Set<CacheKey>()
            for key in removedKeys {
                guard case .removed(let sequence)? = slots[key] else { continue }
                if sequence >= committed {
                    waiting.insert(key)
                } else if let held = slots.removeValue(forKey: key), over {
                    dropped.slots.append(held)
                }
            }
            removedKeys = waiting
        }
        guard over, slots.count > target else { return (dropped, false) }
        // (Removed slots left are all waiting: the committed ones went above.)
        if !continuing, slots.count - target > target {
            // Most of the map goes (reads between two cycles filled it far past the limit):
            // the slots that stay — the waiting ones, then the newest others up to the
            // target — move to a new table and the old one is handed back whole, so that no
            // table stays sized for a burst. O(slots), in this one hold.
            var waiting = removedKeys.count
            for case .present(let box) in slots.values where box.entry.entry.sequence >= committed { waiting += 1 }
            var toDrop = slots.count - max(target, waiting)
            var (table, order) = rebuilt(capacity: max(target, waiting)) { _, box in
                guard box.entry.entry.sequence < committed, toDrop > 0 else { return true }
                toDrop -= 1
                return false
            }
            swap(&table, &slots)
            swap(&order, &arrivals)
            dropped.table = table
            dropped.order = order
            dropped.keptInTable = slots.count
            return (dropped, false)
        }
        // Fewer go than stay (a cycle's writes, the usual case): out of the table in place,
        // oldest first. A waiting slot the walk passes goes to the back — a queued write is
        // newer than every committed slot — so that the next chunk does not walk it again
        // (found by an outside attack: keys rewritten within a cycle put their queued writes
        // ahead of the reads filled after them, and every 512-slot chunk walked them all); the
        // walk ends at the key that was the newest when it began.
        let wanted = min(atMost, slots.count - target)
        var victims: [CacheKey] = []
        victims.reserveCapacity(wanted)
        dropped.slots.reserveCapacity(dropped.slots.count + wanted)
        var next = arrivals.first
        let newest = arrivals.last
        while let position = next, victims.count < wanted {
            next = position == newest ? nil : arrivals.position(after: position)
            guard let index = slots.index(forKey: arrivals.key(at: position)),
                case .present(let box) = slots.values[index]
            else { preconditionFailure("a key in the arrival order has no present slot") }
            guard box.entry.entry.sequence < committed else {
                arrivals.moveToBack(position)
                continue
            }
            dropped.slots.append(slots.remove(at: index).value)
            victims.append(arrivals.remove(position))
        }
        dropped.keys = victims
        // No bump: a dropped slot's write is in the index now, and a fill that began before
        // the write already saw the generation move.
        return (dropped, victims.count == wanted && slots.count > target)
    }

    /// The store closed.
    mutating func removeAll() {
        slots.removeAll()
        arrivals = ArrivalOrder()
        removedKeys.removeAll()
        pinned.removeAll()
        generation &+= 1
    }

    /// The slots `keep` accepts of the present ones (given each key and box), in their order,
    /// and every removed one: a new table, reserved for `capacity`, and its order.
    private func rebuilt(capacity: Int, keeping keep: (CacheKey, Box) -> Bool)
        -> (slots: [CacheKey: Held], arrivals: ArrivalOrder)
    {
        var table: [CacheKey: Held] = [:]
        table.reserveCapacity(capacity)
        var order = ArrivalOrder()
        var next = arrivals.first
        while let position = next {
            next = arrivals.position(after: position)
            let key = arrivals.key(at: position)
            guard case .present(let box)? = slots[key], keep(key, box) else { continue }
            table[key] = .present(Box(box.entry, at: order.append(key)))
        }
        for key in removedKeys {
            if let held = slots[key] { table[key] = held }
        }
        return (table, order)
    }

    private mutating func changed(_ key: CacheKey, _ kind: KeyChange.Kind) {
        generation &+= 1
        observer?(KeyChange(key: key, kind: kind))
    }

    private static func order(_ a: CacheKey, _ b: CacheKey) -> Bool {
        a < b
    }
}
