import TroveCore

/// A counting semaphore with two levels — at most `total` holders in all and at most `perKey`
/// per key (an origin) — that suspends waiters instead of blocking threads.
///
/// Waiters are served first come, first served, except that one whose key is at its own limit
/// lets later waiters of other keys pass (otherwise one slow host would hold everyone up).
/// A cancelled waiter leaves the line at once.
///
/// Invariant (under the lock): every waiter is blocked — the total is reached, or its key is at
/// its limit. So a newcomer may take a slot whenever the two counts allow it without
/// overtaking anyone it competes with.
final class ConcurrencyLimiter: Sendable {
    private struct Waiter {
        var id: UInt64
        var key: String
        var continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var held = 0
        var heldByKey: [String: Int] = [:]
        /// Waiters in arrival order.
        var waiters: [Waiter] = []
        var nextID: UInt64 = 0

        func canTake(_ key: String, total: Int, perKey: Int) -> Bool {
            held < total && heldByKey[key, default: 0] < perKey
        }

        mutating func take(_ key: String) {
            held += 1
            heldByKey[key, default: 0] += 1
        }
    }

    let total: Int
    let perKey: Int
    private let state = Locked(State())

    init(total: Int, perKey: Int) {
        precondition(total > 0 && perKey > 0, "concurrency limits must be positive")
        self.total = total
        self.perKey = perKey
    }

    /// Takes a slot for `key`, waiting for one if needed.
    ///
    /// - Returns: true with a slot held (give it back with ``release(_:)``); false, holding
    ///   nothing, when the task is cancelled before a slot came.
    func acquire(_ key: String) async -> Bool {
        let id: UInt64? = state.withLock { state in
            if state.canTake(key, total: total, perKey: perKey) {
                state.take(key)
                return nil
            }
            state.nextID += 1
            return state.nextID
        }
        guard let id else { return true }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let immediate: Bool? = state.withLock { state in
                    // Checked under the lock: a cancellation either came before (seen here) or
                    // its handler runs after the waiter is in line and removes it.
                    if Task.isCancelled { return false }
                    if state.canTake(key, total: total, perKey: perKey) {
                        state.take(key)
                        return true
                    }
                    state.waiters.append(Waiter(id: id, key: key, continuation: continuation))
                    return nil
                }
                if let immediate { continuation.resume(returning: immediate) }
            }
        } onCancel: {
            let cancelled: CheckedContinuation<Bool, Never>? = state.withLock { state in
                guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters.remove(at: index).continuation
            }
            cancelled?.resume(returning: false)
        }
    }

    /// Gives back a slot of `key` and hands free slots to the waiters that can take them.
    func release(_ key: String) {
        let woken: [CheckedContinuation<Bool, Never>] = state.withLock { state in
            state.held -= 1
            let remaining = state.heldByKey[key, default: 1] - 1
            state.heldByKey[key] = remaining > 0 ? remaining : nil
            var woken: [CheckedContinuation<Bool, Never>] = []
            var index = 0
            while index < state.waiters.count, state.held < total {
                if state.canTake(state.waiters[index].key, total: total, perKey: perKey) {
                    let waiter = state.waiters.remove(at: index)
                    state.take(waiter.key)
                    woken.append(waiter.continuation)
                } else {
                    index += 1
                }
            }
            return woken
        }
        for continuation in woken { continuation.resume(returning: true) }
    }

    /// Slots held now, in all (for tests).
    var held: Int { state.withLock { $0.held } }

    /// Waiters in line now (for tests).
    var waiting: Int { state.withLock { $0.waiters.count } }
}
