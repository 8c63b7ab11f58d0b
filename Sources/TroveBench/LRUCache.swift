public import Foundation
public import TroveCore

/// The textbook least-recently-used cache with a byte capacity — a dictionary from key to node
/// and a doubly linked list in recency order; a hit moves its node to the front, an insert
/// evicts from the back until the new entry fits. The baseline the memory tier's hit ratio is
/// compared with (Docs/Benchmarks.md).
///
/// An entry costs its data's length plus `itemOverhead`, like ``Trove/MemoryCache``'s, so both
/// hold the same entries in the same capacity. Single-threaded: the hit-ratio workloads replay
/// one trace on one thread.
public struct LRUCache {
    private struct Node {
        var key: CacheKey
        var data: Data
        var cost: Int
        var newer: Int = -1
        var older: Int = -1
    }

    /// The most bytes held.
    public let capacity: Int
    /// What an entry costs besides its data.
    public let itemOverhead: Int
    /// The bytes held.
    public private(set) var cost = 0

    private var table: [CacheKey: Int] = [:]
    private var nodes: [Node] = []
    private var freeSlots: [Int] = []
    /// Most recently used.
    private var head = -1
    /// Least recently used: evicted first.
    private var tail = -1

    /// Makes an empty cache of `capacity` bytes.
    public init(capacity: Int, itemOverhead: Int) {
        self.capacity = capacity
        self.itemOverhead = itemOverhead
    }

    /// The entries held.
    public var count: Int { table.count }

    /// The data for `key`, which becomes the most recently used; nil on a miss.
    public mutating func data(for key: CacheKey) -> Data? {
        guard let slot = table[key] else { return nil }
        unlink(slot)
        pushFront(slot)
        return nodes[slot].data
    }

    /// Stores `data` under `key` as the most recently used, evicting the least recently used
    /// until it fits. Not stored if it alone exceeds the capacity.
    public mutating func insert(_ data: Data, for key: CacheKey) {
        if let old = table.removeValue(forKey: key) { drop(old) }
        let itemCost = data.count + itemOverhead
        guard itemCost <= capacity else { return }
        while cost + itemCost > capacity, tail >= 0 {
            let victim = tail
            table.removeValue(forKey: nodes[victim].key)
            drop(victim)
        }
        let node = Node(key: key, data: data, cost: itemCost)
        let slot: Int
        if let free = freeSlots.popLast() {
            nodes[free] = node
            slot = free
        } else {
            nodes.append(node)
            slot = nodes.count - 1
        }
        pushFront(slot)
        table[key] = slot
        cost += itemCost
    }

    /// Whether `key` is held, without touching the recency order.
    public func contains(_ key: CacheKey) -> Bool { table[key] != nil }

    private mutating func drop(_ slot: Int) {
        unlink(slot)
        cost -= nodes[slot].cost
        nodes[slot].data = Data()
        freeSlots.append(slot)
    }

    private mutating func unlink(_ slot: Int) {
        let (newer, older) = (nodes[slot].newer, nodes[slot].older)
        if newer >= 0 { nodes[newer].older = older } else { head = older }
        if older >= 0 { nodes[older].newer = newer } else { tail = newer }
        nodes[slot].newer = -1
        nodes[slot].older = -1
    }

    private mutating func pushFront(_ slot: Int) {
        nodes[slot].older = head
        nodes[slot].newer = -1
        if head >= 0 { nodes[head].newer = slot } else { tail = slot }
        head = slot
    }
}
