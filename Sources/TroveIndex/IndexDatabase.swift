public import TroveCore

#if canImport(Glibc)
    import Glibc
#endif

/// Trove's index: one SQLite connection with Trove's schema and typed queries. No SQL
/// leaves this module.
///
/// A store opens one writer (which creates and migrates the schema) and a few read-only
/// connections for concurrent gets. Each `IndexDatabase` is confined to one owner at a time
/// and is not `Sendable`; the store keeps it behind a lock.
public final class IndexDatabase {
    let connection: SQLiteConnection
    /// Changes to segments' live bytes made in the open transaction, written once per segment
    /// when it commits (a put would otherwise update its segment's row up to three times).
    var liveByteDeltas: [UInt32: Int64] = [:]
    /// New puts inserted in groups (``insertNewPuts(_:)``) since opening: for tests, which must
    /// know that the grouped path ran.
    var groupedPuts = 0
    /// Entry row ids by key digest (schema 7; ``EntryDigestTable``): a writer's own, loaded when
    /// it opens and kept by its statements; a reader's, the writer's that it was given. Nil for
    /// a reader opened on its own, which has no writer to keep a table current and finds rows
    /// by digest with a scan of the entries.
    public let digests: EntryDigestTable?
    /// Ids this connection's open transaction added to ``digests`` (taken out again if it rolls
    /// back) and rows it deleted (taken out of ``digests`` once it commits).
    var insertedDigests: [(digest: ContentHash, id: Int64)] = []
    var removedDigests: [(digest: ContentHash, id: Int64)] = []
    /// Keeps the places in ``digests`` with this connection's changes (a writer's; nil for a
    /// reader).
    let places: PlaceKeeper?

    /// Opens the index at `path`.
    ///
    /// - Parameters:
    ///   - readOnly: open a reader. A writer creates the file when missing, turns on WAL,
    ///     brings the schema to the current version and loads its ``digests``.
    ///   - digests: for a writer, the table to load and keep (a new one when nil); for a reader,
    ///     its writer's, to look rows up through (without it, a lookup by digest scans the
    ///     entries: for tools and tests, not for hot paths).
    /// - Throws: ``IndexError`` with code `.schemaTooNew` when a newer Trove wrote the index,
    ///   `.corrupt` when it is not a database or (a writer) when two entry rows share a key
    ///   digest, `.sqlite` otherwise.
    public init(path: String, readOnly: Bool, digests: EntryDigestTable? = nil) throws(IndexError) {
        let table = readOnly ? digests : digests ?? EntryDigestTable()
        self.digests = table
        places = readOnly ? nil : table.map(PlaceKeeper.init)
        connection = try SQLiteConnection(path: path, readOnly: readOnly)
        try connection.keepWriteAheadLogFiles()
        // A point lookup costs about 3.8 µs with mmap against 10.7 µs without (DESIGN.md). The
        // window is address space, not memory: 1 GiB covers the index of ~3 M entries.
        try connection.execute("PRAGMA busy_timeout = 5000; PRAGMA mmap_size = 1073741824; PRAGMA cache_size = -16384;")
        if readOnly {
            try connection.execute("PRAGMA query_only = 1;")
            try checkVersion()
        } else {
            // synchronous=NORMAL: a WAL commit is not fsynced. Durability comes from the packs:
            // an index that lost its last commits is brought forward by replaying the active
            // segment's tail (Docs/Architecture.md, "Durability").
            try connection.execute("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA temp_store = MEMORY;")
            try migrate()
            if let places {
                connection.observeRowChanges(inTable: "entries", places.rowChanged, ending: places.transactionEnding)
            }
            try loadDigests()
        }
    }

    /// The schema version of the open index.
    public func schemaVersion() throws(IndexError) -> Int {
        Int(try connection.statement("PRAGMA user_version").first { $0.int64(0) } ?? 0)
    }

    private func checkVersion() throws(IndexError) {
        let version = try schemaVersion()
        // A damaged header (found by an outside attack: a negative version trapped the migration).
        guard version >= 0 else {
            throw IndexError(code: .corrupt, message: "\(connection.path) has schema version \(version), which no Trove writes")
        }
        guard version <= IndexSchema.currentVersion else {
            throw IndexError(
                code: .schemaTooNew,
                message: "\(connection.path) has schema version \(version); this Trove reads up to "
                    + "\(IndexSchema.currentVersion). Use a newer Trove.")
        }
    }

