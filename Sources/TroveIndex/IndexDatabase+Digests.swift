public import TroveCore

// The entry digest table (schema 7): loading it, and keeping it with this connection's writes.
// Every statement that adds or deletes an entry row reports it here, so the rule "no committed
// row is missing from the table" has one owner; SQLite reports every changed entry row here
// (`entryRowChanged`), so the rule "no place is older than its row" has one too.

extension IndexDatabase {
    /// Fills the writer's ``digests`` with every entry row's id by its key digest: one scan of
    /// the table. Rows whose digest is not a 16-byte BLOB match no lookup and are left out. Two
    /// rows with the same digest break the one-row-per-key rule that lookups and writes rely on:
    /// the writer refuses the index (`.corrupt`, which the store reports with the advice to run
    /// `trove fsck --rebuild-index`).
    func loadDigests() throws(IndexError) {
        guard let digests else { return }
        var pairs: [(key: UInt64, id: Int64)] = []
        var places: [Int64: EntryPlace] = [:]
        let rows = Int(try connection.statement("SELECT count(*) FROM entries").first { $0.int64(0) } ?? 0)
        pairs.reserveCapacity(rows)
        places.reserveCapacity(rows)
        // With each row, where its records are when its blob and link are neighbours (a put's),
        // and what the row says of its link (hashed from the column bytes: no strings made).
        try connection.statement(
            """
            SELECT e.id, e.key_hash, e.sequence, e.link_segment, e.link_offset, e.link_length, e.accessed_at,
                b.segment, b.offset, b.record_bytes,
                e.url, e.variant, e.etag, e.last_modified, e.cache_policy, e.blob, e.created_at, e.expires_at,
                b.hash, b.length
            FROM entries e LEFT JOIN blobs b ON b.id = e.blob
            """
        ).query { (r) throws(IndexError) in
            guard let digest = r.hash(1) else { return true }
            let id = r.int64(0)
            pairs.append((digests.key(of: digest), id))
            // Columns a row of this store never holds (negative places, a NULL where a value
            // belongs) make no place: the row is read through SQLite, which judges it.
            guard !r.isNull(7), r.int64(7) == r.int64(3), r.int64(8) >= 0, r.int64(9) > 0, r.int64(5) > 0,
                r.int64(4) == r.int64(8) &+ r.int64(9), let segment = UInt32(exactly: r.int64(3)),
                let span = UInt32(exactly: r.int64(9) &+ r.int64(5)), r.int64(9) &+ r.int64(5) > 0,
                !r.isNull(10), !r.isNull(11), let blobHash = r.hash(18), r.int64(19) >= 0
            else { return true }
            var builder = FingerprintBuilder()
            for column: Int32 in 10...14 {
                if let bytes = r.textBytes(column) { builder.text(bytes) } else { builder.absent() }
            }
            let fingerprint = builder.finish(
                blobID: r.int64(15), blobHash: blobHash, blobLength: r.int64(19), linkLength: r.int64(5),
                createdAt: r.int64(16), expiresAt: r.optionalInt64(17))
            places[id] = EntryPlace(
                sequence: r.sequence(2), blobOffset: UInt64(r.int64(8)), accessedAt: r.int64(6), fingerprint: fingerprint,
                segment: segment, span: span)
            return true
        }
        digests.replace(with: pairs, places: places)
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
/// reports every entry row the connection inserts, updates or deletes (its update hook), and
/// ``rowChanged(_:)`` takes that row's place away at once, whatever statement made the change;
/// a write that knows the row's new place stages it, and the place is set when the transaction
/// commits. Confined to the connection's owner, like the connection.
final class PlaceKeeper {
    private let table: EntryDigestTable
    /// Places of rows the open transaction wrote, and read times it raised.
    private var staged: [Int64: EntryPlace] = [:]
    private var stagedReads: [Int64: Int64] = [:]
    /// Set while statements that change read times alone run: their rows keep their places.
    var keepingPlaces = false

    init(_ table: EntryDigestTable) {
        self.table = table
    }

    /// Entry row `id` was inserted, updated or deleted (inside the statement): its place no
    /// longer holds, and one staged for it earlier in the transaction is outdated.
    func rowChanged(_ id: Int64) {
        guard !keepingPlaces else { return }
        staged[id] = nil
        table.forgetPlace(id)
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
