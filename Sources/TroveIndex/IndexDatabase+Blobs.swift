public import TroveCore

// Blobs and segments: content rows, reference counts, and the per-segment accounting that
// recovery and the compactor rely on.

extension IndexDatabase {
    /// The blob with id `id`.
    public func blob(id: Int64) throws(IndexError) -> BlobRow? {
        try statement(.blobByID).first([.integer(id)]) { Self.blobRow($0, from: 0) }
    }

    /// Adds blob `id` with no references yet; it becomes live when an entry links to it.
    /// - Returns: false, changing nothing, when the index has a blob with that id already.
    @discardableResult
    public func insertBlob(
        id: Int64, hash: ContentHash, length: UInt64, segment: UInt32, offset: UInt64, recordBytes: UInt64
    ) throws(IndexError) -> Bool {
        try statement(.insertBlob).run([
            .integer(id), .hash(hash), .integer(Int64(length)), .integer(Int64(segment)),
            .integer(Int64(offset)), .integer(Int64(recordBytes)),
        ])
        return connection.changes > 0
    }

    /// The id and hash of at most `limit` blob rows with an id above `id`, in id order, and the
    /// last id read (nil: none is left): what the store's dedup hints are loaded from, one short
    /// query a batch (a snapshot held for a whole pass would keep a TRUNCATE checkpoint waiting).
    public func blobHashes(after id: Int64, limit: Int) throws(IndexError) -> (
        hashes: [(id: Int64, hash: ContentHash)], last: Int64?
    ) {
        var batch: [(id: Int64, hash: ContentHash)] = []
        batch.reserveCapacity(limit)
        var last: Int64?
        try statement(.blobHashes).query([.integer(id), .integer(Int64(limit))]) { (r) throws(IndexError) in
            last = r.int64(0)
            if let hash = r.hash(1) { batch.append((r.int64(0), hash)) }
            return true
        }
        return (batch, last)
    }

    /// Adds a reference to blob `id`; returns what its row says of it (nil: no such blob, or a
    /// row no place can be made from).
    @discardableResult
    func retainBlob(_ id: Int64) throws(IndexError) -> BlobPlace? {
        // 0 → 1: the blob record becomes live bytes of its segment.
        let after = try statement(.retainBlob).first([.integer(id)]) { r in
            (
                r.int64(0), UInt32(truncatingIfNeeded: r.int64(1)), r.int64(2), r.int64(3), r.hash(4), r.int64(5)
            )
        }
        guard let (refs, segment, bytes, offset, hash, length) = after else { return nil }
        if refs == 1 { try addLiveBytes(bytes, segment: segment) }
        guard offset >= 0, bytes >= 0, length >= 0, let hash else { return nil }
        return BlobPlace(
            hash: hash, length: UInt64(length), segment: segment, offset: UInt64(offset), recordBytes: UInt64(bytes))
    }

    func releaseBlob(_ id: Int64) throws(IndexError) {
        // 1 → 0: the blob is dead; its bytes are garbage for the compactor, which also deletes
        // the row when it reclaims them. Until then a put of equal bytes may link to it again.
        let after = try statement(.releaseBlob).first([.integer(id)]) {
            ($0.int64(0), UInt32(truncatingIfNeeded: $0.int64(1)), $0.int64(2))
        }
        if let (refs, segment, bytes) = after, refs == 0 {
            try addLiveBytes(-bytes, segment: segment)
        }
    }

    // MARK: Segments

    /// Every segment row, by id.
    public func segments() throws(IndexError) -> [SegmentRow] {
        try writeLiveByteDeltas()
        var out: [SegmentRow] = []
        try connection.statement("SELECT id, indexed_bytes, live_bytes, sealed FROM segments ORDER BY id").query {
            (r) throws(IndexError) in
            out.append(
                SegmentRow(
                    id: UInt32(truncatingIfNeeded: r.int64(0)), indexedBytes: r.position(1),
                    liveBytes: Int64(r.position(2)), isSealed: r.int64(3) != 0))
            return true
        }
        return out
    }

    /// Adds a segment row.
    public func insertSegment(id: UInt32, indexedBytes: UInt64) throws(IndexError) {
        try connection.statement("INSERT OR IGNORE INTO segments(id, indexed_bytes) VALUES (?, ?)")
            .run([.integer(Int64(id)), .integer(Int64(indexedBytes))])
    }

    /// Records that the index reflects segment `id` up to `indexedBytes`.
    public func setIndexedBytes(_ indexedBytes: UInt64, segment id: UInt32) throws(IndexError) {
        try statement(.setIndexedBytes).run([.integer(Int64(indexedBytes)), .integer(Int64(id))])
    }

    /// Marks segment `id` sealed.
    public func sealSegment(_ id: UInt32) throws(IndexError) {
        try connection.statement("UPDATE segments SET sealed = 1 WHERE id = ?").run([.integer(Int64(id))])
    }

    /// Changes the live bytes of segment `id` by `delta` (written when the transaction commits).
    public func addLiveBytes(_ delta: Int64, segment id: UInt32) throws(IndexError) {
        guard delta != 0 else { return }
        // Saturating: a damaged length must not trap (fsck recomputes the counts anyway).
        let (sum, overflow) = liveByteDeltas[id, default: 0].addingReportingOverflow(delta)
        liveByteDeltas[id] = overflow ? (delta < 0 ? .min : .max) : sum
    }

    /// Writes the accumulated live-byte changes, one statement per segment.
    func writeLiveByteDeltas() throws(IndexError) {
        guard !liveByteDeltas.isEmpty else { return }
        let update = try statement(.addLiveBytes)
        for (id, delta) in liveByteDeltas.sorted(by: { $0.key < $1.key }) where delta != 0 {
            try update.run([.integer(delta), .integer(Int64(id))])
        }
        liveByteDeltas.removeAll(keepingCapacity: true)
    }

    /// Drops every entry whose blob or link record in segment `id` ends past `limit`, and the
    /// blobs there: used when those bytes are gone (a truncated or missing file; `limit` 0
    /// drops everything in the segment). Run inside a transaction.
    /// - Returns: the dropped entries.
    public func dropRecords(segment id: UInt32, beyond limit: UInt64) throws(IndexError) -> [EntryRow] {
        var doomed: [EntryRow] = []
        try connection.statement(
            """
            SELECT \(Self.entryColumns) FROM entries e JOIN blobs b ON b.id = e.blob
            WHERE (b.segment = ?1 AND b.offset + b.record_bytes > ?2)
               OR (e.link_segment = ?1 AND e.link_offset + e.link_length > ?2)
            """
        ).query([.integer(Int64(id)), .integer(Int64(limit))]) { (r) throws(IndexError) in
            doomed.append(Self.entryRow(r))
            return true
        }
        for row in doomed { try removeEntry(digest: row.keyDigest) }
        try connection.statement("DELETE FROM blobs WHERE segment = ? AND offset + record_bytes > ?")
            .run([.integer(Int64(id)), .integer(Int64(limit))])
        return doomed
    }

    /// Deletes segment `id`'s row (its records must already be gone from the index).
    public func deleteSegment(_ id: UInt32) throws(IndexError) {
        liveByteDeltas[id] = nil
        try connection.statement("DELETE FROM segments WHERE id = ?").run([.integer(Int64(id))])
    }
}
