import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

@testable import TroveStore

/// The one thread the syncer and the checkpointer each run on: jobs in order, `stop()` runs the
/// accepted ones and then the exit, every caller of `stop()` waits, and nothing is accepted after.
@Suite struct WorkerThreadTests {
    @Test func jobsRunInOrderOnOneNamedThreadAndStopRunsTheAcceptedOnes() async throws {
        try await offPool {
            let log = Locked<[String]>([])
            let gate = DispatchSemaphore(value: 0)
            let worker = WorkerThread(name: "trove-test-wkr") {
                log.withLock { $0.append("exit on \(Thread.current.name ?? "?")") }
            }
            // The first job holds the thread while the rest queue up behind it.
            #expect(worker.enqueue { gate.wait() })
            for index in 0..<50 {
                #expect(worker.enqueue { log.withLock { $0.append("\(index) on \(Thread.current.name ?? "?")") } })
            }
            let stopped = Locked(0)
            let stoppers = DispatchGroup()
            for _ in 0..<3 {
                DispatchQueue.global().async(group: stoppers) {
                    worker.stop()
                    // Each caller returns only after the last job and the exit have run.
                    #expect(log.withLock { $0.last?.hasPrefix("exit") } == true)
                    stopped.withLock { $0 += 1 }
                }
            }
            // The stoppers wait for the held job; none may return before it is let go.
            Thread.sleep(forTimeInterval: 0.2)
            #expect(stopped.withLock { $0 } == 0)
            gate.signal()
            #expect(stoppers.wait(timeout: .now() + 30) == .success)
            #expect(stopped.withLock { $0 } == 3)
            let expected = (0..<50).map { "\($0) on trove-test-wkr" } + ["exit on trove-test-wkr"]
            #expect(log.withLock { $0 } == expected)

            // Refused after stop, and never run.
            let ranLate = Locked(false)
            #expect(!worker.enqueue { ranLate.withLock { $0 = true } })
            worker.stop()
            Thread.sleep(forTimeInterval: 0.05)
            #expect(!ranLate.withLock { $0 })
        }
    }

    @Test func aWorkerNeverUsedStopsAtOnceWithoutAThread() async throws {
        try await offPool {
            let exited = Locked(false)
            let worker = WorkerThread(name: "trove-test-idle") { exited.withLock { $0 = true } }
            worker.stop()
            #expect(!exited.withLock { $0 })
            #expect(!worker.enqueue {})
        }
    }

    /// A store closing still syncs its last cycle: after `stop()` a sync runs on the caller's
    /// thread, and its failure still reaches the committer.
    @Test func theSyncerRunsWorkItselfAfterStopAndKeepsErrors() async throws {
        try await offPool {
            let syncer = BackgroundSyncer()
            let onThread = Locked<String?>(nil)
            try syncer.submit { onThread.withLock { $0 = Thread.current.name } }.wait()
            #expect(onThread.withLock { $0 } == "trove-syncer")
            syncer.stop()
            let caller = pthread_self()
            let ranOnCaller = Locked(false)
            let job = syncer.submit { ranOnCaller.withLock { $0 = pthread_equal(pthread_self(), caller) != 0 } }
            #expect(ranOnCaller.withLock { $0 })
            try job.wait()
            struct Failed: Error {}
            #expect(throws: Failed.self) { try syncer.submit { throw Failed() }.wait() }
        }
    }

    /// What `ps -T` shows for the store's threads, read from the kernel.
    @Test func theStoresThreadsCarryTheirNames() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir, durability: .full)
            try store.put(Data("v".utf8), for: CacheKey(url: "https://x/1"))
            let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")
            let names = Set(
                tasks.compactMap { try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8) }
                    .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) })
            #expect(names.isSuperset(of: ["trove-committer", "trove-syncer"]), "\(names.sorted())")
            try store.close()
        }
    }
}
