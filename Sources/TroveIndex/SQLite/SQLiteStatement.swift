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
    /// The bytes of the bound text, BLOB and hash values, one after another: bound with
    /// `SQLITE_STATIC`, so that a bind copies them here (a buffer kept for the statement's life)
    /// instead of SQLite allocating a copy of each and freeing it again — a fifth of the
    /// committer's apply went to those allocations. Valid from a bind until the next bind or the
    /// `clear_bindings` that ends every run.
    private var scratch: UnsafeMutableRawPointer
    private var scratchCapacity = 256

    init(_ handle: OpaquePointer, connection: SQLiteConnection, sql: String) {
        self.handle = handle
        self.connection = connection
        self.sql = sql
        scratch = .allocate(byteCount: scratchCapacity, alignment: 8)
    }

    deinit {
        sqlite3_finalize(handle)
        scratch.deallocate()
    }

    /// Binds `values` to the parameters, in order.
    private func bind(_ values: [SQLiteValue]) throws(IndexError) {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        var needed = 0
        for value in values {
            switch value {
            case .text(let s): needed += s.utf8.count
            case .blob(let b): needed += b.count
            case .hash: needed += 16
            case .null, .integer: break
            }
        }
        if needed > scratchCapacity {
            scratch.deallocate()
            scratchCapacity = max(needed, scratchCapacity * 2)
            scratch = .allocate(byteCount: scratchCapacity, alignment: 8)
        }
        var offset = 0
        for (i, value) in values.enumerated() {
            let index = Int32(i + 1)
            let at = scratch + offset
            let rc: Int32
            switch value {
            case .null: rc = sqlite3_bind_null(handle, index)
            case .integer(let v): rc = sqlite3_bind_int64(handle, index, v)
            case .text(var s):
                // With its length, not up to a NUL: the text as it is.
                let count = s.withUTF8 { bytes in
                    if let base = bytes.baseAddress { at.copyMemory(from: base, byteCount: bytes.count) }
                    return bytes.count
                }
                offset += count
                rc = sqlite3_bind_text(handle, index, at.assumingMemoryBound(to: CChar.self), Int32(count), CSQLite_static())
            case .blob(let b):
                b.withUnsafeBytes { if let base = $0.baseAddress { at.copyMemory(from: base, byteCount: $0.count) } }
                offset += b.count
                rc = sqlite3_bind_blob(handle, index, at, Int32(b.count), CSQLite_static())
            case .hash(let h):
                // The 16 big-endian bytes of `ContentHash.bytes`.
                at.storeBytes(of: h.high.bigEndian, as: UInt64.self)
                (at + 8).storeBytes(of: h.low.bigEndian, as: UInt64.self)
                offset += 16
                rc = sqlite3_bind_blob(handle, index, at, 16, CSQLite_static())
            }
            guard rc == SQLITE_OK else { throw connection.error(rc, sql: sql) }
        }
    }

    /// Resets the statement and drops its bindings (which point into ``scratch``).
    private func finish() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// Runs the statement to completion with `values` bound.
    func run(_ values: [SQLiteValue] = []) throws(IndexError) {
        try bind(values)
        defer { finish() }
        var rc = sqlite3_step(handle)
        while rc == SQLITE_ROW { rc = sqlite3_step(handle) }
        guard rc == SQLITE_DONE else { throw connection.error(rc, sql: sql) }
    }

    /// Runs the query with `values` bound and calls `row` for each result row; `row` returns
    /// false to stop early.
    func query(_ values: [SQLiteValue] = [], row: (SQLiteRow) throws(IndexError) -> Bool) throws(IndexError) {
        try bind(values)
        defer { finish() }
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

    /// A TEXT column's UTF-8 bytes, valid until the next step; nil for NULL.
    func textBytes(_ column: Int32) -> UnsafeRawBufferPointer? {
        guard !isNull(column) else { return nil }
        guard let p = sqlite3_column_text(handle, column) else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: p, count: Int(sqlite3_column_bytes(handle, column)))
    }

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
