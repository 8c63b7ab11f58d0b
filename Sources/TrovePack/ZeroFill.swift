import Foundation
import TroveCore

/// Zeros written into a segment ahead of its writer, and synced, on a thread other than the
/// writer's.
///
/// A write that extends a file makes its `fdatasync` write the file's metadata too (new blocks,
/// a new size: a journal commit, or the inode itself on ext4 without a journal); a write that
/// lands inside the file's size, on blocks the file already has, makes the `fdatasync` write the
/// data and flush the disk's cache only. On this machine's
/// ext4 that sync costs 150–276 µs instead of 219–297 µs, the filling paid for
/// (Docs/Benchmarks.md, "zeros ahead of `full` writes"). The price: every byte is written to
/// the disk twice, and the file holds up to a chunk of zeros past its records, which sealing
/// and closing cut (``PackWriter/finishSegment()``). The scanner knows nothing of them: zeros
/// a crash leaves past the last record are bytes that hold no record, cut from the newest
/// segment on opening as a torn tail and reported like any (an outside attack found that
/// reading zeros as an end hid zeroed records).
///
/// A fill is claimed and absorbed by ``PackWriter`` only, under its owner's lock; no record is
/// written into `range` before the fill's zeros are (they would land on it). Off by default
/// (`Store.Configuration.zeroFill`): the zeros' writeback lands in the writers' syncs.
public final class ZeroFill: Sendable {
    /// The segment the zeros go into.
    public let segment: SegmentFile
    /// Where they go: past every record written, and past the file's end when claimed.
    public let range: Range<UInt64>
    private let condition = NSCondition()
    // Read and written only with `condition` locked.
    nonisolated(unsafe) private var outcome: Bool?

    init(segment: SegmentFile, range: Range<UInt64>) {
        self.segment = segment
        self.range = range
    }

    /// Writes the zeros, lets the writer use them, then syncs the segment through a descriptor
    /// of the fill's own (``SegmentFile/synchronizeSeparately()``), which never hides a failure
    /// from the writer's syncs.
    public func run() {
        let written = (try? segment.writeZeros(range)) != nil
        finish(written)
        if written { segment.synchronizeSeparately() }
    }

    /// Ends the fill without writing anything (its thread is gone).
    public func cancel() {
        finish(false)
    }

    private func finish(_ written: Bool) {
        condition.lock()
        outcome = written
        condition.broadcast()
        condition.unlock()
    }

    /// Whether the zeros are written (or the fill ended without them): records may go into
    /// `range` from now on (a record written after the zeros overwrites them; the sync covers
    /// both).
    var isWritten: Bool {
        condition.lock()
        defer { condition.unlock() }
        return outcome != nil
    }

    /// Waits until the zeros are written or the fill has ended without them; whether every
    /// zero was written.
    func waitUntilWritten() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while outcome == nil { condition.wait() }
        return outcome!
    }
}

/// How a ``PackWriter`` keeps zeros ahead of its writes (``ZeroFill``).
public struct ZeroFillPolicy: Sendable {
    /// The bytes one fill writes; the next is claimed when fewer than half of them are left
    /// ahead of the writes.
    public var chunk: UInt64
    /// Runs a claimed fill on another thread: ``ZeroFill/run()``, or ``ZeroFill/cancel()``
    /// when it cannot.
    public var start: @Sendable (ZeroFill) -> Void

    public init(chunk: UInt64, start: @escaping @Sendable (ZeroFill) -> Void) {
        self.chunk = chunk
        self.start = start
    }
}

/// How a ``PackWriter`` keeps the pages of its file's next bytes in the page cache before its
/// writes reach them.
///
/// A write that lands on a page the page cache does not hold makes the kernel allocate the page
/// and zero what the write does not cover, inside the writer's system call. On a virtual machine
/// whose memory the host backs only when the guest first touches a page — and takes back when
/// the guest frees it (free page reporting) — that first touch is most of a small put's kernel
/// time (Docs/Benchmarks.md, "pages ahead of the writes"). So the writer extends its file by a
/// chunk at a time (``PackWriter`` owns the file's size: `ftruncate`, a hole, no disk space) and
/// hands the range to ``start``, which reads it into the page cache on another thread
/// (``SegmentFile/warm(_:)``); a write that lands there finds its page present, zeroed and up to
/// date. Nothing is written and nothing waits: a write that outruns the warming pays for its
/// own pages as before. The hole holds no records: cut like zeros when the segment is sealed or
/// the store closes, and after a crash cut by opening without a report (``PreparedTail``).
public struct WarmAheadPolicy: Sendable {
    /// The bytes one extension adds; the next is made when fewer than half of them are left
    /// ahead of the writes.
    public var chunk: UInt64
    /// No extension is made while the writes average more bytes than this: a write of 64 KiB
    /// or more ran slower into warmed pages than into pages it allocated itself, and its syncs
    /// slower too (Docs/Benchmarks.md, "pages ahead of the writes"). Default 32 KiB.
    public var largestAverageWrite: UInt64
    /// Runs the job on another thread: ``WarmJob/run()``, or ``WarmJob/cancel()`` when it cannot.
    public var start: @Sendable (WarmJob) -> Void

    public init(chunk: UInt64, largestAverageWrite: UInt64 = 32 << 10, start: @escaping @Sendable (WarmJob) -> Void) {
        self.chunk = chunk
        self.largestAverageWrite = largestAverageWrite
        self.start = start
    }
}

/// A range of a segment to read into the page cache (``WarmAheadPolicy``), handed by its writer to
/// another thread; the writer makes no further extension until it is done.
public final class WarmJob: Sendable {
    /// The segment whose file holds the range.
    public let segment: SegmentFile
    /// The hole to read in.
    public let range: Range<UInt64>
    private let done = Locked(false)

    init(segment: SegmentFile, range: Range<UInt64>) {
        self.segment = segment
        self.range = range
    }

    /// Reads the range into the page cache (``SegmentFile/warm(_:)``).
    public func run() {
        segment.warm(range)
        done.withLock { $0 = true }
    }

    /// Ends the job without reading anything (its thread is gone).
    public func cancel() {
        done.withLock { $0 = true }
    }

    /// Whether the job ran or was cancelled.
    var isDone: Bool { done.withLock { $0 } }
}
