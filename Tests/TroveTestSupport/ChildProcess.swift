public import Foundation

/// The result of a finished child process.
public struct ProcessOutput: Sendable {
    public var status: Int32
    public var stdout: Data
    public var stderr: Data

    public var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
    public var stderrText: String { String(decoding: stderr, as: UTF8.self) }
}

/// Runs `executable` with `arguments` to completion and returns its status and output, waiting
/// on a thread of its own: an async test must not hold a thread of the cooperative pool while a
/// child runs, or the other suites' tasks (and their deadlines) starve meanwhile — on a 2-core
/// machine the pool has two threads.
public func runProcess(
    _ executable: String, _ arguments: [String], stdin: Data? = nil, environment: [String: String]? = nil
) async throws -> ProcessOutput {
    try await offPool { try runProcessBlocking(executable, arguments, stdin: stdin, environment: environment) }
}

/// Runs `body` on a thread of its own and returns its result: for test code that blocks
/// (semaphores, sleeps, waiting for a child), so that it holds no thread of the cooperative pool.
///
/// `body` stays in the calling task (a task executor preference, not a detached thread), so an
/// `#expect` or `Issue.record` in it is charged to the test that runs it.
public func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    let executor = DedicatedThreadExecutor()
    defer { executor.shutdown() }
    return try await withTaskExecutorPreference(executor) { try body() }
}

/// A task executor with one thread of its own, which runs the jobs given to it in order until
/// ``shutdown()``.
final class DedicatedThreadExecutor: TaskExecutor, @unchecked Sendable {
    // `@unchecked Sendable`: `jobs` and `stopping` are read and written only with `condition`
    // locked.
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var stopping = false

    init() {
        Thread.detachNewThread { [self] in run() }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Lets the thread end once it has run the jobs it was given.
    func shutdown() {
        condition.lock()
        stopping = true
        condition.signal()
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while jobs.isEmpty && !stopping { condition.wait() }
            guard !jobs.isEmpty else {
                condition.unlock()
                return
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

/// Runs `executable` with `arguments` to completion and returns its status and output, blocking
/// the calling thread.
public func runProcessBlocking(
    _ executable: String, _ arguments: [String], stdin: Data? = nil, environment: [String: String]? = nil
) throws -> ProcessOutput {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if let environment { process.environment = environment }
    let out = Pipe()
    let err = Pipe()
    let input = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = input
    try process.run()
    if let stdin { input.fileHandleForWriting.write(stdin) }
    try input.fileHandleForWriting.close()
    // Read both pipes to the end before waiting, so a full pipe cannot block the child.
    let group = DispatchGroup()
    nonisolated(unsafe) var errData = Data()
    group.enter()
    DispatchQueue.global().async {
        errData = err.fileHandleForReading.readDataToEndOfFile()
        group.leave()
    }
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    group.wait()
    process.waitUntilExit()
    return ProcessOutput(status: process.terminationStatus, stdout: outData, stderr: errData)
}

/// Whether the calling thread is named `prefix…` — the kernel's name, which Trove's threads set
/// (`trove-preparer`, `trove-syncer`…): how a fault injector tells whose call it is.
public func onThread(named prefix: String) -> Bool {
    (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8))?.hasPrefix(prefix) == true
}
