/// The statements of the hot paths — a put's and a get's lookups, the committer's apply — each
/// kept by its connection in a numbered slot (``SQLiteConnection/statement(slot:_:)``): found
/// by position, not by hashing its text on every call.
enum IndexStatement: Int {
    case entryByID
    case entryRowByID
    case variantsByURL
    case blobByID
    case insertBlob
    case insertLinkedBlob
    case retainBlob
    case releaseBlob
    case insertEntry
    case replaceEntry
    case deleteEntry
    case touch
    case addLiveBytes
    case setIndexedBytes
    case blobHashes
    case blobInRange
    case lastEntryID
    case insertNewBlobs4
    case insertNewBlobs16
    case insertNewEntries4
    case insertNewEntries16

    var sql: String {
        switch self {
        // By row id, from the digest table's candidates; the digest must match as well.
        case .entryByID:
            "SELECT \(IndexDatabase.entryColumns), \(IndexDatabase.blobColumns) FROM entries e JOIN blobs b ON b.id = e.blob "
                + "WHERE e.id = ?1 AND e.key_hash = ?2"
        case .entryRowByID: "SELECT \(IndexDatabase.entryColumns) FROM entries e WHERE e.id = ?1 AND e.key_hash = ?2"
        case .variantsByURL:
            // Through the partial URL index (schema 5: originals are not in it).
            """
            SELECT \(IndexDatabase.entryColumns), \(IndexDatabase.blobColumns) FROM entries e JOIN blobs b ON b.id = e.blob
            WHERE e.url_hash = ?1 AND e.url = ?2 AND e.variant != '' ORDER BY e.variant
            """
        case .blobByID: "SELECT \(IndexDatabase.blobColumns) FROM blobs b WHERE b.id = ?"
        case .insertBlob, .insertLinkedBlob:
            "INSERT INTO blobs(id, hash, length, segment, offset, record_bytes, refs) VALUES (?, ?, ?, ?, ?, ?, "
                + (self == .insertBlob ? "0" : "1") + ") ON CONFLICT(id) DO NOTHING"
        case .retainBlob:
            "UPDATE blobs SET refs = refs + 1 WHERE id = ? RETURNING refs, segment, record_bytes, offset, hash, length"
        case .releaseBlob: "UPDATE blobs SET refs = refs - 1 WHERE id = ? RETURNING refs, segment, record_bytes"
        case .insertEntry:
            """
            INSERT INTO entries(key_hash, url, variant, url_hash, blob, link_segment, link_offset, link_length,
                sequence, etag, last_modified, expires_at, created_at, accessed_at, cost, cache_policy)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """
        // A group of new puts (``IndexDatabase/insertNewPuts(_:)``): one statement a table, so
        // that SQLite opens and positions its cursors once for the group, not once a row.
        case .insertNewBlobs4, .insertNewBlobs16:
            "INSERT INTO blobs(id, hash, length, segment, offset, record_bytes, refs) VALUES "
                + repeatElement("(?, ?, ?, ?, ?, ?, 1)", count: groupSize).joined(separator: ", ")
        case .insertNewEntries4, .insertNewEntries16:
            """
            INSERT INTO entries(id, key_hash, url, variant, url_hash, blob, link_segment, link_offset, link_length,
                sequence, etag, last_modified, expires_at, created_at, accessed_at, cost, cache_policy) VALUES
            """
                + repeatElement("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", count: groupSize).joined(separator: ", ")
        case .replaceEntry:
            // In place (schema 6): the row keeps its place in the table and its id.
            """
            UPDATE entries SET url = ?2, variant = ?3, url_hash = ?4, blob = ?5, link_segment = ?6,
                link_offset = ?7, link_length = ?8, sequence = ?9, etag = ?10, last_modified = ?11,
                expires_at = ?12, created_at = ?13, accessed_at = ?14, cost = ?15, cache_policy = ?16
            WHERE id = ?17 AND key_hash = ?1
            """
        case .deleteEntry:
            "DELETE FROM entries WHERE id = ?1 AND key_hash = ?2 RETURNING \(IndexDatabase.entryReturningColumns)"
        case .touch: "UPDATE entries SET accessed_at = max(accessed_at, ?1) WHERE id = ?2 AND key_hash = ?3"
        case .addLiveBytes: "UPDATE segments SET live_bytes = live_bytes + ? WHERE id = ?"
        case .setIndexedBytes: "UPDATE segments SET indexed_bytes = ? WHERE id = ?"
        case .blobHashes: "SELECT id, hash FROM blobs WHERE id > ?1 ORDER BY id LIMIT ?2"
        case .blobInRange: "SELECT 1 FROM blobs WHERE id BETWEEN ?1 AND ?2 LIMIT 1"
        case .lastEntryID: "SELECT max(id) FROM entries"
        }
    }

    /// The rows a group statement inserts (0: not a group statement).
    var groupSize: Int {
        switch self {
        case .insertNewBlobs4, .insertNewEntries4: 4
        case .insertNewBlobs16, .insertNewEntries16: 16
        default: 0
        }
    }
}

extension IndexDatabase {
    /// The prepared statement `statement`, from this connection's slots.
    func statement(_ statement: IndexStatement) throws(IndexError) -> SQLiteStatement {
        try connection.statement(slot: statement.rawValue) { statement.sql }
    }
}
