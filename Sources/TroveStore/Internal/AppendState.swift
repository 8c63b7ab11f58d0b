import TroveCore
import TroveIndex
import TrovePack

/// A write appended to a pack segment but not yet applied to the index.
struct PendingWrite {
    /// The segment the record is in.
    var segment: UInt32
    /// The record, as the scanner would describe it.
    var record: ScannedRecord
}

/// A content already appended in the open batch, found again by hash and length.
struct PendingBlobKey: Hashable {
    var hash: ContentHash
    var length: UInt64
}

/// The appender: the active segment and the writes not yet in the index. Only ever used under
/// `Store.appender`, which is held for one write's appends — and, on rare paths (a dedup
/// candidate committed meanwhile, a metadata update of a committed entry), one index read and
/// one blob read — never for a sync or an index write.
///
/// Invariant: `queue` holds, in append order, every record appended since the last commit
/// cycle took its snapshot and not yet committed; every key with a queued write has a slot in
/// the location map, so readers see the write before the index does.
///
/// `@unchecked Sendable`: reachable only through `Store.appender.withLock`.
final class AppendState: @unchecked Sendable {
    let pack: PackWriter
    /// The format new segments are created in (the store secret's version 2).
    let format: SegmentFormat
    let faults: FaultInjector?
    /// The sequence number of the next link or tombstone.
    var nextSequence: UInt64
    /// Appended, not yet committed.
    private(set) var queue = WriteQueue()
    /// Every write with a lower sequence number has left `queue` (committed and released).
    private(set) var releasedSequence: UInt64
    /// Segments sealed by rotation since the last commit, with their final length.
    var rotated: [(file: SegmentFile, end: UInt64)] = []
    /// Segments created by rotation since the last commit.
    var created: [UInt32] = []
    /// Whether syncs are kept track of (every durability but `none`): then the pack's syncs
    /// (``Store/syncPack()``) take the two lists below.
    let syncs: Bool
    /// Segments sealed by rotation whose last bytes no sync of the pack has covered yet, oldest
    /// first (``Store/syncPack()`` removes those it synced).
    private(set) var unsyncedSealed: [SegmentFile] = []
    /// Segments created by rotation whose directory entry no sync of the pack has made durable.
    private(set) var unsyncedCreations = 0
    /// Set by close(); every write after it throws ``StoreError/Code/closed``.
    var isClosed = false
    /// Segments the compactor is rewriting: a put must not deduplicate onto a blob in one of
    /// them (the blob may be reclaimed before the put's link is applied); it appends the bytes.
    var reclaiming: Set<UInt32> = []

    init(pack: PackWriter, nextSequence: UInt64, format: SegmentFormat, syncs: Bool, faults: FaultInjector?) {
        self.pack = pack
        self.syncs = syncs
        self.nextSequence = nextSequence
        self.releasedSequence = nextSequence
        self.format = format
        self.faults = faults
    }

    /// Seals the active segment and continues in a new one. The new file's header and the
    /// directory entry are synced by the next commit cycle, before its row is committed.
    func rotate(packs: String, createdAt: Int64) throws(StoreError) {
        let old = pack.segment
        let id = old.id + 1
        let file: SegmentFile
        // The sealed segment ends with its last record (no zeros ahead of writes).
        do { try pack.finishSegment() } catch { throw StoreError(pack: error) }
        do {
            file = try SegmentFile.create(
                id: id, in: packs, createdAt: createdAt, format: format, synchronize: false, faults: faults)
        } catch {
            // A file created without its whole header holds nothing: remove it (best effort) so
            // that the next rotation can create the segment again.
            if let size = PackDirectory.segmentSize(id, in: packs), size < UInt64(PackFormat.segmentHeaderSize) {
                try? PackDirectory.removeSegment(id, in: packs)
            }
            throw StoreError(pack: error)
        }
        rotated.append((old, pack.end))
        created.append(id)
        if syncs {
            unsyncedSealed.append(old)
            unsyncedCreations += 1
        }
        pack.rotate(to: file)
    }

    /// What the next sync of the pack covers: the sealed segments and creations no sync has
    /// covered yet, the active segment, and the place it reaches — every byte appended so far.
    func unsynced() -> (sealed: [SegmentFile], creations: Int, active: SegmentFile, through: PackPosition) {
        (unsyncedSealed, unsyncedCreations, pack.segment, PackPosition(segment: pack.segment.id, offset: pack.end))
    }

