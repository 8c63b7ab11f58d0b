import TroveIndex

/// The committer's side: the index's write connection and what has been committed. Only ever
/// used under `Store.committer`, which serializes commit cycles (and is held across their
/// fdatasync and SQLite commit — never the appender's lock, so puts go on meanwhile).
///
/// `@unchecked Sendable`: reachable only through `Store.committer.withLock`.
final class CommitState: @unchecked Sendable {
    let index: IndexDatabase
    /// Every write with a lower sequence number is committed.
    var committedSequence: UInt64
    /// The active segment's length as the index holds it, known to be on disk: set at open
    /// (recovery synced the tails it replays) and by every cycle that commits. A longer length
    /// is something to commit, and the cycle that commits it syncs the segment first, even with
    /// no write queued: the compactor's copies are appended without being queued, and a clean
    /// close must leave no tail for the next open to replay.
    var committedEnd: (segment: UInt32, end: UInt64)
    /// When read times were last written to the index.
    var lastReadTimeFlush = ContinuousClock.now
    /// Set by close().
    var isClosed = false
    /// The replay opening could not write (a full disk): the next commit cycle applies it first,
    /// in its own transaction.
    var deferredReplay: Recovery.ReplayPlan?

    init(index: IndexDatabase, committedSequence: UInt64, committedEnd: (segment: UInt32, end: UInt64)) {
        self.index = index
        self.committedSequence = committedSequence
        self.committedEnd = committedEnd
    }
}
