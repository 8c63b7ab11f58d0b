import TroveCore
import TroveStore

/// A key's hashes, computed once by ``MemoryCache`` before the shard's lock is taken: the
/// shard's table uses `hash` as is, so a hit hashes the key's text once.
struct KeyHashes: Hashable {
    /// ``MemoryCache``'s hash of the key; equal keys have equal hashes.
    let hash: Int
    /// The hash of the key's URL alone: it picks the shard and chains a URL's variants.
    let urlHash: Int
}

/// One shard of ``MemoryCache``: a table of entries and S3-FIFO eviction over them
/// (Yang et al., "FIFO queues are all you need for cache eviction", SOSP 2023), written from
/// the paper's description. Docs/MemoryTier.md explains the policy; in short:
///
/// - a new entry goes to the head of the *small* FIFO (about 10 % of the shard), unless its key
///   is in the *ghost* FIFO (it was evicted from the small FIFO recently), then to *main*;
/// - a hit only raises the entry's 2-bit frequency (0...3): no list is touched;
/// - to make room, while the small FIFO holds more than its share, its tail leaves: to main when
///   it was hit since it came in (frequency ≥ 1, reset to 0), else out of the cache and its hash
///   into the ghost FIFO. Otherwise main's tail leaves if its frequency is 0; with a higher
///   frequency it is lowered by one and the entry goes back to main's head (reinsertion).
///
/// A key read once (a scan) enters the small FIFO and leaves from it without touching main, so
/// one pass over many cold keys cannot flush the hot set.
///
/// **The table is the node array.** `nodes` is an open-addressing hash table (linear probing
/// from `hash & mask`, at most 3/4 full), and a node holds the entry itself, so a hit goes
/// from the key's hash straight to the entry: one dependent memory access fewer than an index
/// table pointing into a node array, which is most of a hit's cost when the cache is larger
/// than the CPU's caches. A removal shifts the rest of its probe run back (no tombstones);
/// moved nodes take their links along (``move(_:to:)``). `links` is parallel to `nodes` and
/// holds what only inserts, evictions and removals read.
///
/// Not thread-safe: every shard lives inside a `Locked` owned by ``MemoryCache``, and every
/// method runs with that lock held. Nothing here calls out (no I/O, no store, no callbacks but
/// the clock).
///
/// Invariants (checked by ``checkInvariants()`` in tests):
/// - every occupied node is found by a lookup of its key (no empty node between its home and
///   it), is in exactly one FIFO, and in its URL hash's chain; empty nodes are in no list;
/// - `small.cost + main.cost` is the sum of occupied nodes' costs, ≤ `costLimit`;
///   `small.count + main.count` = `occupied` ≤ `countLimit`.
struct MemoryShard {
    /// Which FIFO a node is in.
    enum Queue: UInt8 {
        case none, small, main
    }

    /// A slot of the table: what a hit reads, together.
    ///
    /// Field order is layout: a probe reads `hash` and `isOccupied`, a hit then the key, the
    /// expiry, the frequency and the entry's data reference (which it retains) — mostly the
    /// node's first cache line — and copies the rest of the entry, whose lines it can load in
    /// parallel.
    struct Node {
        /// The key's hash (``KeyHashes/hash``).
        var hash = 0
        var isOccupied = false
        /// Hits since it entered its FIFO or was last passed over by eviction, at most 3.
        var frequency: UInt8 = 0
        /// Seconds since the reference date after which the entry is a miss; infinity for none.
        var expiresAt = Double.infinity
        /// The key it is stored under (the entry's own `info.key` may differ if a caller
        /// inserted it under another key).
        var key = CacheKey(url: "")
        /// The entry; nil in an empty slot.
        var entry: Entry?
    }

    /// What only inserts, evictions and removals read: cost and links. Links are indices into
    /// `nodes` (-1 for none), so moving an entry between FIFOs allocates nothing.
    struct Links {
        /// The hash of the key's URL (``KeyHashes/urlHash``).
        var urlHash = 0
        /// The entry's cost: its byte count plus ``MemoryCache/itemOverhead``.
        var cost = 0
        /// Neighbours in the node's FIFO: `newer` toward the head, `older` toward the tail.
        var newer: Int32 = -1
        var older: Int32 = -1
        /// Neighbours among the nodes whose URLs have the same hash.
        var urlPrevious: Int32 = -1
        var urlNext: Int32 = -1
        var queue = Queue.none
    }

