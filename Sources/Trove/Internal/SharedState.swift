import TroveCore
import TroveIndex
import TrovePack

/// The state that gets and puts share, guarded by `Store.shared` (a `Locked`). The lock is held
/// for map and dictionary operations only, never across I/O.
///
/// Invariant: a `.present` slot is never older than the index. Writers update the slot after
/// writing the index row (committed or not), so a get that finds a slot gets this process's
/// latest write (read-your-writes) without waiting for a commit. A get that misses reads the
/// index and may insert what it found only if `generation` did not move meanwhile, so it can
/// never put back a row that a concurrent write replaced or removed.
struct SharedState {
    enum Slot {
        /// The entry as last written or read.
        case present(IndexedEntry)
        /// Removed, possibly not yet committed: readers must not look in the index.
        case removed
    }

    /// Recently written or read keys. Emptied only right after a commit, when every slot is
    /// committed and the index answers for all of them.
    var slots: [CacheKey: Slot] = [:]
    /// Keys whose state opening found in the packs but could not write to the index (a full
    /// disk): looked up after `slots` and before the index, until the commit cycle that applies
    /// that replay empties it.
    var pinned: [CacheKey: Slot] = [:]
    /// Incremented by every write to `slots` made by a put or remove.
    var generation: UInt64 = 0
    /// Read times not yet flushed to the index, by key.
    var readTimes: [CacheKey: Int64] = [:]
    /// Open segment files by id. A reader takes a reference under the lock and reads without
    /// it; the file stays readable until the last reference goes, even if unlinked.
    var segmentFiles: [UInt32: SegmentFile] = [:]
    /// Set by close(): every operation after it throws ``StoreError/Code/closed``.
    var isClosed = false
    /// The first error of background work (commit cycles, compaction), sticky until close.
    var backgroundError: StoreError?
    /// Whether an fsck has already reported what opening the store repaired.
    var recoveryReported = false
}

/// A read-only index connection lent to one reader at a time.
///
/// `@unchecked Sendable`: the pool hands each instance to exactly one borrower and takes it
/// back before lending it again, so the SQLite handle is never used by two threads at once.
final class PooledReader: @unchecked Sendable {
    let index: IndexDatabase
    init(index: IndexDatabase) { self.index = index }
}
