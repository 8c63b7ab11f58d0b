public import TroveCore

// Entries: lookups, linking a key to a blob (with reference counting and live-byte
// accounting), removal, access times, enumeration.

extension IndexDatabase {
    /// The entries columns that ``entryRow(_:)`` reads, in its order.
    static let entryColumnNames = [
        "key_hash", "url", "variant", "blob", "link_segment", "link_offset", "link_length", "sequence", "etag",
        "last_modified", "expires_at", "created_at", "accessed_at", "cost", "cache_policy",
    ]
    static let entryColumns = entryColumnNames.map { "e." + $0 }.joined(separator: ", ")
    /// The same columns unqualified, for `RETURNING` (which takes no table names).
    static let entryReturningColumns = entryColumnNames.joined(separator: ", ")
    static let blobColumns = "b.id, b.hash, b.length, b.segment, b.offset, b.record_bytes, b.refs"

    static func entryRow(_ r: SQLiteRow) -> EntryRow {
        EntryRow(
            keyDigest: r.hash(0) ?? ContentHash(high: 0, low: 0), url: r.text(1), variant: r.text(2),
            blobID: r.int64(3), linkSegment: UInt32(truncatingIfNeeded: r.int64(4)),
            linkOffset: r.position(5), linkLength: r.position(6),
            sequence: r.sequence(7), etag: r.optionalText(8), lastModified: r.optionalText(9),
            expiresAt: r.optionalInt64(10), createdAt: r.int64(11), accessedAt: r.int64(12), cost: Int64(r.position(13)),
            cachePolicy: r.optionalText(14))
    }

    static func blobRow(_ r: SQLiteRow, from c: Int32) -> BlobRow {
        BlobRow(
            id: r.int64(c), hash: r.hash(c + 1) ?? ContentHash(high: 0, low: 0),
            length: r.position(c + 2), segment: UInt32(truncatingIfNeeded: r.int64(c + 3)),
            offset: r.position(c + 4), recordBytes: r.position(c + 5),
            references: r.int64(c + 6))
    }

    /// The entry whose key digest is `digest`, with its blob: its row found by id through
    /// ``digests`` (one lookup by row id per candidate, most often one; none for a new key).
    ///
    /// The caller compares the returned URL and variant with its key: digests can collide.
    public func entry(digest: ContentHash) throws(IndexError) -> IndexedEntry? {
        for id in try entryIDs(of: digest) {
            let found = try statement(.entryByID).first([.integer(id), .hash(digest)]) {
                IndexedEntry(entry: Self.entryRow($0), blob: Self.blobRow($0, from: 15))
            }
            if let found { return found }
        }
        return nil
    }

    /// Every entry of `url` (all its variants), with their blobs, ordered by variant.
    public func entries(url: String) throws(IndexError) -> [IndexedEntry] {
        // The original by its digest, the variants through the partial URL index.
        var out: [IndexedEntry] = []
        if let original = try entry(digest: CacheKey(url: url).digest), original.entry.url.hasSameUTF8(as: url),
            original.entry.variant.isEmpty
        {
            out.append(original)
        }
        try statement(.variantsByURL).query([.integer(CacheKey.urlDigest(url)), .text(url)]) { (r) throws(IndexError) in
            out.append(IndexedEntry(entry: Self.entryRow(r), blob: Self.blobRow(r, from: 15)))
            return true
        }
        return out
    }

    /// Calls `body` for every entry, in key order, until it returns false.
    public func forEachEntry(_ body: (IndexedEntry) -> Bool) throws(IndexError) {
        try connection.statement(
            "SELECT \(Self.entryColumns), \(Self.blobColumns) FROM entries e NOT INDEXED JOIN blobs b ON b.id = e.blob "
                + "ORDER BY e.url, e.variant"
        ).query { (r) throws(IndexError) in body(IndexedEntry(entry: Self.entryRow(r), blob: Self.blobRow(r, from: 15))) }
    }

    /// Links `row.keyDigest` to `row.blobID`, replacing any entry for the same digest.
    ///
    /// Keeps reference counts and segment live bytes right: the new blob gains a reference,
    /// the replaced entry's blob loses one (and is deleted at zero). Run inside a transaction.
    /// - Returns: the replaced entry, if any.
    @discardableResult
    public func link(_ row: EntryRow) throws(IndexError) -> EntryRow? {
        let replaced = try entryRow(digest: row.keyDigest)
        try link(row, replacing: replaced)
        return replaced
    }