    /// The two ends of one FIFO, with its size. New nodes enter at `head`; eviction looks at
    /// `tail`.
    struct FIFO {
        var head: Int32 = -1
        var tail: Int32 = -1
        var count = 0
        var cost = 0
    }

    /// The most a frequency counter holds (two bits).
    static let maximumFrequency: UInt8 = 3
    /// The table's size when empty.
    static let initialCapacity = 16

    let costLimit: Int
    let countLimit: Int
    /// The small FIFO's share: while it holds more than either, eviction takes from it first.
    let smallCostLimit: Int
    let smallCountLimit: Int

    /// The table: a power-of-two count of slots, at most 3/4 occupied.
    private var nodes: [Node]
    /// Parallel to `nodes`.
    private var links: [Links]
    private var mask: Int
    private var small = FIFO()
    private var main = FIFO()
    /// Head of each URL hash's chain of nodes, for `removeAll(url:)`.
    private var urlChains: [Int: Int32] = [:]
    private var ghost = GhostFIFO()
    /// Invalidations, for insertion tokens.
    private(set) var log = InvalidationLog()
    /// This shard's counters.
    private(set) var counters = MemoryCache.Statistics()

    init(costLimit: Int, countLimit: Int) {
        precondition(costLimit >= 0 && countLimit >= 0)
        self.costLimit = costLimit
        self.countLimit = countLimit
        smallCostLimit = costLimit / 10
        smallCountLimit = countLimit / 10
        nodes = [Node](repeating: Node(), count: Self.initialCapacity)
        links = [Links](repeating: Links(), count: Self.initialCapacity)
        mask = Self.initialCapacity - 1
    }

    var count: Int { small.count + main.count }
    var cost: Int { small.cost + main.cost }

    /// The slot holding `key`.
    @inline(__always)
    private func slot(of key: CacheKey, _ hashes: KeyHashes) -> Int? {
        var i = hashes.hash & mask
        while nodes[i].isOccupied {
            if nodes[i].hash == hashes.hash && nodes[i].key == key { return i }
            i = (i + 1) & mask
        }
        return nil
    }

    // MARK: Reads

    /// The entry for `key`, raising its frequency; nil on a miss. An entry whose expiry has
    /// passed (`now()`, called only for entries that have one) is dropped and is a miss.
    mutating func entry(for key: CacheKey, _ hashes: KeyHashes, now: () -> Double) -> Entry? {
        guard let i = slot(of: key, hashes) else {
            counters.misses += 1
            return nil
        }
        if nodes[i].expiresAt != .infinity && nodes[i].expiresAt <= now() {
            remove(i)
            counters.expirations += 1
            counters.misses += 1
            return nil
        }
        if nodes[i].frequency < Self.maximumFrequency { nodes[i].frequency += 1 }
        counters.hits += 1
        return nodes[i].entry
    }

    // MARK: Inserts

    /// Whether an insert with `token` (taken by ``MemoryCache/insertionToken(for:)``) may go
    /// ahead: the token is `key`'s, at most `allowed` invalidations of `key` since, and the log
    /// still reaches back to the token (else refused: it cannot tell).
    func admits(_ hashes: KeyHashes, token: MemoryCache.InsertionToken, allowing allowed: Int) -> Bool {
        guard token.keyHash == hashes.hash, let changes = log.changes(of: hashes, since: token.epoch) else { return false }
        return changes <= allowed
    }

    /// Counts an insert refused before it reached ``insert(_:for:_:cost:expiresAt:refuse:)``.
    mutating func refused() {
        counters.refusedInserts += 1
    }

