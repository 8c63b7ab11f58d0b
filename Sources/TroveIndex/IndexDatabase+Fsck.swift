public import TroveCore

// Queries of fsck: whole-table walks and recomputations of derived columns.

extension IndexDatabase {
    /// Blobs whose stored reference count differs from the number of entries linked to them:
    /// (id, stored, actual).
    public func wrongReferenceCounts() throws(IndexError) -> [(id: Int64, stored: Int64, actual: Int64)] {
        var out: [(Int64, Int64, Int64)] = []
        try connection.statement(
            """
            SELECT b.id, b.refs, (SELECT count(*) FROM entries e WHERE e.blob = b.id) AS actual
            FROM blobs b WHERE b.refs != actual
            """
        ).query { (r) throws(IndexError) in
            out.append((r.int64(0), r.int64(1), r.int64(2)))
            return true
        }
        return out
    }

    /// Segments whose stored live bytes differ from what the rows add up to:
    /// (segment, stored, actual).
    public func wrongLiveBytes() throws(IndexError) -> [(segment: UInt32, stored: Int64, actual: Int64)] {
        try writeLiveByteDeltas()
        var out: [(UInt32, Int64, Int64)] = []
        try connection.statement(
            """
            SELECT s.id, s.live_bytes,
                coalesce((SELECT sum(b.record_bytes) FROM blobs b WHERE b.segment = s.id AND b.refs > 0), 0)
                + coalesce((SELECT sum(e.link_length) FROM entries e WHERE e.link_segment = s.id), 0) AS actual
            FROM segments s WHERE s.live_bytes != actual
            """
        ).query { (r) throws(IndexError) in
            out.append((UInt32(truncatingIfNeeded: r.int64(0)), r.int64(1), r.int64(2)))
            return true
        }
        return out
    }

    /// Sets every blob's reference count to the number of entries linked to it, and every
    /// segment's live bytes to what the rows add up to. Run inside a transaction.
    public func recomputeDerivedColumns() throws(IndexError) {
        liveByteDeltas.removeAll()
        try connection.execute("UPDATE blobs SET refs = (SELECT count(*) FROM entries e WHERE e.blob = blobs.id)")
        try connection.execute(
            """
            UPDATE segments SET live_bytes =
                coalesce((SELECT sum(b.record_bytes) FROM blobs b WHERE b.segment = segments.id AND b.refs > 0), 0)
                + coalesce((SELECT sum(e.link_length) FROM entries e WHERE e.link_segment = segments.id), 0)
            """)
    }
}
