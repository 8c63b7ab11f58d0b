import TroveCore

/// The keys of the ``LocationMap``'s present slots, least recently written or filled first: the
/// order in which the map lets go of slots when it is over its limit.
///
/// A doubly linked list kept in one array, whose freed nodes are reused: appending a key,
/// moving it to the back and unlinking it are O(1), and walking from the front finds the
/// oldest slots without looking at the table. Why the map needs an order of its own: a Swift
/// dictionary keeps its elements where they hash, with linear probing, so letting go of the
/// first slots in its iteration order — as the map did — empties the low buckets and leaves the
/// high ones full; every new key that hashes there then probes a run as long as the full part,
/// and a map at its limit under churn slowed from 0.07 s to 20–50 s per 100 000 inserts
/// (Docs/Benchmarks.md, "a location map at its limit slows down with churn").
///
/// A node is 40 bytes: the key (two strings, sharing the table's text) and two links.
struct ArrivalOrder {
    /// Where a key is in the order: its node, which the slot's box keeps.
    struct Position: Equatable, Sendable {
        fileprivate let node: Int32
    }

    private struct Node {
        var key: CacheKey
        var previous: Int32
        var next: Int32
    }

    /// No node.
    private static let none: Int32 = -1
    /// What a free node holds in place of a key: empty strings, which allocate nothing.
    private static let noKey = CacheKey(url: "")

    private var nodes: [Node] = []
    /// The first free node; free nodes are chained through `next`.
    private var freeNode = none
    private var front = none
    private var back = none
    /// How many keys are in the order.
    private(set) var count = 0

    /// The oldest key's position.
    var first: Position? { front == Self.none ? nil : Position(node: front) }

    /// The newest key's position.
    var last: Position? { back == Self.none ? nil : Position(node: back) }

    /// The position of the key after the one at `position` (newer), if any.
    func position(after position: Position) -> Position? {
        let next = nodes[Int(position.node)].next
        return next == Self.none ? nil : Position(node: next)
    }

    /// The key at `position`.
    func key(at position: Position) -> CacheKey {
        nodes[Int(position.node)].key
    }

    /// Adds `key` at the back (the newest).
    mutating func append(_ key: CacheKey) -> Position {
        let node: Int32
        if freeNode != Self.none {
            node = freeNode
            freeNode = nodes[Int(node)].next
            nodes[Int(node)] = Node(key: key, previous: back, next: Self.none)
        } else {
            precondition(nodes.count < Int(Int32.max), "an arrival order holds fewer than 2^31 keys")
            node = Int32(nodes.count)
            nodes.append(Node(key: key, previous: back, next: Self.none))
        }
        linkAtBack(node)
        count += 1
        return Position(node: node)
    }

    /// The key at `position` was written again: it becomes the newest.
    mutating func moveToBack(_ position: Position) {
        let node = position.node
        guard node != back else { return }
        unlink(node)
        nodes[Int(node)].previous = back
        nodes[Int(node)].next = Self.none
        linkAtBack(node)
    }

    /// Takes the key at `position` out of the order, and hands it back: a caller that holds a
    /// lock frees it after (its text may be the last reference).
    mutating func remove(_ position: Position) -> CacheKey {
        let node = position.node
        unlink(node)
        var key = Self.noKey
        swap(&key, &nodes[Int(node)].key)
        nodes[Int(node)].previous = Self.none
        nodes[Int(node)].next = freeNode
        freeNode = node
        count -= 1
        return key
    }

    /// Every key, oldest first (O(n): for tests and the map's rebuilds).
    var keys: [CacheKey] {
        var keys: [CacheKey] = []
        keys.reserveCapacity(count)
        var node = front
        while node != Self.none {
            keys.append(nodes[Int(node)].key)
            node = nodes[Int(node)].next
        }
        return keys
    }

    private mutating func linkAtBack(_ node: Int32) {
        if back == Self.none { front = node } else { nodes[Int(back)].next = node }
        back = node
    }

    private mutating func unlink(_ node: Int32) {
        let (previous, next) = (nodes[Int(node)].previous, nodes[Int(node)].next)
        if previous == Self.none { front = next } else { nodes[Int(previous)].next = next }
        if next == Self.none { back = previous } else { nodes[Int(next)].previous = previous }
    }
}
