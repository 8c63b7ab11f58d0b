import Foundation
import TroveCore

/// One thread of the store's own, started on the first job, that runs jobs in the order they
/// were enqueued — the lifecycle the syncer and the checkpointer share, in one place.
///
/// A dedicated thread, not a task: its jobs block (`fdatasync`, an SQLite checkpoint), which
/// must not hold a thread of the cooperative pool.
///
/// ``stop()`` runs every job already accepted, then `onExit` on the thread, then returns; every
/// caller waits, so two closes at once both return with the thread gone. After it,
/// ``enqueue(_:)`` refuses work and the caller decides what to do with it. A job must not call
/// ``stop()`` (it would wait for itself).
final class WorkerThread: @unchecked Sendable {
    // `@unchecked Sendable`: `queue`, `stopping`, `started` and `exited` are read and written
    // only with `condition` locked. Lock order: `condition` is a leaf — no job runs under it.
    private let condition = NSCondition()
    private var queue: [@Sendable () -> Void] = []
    private var stopping = false
    private var started = false
    private var exited = false
    private let name: String
    private let onExit: @Sendable () -> Void

    /// A worker whose thread will be named `name` (at most 15 bytes); `onExit` runs on the thread after its last
    /// job (to release what the jobs kept on it), and only if the thread was ever started.
    init(name: String, onExit: @escaping @Sendable () -> Void = {}) {
        self.name = name
        self.onExit = onExit
    }

    /// Queues `job` behind the ones already queued, starting the thread on first use. Returns
    /// false, without running or keeping `job`, once ``stop()`` has been called.
    @discardableResult
    func enqueue(_ job: @escaping @Sendable () -> Void) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !stopping else { return false }
        queue.append(job)
        if !started {
            started = true
            Thread.start(named: name) { [self] in run() }
        }
        condition.signal()
        return true
    }

    /// Refuses further jobs, lets the thread finish the accepted ones and waits until it has
    /// ended. Idempotent; every caller waits.
    func stop() {
        condition.lock()
        defer { condition.unlock() }
        stopping = true
        condition.broadcast()
        while started && !exited { condition.wait() }
    }

    private func run() {
        while true {
            condition.lock()
            while queue.isEmpty && !stopping { condition.wait() }
            guard !queue.isEmpty else {
                condition.unlock()
                break
            }
            let job = queue.removeFirst()
            condition.unlock()
            job()
        }
        onExit()
        condition.lock()
        exited = true
        condition.broadcast()
        condition.unlock()
    }
}