    /// Stores `entry` under `key`, evicting by S3-FIFO until it fits; replaces an entry the key
    /// had. Refused (false) when `refuse` is set (the entry has expired), when `cost` exceeds
    /// the shard's cost limit or the count limit is 0; the replaced entry is dropped even then
    /// (it is older than the one refused).
    mutating func insert(
        _ entry: Entry, for key: CacheKey, _ hashes: KeyHashes, cost: Int, expiresAt: Double, refuse: Bool = false
    ) -> Bool {
        var queue = Queue.small
        var frequency: UInt8 = 0
        if let old = slot(of: key, hashes) {
            // Same key, new value: it keeps the place it earned (main) and its frequency.
            queue = links[old].queue
            frequency = nodes[old].frequency
            remove(old)
            counters.replacements += 1
        }
        guard !refuse, cost <= costLimit, countLimit > 0 else {
            counters.refusedInserts += 1
            return false
        }
        while count + 1 > countLimit || self.cost + cost > costLimit {
            evict()
        }
        if queue != .main && ghost.remove(hashes.hash) { queue = .main }
        if (count + 1) * 4 > nodes.count * 3 { grow() }
        var i = hashes.hash & mask
        while nodes[i].isOccupied { i = (i + 1) & mask }
        nodes[i] = Node(
            hash: hashes.hash, isOccupied: true, frequency: frequency, expiresAt: expiresAt, key: key, entry: entry)
        links[i] = Links(urlHash: hashes.urlHash, cost: cost)
        pushHead(i, queue)
        linkURL(i)
        counters.inserts += 1
        return true
    }

    // MARK: Removals

    /// Drops `key`'s entry, if any, and records an invalidation of it either way (an insert
    /// racing with this removal must not put back what was read before it).
    @discardableResult
    mutating func invalidate(_ key: CacheKey, _ hashes: KeyHashes) -> Bool {
        log.record(hashes.hash)
        guard let i = slot(of: key, hashes) else { return false }
        remove(i)
        counters.invalidations += 1
        return true
    }

    /// Drops every entry of `url` (whose URL hash is `urlHash`), and records an invalidation of
    /// all its keys, held or not.
    mutating func invalidateAll(url: String, urlHash: Int) -> Int {
        log.record(url: urlHash)
        // Collect first: a removal moves other nodes, so chain positions do not survive it.
        var keys: [(CacheKey, KeyHashes)] = []
        var i = urlChains[urlHash] ?? -1
        while i >= 0 {
            if nodes[Int(i)].key.url.hasSameUTF8(as: url) {
                keys.append((nodes[Int(i)].key, KeyHashes(hash: nodes[Int(i)].hash, urlHash: urlHash)))
            }
            i = links[Int(i)].urlNext
        }
        for (key, hashes) in keys {
            if let i = slot(of: key, hashes) {
                remove(i)
                counters.invalidations += 1
            }
        }
        return keys.count
    }

    /// Drops every entry; every insertion token taken before is refused after this.
    mutating func invalidateAll() {
        counters.invalidations += count
        nodes = [Node](repeating: Node(), count: Self.initialCapacity)
        links = [Links](repeating: Links(), count: Self.initialCapacity)
        mask = Self.initialCapacity - 1
        urlChains.removeAll()
        small = FIFO()
        main = FIFO()
        ghost.removeAll()
        log.recordEverything()
    }

    /// Evicts by the policy until the shard's cost is at most `target`.
    mutating func trim(toCost target: Int) {
        while cost > max(0, target) { evict() }
    }

    // MARK: S3-FIFO

    /// Evicts one entry: from the small FIFO while it holds more than its share (or main is
    /// empty), else from main.
    private mutating func evict() {
        precondition(count > 0, "evicting from an empty shard")
        if small.count > 0 && (small.cost > smallCostLimit || small.count > smallCountLimit || main.count == 0) {
            if evictSmall() { return }
        }
        evictMain()
    }

    /// Takes the small FIFO's tail: a node hit since it came in moves to main (not an
    /// eviction; the loop goes on), one that was not leaves the cache and its hash goes to the
    /// ghost FIFO. False when the small FIFO emptied without an eviction.
    private mutating func evictSmall() -> Bool {
        while small.tail >= 0 {
            let i = Int(small.tail)
            if nodes[i].frequency >= 1 {
                unlinkQueue(i)
                nodes[i].frequency = 0
                pushHead(i, .main)
                continue
            }
            let hash = nodes[i].hash
            remove(i)
            ghost.append(hash, limit: max(main.count, GhostFIFO.minimumLimit))
            counters.evictions += 1
            return true
        }
        return false
    }

    /// Takes main's tail: a node with frequency > 0 goes back to the head one lower; the first
    /// with frequency 0 leaves the cache. Ends within 3 × main.count + 1 steps.
    private mutating func evictMain() {
        while main.tail >= 0 {
            let i = Int(main.tail)
            if nodes[i].frequency > 0 {
                unlinkQueue(i)
                nodes[i].frequency -= 1
                pushHead(i, .main)
                continue
            }
            remove(i)
            counters.evictions += 1
            return
        }
    }

