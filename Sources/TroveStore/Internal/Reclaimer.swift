import Foundation
import TroveCore

/// Frees large values on a thread of the store's own (`trove-reclaim`), so that the thread that
/// let go of them — the committer, holding the locks puts wait for — does not pay for it.
///
/// The one such value today is the slots the location map lets go of when it goes over its
/// limit (``LocationMap/Dropped``): a hundred thousand keys and rows (when the map was emptied
/// whole) took 20–57 ms to free on the committer, and every put of a burst waited that long
/// (Docs/Benchmarks.md, "the location map's drop and slots"); a sixteenth of the default limit
/// still takes a few milliseconds. Small values are freed at once: a hop to the thread would
/// cost more.
final class Reclaimer: Sendable {
    /// Values with fewer parts than this are freed by the caller.
    static let threshold = 4_096

    private let worker = WorkerThread(name: "trove-reclaim")
    /// Lock order: a leaf.
    private let freed = Locked(0)

    /// How many slots the thread has freed.
    var freedSlots: Int { freed.withLock { $0 } }

    /// Takes `dropped` and frees it: on the reclaimer's thread when it is large, else here (and
    /// here too once ``stop()`` was called).
    func release(_ dropped: consuming LocationMap.Dropped) {
        guard dropped.count >= Self.threshold else { return }
        // The box holds the only reference to the slots once the caller's is consumed, so the
        // job's `take()` frees it on the worker, whatever the order in which the two threads let
        // go of the box.
        let box = Box(dropped)
        worker.enqueue { [freed] in
            let count = box.take()
            freed.withLock { $0 += count }
        }
    }

    /// Frees what was handed over and ends the thread (every caller waits).
    func stop() {
        worker.stop()
    }

    /// `@unchecked Sendable`: `value` is written by `init` and then only by the one job that
    /// takes it.
    private final class Box: @unchecked Sendable {
        private var value: LocationMap.Dropped?
        init(_ value: consuming LocationMap.Dropped) { self.value = value }
        /// Frees the value; returns how many slots it held.
        func take() -> Int {
            defer { value = nil }
            return value?.count ?? 0
        }
    }
}
