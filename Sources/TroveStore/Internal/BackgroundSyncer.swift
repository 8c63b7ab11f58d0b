import Foundation

/// The thread that runs a commit cycle's fdatasyncs while the committer applies the same
/// cycle's writes to the index, so that a cycle costs the longer of the two instead of their
/// sum (Docs/Architecture.md, "Data flow", commit cycles).
///
/// The order that makes a crash safe is unchanged: the committer waits for the sync
/// (``Job/wait()``) before it commits the transaction, so no committed row ever points at pack
/// bytes that are not durable; a failed sync rolls the transaction back and the writes stay
/// queued. One job at a time: only the committer submits, under its lock, and it waits for each
/// job before the cycle ends — also when the apply fails, so no sync outlives its cycle.
///
/// Started on the first job; one thread, a wake-up condition and a shutting-down flag, like
/// ``BackgroundCheckpointer``.
final class BackgroundSyncer: @unchecked Sendable {
    // `@unchecked Sendable`: `pending`, `shuttingDown`, `started` and `exited` are read and
    // written only with `condition` locked.
    private let condition = NSCondition()
    private var pending: Job?
    private var shuttingDown = false
    private var started = false
    private var exited = false

    /// One submitted sync: its outcome once the thread has run it.
    final class Job: @unchecked Sendable {
        // `@unchecked Sendable`: `outcome` is read and written only with `condition` locked;
        // `work` is run once: by the thread, or by `submit` itself after `stop()`.
        private let condition = NSCondition()
        private var outcome: Result<Void, any Error>?
        fileprivate let work: @Sendable () throws -> Void

        fileprivate init(_ work: @escaping @Sendable () throws -> Void) {
            self.work = work
        }

        fileprivate func finish(_ result: Result<Void, any Error>) {
            condition.lock()
            outcome = result
            condition.broadcast()
            condition.unlock()
        }

        /// Waits for the sync and rethrows its error. Idempotent: a second call returns the same
        /// outcome at once.
        func wait() throws {
            condition.lock()
            while outcome == nil { condition.wait() }
            let result = outcome!
            condition.unlock()
            try result.get()
        }
    }

    /// Starts `work` on the thread and returns at once. After ``stop()`` the work runs on the
    /// caller's thread before this returns (a store closing still syncs its last cycle).
    func submit(_ work: @escaping @Sendable () throws -> Void) -> Job {
        let job = Job(work)
        condition.lock()
        if shuttingDown {
            condition.unlock()
            job.finish(Result { try work() })
            return job
        }
        precondition(pending == nil, "one sync at a time: the committer waits for each before the next")
        pending = job
        if !started {
            started = true
            let thread = Thread { [self] in run() }
            thread.name = "trove-syncer"
            thread.start()
        }
        condition.signal()
        condition.unlock()
        return job
    }

    /// Stops the thread, after the job under way (every caller waits, like the checkpointer's).
    func stop() {
        condition.lock()
        defer { condition.unlock() }
        shuttingDown = true
        condition.broadcast()
        while started && !exited { condition.wait() }
    }

    private func run() {
        while true {
            condition.lock()
            while pending == nil && !shuttingDown { condition.wait() }
            let job = pending
            pending = nil
            let stop = shuttingDown && job == nil
            condition.unlock()
            if stop { break }
            if let job { job.finish(Result { try job.work() }) }
        }
        condition.lock()
        exited = true
        condition.broadcast()
        condition.unlock()
    }
}
