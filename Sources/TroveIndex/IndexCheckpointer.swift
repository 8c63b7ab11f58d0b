/// A connection to an index that only checkpoints its write-ahead log: copies the pages that
/// commits appended to the log into the database file, so that the log can start over.
///
/// The store runs one on a thread of its own, so that the committer's cycles never pay for a
/// checkpoint's copying and its two fsyncs (`synchronous=NORMAL` syncs the log before and the
/// database after). A checkpoint runs beside the writer and the readers: it copies what no
/// reader still needs and never waits for a lock. Confined to one owner at a time, like every
/// connection.
public final class IndexCheckpointer {
    private let connection: SQLiteConnection

    /// Opens a connection to the existing index at `path`.
    public init(path: String) throws(IndexError) {
        connection = try SQLiteConnection(path: path, readOnly: false)
        // The last connection to close must not delete the log files (a store opens on a full
        // disk because they exist).
        try connection.keepWriteAheadLogFiles()
        // A connection learns that the database is in WAL mode — and opens the log — when it
        // first reads it; a checkpoint before that does nothing (and reports -1 frames).
        try connection.execute("SELECT count(*) FROM sqlite_master")
    }

    /// Copies into the database what it can without waiting. Returns the frames in the log and
    /// how many of them are copied.
    @discardableResult
    public func checkpoint() throws(IndexError) -> (log: Int, copied: Int) {
        try connection.checkpoint(.passive)
    }
}
