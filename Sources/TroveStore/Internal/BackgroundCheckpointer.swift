import Foundation
import TroveCore
import TroveIndex

/// The thread that checkpoints the index's write-ahead log when the committer asks, so that a
/// commit cycle never pays for one (Docs/Architecture.md, "Checkpoints").
///
/// SQLite's automatic checkpoint runs inside the `COMMIT` that takes the log past 1 000 pages:
/// on the committer thread, copying every page of the log into the database between two fsyncs
/// — every second or third cycle of a stream of puts was three times as slow as the others.
/// Here the committer's connection only counts the log (``IndexDatabase/takeOverCheckpoints()``)
/// and, past ``Store/checkpointFrames(indexBytes:capacity:)``, wakes this thread, whose own
/// connection copies what no reader still needs without waiting for any lock. A checkpoint that fails (a full disk) is
/// left for the next request, as SQLite leaves a failed automatic one; the log keeps growing
/// meanwhile, until the committer checkpoints itself at ``Store/walFrameLimit``.
///
/// The thread and its lifecycle are a ``WorkerThread`` (`trove-wal-ckpt`); requests made
/// while one is already queued are answered by that one.
final class BackgroundCheckpointer: Sendable {
    private struct Counts {
        /// Whether a checkpoint job is queued and not yet started.
        var queued = false
        var passes = 0
        var copied = 0
    }

    private let path: String
    /// Lock order: a leaf; nothing else is locked while it is held.
    private let counts = Locked(Counts())
    private let connection: ThreadConnection
    private let worker: WorkerThread

    /// The checkpointer's SQLite connection, which lives on the worker's thread: only its jobs
    /// and its exit touch it, one at a time.
    private final class ThreadConnection: @unchecked Sendable {
        var connection: IndexCheckpointer?
    }

    /// A checkpointer for the index at `path`.
    init(path: String) {
        self.path = path
        let connection = ThreadConnection()
        self.connection = connection
        // Closed on the thread that used it, after its last checkpoint.
        worker = WorkerThread(name: "trove-wal-ckpt") { connection.connection = nil }
    }

    /// How many checkpoints the thread has run.
    var completedPasses: Int {
        counts.withLock { $0.passes }
    }

    /// The log frames the thread's checkpoints reported copied into the database, summed over
    /// them (a frame still in the log when the next checkpoint runs counts again): zero means
    /// none of them copied anything.
    var copiedFrames: Int {
        counts.withLock { $0.copied }
    }

    /// Asks for a checkpoint (one runs after the call, however many calls it answers). Ignored
    /// after ``stop()``.
    func request() {
        let first = counts.withLock { counts in
            defer { counts.queued = true }
            return !counts.queued
        }
        guard first else { return }
        if !worker.enqueue({ [self] in checkpoint() }) { counts.withLock { $0.queued = false } }
    }

    /// Stops the thread, waiting for a checkpoint under way to finish — every caller waits, so
    /// two closes at once both return with the thread gone. Later requests are ignored.
    func stop() {
        worker.stop()
    }

    private func checkpoint() {
        // A request from here on needs a checkpoint after this one.
        counts.withLock { $0.queued = false }
        // Opened on first use; a failed open is tried again at the next request.
        if connection.connection == nil { connection.connection = try? IndexCheckpointer(path: path) }
        let frames = (try? connection.connection?.checkpoint())?.copied ?? 0
        counts.withLock {
            $0.passes += 1
            $0.copied += max(0, frames)
        }
    }
}
