public import TroveCore

// What recovery, rebuilds and fsck need beyond the commit path: the store secret, whole-table
// reads, blob rows set from the packs, and the damage registry.

extension IndexDatabase {
    // MARK: Store secret

    /// The store secret kept in the meta table (two 64-bit halves), if any.
    public func secret() throws(IndexError) -> (first: UInt64, second: UInt64)? {
        guard let first = try meta("secret.first"), let second = try meta("secret.second") else { return nil }
        return (UInt64(bitPattern: first), UInt64(bitPattern: second))
    }

    /// Stores the store secret.
    public func setSecret(first: UInt64, second: UInt64) throws(IndexError) {
        try setMeta("secret.first", Int64(bitPattern: first))
        try setMeta("secret.second", Int64(bitPattern: second))
    }

    // MARK: Committed sequence

    /// The sequence below which every write is applied to this index, as its two copies in the
    /// meta table give it (values outside 0…2⁶² count as damaged and are ignored), raised to
    /// what the rows show; nil for an index that never committed anything (a new or lost one).
    ///
    /// `lower` and `higher` differ only when one copy is damaged. Each use takes the side a
    /// damaged copy cannot turn against it: replaying a tail trusts `lower` (a raised copy must
    /// not make it skip writes it has to apply), repair trusts `higher` (a lowered copy must
    /// not make it restore what may have been removed).
    public func committedSequence() throws(IndexError) -> (lower: UInt64, higher: UInt64)? {
        let valid: (Int64?) -> UInt64? = { value in
            guard let value, value >= 0, value < Self.sequenceLimit else { return nil }
            return UInt64(value)
        }
        let copies = [try meta("sequence"), try meta("sequence.copy")].compactMap(valid)
        let rows = try connection.statement("SELECT max(sequence) FROM entries").first { $0.isNull(0) ? nil : $0.int64(0) } ?? nil
        let blobs = try connection.statement("SELECT max(id) FROM blobs").first { $0.isNull(0) ? nil : $0.int64(0) } ?? nil
        let shown = [rows, blobs].compactMap(valid).map { $0 + 1 }.max()
        guard !copies.isEmpty || shown != nil else { return nil }
        let floor = shown ?? 0
        return (max(copies.min() ?? floor, floor), max(copies.max() ?? floor, floor))
    }

    /// The highest copy of the committed sequence the meta table holds (nil when neither is
    /// in range). Unlike ``committedSequence()`` it ignores the rows: a row claiming this
    /// number or more was never committed — it is damaged.
    public func recordedSequence() throws(IndexError) -> UInt64? {
        [try meta("sequence"), try meta("sequence.copy")].compactMap { value -> UInt64? in
            guard let value, value >= 0, value < Self.sequenceLimit else { return nil }
            return UInt64(value)
        }.max()
    }

    /// Sequence numbers a store hands out stay below this (2⁵⁶, some 7 × 10¹⁶ writes): a
    /// stored value at or above it is damage and ignored, and anything up to 2⁶² still fits.
    public static let sequenceLimit: Int64 = 1 << 56

    /// Whether the meta table has no copy of the committed sequence in range (both gone, or
    /// damaged): then only the packs can say which numbers were used.
    public func hasLostSequence() throws(IndexError) -> Bool {
        [try meta("sequence"), try meta("sequence.copy")].allSatisfy { value in
            guard let value else { return true }
            return value < 0 || value >= Self.sequenceLimit
        }
    }

    /// Records that every write below `sequence` is applied (both copies).
    public func setCommittedSequence(_ sequence: UInt64) throws(IndexError) {
        try setMeta("sequence", Int64(bitPattern: sequence))
        try setMeta("sequence.copy", Int64(bitPattern: sequence))
    }

    // MARK: Whole tables

    /// Every entry row (without its blob), in key-digest order: read from the table itself.
    public func entryRows() throws(IndexError) -> [EntryRow] {
        var out: [EntryRow] = []
        try connection.statement("SELECT \(Self.entryColumns) FROM entries e NOT INDEXED ORDER BY e.key_hash").query {
            (r) throws(IndexError) in
            out.append(Self.entryRow(r))
            return true
        }
        return out
    }

    /// Every blob row, by id.
    public func blobRows() throws(IndexError) -> [BlobRow] {
        var out: [BlobRow] = []
        try connection.statement("SELECT \(Self.blobColumns) FROM blobs b ORDER BY b.id").query { (r) throws(IndexError) in
            out.append(Self.blobRow(r, from: 0))
            return true
        }
        return out
    }

