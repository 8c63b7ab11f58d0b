import Foundation
import TroveIndex

/// The thread that checkpoints the index's write-ahead log when the committer asks, so that a
/// commit cycle never pays for one (Docs/Architecture.md, "Checkpoints").
///
/// SQLite's automatic checkpoint runs inside the `COMMIT` that takes the log past 1 000 pages:
/// on the committer thread, copying every page of the log into the database between two fsyncs
/// — every second or third cycle of a stream of puts was three times as slow as the others.
/// Here the committer's connection only counts the log (``IndexDatabase/takeOverCheckpoints()``)
/// and, past ``Store/checkpointFrames``, wakes this thread, whose own connection copies what no
/// reader still needs without waiting for any lock. A checkpoint that fails (a full disk) is
/// left for the next request, as SQLite leaves a failed automatic one; the log keeps growing
/// meanwhile, until the committer checkpoints itself at ``Store/walFrameLimit``.
///
/// Started on the first request; one thread, a wake-up condition and a shutting-down flag, like
/// ``BackgroundCommitter``.
final class BackgroundCheckpointer: @unchecked Sendable {
    // `@unchecked Sendable`: `requested`, `shuttingDown`, `started`, `exited`, `passes` and
    // `copied` are read and written only with `condition` locked; the connection lives on the
    // thread.
    private let path: String
    private let condition = NSCondition()
    private var requested = false
    private var shuttingDown = false
    private var started = false
    private var passes = 0
    private var copied = 0
    private var exited = false

    /// A checkpointer for the index at `path`.
    init(path: String) {
        self.path = path
    }

    /// How many checkpoints the thread has run.
    var completedPasses: Int {
        condition.lock()
        defer { condition.unlock() }
        return passes
    }

    /// The log frames the thread's checkpoints reported copied into the database, summed over
    /// them (a frame still in the log when the next checkpoint runs counts again): zero means
    /// none of them copied anything.
    var copiedFrames: Int {
        condition.lock()
        defer { condition.unlock() }
        return copied
    }

    /// Asks for a checkpoint (one runs after the call, however many calls it answers).
    func request() {
        condition.lock()
        defer { condition.unlock() }
        guard !shuttingDown else { return }
        requested = true
        if !started {
            started = true
            let thread = Thread { [self] in run() }
            thread.name = "trove-checkpointer"
            thread.start()
        }
        condition.signal()
    }

    /// Stops the thread, waiting for a checkpoint under way to finish — every caller waits, so
    /// two closes at once both return with the thread gone. Later requests are ignored.
    func stop() {
        condition.lock()
        defer { condition.unlock() }
        shuttingDown = true
        condition.broadcast()
        while started && !exited { condition.wait() }
    }

    private func run() {
        var connection: IndexCheckpointer?
        while true {
            condition.lock()
            while !requested && !shuttingDown { condition.wait() }
            let stop = shuttingDown
            requested = false
            condition.unlock()
            if stop { break }
            // Opened on first use; a failed open is tried again at the next request.
            if connection == nil { connection = try? IndexCheckpointer(path: path) }
            let frames = (try? connection?.checkpoint())?.copied ?? 0
            condition.lock()
            passes += 1
            copied += max(0, frames)
            condition.unlock()
        }
        connection = nil
        condition.lock()
        exited = true
        condition.broadcast()
        condition.unlock()
    }
}
