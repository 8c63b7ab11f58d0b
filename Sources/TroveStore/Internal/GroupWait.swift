import Foundation

/// How writers that wait for the same kind of work share it: one of them leads a round of the
/// work, the others wait for it, and every follower wakes at once when it ends. Two instances:
/// the pack's syncs (every write under ``Durability/full`` waits until its record is durable)
/// and commit cycles (writers held back by a long queue wait until the oldest writes are
/// committed).
///
/// The work moves a mark forward — how far the pack is durable, a ``PackPosition``; the
/// committed sequence — and a waiter wants the mark at its target or past it. Waiting on one
/// lock instead, as writes once did, made small groups: a round's end woke the waiters one at a
/// time through the mutex, each only to find its target reached, while the writers released
/// first queued their next writes behind them — two or three writes a round with eight writers
/// on two cores. Here a follower whose target the round did not reach becomes the next leader,
/// and its round takes every write made meanwhile.
///
/// A leader's failure is not handed to its followers: each follower whose target is still not
/// reached leads a round of its own, and sees its own outcome.
final class GroupWait<Mark: Comparable & Sendable>: @unchecked Sendable {
    // `@unchecked Sendable`: every property is read and written only with `condition` locked.
    private let condition = NSCondition()
    /// Whether a leader is running a round.
    private var leading = false
    /// Whether a round is running that no waiter leads (the background committer's cycle, the
    /// compactor's): a waiter it may cover waits for its end here rather than queueing on the
    /// lock that round holds, where the round after it could go first.
    private var roundRunning = false
    /// How far the work has reached (as rounds reported it).
    private var reached: Mark

    init(reached: Mark) {
        self.reached = reached
    }

    /// Returns once the mark is at `target` or past it: moved by a running round, a round
    /// another writer leads, or one this call leads with `work`, which returns the mark it
    /// reached.
    func wait(for target: Mark, leading work: () throws(StoreError) -> Mark) throws(StoreError) {
        condition.lock()
        while reached < target && (leading || roundRunning) { condition.wait() }
        if reached >= target {
            condition.unlock()
            return
        }
        leading = true
        condition.unlock()
        let outcome = Result { () throws(StoreError) in try work() }
        condition.lock()
        leading = false
        if case .success(let mark) = outcome, mark > reached { reached = mark }
        condition.broadcast()
        condition.unlock()
        _ = try outcome.get()
    }

    /// Whether the mark is at `target` or past it.
    func hasReached(_ target: Mark) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        return reached >= target
    }

    /// A round no waiter leads starts.
    func roundStarted() {
        condition.lock()
        roundRunning = true
        condition.unlock()
    }

    /// That round ends, having reached `mark`. A failed round reports what was reached before
    /// it: its waiters lead their own.
    func roundEnded(reached mark: Mark) {
        condition.lock()
        roundRunning = false
        if mark > reached { reached = mark }
        condition.broadcast()
        condition.unlock()
    }
}

/// A place in the pack: a segment and an offset in it. Places are ordered as the appends that
/// reach them: every segment's bytes come before a newer segment's.
struct PackPosition: Comparable, Sendable {
    var segment: UInt32
    var offset: UInt64

    static func < (a: PackPosition, b: PackPosition) -> Bool {
        (a.segment, a.offset) < (b.segment, b.offset)
    }

    /// Before every byte of the pack.
    static let start = PackPosition(segment: 0, offset: 0)
}
