/// The appender's queue: every record appended and not yet committed, in append order, held
/// in the batches that commit cycles took.
///
/// A cycle's snapshot takes the open batch whole (``seal()``): the array is handed over, not
/// copied, and the next append starts a new one. Held in one array instead, the snapshot would
/// share the queue's storage, and the first put after every snapshot would copy the whole queue
/// under the appender lock (a copy-on-write of up to ``Store``'s back-pressure bound of records,
/// each with its strings retained). A release drops whole batches, and hands them back so that
/// their records are freed after the lock, not under it.
///
/// Not thread-safe: lives in ``AppendState``, under the appender lock.
struct WriteQueue: Sequence {
    /// Batches taken by snapshots and not released, oldest first.
    private var sealed: [[PendingWrite]] = []
    /// Appended since the last snapshot.
    private var open: [PendingWrite] = []
    /// Records held, in every batch.
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    mutating func append(_ write: PendingWrite) {
        open.append(write)
        count += 1
    }

    /// Seals the open batch and returns every queued write, in order: what a snapshot commits.
    /// One batch (the usual case: the last cycle released its snapshot) is returned as it is
    /// held; batches left by a failed cycle are joined (a copy, on that rare path only).
    mutating func seal() -> [PendingWrite] {
        if !open.isEmpty {
            sealed.append(open)
            open = []
        }
        switch sealed.count {
        case 0: return []
        case 1: return sealed[0]
        default: return Array(sealed.joined())
        }
    }

    /// Removes the first `count` writes, which must be exactly the batches sealed by the
    /// snapshot that committed them (``seal()`` then a commit), and returns those batches for
    /// the caller to let go of after its lock.
    mutating func removeSealed(_ count: Int) -> [[PendingWrite]] {
        var left = count
        var removed = 0
        while left > 0 {
            precondition(removed < sealed.count && sealed[removed].count <= left, "a release covers whole sealed batches")
            left -= sealed[removed].count
            removed += 1
        }
        let batches = Array(sealed[..<removed])
        sealed.removeFirst(removed)
        self.count -= count
        return batches
    }

    func makeIterator() -> FlattenSequence<[[PendingWrite]]>.Iterator {
        (sealed + [open]).joined().makeIterator()
    }
}
