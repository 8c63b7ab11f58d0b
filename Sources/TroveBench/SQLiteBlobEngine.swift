public import Foundation
import CSQLite
import TroveCore

/// SQLite as a blob store: one table (key, blob, etag, accessed) in WAL mode with prepared
/// statements — what SQLite itself recommends for small blobs ("35 % faster than the file
/// system").
///
/// This baseline talks to the C API directly rather than through TroveIndex: it is what a
/// user would write, and it must not share Trove's tuning by accident. It gets the same
/// `mmap_size` and `cache_size` as Trove's index for fairness.
///
/// With ``updatesAccessTime`` a hit also runs `UPDATE … SET accessed`, the LRU bookkeeping
/// such caches do; turning it off shows what that costs.
///
/// One connection: calls from several threads take turns on it (a lock), which is how SQLite
/// serializes writers anyway — one write transaction at a time per database.
public final class SQLiteBlobEngine: BlobStoring, @unchecked Sendable {
    public let directory: String
    /// `synchronous=FULL` (fsync on every commit) instead of `NORMAL`.
    public private(set) var synchronousFull: Bool
    /// Update the row's access time on every hit.
    public var updatesAccessTime: Bool
    private var db: OpaquePointer?
    private var insert: OpaquePointer?
    private var select: OpaquePointer?
    private var touch: OpaquePointer?
    /// Held around every use of the connection.
    private let serial = Locked(())

    public var name: String {
        synchronousFull ? "SQLiteBlob FULL" : updatesAccessTime ? "SQLiteBlob" : "SQLiteBlob no-LRU"
    }

    /// Opens (creating) `directory/blobs.sqlite`.
    public init(directory: String, synchronousFull: Bool = false, updatesAccessTime: Bool = true) throws {
        self.directory = directory
        self.synchronousFull = synchronousFull
        self.updatesAccessTime = updatesAccessTime
        try SystemCall.makeDirectory(directory)
        guard sqlite3_open(directory + "/blobs.sqlite", &db) == SQLITE_OK else { throw error("open") }
        try execute(
            """
            PRAGMA journal_mode = WAL; PRAGMA mmap_size = 268435456; PRAGMA cache_size = -16384;
            CREATE TABLE IF NOT EXISTS blobs(key TEXT PRIMARY KEY, data BLOB NOT NULL, etag TEXT,
                accessed INTEGER NOT NULL);
            """)
        try setSynchronousFull(synchronousFull)
        insert = try prepare("INSERT OR REPLACE INTO blobs(key, data, etag, accessed) VALUES (?, ?, ?, ?)")
        select = try prepare("SELECT data FROM blobs WHERE key = ?")
        touch = try prepare("UPDATE blobs SET accessed = ? WHERE key = ?")
    }

    deinit { try? close() }

    /// Switches between `synchronous=FULL` and `NORMAL`.
    public func setSynchronousFull(_ full: Bool) throws {
        synchronousFull = full
        try execute("PRAGMA synchronous = \(full ? "FULL" : "NORMAL")")
    }

    public func put(_ data: Data, key: String, etag: String) throws {
        try serial.withLock { _ throws(BenchmarkError) in try putLocked(data, key: key, etag: etag) }
    }

    private func putLocked(_ data: Data, key: String, etag: String) throws(BenchmarkError) {
        defer { sqlite3_reset(insert) }
        sqlite3_bind_text(insert, 1, key, -1, CSQLite_transient())
        _ = data.withUnsafeBytes { sqlite3_bind_blob(insert, 2, $0.baseAddress, Int32($0.count), CSQLite_transient()) }
        sqlite3_bind_text(insert, 3, etag, -1, CSQLite_transient())
        sqlite3_bind_int64(insert, 4, Self.now())
        guard sqlite3_step(insert) == SQLITE_DONE else { throw error("insert") }
    }

    public func get(_ key: String) throws -> Data? {
        try serial.withLock { _ throws(BenchmarkError) in try getLocked(key) }
    }

    private func getLocked(_ key: String) throws(BenchmarkError) -> Data? {
        sqlite3_bind_text(select, 1, key, -1, CSQLite_transient())
        let rc = sqlite3_step(select)
        guard rc == SQLITE_ROW else {
            sqlite3_reset(select)
            if rc == SQLITE_DONE { return nil }
            throw error("select")
        }
        let count = Int(sqlite3_column_bytes(select, 0))
        let data = count == 0 ? Data() : Data(bytes: sqlite3_column_blob(select, 0), count: count)
        sqlite3_reset(select)
        if updatesAccessTime {
            defer { sqlite3_reset(touch) }
            sqlite3_bind_int64(touch, 1, Self.now())
            sqlite3_bind_text(touch, 2, key, -1, CSQLite_transient())
            guard sqlite3_step(touch) == SQLITE_DONE else { throw error("update") }
        }
        return data
    }

    public func flush() throws {}

    public func close() throws {
        for statement in [insert, select, touch] { sqlite3_finalize(statement) }
        insert = nil
        select = nil
        touch = nil
        if let db { sqlite3_close_v2(db) }
        db = nil
    }

    private func execute(_ sql: String) throws {
        guard sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else { throw error(sql) }
    }

    private func prepare(_ sql: String) throws -> OpaquePointer? {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v3(db, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil) == SQLITE_OK else {
            throw error(sql)
        }
        return statement
    }

    private func error(_ what: String) -> BenchmarkError {
        BenchmarkError("SQLiteBlob \(what): \(db.map { String(cString: sqlite3_errmsg($0)) } ?? "no database")")
    }

    private static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}