    // MARK: The table

    /// Removes the occupied node at `i` from its FIFO, its URL chain and the table, then shifts
    /// later nodes of its probe run back into the hole when their home is not between the hole
    /// and them (cyclically), so every key stays reachable from its home. Other nodes may move.
    private mutating func remove(_ i: Int) {
        unlinkQueue(i)
        unlinkURL(i)
        var hole = i
        var j = i
        while true {
            j = (j + 1) & mask
            guard nodes[j].isOccupied else { break }
            let home = nodes[j].hash & mask
            if (j - home) & mask >= (j - hole) & mask {
                move(j, to: hole)
                hole = j
            }
        }
        nodes[hole] = Node()
        links[hole] = Links()
    }

    /// Moves the node at `from` into the empty slot `to`, and points its FIFO and URL-chain
    /// neighbours (or the list ends) at its new place. `from` is left to be overwritten.
    private mutating func move(_ from: Int, to: Int) {
        nodes.swapAt(from, to)
        links.swapAt(from, to)
        let link = links[to]
        let slot = Int32(to)
        if link.newer >= 0 { links[Int(link.newer)].older = slot } else { setHead(slot, link.queue) }
        if link.older >= 0 { links[Int(link.older)].newer = slot } else { setTail(slot, link.queue) }
        if link.urlPrevious >= 0 { links[Int(link.urlPrevious)].urlNext = slot } else { urlChains[link.urlHash] = slot }
        if link.urlNext >= 0 { links[Int(link.urlNext)].urlPrevious = slot }
    }

    /// Doubles the table: every node is placed anew and every link translated.
    private mutating func grow() {
        let capacity = nodes.count * 2
        var newNodes = [Node](repeating: Node(), count: capacity)
        var newLinks = [Links](repeating: Links(), count: capacity)
        var place = [Int32](repeating: -1, count: nodes.count)
        let newMask = capacity - 1
        for i in nodes.indices where nodes[i].isOccupied {
            var j = nodes[i].hash & newMask
            while newNodes[j].isOccupied { j = (j + 1) & newMask }
            newNodes[j] = nodes[i]
            newLinks[j] = links[i]
            place[i] = Int32(j)
        }
        func translate(_ slot: Int32) -> Int32 { slot >= 0 ? place[Int(slot)] : -1 }
        for j in newLinks.indices where newNodes[j].isOccupied {
            newLinks[j].newer = translate(newLinks[j].newer)
            newLinks[j].older = translate(newLinks[j].older)
            newLinks[j].urlPrevious = translate(newLinks[j].urlPrevious)
            newLinks[j].urlNext = translate(newLinks[j].urlNext)
        }
        for fifo in [\MemoryShard.small, \MemoryShard.main] {
            self[keyPath: fifo].head = translate(self[keyPath: fifo].head)
            self[keyPath: fifo].tail = translate(self[keyPath: fifo].tail)
        }
        for (urlHash, head) in urlChains { urlChains[urlHash] = translate(head) }
        nodes = newNodes
        links = newLinks
        mask = newMask
    }

    // MARK: Lists

    private mutating func setHead(_ slot: Int32, _ queue: Queue) {
        switch queue {
        case .small: small.head = slot
        case .main: main.head = slot
        case .none: preconditionFailure("a node outside the FIFOs has no place in one")
        }
    }

    private mutating func setTail(_ slot: Int32, _ queue: Queue) {
        switch queue {
        case .small: small.tail = slot
        case .main: main.tail = slot
        case .none: preconditionFailure("a node outside the FIFOs has no place in one")
        }
    }

    private mutating func pushHead(_ i: Int, _ queue: Queue) {
        let slot = Int32(i)
        let head = queue == .small ? small.head : main.head
        links[i].queue = queue
        links[i].newer = -1
        links[i].older = head
        if head >= 0 { links[Int(head)].newer = slot } else { setTail(slot, queue) }
        setHead(slot, queue)
        let cost = links[i].cost
        if queue == .small {
            small.count += 1
            small.cost += cost
        } else {
            main.count += 1
            main.cost += cost
        }
    }

