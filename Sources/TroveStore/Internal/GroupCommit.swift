import Foundation

/// How writes that wait for their commit (every write under ``Durability/full``, and writers
/// held back by a long queue) share commit cycles: one of them leads a cycle, the others wait
/// for it, and every follower wakes at once when it ends.
///
/// Waiting on the committer's lock instead, as writes once did, made small groups: a cycle's
/// end woke the waiters one at a time through the mutex, each only to find its write committed,
/// while the writers released first queued their next writes behind them — two or three writes
/// a cycle with eight writers on two cores. Here a follower whose write the cycle did not cover
/// becomes the next leader, and its cycle takes every write queued meanwhile.
///
/// A leader's failure is not handed to its followers: each follower whose write is still not
/// committed leads a cycle of its own, and sees its own outcome.
final class GroupCommit: @unchecked Sendable {
    // `@unchecked Sendable`: every property is read and written only with `condition` locked.
    private let condition = NSCondition()
    /// Whether a leader is running a cycle.
    private var leading = false
    /// Whether a commit cycle is running, whoever runs it (a leader, the background committer,
    /// the compactor): a waiter it may cover waits for its end here rather than queueing on the
    /// committer's lock, where the cycle after it could go first.
    private var cycleRunning = false
    /// Every write with a lower sequence number is committed (as cycles reported it).
    private var committed: UInt64 = 0

    /// Returns once the write with sequence number `sequence` is committed: by a running cycle,
    /// a cycle another writer leads, or one this call leads with `commit`, which commits every
    /// queued write through `sequence` at least and returns the committed sequence (every write
    /// below it is committed).
    func waitForCommit(of sequence: UInt64, commit: () throws(StoreError) -> UInt64) throws(StoreError) {
        condition.lock()
        while committed <= sequence && (leading || cycleRunning) { condition.wait() }
        if committed > sequence {
            condition.unlock()
            return
        }
        leading = true
        condition.unlock()
        let outcome = Result { () throws(StoreError) in try commit() }
        condition.lock()
        leading = false
        if case .success(let through) = outcome { committed = max(committed, through) }
        condition.broadcast()
        condition.unlock()
        _ = try outcome.get()
    }

    /// A commit cycle starts (held: the committer lock).
    func cycleStarted() {
        condition.lock()
        cycleRunning = true
        condition.unlock()
    }

    /// The cycle ends, having committed every write below `committed` (held: the committer
    /// lock). A failed cycle reports what was committed before it: its waiters lead their own.
    func cycleEnded(committed through: UInt64) {
        condition.lock()
        cycleRunning = false
        committed = max(committed, through)
        condition.broadcast()
        condition.unlock()
    }
}