    /// Links `row.keyDigest` to `row.blobID` like ``link(_:)``, when the caller has just read
    /// the digest's current row (`current`, nil for none) in this transaction: one lookup
    /// fewer, the committer's path.
    public func link(_ row: EntryRow, replacing current: EntryRow?) throws(IndexError) {
        // Retain first: when the replaced entry links to the same blob, releasing it first
        // would drop the blob to zero references.
        let blob = try retainBlob(row.blobID)
        try write(row, replacing: current, blob: blob)
    }

    /// Writes `row` in place of `current` (the key's row, nil for none), releasing `current`'s
    /// blob and moving the link's live bytes; `row`'s blob is already retained, its record at
    /// `blob` (when known: the row's place in ``digests`` is set from it).
    private func write(
        _ row: EntryRow, replacing current: EntryRow?, blob: BlobPlace?
    )
        throws(IndexError)
    {
        if let current {
            try addLiveBytes(-Int64(current.linkLength), segment: current.linkSegment)
            try releaseBlob(current.blobID)
            // The caller read `current` in this transaction: exactly one candidate row holds it.
            var changed = 0
            for id in try entryIDs(of: row.keyDigest) {
                try statement(.replaceEntry).run(Self.values(of: row) + [.integer(id)])
                guard connection.changes > 0 else { continue }
                changed += connection.changes
                stagePlace(of: row, id: id, blob: blob)
            }
            // An update that found no row would leave the key unlinked after its old blob was
            // released.
            guard changed == 1 else {
                throw IndexError(
                    code: .corrupt,
                    message: changed == 0
                        ? "the entry of \(row.url) (variant '\(row.variant)') was gone when it was replaced"
                        : "\(changed) entry rows share the key digest of \(row.url) (variant '\(row.variant)')")
            }
        } else {
            // One row per key is this connection's to keep (schema 7 has no unique index): a
            // caller that read no row for the key must be right. A new key has no candidate and
            // costs nothing here; a candidate is checked against its row.
            if try entryRow(digest: row.keyDigest) != nil {
                throw IndexError(
                    code: .corrupt,
                    message: "the entry of \(row.url) (variant '\(row.variant)') was written as new, "
                        + "but the index has a row with its key digest")
            }
            try statement(.insertEntry).run(Self.values(of: row))
            // In the digest table before the transaction commits (readers see the row no
            // earlier); a rollback takes it out again.
            let id = connection.lastInsertRowID
            noteInserted(row.keyDigest, id: id)
            stagePlace(of: row, id: id, blob: blob)
        }
        try addLiveBytes(Int64(row.linkLength), segment: row.linkSegment)
    }

    /// The number of entry rows.
    public func entryCount() throws(IndexError) -> Int {
        Int(try connection.statement("SELECT count(*) FROM entries").first { $0.int64(0) } ?? 0)
    }

    /// Inserts blob `id` — unless a row has that id — already referenced by `row`, which links
    /// to it, and writes `row` in place of `current` (the key's row, if any): the same rows, counts
    /// and live bytes as ``insertBlob(id:hash:length:segment:offset:recordBytes:)`` followed by
    /// ``link(_:replacing:)``, in two statements instead of four. This is how a put of new bytes
    /// is applied. Run inside a transaction.
    ///
    /// - Returns: false, having changed nothing, when a blob row with that id exists (the caller
    ///   links the row the usual way).
    public func insertBlob(
        id: Int64, hash: ContentHash, length: UInt64, segment: UInt32, offset: UInt64, recordBytes: UInt64,
        linking row: EntryRow, replacing current: EntryRow?
    ) throws(IndexError) -> Bool {
        precondition(row.blobID == id, "the row must link the blob it is inserted with")
        try statement(.insertLinkedBlob).run([
            .integer(id), .hash(hash), .integer(Int64(length)), .integer(Int64(segment)),
            .integer(Int64(offset)), .integer(Int64(recordBytes)),
        ])
        guard connection.changes > 0 else { return false }
        // Its first reference: the record becomes live bytes of its segment.
        try addLiveBytes(Int64(recordBytes), segment: segment)
        try write(
            row, replacing: current,
            blob: BlobPlace(hash: hash, length: length, segment: segment, offset: offset, recordBytes: recordBytes))
        return true
    }

