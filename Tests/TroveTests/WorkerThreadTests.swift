import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

@testable import TroveStore

/// The one thread the syncer and the checkpointer each run on: jobs in order, `stop()` runs the
/// accepted ones and then the exit, every caller of `stop()` waits, and nothing is accepted after.
@Suite struct WorkerThreadTests {
    /// The kernel's name of the calling thread (what `ps -T` shows).
    static func kernelThreadName() -> String {
        ((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "?")
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test func jobsRunInOrderOnOneNamedThreadAndStopRunsTheAcceptedOnes() async throws {
        try await offPool {
            let log = Locked<[String]>([])
            let gate = DispatchSemaphore(value: 0)
            let worker = WorkerThread(name: "trove-test-wkr") {
                log.withLock { $0.append("exit on \(Self.kernelThreadName())") }
            }
            // The first job holds the thread while the rest queue up behind it.
            #expect(worker.enqueue { gate.wait() })
            for index in 0..<50 {
                #expect(worker.enqueue { log.withLock { $0.append("\(index) on \(Self.kernelThreadName())") } })
            }
            // Three callers stop the worker while it is held; each notes what had run when it
            // returned.
            let stopping = DispatchSemaphore(value: 0)
            let seenOnReturn = Locked<[String?]>([])
            let stoppers = DispatchGroup()
            for _ in 0..<3 {
                DispatchQueue.global().async(group: stoppers) {
                    stopping.signal()
                    worker.stop()
                    seenOnReturn.withLock { $0.append(log.withLock { $0.last }) }
                }
            }
            for _ in 0..<3 { stopping.wait() }
            // The stoppers have called stop(), or are about to: none may return while the
            // first job holds the thread.
            Thread.sleep(forTimeInterval: 0.2)
            #expect(seenOnReturn.withLock { $0 }.isEmpty)
            gate.signal()
            #expect(stoppers.wait(timeout: .now() + 30) == .success)
            // Each returned only after the last job and the exit had run.
            #expect(seenOnReturn.withLock { $0 } == Array(repeating: "exit on trove-test-wkr", count: 3))
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
            try syncer.submit { onThread.withLock { $0 = Self.kernelThreadName() } }.wait()
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

    /// The name reaches the kernel however fast the new thread starts (a name given to
    /// `Thread` before `start()` never does on Linux, and one over 15 bytes is refused).
    @Test func aStartedThreadCarriesItsNameInTheKernel() async throws {
        try await offPool {
            for round in 0..<20 {
                let name = "trove-test-\(round)"
                let seen = Locked<String?>(nil)
                let done = DispatchSemaphore(value: 0)
                Thread.start(named: name) {
                    seen.withLock { $0 = Self.kernelThreadName() }
                    done.signal()
                }
                #expect(done.wait(timeout: .now() + 30) == .success)
                #expect(seen.withLock { $0 } == name)
            }
        }
    }
}