    /// The entry row with digest `digest` (whatever its key columns say), without its blob.
    public func entryRow(digest: ContentHash) throws(IndexError) -> EntryRow? {
        for id in try entryIDs(of: digest) {
            if let row = try statement(.entryRowByID).first([.integer(id), .hash(digest)], Self.entryRow) { return row }
        }
        return nil
    }

    /// Sets blob `id`'s row to what the packs hold (inserting it when missing), keeping its
    /// reference count. Run inside a transaction; recompute derived columns afterwards.
    public func setBlob(
        id: Int64, hash: ContentHash, length: UInt64, segment: UInt32, offset: UInt64, recordBytes: UInt64
    ) throws(IndexError) {
        try connection.statement(
            """
            INSERT INTO blobs(id, hash, length, segment, offset, record_bytes, refs) VALUES (?, ?, ?, ?, ?, ?, 0)
            ON CONFLICT(id) DO UPDATE SET hash = excluded.hash, length = excluded.length, segment = excluded.segment,
                offset = excluded.offset, record_bytes = excluded.record_bytes
            """
        ).run([
            .integer(id), .hash(hash), .integer(Int64(length)), .integer(Int64(segment)),
            .integer(Int64(offset)), .integer(Int64(recordBytes)),
        ])
    }

    /// Deletes blob `id`'s row (no entry may link to it). Run inside a transaction.
    public func deleteBlob(_ id: Int64) throws(IndexError) {
        try connection.statement("DELETE FROM blobs WHERE id = ?").run([.integer(id)])
    }

    /// Deletes the entry row with digest `digest` without touching its blob's counts (for rows
    /// whose columns cannot be trusted; recompute derived columns afterwards).
    public func deleteEntryRow(digest: ContentHash) throws(IndexError) {
        let delete = try connection.statement("DELETE FROM entries WHERE id = ? AND key_hash = ?")
        for id in try entryIDs(of: digest) {
            try delete.run([.integer(id), .hash(digest)])
            if connection.changes > 0 { noteRemoved(digest, id: id) }
        }
    }

    /// Deletes every entry row whose key digest is not a 16-byte BLOB, without touching its
    /// blob's counts: a damaged row that no lookup by digest reaches and that
    /// ``deleteEntryRow(digest:)`` cannot name (recompute derived columns afterwards).
    public func deleteMalformedEntryRows() throws(IndexError) {
        try connection.statement("DELETE FROM entries WHERE typeof(key_hash) != 'blob' OR length(key_hash) != 16").run()
    }

    // MARK: Damage registry

    /// Records damage (once per segment, start and kind; a second report replaces the first).
    public func recordDamage(_ row: DamageRow) throws(IndexError) {
        try connection.statement(
            "INSERT OR REPLACE INTO damage(segment, start, end, kind, message, found_at) VALUES (?, ?, ?, ?, ?, ?)"
        ).run([
            .integer(Int64(row.segment)), .integer(Int64(row.start)), .integer(Int64(row.end)), .text(row.kind),
            .text(row.message), .integer(row.foundAt),
        ])
    }

    /// Every recorded damage, by segment and offset.
    public func damage() throws(IndexError) -> [DamageRow] {
        var out: [DamageRow] = []
        try connection.statement("SELECT segment, start, end, kind, message, found_at FROM damage ORDER BY segment, start")
            .query { (r) throws(IndexError) in
                out.append(
                    DamageRow(
                        segment: UInt32(truncatingIfNeeded: r.int64(0)), start: r.position(1),
                        end: r.position(2), kind: r.text(3), message: r.text(4), foundAt: r.int64(5)))
                return true
            }
        return out
    }

    /// Forgets the recorded damage of `kind` in `segment`.
    public func clearDamage(segment: UInt32, kind: String) throws(IndexError) {
        try connection.statement("DELETE FROM damage WHERE segment = ? AND kind = ?").run([
            .integer(Int64(segment)), .text(kind),
        ])
    }

    /// Forgets recorded damage: all of it, or that of `segment`.
    public func clearDamage(segment: UInt32? = nil) throws(IndexError) {
        if let segment {
            try connection.statement("DELETE FROM damage WHERE segment = ?").run([.integer(Int64(segment))])
        } else {
            try connection.statement("DELETE FROM damage").run()
        }
    }
}