    /// A put of new bytes under a key the index has no row for: a new blob, and the entry row
    /// that links it (``insertNewPuts(_:)``).
    public struct NewPut {
        public var blobID: Int64
        public var hash: ContentHash
        public var length: UInt64
        public var segment: UInt32
        public var offset: UInt64
        public var recordBytes: UInt64
        /// The key's row; links blob ``blobID``.
        public var row: EntryRow

        public init(
            blobID: Int64, hash: ContentHash, length: UInt64, segment: UInt32, offset: UInt64, recordBytes: UInt64,
            row: EntryRow
        ) {
            precondition(row.blobID == blobID, "the row must link the blob it is inserted with")
            self.blobID = blobID
            self.hash = hash
            self.length = length
            self.segment = segment
            self.offset = offset
            self.recordBytes = recordBytes
            self.row = row
        }
    }

    /// The group sizes ``insertNewPuts(_:)`` takes, largest first.
    public static let newPutGroupSizes = [16, 4]

    /// Inserts a group of new puts — each a blob row and the entry row linking it, the same rows,
    /// counts, live bytes, digest-table ids and places as
    /// ``insertBlob(id:hash:length:segment:offset:recordBytes:linking:replacing:)`` with no
    /// current row, one put after another — in one statement a table: SQLite then positions its
    /// cursors once for the group instead of once a row (Docs/Benchmarks.md, "new puts in
    /// groups"). The rows get the ids SQLite would have given them one by one (one above the
    /// largest, in order). Run inside a transaction.
    ///
    /// - Returns: false, having changed nothing, unless the blob ids rise and are new (no row has
    ///   an id between the group's first and last), the keys are distinct and none of them may
    ///   have a row: the caller then applies the puts one by one.
    public func insertNewPuts(_ puts: ArraySlice<NewPut>) throws(IndexError) -> Bool {
        precondition(Self.newPutGroupSizes.contains(puts.count), "a group size")
        // Blob ids rising (as the appender gives them), no blob row between the first and the last.
        // By index throughout, not `for put in puts`: each copy of a put retains its row's strings.
        let indices = puts.indices
        guard let low = puts.first?.blobID, let high = puts.last?.blobID,
            indices.dropFirst().allSatisfy({ puts[$0 - 1].blobID < puts[$0].blobID }),
            try statement(.blobInRange).first([.integer(low), .integer(high)], { _ in true }) == nil
        else { return false }
        let digests = indices.map { puts[$0].row.keyDigest }
        for (n, digest) in digests.enumerated() where digests[..<n].contains(digest) { return false }
        guard try noRowMayHold(digests) else { return false }
        let last = try statement(.lastEntryID).first { $0.int64(0) } ?? 0
        guard last >= 0, last <= Int64.max - Int64(puts.count) else { return false }
        let large = puts.count == 16
        var blobValues: [SQLiteValue] = []
        var entryValues: [SQLiteValue] = []
        blobValues.reserveCapacity(puts.count * 6)
        entryValues.reserveCapacity(puts.count * 17)
        for (n, i) in indices.enumerated() {
            blobValues.append(.integer(puts[i].blobID))
            blobValues.append(.hash(puts[i].hash))
            blobValues.append(.integer(Int64(puts[i].length)))
            blobValues.append(.integer(Int64(puts[i].segment)))
            blobValues.append(.integer(Int64(puts[i].offset)))
            blobValues.append(.integer(Int64(puts[i].recordBytes)))
            entryValues.append(.integer(last + 1 + Int64(n)))
            Self.appendValues(of: puts[i].row, to: &entryValues)
        }
        try statement(large ? .insertNewBlobs16 : .insertNewBlobs4).run(blobValues)
        try statement(large ? .insertNewEntries16 : .insertNewEntries4).run(entryValues)
        noteInserted(digests.enumerated().map { (digest: $1, id: last + 1 + Int64($0)) })
        for (n, i) in indices.enumerated() {
            let id = last + 1 + Int64(n)
            // Each blob's first reference: its record becomes live bytes of its segment.
            try addLiveBytes(Int64(puts[i].recordBytes), segment: puts[i].segment)
            stagePlace(
                of: puts[i].row, id: id,
                blob: BlobPlace(
                    hash: puts[i].hash, length: puts[i].length, segment: puts[i].segment, offset: puts[i].offset,
                    recordBytes: puts[i].recordBytes))
            try addLiveBytes(Int64(puts[i].row.linkLength), segment: puts[i].row.linkSegment)
        }
        groupedPuts += puts.count
        return true
    }

