public import TroveCore

// The entry digest table (schema 7): loading it, and keeping it with this connection's writes.
// Every statement that adds or deletes an entry row reports it here, so the rule "no committed
// row is missing from the table" has one owner; SQLite reports every changed entry row to the
// `PlaceKeeper` below, so the rule "no place is older than its row" has one too. Places are
// loaded apart from the ids (`places(after:limit:)`), by the store in the background after it opens.

extension IndexDatabase {
    /// Fills the writer's ``digests`` with every entry row's id by its key digest: one scan of
    /// the table. Rows whose digest is not a 16-byte BLOB match no lookup and are left out. Two
    /// rows with the same digest break the one-row-per-key rule that lookups and writes rely on:
    /// the writer refuses the index (`.corrupt`, which the store reports with the advice to run
    /// `trove fsck --rebuild-index`).
    func loadDigests() throws(IndexError) {
        guard let digests else { return }
        var pairs: [(key: UInt64, id: Int64)] = []
        pairs.reserveCapacity(Int(try connection.statement("SELECT count(*) FROM entries").first { $0.int64(0) } ?? 0))
        try connection.statement("SELECT id, key_hash FROM entries").query { (r) throws(IndexError) in
            if let digest = r.hash(1) { pairs.append((digests.key(of: digest), r.int64(0))) }
            return true
        }
        digests.replace(with: pairs)
        // Keys shared by two rows are rare (64 bits, seeded); only then are digests compared.
        var seen = Set<UInt64>(minimumCapacity: pairs.count)
        guard pairs.contains(where: { !seen.insert($0.key).inserted }) else { return }
        let shared = try sharedDigestCount()
        guard shared == 0 else {
            throw IndexError(
                code: .corrupt,
                message: "\(connection.path): \(shared) key digests have more than one entry row")
        }
    }

    /// The places of up to `limit` entry rows with ids above `id`, in id order, and the last id
    /// read (nil when there was none: the load is done): each row whose link record follows its
    /// blob record (a put's), with what the row and its blob row say of the link hashed from the
    /// column bytes (no strings made). Rows with values no row of this store holds (negative
    /// places, NULLs, a malformed hash) get none: they are read through SQLite, which judges
    /// them. One short query, so a load never holds a read snapshot for long (a long one would
    /// keep a TRUNCATE checkpoint, and the committer lock it holds, waiting); call it after
    /// ``EntryDigestTable/beginPlaceLoad()``, in any number of snapshots.
    public func places(after id: Int64, limit: Int) throws(IndexError) -> (
        places: [(id: Int64, place: EntryPlace)], last: Int64?
    ) {
        var batch: [(id: Int64, place: EntryPlace)] = []
        batch.reserveCapacity(limit)
        var last: Int64?
        try connection.statement(
            """
            SELECT e.id, e.sequence, e.link_segment, e.link_offset, e.link_length, e.accessed_at,
                b.segment, b.offset, b.record_bytes,
                e.url, e.variant, e.etag, e.last_modified, e.cache_policy, e.blob, e.created_at, e.expires_at,
                b.hash, b.length,
                b.segment = e.link_segment AND e.link_offset = b.offset + b.record_bytes
            FROM entries e LEFT JOIN blobs b ON b.id = e.blob
            WHERE e.id > ?1 ORDER BY e.id LIMIT ?2
            """
        ).query([.integer(id), .integer(Int64(limit))]) { (r) throws(IndexError) in
            last = r.int64(0)
            guard r.int64(19) == 1, r.int64(7) >= 0, r.int64(8) > 0, r.int64(4) > 0,
                let segment = UInt32(exactly: r.int64(2)),
                case (let end, false) = r.int64(8).addingReportingOverflow(r.int64(4)), let span = UInt32(exactly: end),
                !r.isNull(9), !r.isNull(10), let blobHash = r.hash(17), r.int64(18) >= 0
            else { return true }
            let texts = (Int32(9)...13).reduce(0) { $0 + (r.textBytes($1)?.count ?? 0) }
            let fingerprint = FingerprintBuilder.hash(textBytes: texts) { builder in
                for column: Int32 in 9...13 {
                    if let bytes = r.textBytes(column) { builder.text(bytes) } else { builder.absent() }
                }
                builder.finish(
                    blobID: r.int64(14), blobHash: blobHash, blobLength: r.int64(18), linkLength: r.int64(4),
                    createdAt: r.int64(15), expiresAt: r.optionalInt64(16))
            }
            batch.append(
                (
                    r.int64(0),
                    EntryPlace(
                        sequence: r.sequence(1), blobOffset: UInt64(r.int64(7)), accessedAt: r.int64(5),
                        fingerprint: fingerprint, segment: segment, span: span)
                ))
            return true
        }
        return (batch, last)
    }

    /// The ids of the rows that may hold `digest` (candidates: check `id` and `key_hash`).
    func entryIDs(of digest: ContentHash) throws(IndexError) -> [Int64] {
        if let digests { return digests.candidates(digest) }
        var ids: [Int64] = []
        try connection.statement("SELECT id FROM entries WHERE key_hash = ?").query([.hash(digest)]) {
            (r) throws(IndexError) in
            ids.append(r.int64(0))
            return true
        }
        return ids
    }