    private mutating func unlinkQueue(_ i: Int) {
        let link = links[i]
        if link.newer >= 0 { links[Int(link.newer)].older = link.older } else { setHead(link.older, link.queue) }
        if link.older >= 0 { links[Int(link.older)].newer = link.newer } else { setTail(link.newer, link.queue) }
        if link.queue == .small {
            small.count -= 1
            small.cost -= link.cost
        } else {
            main.count -= 1
            main.cost -= link.cost
        }
        links[i].newer = -1
        links[i].older = -1
        links[i].queue = .none
    }

    private mutating func linkURL(_ i: Int) {
        let urlHash = links[i].urlHash
        let head = urlChains[urlHash] ?? -1
        links[i].urlNext = head
        links[i].urlPrevious = -1
        if head >= 0 { links[Int(head)].urlPrevious = Int32(i) }
        urlChains[urlHash] = Int32(i)
    }

    private mutating func unlinkURL(_ i: Int) {
        let link = links[i]
        if link.urlPrevious >= 0 {
            links[Int(link.urlPrevious)].urlNext = link.urlNext
        } else if link.urlNext >= 0 {
            urlChains[link.urlHash] = link.urlNext
        } else {
            urlChains.removeValue(forKey: link.urlHash)
        }
        if link.urlNext >= 0 { links[Int(link.urlNext)].urlPrevious = link.urlPrevious }
        links[i].urlNext = -1
        links[i].urlPrevious = -1
    }

    // MARK: Tests

    /// Places in the ghost queue, stale ones included (tests).
    var ghostPlaces: Int { ghost.places }

    /// The mean distance of occupied nodes from their home slot: the extra probes of a hit
    /// (tests; about 1 at 3/4 occupancy with well-spread hashes).
    var meanDisplacement: Double {
        var total = 0
        var occupied = 0
        for i in nodes.indices where nodes[i].isOccupied {
            total += (i - nodes[i].hash & mask) & mask
            occupied += 1
        }
        return occupied == 0 ? 0 : Double(total) / Double(occupied)
    }

    /// Every stored invariant, checked by walking the lists and the table (tests only: O(n)).
    func checkInvariants() -> [String] {
        var problems: [String] = []
        var seen = Set<Int32>()
        for (queue, fifo) in [(Queue.small, small), (Queue.main, main)] {
            var count = 0
            var cost = 0
            var slot = fifo.head
            var previous: Int32 = -1
            while slot >= 0 {
                let link = links[Int(slot)]
                let node = nodes[Int(slot)]
                if link.queue != queue { problems.append("slot \(slot) in \(queue) FIFO says \(link.queue)") }
                if link.newer != previous { problems.append("slot \(slot): broken newer link") }
                if !seen.insert(slot).inserted { problems.append("slot \(slot) twice in the FIFOs") }
                if !node.isOccupied || node.entry == nil { problems.append("slot \(slot) in a FIFO is empty") }
                let hashes = MemoryCache.hashes(of: node.key)
                if hashes != KeyHashes(hash: node.hash, urlHash: link.urlHash) { problems.append("slot \(slot): wrong hashes") }
                if self.slot(of: node.key, hashes) != Int(slot) { problems.append("slot \(slot) not found by its key") }
                count += 1
                cost += link.cost
                previous = slot
                slot = link.older
            }
            if previous != fifo.tail { problems.append("\(queue) FIFO: wrong tail") }
            if count != fifo.count || cost != fifo.cost { problems.append("\(queue) FIFO: count or cost off") }
        }
        let occupied = nodes.filter(\.isOccupied).count
        if seen.count != occupied { problems.append("table holds \(occupied), FIFOs \(seen.count)") }
        if occupied * 4 > nodes.count * 3 { problems.append("table over 3/4 full") }
        if self.cost > costLimit { problems.append("cost \(self.cost) over \(costLimit)") }
        if count > countLimit { problems.append("count \(count) over \(countLimit)") }
        var chained = 0
        for (urlHash, head) in urlChains {
            var slot = head
            var previous: Int32 = -1
            while slot >= 0 {
                if links[Int(slot)].urlHash != urlHash { problems.append("slot \(slot) in the wrong URL chain") }
                if links[Int(slot)].urlPrevious != previous { problems.append("slot \(slot): broken URL link") }
                chained += 1
                previous = slot
                slot = links[Int(slot)].urlNext
            }
        }
        if chained != count { problems.append("URL chains hold \(chained), FIFOs \(count)") }
        return problems
    }
}
