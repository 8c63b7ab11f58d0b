import TroveIndex

/// The appender's queue: every record appended and not yet committed, in append order, held
/// in the batches that commit cycles took — and, with each batch, the blobs its records added
/// (for deduplication before they reach the index).
///
/// A cycle's snapshot takes the open batch whole (``seal()``): the array is handed over, not
/// copied, and the next append starts a new one. Held in one array instead, the snapshot would
/// share the queue's storage, and the first put after every snapshot would copy the whole queue
/// under the appender lock (a copy-on-write of up to ``Store``'s back-pressure bound of records,
/// each with its strings retained). A release drops whole batches — their pending blobs with
/// them, without a lookup per blob — and hands them back so that their records are freed after
/// the lock, not under it.
///
/// Not thread-safe: lives in ``AppendState``, under the appender lock.
struct WriteQueue: Sequence {
    fileprivate struct Batch {
        var writes: [PendingWrite] = []
        /// The first blob this batch's records appended with each hash and length: held inline,
        /// not in an array of its own, so that a put of new bytes allocates nothing here.
        var blobs: [PendingBlobKey: BlobRow] = [:]
        /// Later blobs with a hash and length `blobs` already holds, in append order: bytes that
        /// differ under an equal hash, or a copy appended while the first one's segment was being
        /// rewritten. Almost always empty.
        var moreBlobs: [PendingBlobKey: [BlobRow]] = [:]

        init() {}

        /// An empty batch with room for `writes` records and `blobs` blobs: sized like the batch
        /// before it, a burst's batch fills without growing (each growth allocated the next size
        /// and moved every record, under the appender lock).
        init(reservingWrites writes: Int, blobs: Int) {
            self.writes.reserveCapacity(writes)
            self.blobs.reserveCapacity(blobs)
        }
    }

    /// Batches a release took out of the queue, to be let go of after the appender lock.
    struct Released {
        fileprivate var batches: [Batch] = []
        /// Records released.
        var count: Int { batches.reduce(0) { $0 + $1.writes.count } }
    }

    /// Batches taken by snapshots and not released, oldest first.
    private var sealed: [Batch] = []
    /// Appended since the last snapshot.
    private var open = Batch()
    /// Records held, in every batch.
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    mutating func append(_ write: PendingWrite) {
        open.writes.append(write)
        count += 1
    }

    /// A blob the last appended record added (its ``append(_:)`` comes first or after, under
    /// the same lock): found by ``blobs(_:)`` until the batch is released.
    mutating func addBlob(_ blob: BlobRow, _ key: PendingBlobKey) {
        // One lookup on the usual path (the first blob with this key in the batch).
        if let first = open.blobs.updateValue(blob, forKey: key) {
            open.blobs[key] = first
            open.moreBlobs[key, default: []].append(blob)
        }
    }

    /// The queued blobs with this hash and length, oldest first.
    func blobs(_ key: PendingBlobKey) -> [BlobRow] {
        var found: [BlobRow] = []
        for batch in sealed { batch.appendBlobs(key, to: &found) }
        open.appendBlobs(key, to: &found)
        return found
    }

    /// Whether any blob is queued (tests).
    var holdsBlobs: Bool { !open.blobs.isEmpty || sealed.contains { !$0.blobs.isEmpty } }

    /// Seals the open batch and returns every queued write, in order: what a snapshot commits.
    /// One batch (the usual case: the last cycle released its snapshot) is returned as it is
    /// held; batches left by a failed cycle are joined (a copy, on that rare path only).
    mutating func seal() -> [PendingWrite] {
        if !open.writes.isEmpty || !open.blobs.isEmpty {
            let (writes, blobs) = (open.writes.count, open.blobs.count)
            sealed.append(open)
            open = Batch(reservingWrites: writes, blobs: blobs)
        }
        switch sealed.count {
        case 0: return []
        case 1: return sealed[0].writes
        default: return Array(sealed.lazy.map(\.writes).joined())
        }
    }

    /// Removes the first `count` writes, which must be exactly the batches sealed by the
    /// snapshot that committed them (``seal()`` then a commit), with their blobs; returns those
    /// batches for the caller to let go of after its lock.
    mutating func removeSealed(_ count: Int) -> Released {
        var left = count
        var removed = 0
        while left > 0 {
            precondition(
                removed < sealed.count && sealed[removed].writes.count <= left, "a release covers whole sealed batches")
            left -= sealed[removed].writes.count
            removed += 1
        }
        let released = Released(batches: Array(sealed[..<removed]))
        sealed.removeFirst(removed)
        self.count -= count
        return released
    }

    func makeIterator() -> FlattenSequence<[[PendingWrite]]>.Iterator {
        (sealed.map(\.writes) + [open.writes]).joined().makeIterator()
    }
}

extension WriteQueue.Batch {
    /// Appends this batch's blobs with `key` to `found`, in append order.
    fileprivate func appendBlobs(_ key: PendingBlobKey, to found: inout [BlobRow]) {
        guard let first = blobs[key] else { return }
        found.append(first)
        if let more = moreBlobs[key] { found += more }
    }
}
