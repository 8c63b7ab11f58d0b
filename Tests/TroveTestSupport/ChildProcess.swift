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
public func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
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