    /// Whether no row may hold any of `digests` (false: one may). One look at the digest table
    /// for them all — a group of new puts asks this, not once a put.
    func noRowMayHold(_ digests: [ContentHash]) throws(IndexError) -> Bool {
        if let table = self.digests { return table.containsNone(of: digests) }
        for digest in digests where try !entryIDs(of: digest).isEmpty { return false }
        return true
    }

    /// Rows were inserted, each with its digest: ``noteInserted(_:id:)`` for them all, with one
    /// hold of the digest table's lock.
    func noteInserted(_ rows: [(digest: ContentHash, id: Int64)]) {
        digests?.insert(rows)
        if isInTransaction { insertedDigests += rows }
    }

    /// An entry row with `digest` was inserted as row `id`: in the table at once (before its
    /// transaction commits: a candidate that is not yet a row costs a reader one lookup).
    func noteInserted(_ digest: ContentHash, id: Int64) {
        digests?.insert(digest, id: id)
        if isInTransaction { insertedDigests.append((digest, id)) }
    }

    /// Row `id`, with `digest`, was deleted: out of the table once that is committed (until
    /// then readers still see the row).
    func noteRemoved(_ digest: ContentHash, id: Int64) {
        if isInTransaction {
            removedDigests.append((digest, id))
        } else {
            digests?.remove([(digest, id)])
        }
    }

    /// Row `id` now holds `row`, whose blob record is at `blob`: its place, set when the
    /// transaction commits (at once outside one). Call after the statement that wrote it.
    func stagePlace(of row: EntryRow, id: Int64, blob: BlobPlace?) {
        guard let blob, let place = EntryPlace(row, blob: blob) else { return }
        places?.stage(place, id: id, now: !isInTransaction)
    }

    /// The open transaction ended: a commit takes its deleted rows out of the table and sets
    /// its rows' places; a rollback takes out the rows it inserted (the places its statements
    /// took away stay away: their rows are read through SQLite until written again).
    func transactionEnded(committed: Bool) {
        digests?.remove(committed ? removedDigests : insertedDigests)
        places?.transactionEnded(committed: committed)
        insertedDigests.removeAll()
        removedDigests.removeAll()
    }
}

/// Keeps the places of an ``EntryDigestTable`` with one writer connection's changes: SQLite
/// reports every entry row the connection inserts, updates or deletes (its update hook,
/// ``rowChanged(_:)``), whatever statement made the change, and those rows' places are taken
/// away before the change can be seen: in one hold of the table's lock, right before the
/// transaction commits (SQLite's commit hook, ``transactionEnding()``, which also runs before a
/// statement outside a transaction commits itself). Until then the places describe the
/// committed rows, which are all another connection sees. A write that knows the row's new place
/// stages it, and the place is set when the transaction has committed. Confined to the
/// connection's owner, like the connection.
final class PlaceKeeper {
    private let table: EntryDigestTable
    /// Places of rows the open transaction wrote, and read times it raised.
    private var staged: [Int64: EntryPlace] = [:]
    private var stagedReads: [Int64: Int64] = [:]
    /// Rows the open transaction changed, whose places go before it commits (one hold of the
    /// table's lock for them all, not one a row: the puts' key lookups wait on that lock).
    private var changed: [Int64] = []
    /// Set while statements that change read times alone run: their rows keep their places.
    var keepingPlaces = false

    init(_ table: EntryDigestTable) {
        self.table = table
    }

    /// Entry row `id` was inserted, updated or deleted (inside the statement): its place no
    /// longer holds once the change commits, and one staged for it earlier in the transaction is
    /// outdated.
    func rowChanged(_ id: Int64) {
        guard !keepingPlaces else { return }
        staged[id] = nil
        changed.append(id)
    }

    /// The connection's transaction is about to commit, or rolled back: the places of the rows it
    /// changed go now (after a rollback they would still hold; they go all the same, and those
    /// rows are read through SQLite until written again).
    func transactionEnding() {
        guard !changed.isEmpty else { return }
        table.forgetPlaces(changed)
        changed.removeAll(keepingCapacity: true)
    }

    /// Row `id`'s new place, set when the transaction commits (`now`: outside one, at once).
    func stage(_ place: EntryPlace, id: Int64, now: Bool) {
        if now { table.setPlaces([id: place]) } else { staged[id] = place }
    }

    /// Row `id`'s read time was raised to `time`.
    func stageRead(id: Int64, at time: Int64, now: Bool) {
        if now { table.noteReads([id: time]) } else { stagedReads[id] = max(time, stagedReads[id] ?? time) }
    }

    func transactionEnded(committed: Bool) {
        if committed {
            table.setPlaces(staged)
            table.noteReads(stagedReads)
        }
        staged.removeAll()
        stagedReads.removeAll()
    }
}