    /// A sync of the pack made the first `sealed` segments of ``unsyncedSealed`` and the first
    /// `creations` creations durable (rotations since stay to the next).
    func synced(sealed: Int, creations: Int) {
        unsyncedSealed.removeFirst(sealed)
        unsyncedCreations -= creations
    }

    /// The failed sync that makes the store refuse writes until it is reopened, if any: of the
    /// active segment, or of a rotated one whose writes are still queued — the commit of those
    /// writes needs a sync that can no longer be trusted (``SegmentFile/synchronize()``).
    var syncFailure: PackError? {
        unsyncedTails ?? pack.segment.syncFailure ?? rotated.lazy.compactMap { $0.file.syncFailure }.first
    }

    /// Set at open when the tails the replay found could not be written again and synced
    /// (``Store/Opened/unsyncedTails``): their writes are served from memory and never
    /// committed in this opening, so the store refuses writes and commit cycles as after a
    /// failed sync.
    var unsyncedTails: PackError?

    /// Queues a record appended at `offset` of the active segment.
    func enqueue(offset: UInt64, length: UInt64, _ content: ScannedRecord.Content) {
        queue.append(
            PendingWrite(segment: pack.segment.id, record: ScannedRecord(offset: offset, length: length, content: content)))
    }
}

/// A write just queued, as its writer sees the queue (``AppendState/queued(_:)``).
struct QueuedWrite {
    /// The write's sequence number.
    var sequence: UInt64
    /// Records queued, this write's included.
    var queueLength: Int
    /// No write with a lower sequence number is still queued: a commit through this sequence
    /// shortens the queue.
    var oldestQueued: UInt64
    /// The end of the pack once the write was appended: a sync through it makes it durable.
    var end: PackPosition
}

/// What a commit cycle takes from the appender, under its lock, in one step.
struct CommitSnapshot {
    var writes: [PendingWrite]
    var rotated: [(file: SegmentFile, end: UInt64)]
    var created: [UInt32]
    var active: SegmentFile
    /// The end of the active segment: everything before it is in `writes` or already indexed.
    var end: UInt64
    /// Every write with a lower sequence number is in this snapshot or already committed.
    var sequence: UInt64
    /// Why no cycle may commit in this opening (``AppendState/unsyncedTails``), if any.
    var refusal: PackError?

    var isEmpty: Bool { writes.isEmpty && rotated.isEmpty && created.isEmpty }
}

extension AppendState {
    func snapshot() -> CommitSnapshot {
        CommitSnapshot(
            writes: queue.seal(), rotated: rotated, created: created, active: pack.segment, end: pack.end, sequence: nextSequence,
            refusal: unsyncedTails)
    }

    /// Forgets what `snapshot` committed, with the blobs its writes added. Returns the released
    /// batches of the queue, which the caller lets go of after the appender lock (their records
    /// are freed then, not under it).
    func release(_ snapshot: CommitSnapshot) -> WriteQueue.Released {
        let released = queue.removeSealed(snapshot.writes.count)
        rotated.removeFirst(snapshot.rotated.count)
        created.removeFirst(snapshot.created.count)
        releasedSequence = snapshot.sequence
        return released
    }

    /// The blobs queued with this hash and length, for deduplication before they reach the index.
    func pendingBlobs(_ key: PendingBlobKey) -> [BlobRow] { queue.blobs(key) }

    /// Queues a new blob's record appended at `offset` of the active segment, and the blob.
    func enqueueBlob(_ blob: BlobRow, offset: UInt64, length: UInt64) {
        let content = ScannedRecord.Content.blob(hash: blob.hash, id: UInt64(bitPattern: blob.id), payloadLength: blob.length)
        enqueue(offset: offset, length: length, content)
        queue.addBlob(blob, PendingBlobKey(hash: blob.hash, length: blob.length))
    }

    /// The write with sequence number `sequence`, just queued: what its writer may wait for.
    func queued(_ sequence: UInt64) -> QueuedWrite {
        QueuedWrite(
            sequence: sequence, queueLength: queue.count, oldestQueued: releasedSequence,
            end: PackPosition(segment: pack.segment.id, offset: pack.end))
    }
}
