import CSQLite
import TroveCore

/// A prepared statement, owned by the ``SQLiteConnection`` that prepared it.
///
/// Use it through ``SQLiteStatement/run(_:)`` or ``SQLiteStatement/query(_:row:)``, which
/// reset it as soon as they are done: a statement left un-reset keeps a read transaction open
/// and blocks WAL checkpoints.
final class SQLiteStatement {
    private let handle: OpaquePointer
    private unowned let connection: SQLiteConnection
    let sql: String

    init(_ handle: OpaquePointer, connection: SQLiteConnection, sql: String) {
        self.handle = handle
        self.connection = connection
        self.sql = sql
    }

    deinit { sqlite3_finalize(handle) }

    /// Binds `values` to the parameters, in order.
    private func bind(_ values: [SQLiteValue]) throws(IndexError) {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        for (i, value) in values.enumerated() {
            let index = Int32(i + 1)
            let rc: Int32
            switch value {
            case .null: rc = sqlite3_bind_null(handle, index)
            case .integer(let v): rc = sqlite3_bind_int64(handle, index, v)
            case .text(let s): rc = sqlite3_bind_text(handle, index, s, -1, CSQLite_transient())
            case .blob(let b):
                rc = b.withUnsafeBytes { sqlite3_bind_blob(handle, index, $0.baseAddress, Int32($0.count), CSQLite_transient()) }
            case .hash(let h):
                // The 16 big-endian bytes of `ContentHash.bytes`, from the stack.
                var be = (h.high.bigEndian, h.low.bigEndian)
                rc = withUnsafeBytes(of: &be) { sqlite3_bind_blob(handle, index, $0.baseAddress, 16, CSQLite_transient()) }
            }
            guard rc == SQLITE_OK else { throw connection.error(rc, sql: sql) }
        }
    }

    /// Runs the statement to completion with `values` bound.
    func run(_ values: [SQLiteValue] = []) throws(IndexError) {
        try bind(values)
        defer { sqlite3_reset(handle) }
        var rc = sqlite3_step(handle)
        while rc == SQLITE_ROW { rc = sqlite3_step(handle) }
        guard rc == SQLITE_DONE else { throw connection.error(rc, sql: sql) }
    }

    /// Runs the query with `values` bound and calls `row` for each result row; `row` returns
    /// false to stop early.
    func query(_ values: [SQLiteValue] = [], row: (SQLiteRow) throws(IndexError) -> Bool) throws(IndexError) {
        try bind(values)
        defer { sqlite3_reset(handle) }
        while true {
            let rc = sqlite3_step(handle)
            if rc == SQLITE_DONE { return }
            guard rc == SQLITE_ROW else { throw connection.error(rc, sql: sql) }
            if try !row(SQLiteRow(handle: handle)) { return }
        }
    }

    /// The first row mapped by `transform`, or nil when there is none.
    func first<T>(_ values: [SQLiteValue] = [], _ transform: (SQLiteRow) -> T) throws(IndexError) -> T? {
        var result: T?
        try query(values) { (r) throws(IndexError) in
            result = transform(r)
            return false
        }
        return result
    }
}

/// A value bound to a statement parameter.
enum SQLiteValue {
    case null
    case integer(Int64)
    case text(String)
    case blob([UInt8])
    /// A content hash or key digest, bound as its 16 big-endian bytes without an allocation.
    case hash(ContentHash)

    static func optional(_ v: Int64?) -> SQLiteValue { v.map { .integer($0) } ?? .null }
    static func optional(_ v: String?) -> SQLiteValue { v.map { .text($0) } ?? .null }
}

/// The current row of a query; valid only inside the row closure.
struct SQLiteRow {
    let handle: OpaquePointer

    func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }

    /// A file offset or length: 0 through 2⁴⁸ as stored, anything else (a damaged column:
    /// negative, absurd) as 2⁴⁸, which no offset in a segment reaches — so arithmetic on it
    /// cannot overflow, and a read at it finds nothing.
    func position(_ column: Int32) -> UInt64 {
        clamped(column, to: 1 << 48)
    }

    /// A sequence number or blob id: 0 through 2⁶² as stored, anything else as 2⁶² (which
    /// makes the row claim a write newer than any: repair is careful with it).
    func sequence(_ column: Int32) -> UInt64 {
        clamped(column, to: 1 << 62)
    }

    private func clamped(_ column: Int32, to limit: Int64) -> UInt64 {
        let value = int64(column)
        return UInt64(value >= 0 && value <= limit ? value : limit)
    }

    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }
    func optionalInt64(_ column: Int32) -> Int64? { isNull(column) ? nil : int64(column) }

    func text(_ column: Int32) -> String {
        guard let p = sqlite3_column_text(handle, column) else { return "" }
        let n = Int(sqlite3_column_bytes(handle, column))
        return String(decoding: UnsafeBufferPointer(start: p, count: n), as: UTF8.self)
    }

    func optionalText(_ column: Int32) -> String? { isNull(column) ? nil : text(column) }

    /// A 16-byte hash column; nil when the column is not a BLOB of 16 bytes (a damaged row:
    /// TEXT of the same bytes is no match for a lookup bound as a BLOB, so it must not read as
    /// a good digest either).
    func hash(_ column: Int32) -> ContentHash? {
        guard sqlite3_column_type(handle, column) == SQLITE_BLOB else { return nil }
        let n = Int(sqlite3_column_bytes(handle, column))
        guard n == 16, let p = sqlite3_column_blob(handle, column) else { return nil }
        return ContentHash(bytes: UnsafeRawBufferPointer(start: p, count: n))
    }

    func blob(_ column: Int32) -> [UInt8] {
        let n = Int(sqlite3_column_bytes(handle, column))
        guard n > 0, let p = sqlite3_column_blob(handle, column) else { return [] }
        return Array(UnsafeRawBufferPointer(start: p, count: n))
    }
}