    /// The values of `row` in the order of the entry insert statements.
    static func values(of row: EntryRow) -> [SQLiteValue] {
        var values: [SQLiteValue] = []
        values.reserveCapacity(17)
        appendValues(of: row, to: &values)
        return values
    }

    /// Appends the values of `row` in the order of the entry insert statements.
    static func appendValues(of row: EntryRow, to values: inout [SQLiteValue]) {
        values.append(.hash(row.keyDigest))
        values.append(.text(row.url))
        values.append(.text(row.variant))
        values.append(.integer(CacheKey.urlDigest(row.url)))
        values.append(.integer(row.blobID))
        values.append(.integer(Int64(row.linkSegment)))
        values.append(.integer(Int64(row.linkOffset)))
        values.append(.integer(Int64(row.linkLength)))
        values.append(.integer(Int64(bitPattern: row.sequence)))
        values.append(.optional(row.etag))
        values.append(.optional(row.lastModified))
        values.append(.optional(row.expiresAt))
        values.append(.integer(row.createdAt))
        values.append(.integer(row.accessedAt))
        values.append(.integer(row.cost))
        values.append(.optional(row.cachePolicy))
    }

    /// Removes the entry with digest `digest`, releasing its blob. Run inside a transaction.
    /// - Returns: the removed entry, if there was one.
    @discardableResult
    public func removeEntry(digest: ContentHash) throws(IndexError) -> EntryRow? {
        for id in try entryIDs(of: digest) {
            guard let old = try statement(.deleteEntry).first([.integer(id), .hash(digest)], Self.entryRow) else { continue }
            noteRemoved(digest, id: id)
            try addLiveBytes(-Int64(old.linkLength), segment: old.linkSegment)
            try releaseBlob(old.blobID)
            return old
        }
        return nil
    }

    /// Whether any entry links to blob `id` (read from the entries, not the blob's count).
    public func isLinked(blobID id: Int64) throws(IndexError) -> Bool {
        try connection.statement("SELECT 1 FROM entries WHERE blob = ? LIMIT 1").first([.integer(id)]) { _ in true } ?? false
    }

    /// Every entry linked to blob `id`.
    public func entries(blobID id: Int64) throws(IndexError) -> [EntryRow] {
        var out: [EntryRow] = []
        try connection.statement("SELECT \(Self.entryColumns) FROM entries e WHERE e.blob = ?").query([.integer(id)]) {
            (r) throws(IndexError) in
            out.append(Self.entryRow(r))
            return true
        }
        return out
    }

    /// Records read times, in row order (each is an update by row id; run them in one
    /// transaction, rarely).
    public func touch(_ times: [(digest: ContentHash, accessedAt: Int64)]) throws(IndexError) {
        var updates: [(id: Int64, digest: ContentHash, time: Int64)] = []
        for (digest, time) in times {
            for id in try entryIDs(of: digest) { updates.append((id, digest, time)) }
        }
        let update = try statement(.touch)
        // The statement changes read times alone: the rows keep their places, raised.
        places?.keepingPlaces = true
        defer { places?.keepingPlaces = false }
        for (id, digest, time) in updates.sorted(by: { $0.id < $1.id }) {
            try update.run([.integer(time), .integer(id), .hash(digest)])
            if connection.changes > 0 { places?.stageRead(id: id, at: time, now: !isInTransaction) }
        }
    }

    /// Totals over entries, blobs and segments.
    public func totals() throws -> IndexTotals {
        try writeLiveByteDeltas()
        return try reading {
            // total() adds in floating point and max(0, …) skips damaged values: a damaged column
            // must not turn statistics into an integer-overflow error.
            let entries = try connection.statement("SELECT count(*), total(max(0, cost)) FROM entries").first {
                ($0.int64(0), $0.int64(1))
            }!
            let blobs = try connection.statement("SELECT count(*), total(max(0, length)) FROM blobs WHERE refs > 0").first {
                ($0.int64(0), $0.int64(1))
            }!
            let live = try connection.statement("SELECT total(max(0, live_bytes)) FROM segments").first { $0.int64(0) }!
            return IndexTotals(
                entries: entries.0, blobs: blobs.0, entryPayloadBytes: entries.1, blobPayloadBytes: blobs.1,
                liveBytes: live)
        }
    }
}
