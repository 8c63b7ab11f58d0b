/// The statements of the hot paths — a put's and a get's lookups, the committer's apply — each
/// kept by its connection in a numbered slot (``SQLiteConnection/statement(slot:_:)``): found
/// by position, not by hashing its text on every call.
enum IndexStatement: Int {
    case entryByDigest
    case entryRowByDigest
    case entriesByURL
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
    case blobHints
    case entryDigests

    var sql: String {
        switch self {
        case .entryByDigest:
            "SELECT \(IndexDatabase.entryColumns), \(IndexDatabase.blobColumns) FROM entries e JOIN blobs b ON b.id = e.blob "
                + "WHERE e.key_hash = ?"
        case .entryRowByDigest: "SELECT \(IndexDatabase.entryColumns) FROM entries e WHERE e.key_hash = ?"
        case .entriesByURL:
            // The original by its digest (the unique digest index), the variants through the partial
            // URL index (schema 5: originals are not in it). Result column 3 is the variant.
            """
            SELECT \(IndexDatabase.entryColumns), \(IndexDatabase.blobColumns) FROM entries e JOIN blobs b ON b.id = e.blob
            WHERE e.key_hash = ?1 AND e.url = ?3 AND e.variant = ''
            UNION ALL
            SELECT \(IndexDatabase.entryColumns), \(IndexDatabase.blobColumns) FROM entries e JOIN blobs b ON b.id = e.blob
            WHERE e.url_hash = ?2 AND e.url = ?3 AND e.variant != ''
            ORDER BY 3
            """
        case .blobByID: "SELECT \(IndexDatabase.blobColumns) FROM blobs b WHERE b.id = ?"
        case .insertBlob, .insertLinkedBlob:
            "INSERT INTO blobs(id, hash, length, segment, offset, record_bytes, refs) VALUES (?, ?, ?, ?, ?, ?, "
                + (self == .insertBlob ? "0" : "1") + ") ON CONFLICT(id) DO NOTHING"
        case .retainBlob: "UPDATE blobs SET refs = refs + 1 WHERE id = ? RETURNING refs, segment, record_bytes"
        case .releaseBlob: "UPDATE blobs SET refs = refs - 1 WHERE id = ? RETURNING refs, segment, record_bytes"
        case .insertEntry:
            """
            INSERT INTO entries(key_hash, url, variant, url_hash, blob, link_segment, link_offset, link_length,
                sequence, etag, last_modified, expires_at, created_at, accessed_at, cost, cache_policy)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """
        case .replaceEntry:
            // In place (schema 6): the row keeps its place in the table and its digest's index
            // cell; `INSERT OR REPLACE` would delete it and append a new row.
            """
            UPDATE entries SET url = ?2, variant = ?3, url_hash = ?4, blob = ?5, link_segment = ?6,
                link_offset = ?7, link_length = ?8, sequence = ?9, etag = ?10, last_modified = ?11,
                expires_at = ?12, created_at = ?13, accessed_at = ?14, cost = ?15, cache_policy = ?16
            WHERE key_hash = ?1
            """
        case .deleteEntry: "DELETE FROM entries WHERE key_hash = ? RETURNING \(IndexDatabase.entryReturningColumns)"
        case .touch: "UPDATE entries SET accessed_at = max(accessed_at, ?) WHERE key_hash = ?"
        case .addLiveBytes: "UPDATE segments SET live_bytes = live_bytes + ? WHERE id = ?"
        case .setIndexedBytes: "UPDATE segments SET indexed_bytes = ? WHERE id = ?"
        case .blobHints: "SELECT id, hash FROM blobs"
        // SQLite reads the digests from their index (schema 6), the smallest that covers them.
        case .entryDigests: "SELECT key_hash FROM entries"
        }
    }
}

extension IndexDatabase {
    /// The prepared statement `statement`, from this connection's slots.
    func statement(_ statement: IndexStatement) throws(IndexError) -> SQLiteStatement {
        try connection.statement(slot: statement.rawValue) { statement.sql }
    }
}