    private func migrate() throws(IndexError) {
        try checkVersion()
        var version = try schemaVersion()
        guard version < IndexSchema.currentVersion else { return }
        // Debian's SQLite is built with SECURE_DELETE: dropping the old entries table (schema 6)
        // would write every one of its pages, zeroed, through the log. The freed pages are
        // reused by later rows; what they held is the store's own index.
        let secureDelete = try connection.statement("PRAGMA secure_delete").first { $0.int64(0) } ?? 0
        try connection.execute("PRAGMA secure_delete = 0")
        defer { try? connection.execute("PRAGMA secure_delete = \(secureDelete)") }
        while version < IndexSchema.currentVersion {
            try connection.execute("BEGIN IMMEDIATE")
            do {
                if version == 6 { try checkDigestIndexBeforeDroppingIt() }
                try connection.execute(IndexSchema.migrations[version])
                try connection.execute("PRAGMA user_version = \(version + 1)")
                try connection.execute("COMMIT")
            } catch {
                try? connection.execute("ROLLBACK")
                // A full disk may pass once space is freed; anything else (a row the new schema
                // refuses, a damaged page) needs the index rebuilt from the packs.
                guard !error.isOutOfSpace else { throw error }
                throw IndexError(
                    code: .corrupt,
                    message: "migrating the index from schema \(version) to \(version + 1) failed (\(error.message)); "
                        + "it is left at schema \(version)",
                    resultCode: error.resultCode, extendedResultCode: error.extendedResultCode, sql: error.sql)
            }
            version += 1
        }
    }

    /// Before schema 7 drops the digest index, every row it should reach must be reachable
    /// through it: schema 6 lookups could not see a row whose index cell was lost (an older or a
    /// removed value, which the store wrote around), and dropping the index would make that row
    /// the key's entry (found by an outside attack: a removed key's bytes served after the
    /// migration). Such an index is refused, for a rebuild from the packs; a schema-6 writer
    /// refused one whose digest index was missing or changed in the same way. One pass over the
    /// rows with an index lookup each, once.
    private func checkDigestIndexBeforeDroppingIt() throws(IndexError) {
        let unreached =
            try connection.statement(
                """
                SELECT count(*) FROM entries e NOT INDEXED WHERE NOT EXISTS
                    (SELECT 1 FROM entries x INDEXED BY entries_by_key WHERE x.key_hash = e.key_hash AND x.id = e.id)
                """
            ).first { $0.int64(0) } ?? 0
        guard unreached == 0 else {
            throw IndexError(
                code: .corrupt,
                message: "\(unreached) entry rows are not reached through the digest index of schema 6 "
                    + "(lost index cells: their values may be older or removed ones)")
        }
    }

    // MARK: Transactions
    //
    // Every write transaction goes through `writing { }`; the steps are internal (tests use them
    // to hold a transaction open).

    /// Starts a write transaction.
    func begin() throws(IndexError) { try connection.statement("BEGIN IMMEDIATE").run() }
    /// Commits the open transaction.
    func commit() throws(IndexError) {
        try writeLiveByteDeltas()
        try connection.statement("COMMIT").run()
        transactionEnded(committed: true)
    }

    /// Rolls the open transaction back.
    func rollback() throws(IndexError) {
        liveByteDeltas.removeAll()
        defer { transactionEnded(committed: false) }
        try connection.statement("ROLLBACK").run()
    }
    /// Whether a transaction is open.
    public var isInTransaction: Bool { connection.isInTransaction }

    /// Runs `body` in one write transaction: `BEGIN IMMEDIATE`, then `COMMIT` — or `ROLLBACK`
    /// when `body` or the commit throws, so no write of a failed transaction is left behind.
    public func writing<T>(_ body: () throws -> T) throws -> T {
        try begin()
        do {
            let value = try body()
            try commit()
            return value
        } catch {
            if isInTransaction {
                try? rollback()
            } else {
                // SQLite rolled it back itself (a full disk, an I/O error).
                liveByteDeltas.removeAll()
                transactionEnded(committed: false)
            }
            throw error
        }
    }

    /// Runs `body` in a read transaction (one consistent snapshot for several queries).
    public func reading<T>(_ body: () throws -> T) throws -> T {
        try connection.statement("BEGIN DEFERRED").run()
        do {
            let value = try body()
            try connection.statement("COMMIT").run()
            return value
        } catch {
            try? connection.statement("ROLLBACK").run()
            throw error
        }
    }

