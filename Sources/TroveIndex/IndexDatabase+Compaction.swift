public import TroveCore

// Queries of the compactor: victims for expiry and eviction, and moving records between
// segments.

extension IndexDatabase {
    /// Up to `limit` entries that expired at or before `now` (ms), soonest-expired first.
    public func expiredEntries(now: Int64, limit: Int) throws(IndexError) -> [EntryRow] {
        try rows(
            "SELECT \(Self.entryColumns) FROM entries e WHERE e.expires_at IS NOT NULL AND e.expires_at <= ? "
                + "ORDER BY e.expires_at LIMIT ?", [.integer(now), .integer(Int64(limit))])
    }

    /// Up to `limit` entries created before `cutoff` (ms), oldest first. Scans the table: for
    /// on-demand TTLs (`trove compact --ttl`), not for the background path.
    public func entriesCreated(before cutoff: Int64, limit: Int) throws(IndexError) -> [EntryRow] {
        try rows(
            "SELECT \(Self.entryColumns) FROM entries e WHERE e.created_at < ? ORDER BY e.created_at LIMIT ?",
            [.integer(cutoff), .integer(Int64(limit))])
    }

    /// The `limit` least recently read entries.
    public func leastRecentlyUsed(limit: Int) throws(IndexError) -> [EntryRow] {
        try rows("SELECT \(Self.entryColumns) FROM entries e ORDER BY e.accessed_at LIMIT ?", [.integer(Int64(limit))])
    }

    private func rows(_ sql: String, _ values: [SQLiteValue]) throws(IndexError) -> [EntryRow] {
        var out: [EntryRow] = []
        try connection.statement(sql).query(values) { (r) throws(IndexError) in
            out.append(Self.entryRow(r))
            return true
        }
        return out
    }

    /// Records that blob `id` now lives at `offset` of `segment` in a record of `recordBytes`
    /// (a copy into the current format may differ in size), moving its live bytes.
    public func moveBlob(_ id: Int64, to segment: UInt32, offset: UInt64, recordBytes: UInt64) throws(IndexError) {
        guard let blob = try blob(id: id) else { return }
        try connection.statement("UPDATE blobs SET segment = ?, offset = ?, record_bytes = ? WHERE id = ?")
            .run([.integer(Int64(segment)), .integer(Int64(offset)), .integer(Int64(recordBytes)), .integer(id)])
        if blob.references > 0 {
            try addLiveBytes(-Int64(blob.recordBytes), segment: blob.segment)
            try addLiveBytes(Int64(recordBytes), segment: segment)
        }
    }

    /// Records that the link record of entry `digest`, copied from `from`, now lives at
    /// `offset` of `segment` in a record of `length` bytes, moving its live bytes — only if the
    /// entry still points at `from` (a newer write for the key may have been committed since
    /// the copy was made).
    /// - Returns: whether the entry was moved.
    @discardableResult
    public func moveLink(
        of digest: ContentHash, from: (segment: UInt32, offset: UInt64), to segment: UInt32, offset: UInt64, length: UInt64
    ) throws(IndexError) -> Bool {
        var found: (id: Int64, length: Int64)?
        for id in try entryIDs(of: digest) where found == nil {
            found = try connection.statement(
                "SELECT id, link_length FROM entries WHERE id = ? AND key_hash = ? AND link_segment = ? AND link_offset = ?"
            ).first([.integer(id), .hash(digest), .integer(Int64(from.segment)), .integer(Int64(from.offset))]) {
                ($0.int64(0), $0.int64(1))
            }
        }
        guard let (id, old) = found else { return false }
        try connection.statement("UPDATE entries SET link_segment = ?, link_offset = ?, link_length = ? WHERE id = ?")
            .run([.integer(Int64(segment)), .integer(Int64(offset)), .integer(Int64(length)), .integer(id)])
        try addLiveBytes(-old, segment: from.segment)
        try addLiveBytes(Int64(length), segment: segment)
        return true
    }

    /// The offsets of the records in `segment` that index rows name (blobs and link records),
    /// at or past `offset`, ascending.
    public func referencedOffsets(inSegment segment: UInt32, from offset: UInt64) throws(IndexError) -> [UInt64] {
        var out: [UInt64] = []
        try connection.statement(
            """
            SELECT offset FROM blobs WHERE segment = ?1 AND offset >= ?2
            UNION SELECT link_offset FROM entries WHERE link_segment = ?1 AND link_offset >= ?2 ORDER BY 1
            """
        ).query([.integer(Int64(segment)), .integer(Int64(offset))]) { (r) throws(IndexError) in
            out.append(r.position(0))
            return true
        }
        return out
    }

    /// The offsets of the link records in `segment` that entry rows point at, read from the
    /// table (not through an index: a row whose digest cell was lost is found too).
    public func linkOffsets(inSegment segment: UInt32) throws(IndexError) -> [UInt64] {
        var out: [UInt64] = []
        try connection.statement("SELECT link_offset FROM entries NOT INDEXED WHERE link_segment = ?").query([
            .integer(Int64(segment))
        ]) { (r) throws(IndexError) in
            out.append(r.position(0))
            return true
        }
        return out
    }

    /// Deletes the rows of blobs in `segment` that no entry links to (by the entries, whatever
    /// the counts say); returns their ids and hashes (a row without a readable hash is deleted
    /// and left out).
    @discardableResult
    public func deleteDeadBlobs(in segment: UInt32) throws(IndexError) -> [(id: Int64, hash: ContentHash)] {
        var deleted: [(id: Int64, hash: ContentHash)] = []
        try connection.statement(
            """
            DELETE FROM blobs WHERE segment = ? AND refs <= 0 AND NOT EXISTS (SELECT 1 FROM entries e WHERE e.blob = blobs.id)
            RETURNING id, hash
            """
        ).query([.integer(Int64(segment))]) { (r) throws(IndexError) in
            if let hash = r.hash(1) { deleted.append((r.int64(0), hash)) }
            return true
        }
        return deleted
    }
}
