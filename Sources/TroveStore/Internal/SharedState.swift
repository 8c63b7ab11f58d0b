import TroveCore
import TroveIndex
import TrovePack

/// The state that gets and puts share, guarded by `Store.shared` (a `Locked`). The lock is held
/// for map and dictionary operations only, never across I/O.
struct SharedState {
    /// Where each recently written or read key's entry is; owns the rule that keeps it no
    /// older than the index (see ``LocationMap``).
    var map: LocationMap
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
    /// Cold gets served through the entry digest table's places, without SQLite (for tests
    /// and the benchmark's report).
    var readsThroughPlaces = 0
}

/// A read-only index connection lent to one reader at a time.
///
/// `@unchecked Sendable`: the pool hands each instance to exactly one borrower and takes it
/// back before lending it again, so the SQLite handle is never used by two threads at once.
final class PooledReader: @unchecked Sendable {
    let index: IndexDatabase
    init(index: IndexDatabase) { self.index = index }
}
