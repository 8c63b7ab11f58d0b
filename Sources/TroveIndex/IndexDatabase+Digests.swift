public import TroveCore

// The entry digest table (schema 7): loading it, and keeping it with this connection's writes.
// Every statement that adds or deletes an entry row reports it here, so the rule "no committed
// row is missing from the table" has one owner.

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

    /// The open transaction ended: a commit takes its deleted rows out of the table, a rollback
    /// the rows it inserted.
    func transactionEnded(committed: Bool) {
        digests?.remove(committed ? removedDigests : insertedDigests)
        insertedDigests.removeAll()
        removedDigests.removeAll()
    }
}
