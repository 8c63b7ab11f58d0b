/// An error of the index: a failed SQLite call (with its result codes and SQL) or an index
/// that this version of Trove cannot use.
public struct IndexError: Error, Sendable, CustomStringConvertible {
    /// The kind of an index error. Extensible: new codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// SQLite returned an error; see ``IndexError/resultCode``.
        public static let sqlite = Code(name: "sqlite")
        /// The index was written by a newer Trove (its schema version is higher than this one knows).
        public static let schemaTooNew = Code(name: "schemaTooNew")
        /// The index file is not a database or is damaged.
        public static let corrupt = Code(name: "corrupt")
        public var description: String { name }
    }

    /// What kind of failure this is.
    public var code: Code
    /// SQLite's primary result code (`SQLITE_BUSY`, `SQLITE_CORRUPT`, …), or 0.
    public var resultCode: Int32
    /// SQLite's extended result code, or 0.
    public var extendedResultCode: Int32
    /// What failed and what to do.
    public var message: String
    /// The SQL being run, when there was one.
    public var sql: String?

    /// Makes an error.
    public init(code: Code, message: String, resultCode: Int32 = 0, extendedResultCode: Int32 = 0, sql: String? = nil) {
        self.code = code
        self.message = message
        self.resultCode = resultCode
        self.extendedResultCode = extendedResultCode
        self.sql = sql
    }

    /// Whether SQLite failed for lack of space or on a write to the disk (`SQLITE_FULL`,
    /// `SQLITE_IOERR`): a failure that may pass when space is freed.
    public var isOutOfSpace: Bool { resultCode == 13 || resultCode == 10 }

    public var description: String {
        var s = "\(code): \(message)"
        if resultCode != 0 { s += " (SQLite code \(resultCode)/\(extendedResultCode))" }
        if let sql { s += " in: \(sql)" }
        return s
    }
}
