import TroveCore

/// Identical concurrent requests share one task: the first caller for a key starts the work,
/// later callers wait for the same result.
///
/// Cancellation is per waiter. A waiter whose task is cancelled stops waiting at once (its
/// await throws `CancellationError` without waiting for the work); when the last waiter of a
/// key has gone, the work's task is cancelled — for a download, that closes the connection —
/// and the key is free for a new start. The work runs in its own task, so it inherits no
/// caller's cancellation.
final class TaskCoalescer<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    /// The outcome of a wait.
    struct Outcome {
        /// The work's value.
        var value: Value
        /// Whether this caller joined work another caller had started.
        var joined: Bool
    }

    private struct Flight {
        var id: UInt64
        var task: Task<Void, Never>?
        var waiters: [UInt64: CheckedContinuation<Value, any Error>] = [:]
    }

    private enum Registration { case cancelled, joined, started(flightID: UInt64) }

    private struct State {
        var flights: [Key: Flight] = [:]
        /// Waiters cancelled before they could register (cancellation handlers can run first).
        var cancelledEarly: Set<UInt64> = []
        var nextID: UInt64 = 0
    }

    /// Lock order: `state` is a leaf. Continuations are resumed and tasks cancelled only after
    /// it is released.
    private let state = Locked(State())

    init() {}

    /// The number of keys with work in flight.
    var inFlight: Int { state.withLock { $0.flights.count } }

    /// Waits for the work of `key`, starting it with `work` when none is in flight.
    ///
    /// - Parameters:
    ///   - priority: The priority of the work's task when this call starts it.
    ///   - work: The work; it must not rely on the caller's task-local values.
    /// - Throws: `CancellationError` when the calling task is cancelled; else what `work` throws.
    func value(
        for key: Key, priority: TaskPriority? = nil, work: @escaping @Sendable () async throws -> Value
    ) async throws -> Outcome {
        let waiterID = state.withLock { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
        let joined = Locked(false)
        // Set under `state`'s lock when the waiter registers (or is refused).
        let registered = Locked(false)
        let value = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
                let registration = state.withLock { state -> Registration in
                    registered.withLock { $0 = true }
                    if state.cancelledEarly.remove(waiterID) != nil { return .cancelled }
                    if state.flights[key] != nil {
                        state.flights[key]?.waiters[waiterID] = continuation
                        return .joined
                    }
                    state.nextID += 1
                    let flightID = state.nextID
                    state.flights[key] = Flight(id: flightID, waiters: [waiterID: continuation])
                    return .started(flightID: flightID)
                }
                switch registration {
                case .cancelled:
                    continuation.resume(throwing: CancellationError())
                case .joined:
                    joined.withLock { $0 = true }
                case .started(let flightID):
                    let task = Task(priority: priority) {
                        let result: Result<Value, any Error>
                        do { result = .success(try await work()) } catch { result = .failure(error) }
                        self.finish(key, flightID: flightID, with: result)
                    }
                    // Every waiter may have gone before the task was attached (then nobody cancelled
                    // it), or it may have finished already (cancelling it is then harmless).
                    let orphaned = state.withLock { state -> Bool in
                        guard state.flights[key]?.id == flightID else { return true }
                        state.flights[key]?.task = task
                        return false
                    }
                    if orphaned { task.cancel() }
                }
            }
        } onCancel: {
            leave(key, waiterID: waiterID, registered: registered)
        }
        return Outcome(value: value, joined: joined.withLock { $0 })
    }

    /// A waiter's task was cancelled: resume it with `CancellationError`, and cancel the work
    /// when it was the last.
    private func leave(_ key: Key, waiterID: UInt64, registered: Locked<Bool>) {
        let (continuation, abandoned) = state.withLock {
            state -> (CheckedContinuation<Value, any Error>?, Task<Void, Never>?) in
            guard var flight = state.flights[key], let continuation = flight.waiters.removeValue(forKey: waiterID) else {
                // Not registered yet: remember, so that registration refuses it. (Already
                // served: nothing to do.)
                if !registered.withLock({ $0 }) { state.cancelledEarly.insert(waiterID) }
                return (nil, nil)
            }
            if flight.waiters.isEmpty {
                state.flights[key] = nil
                return (continuation, flight.task)
            }
            state.flights[key] = flight
            return (continuation, nil)
        }
        continuation?.resume(throwing: CancellationError())
        abandoned?.cancel()
    }

    private func finish(_ key: Key, flightID: UInt64, with result: Result<Value, any Error>) {
        let waiters = state.withLock { state -> [CheckedContinuation<Value, any Error>] in
            guard let flight = state.flights[key], flight.id == flightID else { return [] }
            state.flights[key] = nil
            return Array(flight.waiters.values)
        }
        for waiter in waiters { waiter.resume(with: result) }
    }
}
