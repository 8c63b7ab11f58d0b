import Foundation

/// The thread that runs a commit cycle's fdatasyncs while the committer applies the same
/// cycle's writes to the index, so that a cycle costs the longer of the two instead of their
/// sum (Docs/Architecture.md, "Data flow", commit cycles).
///
/// The order that makes a crash safe is unchanged: the committer waits for the sync
/// (``Job/wait()``) before it commits the transaction, so no committed row ever points at pack
/// bytes that are not durable; a failed sync rolls the transaction back and the writes stay
/// queued (never to be committed on a retried sync: ``SegmentFile/synchronize()``). The
/// committer waits for each job before its cycle ends — also when the apply fails, so no sync
/// outlives its cycle, and only the committer submits, under its lock: one job at a
/// time, whether it runs on the thread or (after ``stop()``) on the committer's.
///
/// The thread and its lifecycle are a ``WorkerThread`` (`trove-syncer`).
final class BackgroundSyncer: Sendable {
    private let worker = WorkerThread(name: "trove-syncer")

    /// One submitted sync: its outcome once it has run.
    final class Job: @unchecked Sendable {
        // `@unchecked Sendable`: `outcome` is read and written only with `condition` locked;
        // `work` is run once, by ``run()``.
        private let condition = NSCondition()
        private var outcome: Result<Void, any Error>?
        private let work: @Sendable () throws -> Void

        fileprivate init(_ work: @escaping @Sendable () throws -> Void) {
            self.work = work
        }

        fileprivate func run() {
            let result = Result { try work() }
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
        if !worker.enqueue({ job.run() }) { job.run() }
        return job
    }

    /// Stops the thread after the jobs already submitted (every caller waits).
    func stop() {
        worker.stop()
    }
}
