/// S3-FIFO's ghost FIFO: the hashes of keys evicted from the small FIFO, oldest first, with
/// no entries. A key inserted again while its hash is here goes straight to the main FIFO: it
/// was wanted again soon after it left, so it is not a one-time key.
///
/// The number of hashes is bounded by a limit the shard passes on each append (the number of
/// entries in its main FIFO, as in the paper, and at least ``minimumLimit``). A hash appended
/// twice counts once: its older place is stale and skipped when it reaches the front, as is the
/// place of a hash removed by a ghost hit. Places, stale ones included, are bounded too — past
/// twice the limit, the stale ones are dropped — so a workload of evictions and quick returns,
/// which removes every hash soon after appending it, cannot grow the queue.
struct GhostFIFO {
    /// The smallest limit: a shard whose main FIFO is still empty remembers this many.
    static let minimumLimit = 16

    /// Hash → the sequence number of its newest place in `order`.
    private var members: [Int: UInt64] = [:]
    /// Appended hashes with their sequence numbers, oldest at `front`.
    private var order: [(hash: Int, sequence: UInt64)] = []
    private var front = 0
    private var nextSequence: UInt64 = 0

    /// How many hashes it holds.
    var count: Int { members.count }
    /// How many places its queue holds, stale ones included (tests).
    var places: Int { order.count - front }

    /// Appends `hash`, then drops the oldest hashes until at most `limit` remain, and the stale
    /// places once they outnumber the hashes.
    mutating func append(_ hash: Int, limit: Int) {
        members[hash] = nextSequence
        order.append((hash, nextSequence))
        nextSequence &+= 1
        while members.count > limit { popFront() }
        if order.count - front > 2 * max(limit, Self.minimumLimit) {
            // More stale places than live ones: keep the live ones, in order. After this at most
            // `limit` places remain, so the next pass is at least `limit` appends away
            // (amortized O(1) per append).
            order = order[front...].filter { members[$0.hash] == $0.sequence }
            front = 0
        } else if front > 64 && front * 2 > order.count {
            // Popped places stay in the array until they are most of it.
            order.removeFirst(front)
            front = 0
        }
    }

    /// Removes `hash`; whether it was there.
    mutating func remove(_ hash: Int) -> Bool {
        members.removeValue(forKey: hash) != nil
    }

    mutating func removeAll() {
        members.removeAll()
        order.removeAll()
        front = 0
    }

    /// Pops the oldest place; the hash leaves with it unless the place is stale (the hash was
    /// removed, or appended again later).
    private mutating func popFront() {
        let (hash, sequence) = order[front]
        front += 1
        if members[hash] == sequence { members.removeValue(forKey: hash) }
    }
}