    /// Runs SQLite's `PRAGMA integrity_check` and returns its findings (["ok"] when clean).
    public func integrityCheck() throws(IndexError) -> [String] {
        var lines: [String] = []
        try connection.statement("PRAGMA integrity_check").query { (r) throws(IndexError) in
            lines.append(r.text(0))
            return true
        }
        return lines
    }

    /// What SQLite's integrity check cannot see of the one-row-per-key rule: digests with more
    /// than one entry row. Empty when it holds. Unlike a failed integrity check, it does not make
    /// the file's other contents (the committed sequence, the rows) suspect.
    public func digestFindings() throws(IndexError) -> [String] {
        let shared = try sharedDigestCount()
        return shared > 0 ? ["\(shared) key digests have more than one entry row"] : []
    }

    func sharedDigestCount() throws(IndexError) -> Int64 {
        try connection.statement(
            // Only digests a lookup can match: malformed ones are no key's (fsck deletes them).
            """
            SELECT count(*) FROM (SELECT 1 FROM entries WHERE typeof(key_hash) = 'blob' AND length(key_hash) = 16
                GROUP BY key_hash HAVING count(*) > 1)
            """
        ).first { $0.int64(0) } ?? 0
    }

    /// The bytes of the database's pages in use (`(page_count − freelist_count) × page_size`):
    /// what the index occupies once its WAL is checkpointed and truncated, less its free pages
    /// (which later rows reuse, and which no eviction can give back — the migration to schema
    /// 6 leaves the old entries table's pages free).
    public func databaseBytes() throws(IndexError) -> Int64 {
        let pages = try connection.statement("PRAGMA page_count").first { $0.int64(0) } ?? 0
        let free = try connection.statement("PRAGMA freelist_count").first { $0.int64(0) } ?? 0
        let size = try connection.statement("PRAGMA page_size").first { $0.int64(0) } ?? 4096
        return max(0, pages - free) * size
    }

    /// ``databaseBytes()``'s free pages, read without a connection: from the file header of the
    /// database at `path` (page size at byte 16, free-list page count at byte 36, both
    /// big-endian), so as of its last checkpoint. For callers that must not wait for a
    /// connection (the compaction trigger, on the write path). 0 when the header cannot be read.
    public static func freePageBytes(atPath path: String) -> Int64 {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return 0 }
        defer { _ = close(fd) }
        var header = [UInt8](repeating: 0, count: 40)
        let read = header.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 40, 0) }
        guard read == 40 else { return 0 }
        let rawSize = Int64(header[16]) << 8 | Int64(header[17])
        let pageSize = rawSize == 1 ? 65_536 : rawSize
        let free = header[36..<40].reduce(Int64(0)) { $0 << 8 | Int64($1) }
        return pageSize * free
    }

    /// Copies the WAL into the database and truncates it.
    public func checkpoint() throws(IndexError) {
        try connection.checkpoint(.truncate)
    }

    /// Makes checkpoints the owner's job: commits on this connection no longer run SQLite's
    /// automatic checkpoint (every 1 000 pages, inside `COMMIT`, with two fsyncs), and
    /// ``walFrames`` counts the log instead. The store hands them to an ``IndexCheckpointer``
    /// on its own thread (Docs/Architecture.md, "Checkpoints").
    public func takeOverCheckpoints() {
        connection.takeOverCheckpoints()
    }

    /// The frames in the write-ahead log after this connection's last commit (after
    /// ``takeOverCheckpoints()``; 0 before).
    public var walFrames: Int { connection.walFrames }

    /// A checkpoint that waits for nobody: copies into the database what no reader still
    /// needs. Returns the frames in the log and how many are copied.
    @discardableResult
    public func checkpointPassively() throws(IndexError) -> (log: Int, copied: Int) {
        try connection.checkpoint(.passive)
    }

    // MARK: Meta

    /// The integer stored under `key` in the meta table.
    public func meta(_ key: String) throws(IndexError) -> Int64? {
        try connection.statement("SELECT value FROM meta WHERE key = ?").first([.text(key)]) { $0.int64(0) }
    }

    /// Stores `value` under `key` in the meta table.
    public func setMeta(_ key: String, _ value: Int64) throws(IndexError) {
        try connection.statement("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)").run([.text(key), .integer(value)])
    }
}
