import CSQLite

#if canImport(Glibc)
    import Glibc
#endif

/// One SQLite connection: owns its `sqlite3` handle and a cache of prepared statements.
///
/// Confined to one owner at a time (the store's committer, or one reader taken from a pool):
/// it is not `Sendable`, and the owner serializes every call.
final class SQLiteConnection {
    private let handle: OpaquePointer
    let path: String
    private var statements: [String: SQLiteStatement] = [:]
    /// Statements found by a slot number rather than by their text: the hot paths' (a put's
    /// lookups, a get's, the committer's apply), whose SQL would otherwise be hashed on every
    /// call — a sixth of the committer's CPU when they were found by text.
    private var slots: [SQLiteStatement?] = []

    /// Opens (and, unless `readOnly`, creates) the database at `path`.
    init(path: String, readOnly: Bool) throws(IndexError) {
        var db: OpaquePointer?
        let flags =
            (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)
            | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE | SQLITE_OPEN_NOFOLLOW
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close_v2(db)
            throw IndexError(
                code: rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB ? .corrupt : .sqlite,
                message: "cannot open index \(path): \(message)", resultCode: rc & 0xff, extendedResultCode: rc)
        }
        self.handle = db
        self.path = path
        sqlite3_extended_result_codes(db, 1)
    }

    deinit {
        if let rowObserver {
            sqlite3_update_hook(handle, nil, nil)
            sqlite3_commit_hook(handle, nil, nil)
            sqlite3_rollback_hook(handle, nil, nil)
            Unmanaged.passUnretained(rowObserver).release()
        }
        // Statements must be finalized before the connection closes.
        statements.removeAll()
        slots.removeAll()
        sqlite3_close_v2(handle)
    }

    /// Runs one or more statements that return no rows.
    func execute(_ sql: String) throws(IndexError) {
        var errorMessage: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        if rc != SQLITE_OK {
            let message = errorMessage.map { String(cString: $0) } ?? "error \(rc)"
            sqlite3_free(errorMessage)
            throw error(rc, message: message, sql: sql)
        }
    }

    /// The cached statement for `sql`, prepared once with `SQLITE_PREPARE_PERSISTENT`.
    func statement(_ sql: String) throws(IndexError) -> SQLiteStatement {
        if let cached = statements[sql] { return cached }
        let statement = try prepare(sql)
        statements[sql] = statement
        return statement
    }

    /// The statement kept in `slot`, prepared from `sql()` on first use. A slot always holds the
    /// same SQL: the caller numbers its statements once (an enum's raw values).
    func statement(slot: Int, _ sql: () -> String) throws(IndexError) -> SQLiteStatement {
        if slot < slots.count, let cached = slots[slot] { return cached }
        let statement = try prepare(sql())
        if slot >= slots.count { slots.append(contentsOf: repeatElement(nil, count: slot + 1 - slots.count)) }
        slots[slot] = statement
        return statement
    }

    private func prepare(_ sql: String) throws(IndexError) -> SQLiteStatement {
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil)
        guard rc == SQLITE_OK, let stmt else {
            // Trove's statements are fixed and valid for its schema: one that no longer
            // prepares ("no such column") means the schema itself is damaged.
            var failure = error(rc, sql: sql)
            if rc & 0xff == SQLITE_ERROR {
                failure.code = .corrupt
                failure.message = "\(path): the index's schema is damaged (\(String(cString: sqlite3_errmsg(handle))))"
            }
            throw failure
        }
        return SQLiteStatement(stmt, connection: self, sql: sql)
    }

    /// Keeps the `-wal` and `-shm` files when the last connection closes (emptied, not
    /// deleted), so that the next open needs no disk space to create them: a store opens and
    /// reads on a full disk.
    func keepWriteAheadLogFiles() throws(IndexError) {
        var keep: Int32 = 1
        let rc = sqlite3_file_control(handle, "main", SQLITE_FCNTL_PERSIST_WAL, &keep)
        guard rc == SQLITE_OK else { throw error(rc) }
    }

    // MARK: Row changes

    /// What ``observeRowChanges(inTable:_:)`` installed (retained for the hook's context).
    private var rowObserver: RowChangeObserver?

    /// Calls `body` with the rowid of every row of `table` that a statement on this connection
    /// inserts, updates or deletes, as SQLite changes it (inside the statement, before its
    /// transaction commits; a rolled-back change was reported too), and `ending` when a
    /// transaction of this connection is about to commit — an explicit `COMMIT` or a statement
    /// outside a transaction, which commits itself — and when one rolls back. So an observer may
    /// hold what `body` reported until `ending`: no change it reported becomes visible to another
    /// connection before `ending` has returned. SQLite's update, commit and rollback hooks: they
    /// see every statement, whoever wrote it, except (the update hook) a `DELETE` without `WHERE`
    /// (the truncate optimization) and tables without rowids. One observer per connection;
    /// neither closure may use the connection.
    func observeRowChanges(
        inTable table: StaticString, _ body: @escaping (Int64) -> Void, ending: @escaping () -> Void
    ) {
        precondition(rowObserver == nil, "one row observer per connection")
        let observer = RowChangeObserver(table: table, body: body, ending: ending)
        rowObserver = observer
        // One retain for the three hooks' context, released in deinit.
        let context = Unmanaged.passRetained(observer).toOpaque()
        _ = sqlite3_update_hook(
            handle,
            { context, _, _, changed, rowid in
                guard let context, let changed else { return }
                let observer = Unmanaged<RowChangeObserver>.fromOpaque(context).takeUnretainedValue()
                if observer.matches(changed) { observer.body(rowid) }
            }, context)
        _ = sqlite3_commit_hook(
            handle,
            { context in
                if let context { Unmanaged<RowChangeObserver>.fromOpaque(context).takeUnretainedValue().ending() }
                return 0  // nonzero would turn the commit into a rollback
            }, context)
        _ = sqlite3_rollback_hook(
            handle,
            { context in
                if let context { Unmanaged<RowChangeObserver>.fromOpaque(context).takeUnretainedValue().ending() }
            }, context)
    }

    // MARK: Checkpoints

    /// Frames in the write-ahead log after this connection's last commit; kept by the WAL hook
    /// that ``takeOverCheckpoints()`` installs (0 before).
    private let walCounter = WALCounter()
    var walFrames: Int { walCounter.frames }

    /// Stops SQLite from checkpointing at this connection's commits (its automatic checkpoint
    /// runs inside `COMMIT`, on the committer thread) and counts the log's frames instead: the
    /// owner decides when and where checkpoints run.
    func takeOverCheckpoints() {
        let context = Unmanaged.passUnretained(walCounter).toOpaque()
        _ = sqlite3_wal_hook(
            handle,
            { context, _, _, frames in
                if let context { Unmanaged<WALCounter>.fromOpaque(context).takeUnretainedValue().frames = Int(frames) }
                return SQLITE_OK
            }, context)
    }

    /// The checkpoint modes Trove uses.
    enum CheckpointMode {
        /// Copies what it can without waiting for readers or the writer.
        case passive
        /// Waits for the writer and readers, copies the whole log and truncates it to zero bytes.
        case truncate
    }

    /// Runs a checkpoint. Returns the frames in the log and how many of them are now copied into
    /// the database.
    @discardableResult
    func checkpoint(_ mode: CheckpointMode) throws(IndexError) -> (log: Int, copied: Int) {
        var log: Int32 = 0
        var copied: Int32 = 0
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(1)
        var rc = sqlite3_wal_checkpoint_v2(
            handle, nil, mode == .passive ? SQLITE_CHECKPOINT_PASSIVE : SQLITE_CHECKPOINT_TRUNCATE, &log, &copied)
        // A TRUNCATE waits (busy handler) for readers and the writer, but not for another
        // connection's checkpoint — the checkpointer's, which takes milliseconds: it is asked
        // again until a second has passed since the first try, rather than leaving the log
        // untruncated. (A reader that outlasts the busy timeout still wins: BUSY is returned.)
        while mode == .truncate, rc & 0xff == SQLITE_BUSY, clock.now < deadline {
            usleep(5_000)
            rc = sqlite3_wal_checkpoint_v2(handle, nil, SQLITE_CHECKPOINT_TRUNCATE, &log, &copied)
        }
        // BUSY: another connection holds what the mode needed; nothing is wrong.
        guard rc == SQLITE_OK || rc & 0xff == SQLITE_BUSY else { throw error(rc, sql: "checkpoint") }
        if mode == .truncate && rc == SQLITE_OK { walCounter.frames = 0 }
        return (Int(log), Int(copied))
    }

    /// The rowid of the last inserted row.
    var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// Rows changed by the last statement.
    var changes: Int { Int(sqlite3_changes(handle)) }

    /// Whether a transaction is open.
    var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    /// An ``IndexError`` for result code `rc`, with the connection's message.
    func error(_ rc: Int32, message: String? = nil, sql: String? = nil) -> IndexError {
        let primary = rc & 0xff
        let text = message ?? String(cString: sqlite3_errmsg(handle))
        let code: IndexError.Code = primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB ? .corrupt : .sqlite
        return IndexError(
            code: code, message: "\(path): \(text)", resultCode: primary, extendedResultCode: rc, sql: sql)
    }
}

/// A table name and what to call for each changed row of it (``SQLiteConnection/observeRowChanges(inTable:_:)``).
private final class RowChangeObserver {
    /// The table's name, NUL-terminated.
    let table: [CChar]
    let body: (Int64) -> Void
    /// Called before each commit and at each rollback.
    let ending: () -> Void

    init(table: StaticString, body: @escaping (Int64) -> Void, ending: @escaping () -> Void) {
        self.table = table.withUTF8Buffer { $0.map { CChar(bitPattern: $0) } } + [0]
        self.body = body
        self.ending = ending
    }

    /// Whether the NUL-terminated `name` SQLite passed is ``table``.
    func matches(_ name: UnsafePointer<CChar>) -> Bool {
        strcmp(name, table) == 0
    }
}

/// The write-ahead log's frame count, set by SQLite's WAL hook on the connection's thread and
/// read by the connection's owner (the same confinement as the connection).
private final class WALCounter {
    var frames = 0
}
