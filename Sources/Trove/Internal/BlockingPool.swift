import Foundation
import Synchronization
import TroveCore

/// A fixed set of threads for work that can block: store writes (an `fdatasync` under `full`
/// durability, back-pressure), decoding and encoding.
///
/// Swift's cooperative pool has one thread per core; a job that blocks one of them for 100 ms
/// delays every task scheduled behind it — memory hits included. Jobs run here instead, so
/// however long they take, the cooperative threads stay free (Docs/Pipeline.md, "Threads").
///
/// A caller whose task is cancelled stops waiting at once: its job is skipped when it has not
/// started, and its result dropped when it has (a started decode runs to its end).
final class BlockingPool: Sendable {
    /// A queued job: runs `body`, then resumes its waiter unless the waiter has gone.
    private final class Job: Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }

    private struct State {
        var queue: [Job] = []
        var head = 0
    }

    /// Lock order: `state` is a leaf; nothing else is locked while it is held.
    private let state = Locked(State())
    /// Set once by ``shutdown()``, while `state` is held (so that no job is queued after it);
    /// read without the lock by ``isShutDown``, which every pipeline request asks.
    private let shutDownFlag = Atomic<Bool>(false)
    private let available = DispatchSemaphore(value: 0)
    /// The number of threads.
    let threadCount: Int

    /// Starts `threads` threads named `name`-0, `name`-1… (`name` at most 12 bytes, for the
    /// kernel's 15).
    init(threads: Int, name: String) {
        threadCount = max(1, threads)
        for index in 0..<threadCount {
            Thread.start(named: "\(name)-\(index)", stackSize: 1 << 20) { [self] in work() }
        }
    }

    /// Runs `body` on a pool thread and returns its result.
    ///
    /// - Throws: `CancellationError` at once when the calling task is (or gets) cancelled
    ///   before `body` has finished; ``ShutDown`` after ``shutdown()``; else what `body` throws.
    func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try Task.checkCancellation()
        let waiter = Locked<CheckedContinuation<T, any Error>?>(nil)
        let cancelled = Locked(false)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                waiter.withLock { $0 = continuation }
                if cancelled.withLock({ $0 }) {
                    waiter.withLock { $0.take() }?.resume(throwing: CancellationError())
                    return
                }
                let job = Job {
                    // Skipped when its waiter has gone before it started.
                    guard !cancelled.withLock({ $0 }) else { return }
                    let result = Result { try body() }
                    waiter.withLock { $0.take() }?.resume(with: result)
                }
                guard enqueue(job) else {
                    waiter.withLock { $0.take() }?.resume(throwing: ShutDown())
                    return
                }
            }
        } onCancel: {
            cancelled.withLock { $0 = true }
            waiter.withLock { $0.take() }?.resume(throwing: CancellationError())
        }
    }

    /// Whether ``shutdown()`` has been called.
    var isShutDown: Bool { shutDownFlag.load(ordering: .acquiring) }

    /// The pool was shut down: no job is taken any more.
    struct ShutDown: Error {}

    /// Stops the threads once the queue is empty. Jobs submitted afterwards fail with
    /// ``ShutDown``.
    func shutdown() {
        let wasRunning = state.withLock { _ in
            !shutDownFlag.exchange(true, ordering: .acquiringAndReleasing)
        }
        guard wasRunning else { return }
        for _ in 0..<threadCount { available.signal() }
    }

    private func enqueue(_ job: Job) -> Bool {
        let accepted = state.withLock { state in
            guard !isShutDown else { return false }
            state.queue.append(job)
            return true
        }
        if accepted { available.signal() }
        return accepted
    }

    private func work() {
        while true {
            available.wait()
            let job = state.withLock { state -> Job? in
                guard state.head < state.queue.count else { return nil }
                let job = state.queue[state.head]
                state.head += 1
                if state.head > 64 && state.head * 2 > state.queue.count {
                    state.queue.removeFirst(state.head)
                    state.head = 0
                }
                return job
            }
            guard let job else {
                // A shutdown signal (the queue is empty).
                if isShutDown { return }
                continue
            }
            job.body()
        }
    }
}
