import Foundation
import Testing
import TroveCore
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@testable import TroveStore

#if canImport(Glibc)
    import Glibc
#endif

/// A child process (Tests/CrashWriter) writes to a store continuously and is killed with
/// SIGKILL at a random moment, again and again on the same store. After each kill the store
/// must open without help, serve exactly what was acknowledged (or, for the one operation in
/// flight, its outcome either way), serve no wrong bytes, and keep working.
@Suite(.serialized) struct CrashTests {
    /// What a key holds: the etag "contentSeed:size" of its value, or nil when absent.
    typealias Model = [Int: String]

    final class Output: Sendable {
        let data = Locked(Data())
    }

    struct Child {
        let process: Process
        let output: Output
        let done: DispatchSemaphore

        /// The lines printed so far.
        var lines: [Substring] {
            String(decoding: output.data.withLock { $0 }, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
        }
    }

    static func launch(
        store: String, seed: UInt64, durability: Durability, segmentSize: Int, compacting: Bool = false,
        zeroFill: Int? = nil, environment: [String: String] = [:]
    ) throws -> Child {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: productsDirectory + "/CrashWriter")
        var added = environment
        if let zeroFill { added["TROVE_ZERO_FILL"] = String(zeroFill) }
        if !added.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(added) { $1 }
        }
        process.arguments = [store, String(seed), durability.rawValue, String(segmentSize)] + (compacting ? ["compact"] : [])
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.standardError
        try process.run()
        let (output, done) = collect(pipe.fileHandleForReading)
        return Child(process: process, output: output, done: done)
    }

    /// Reads `reader` to its end on a thread of its own: what it read so far, and a semaphore
    /// signalled at the end.
    static func collect(_ reader: FileHandle) -> (Output, DispatchSemaphore) {
        let output = Output()
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            while true {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                output.data.withLock { $0.append(chunk) }
            }
            done.signal()
        }
        return (output, done)
    }

    static func waitForReady(_ child: Child, timeout: Double = 30) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let line = child.lines.first(where: { $0.hasPrefix("READY ") }) { return Int32(line.dropFirst(6)) }
            if !child.process.isRunning { return nil }
            usleep(2000)
        }
        return nil
    }

    /// Waits until the child acknowledged `count` operations (or died, or `timeout` passed).
    static func waitForAcknowledgements(_ child: Child, count: Int, timeout: Double = 60) {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline && child.process.isRunning && child.lines.filter({ $0 == "OK" }).count < count {
            usleep(1000)
        }
    }

    static func kill(_ child: Child) {
        Glibc.kill(child.process.processIdentifier, SIGKILL)
        child.process.waitUntilExit()
        child.done.wait()
    }

    @Test func sigkillAtRandomMomentsLosesNoAcknowledgedWrite() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool { try runKillRounds(dir, rounds: 24, segmentSize: 256 << 10, compacting: false) }
        }
    }

    /// The same, with a second thread in the child running compaction passes back to back, so
    /// kills land inside segment rewrites: copies written but not committed, committed but the
    /// old file not yet unlinked.
    @Test func sigkillDuringCompactionLosesNoIntactEntry() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool { try runKillRounds(dir, rounds: 24, segmentSize: 48 << 10, compacting: true) }
        }
    }

    /// The same with zeros kept ahead of the writes at every level (`zeroFill`, 16 KiB fills
    /// in 256 KiB segments): kills land while fills write and sync, so openings find zeros past
    /// the last record, records torn inside zeros, and segments sealed before their zeros were
    /// cut.
    @Test func sigkillWithZerosAheadOfTheWritesLosesNoAcknowledgedWrite() async throws {
        try await withTemporaryDirectory { dir in
            try await offPool {
                try runKillRounds(dir, rounds: 18, segmentSize: 256 << 10, compacting: false, zeroFill: 16 << 10)
            }
        }
    }

    func runKillRounds(_ dir: String, rounds: Int, segmentSize: Int, compacting: Bool, zeroFill: Int? = nil) throws {
        let storePath = dir + "/store"
        var model = Model()
        var generator = SeededGenerator(seed: compacting ? 78 : 77)
        var totalOps = 0
        var tornTails = 0
        var compactedSegments = 0
        var compactedInChild = 0
        for round in 0..<rounds {
            let durability = Durability.allCases[round % 3]
            let child = try Self.launch(
                store: storePath, seed: UInt64(round + 1), durability: durability, segmentSize: segmentSize,
                compacting: compacting, zeroFill: zeroFill)
            // Kill sometimes during open and recovery, mostly while writing: then after some
            // work, at a random moment.
            let writing = round % 6 != 5
            if writing { Self.waitForAcknowledgements(child, count: 10) }
            usleep(UInt32.random(in: writing ? 0...100_000 : 0...30_000, using: &generator))
            Self.kill(child)
            #expect(child.process.terminationReason == .uncaughtSignal, "round \(round): the child died on its own")

            // Apply the acknowledged operations to the model; keep the one in flight aside.
            var inFlight: (key: Int, etag: String?)?
            for line in child.lines {
                let fields = line.split(separator: " ")
                switch fields.first {
                case "P": inFlight = (Int(fields[1])!, "\(fields[2]):\(fields[3])")
                case "R": inFlight = (Int(fields[1])!, nil)
                case "G": inFlight = nil
                case "C": compactedInChild += Int(fields[1])!
                case "OK":
                    if let op = inFlight { model[op.key] = op.etag }
                    inFlight = nil
                    totalOps += 1
                default: break
                }
            }

            let store = try openStore(dir, durability: durability, segmentSize: Int64(segmentSize)) {
                $0.compactionInterval = nil
                $0.zeroFill = Int64(zeroFill ?? 0)
            }
            // Opening cut every zero (fills) or hole (warming, the default otherwise) past the
            // records; the writer resumes at the file's end.
            let end = store.appender.withLock { ($0.pack.segment, $0.pack.end) }
            #expect(try end.0.size() == end.1, "round \(round)")
            tornTails += store.recoveryReport.truncatedTails.count
            #expect(store.recoveryReport.missingSegments.isEmpty, "round \(round)")
            #expect(store.recoveryReport.droppedEntries.isEmpty, "round \(round)")
            for k in 0..<60 {
                let entry = try store.entry(for: CacheKey(url: "https://crash.example/\(k)"))
                let actual = entry?.etag
                if let entry {
                    let parts = actual!.split(separator: ":").map { UInt64($0)! }
                    #expect(
                        entry.data == Data(testBytes(seed: parts[0], count: Int(parts[1]))),
                        "round \(round) key \(k): wrong bytes")
                }
                if let op = inFlight, op.key == k {
                    #expect(
                        actual == model[k] || actual == op.etag,
                        "round \(round) key \(k): in-flight op gave \(String(describing: actual))")
                    model[k] = actual
                } else {
                    #expect(
                        actual == model[k],
                        "round \(round) key \(k): expected \(String(describing: model[k])), got \(String(describing: actual))")
                }
            }
            // fsck finds nothing that opening the store did not already repair.
            let check = try store.fsck()
            let unrepaired = check.findings.filter { !$0.repaired }
            #expect(unrepaired.isEmpty, "round \(round): \(unrepaired)")
            // The store keeps working after the crash, compaction included.
            let probe = CacheKey(url: "https://crash.example/probe")
            try store.put(Data("probe \(round)".utf8), for: probe)
            #expect(try store.data(for: probe) == Data("probe \(round)".utf8))
            try store.remove(probe)
            if compacting { compactedSegments += try store.compact().segmentsDeleted }
            try store.close()
        }
        // Every writing round did work before it was killed.
        #expect(totalOps >= 10 * (rounds - rounds / 6))
        // The kills did land while the child was reclaiming segments.
        if compacting { #expect(compactedInChild > 0) }
        let store = try openStore(dir)
        #expect(store.recoveryReport.isClean)
        let final = try store.fsck()
        #expect(final.isClean, "\(final.findings)")
        #expect(try store.statistics().entries == model.values.count)
        print(
            "crash suite\(compacting ? " with compaction" : ""): \(rounds) rounds, \(totalOps) acknowledged operations, \(tornTails) torn tails cut\(compacting ? ", \(compactedInChild) segments reclaimed by the child, \(compactedSegments) after reopening" : "")"
        )
    }

    @Test func aSecondProcessIsRefusedNamingTheOwner() async throws {
        try await withTemporaryDirectory { dir in
            let child = try Self.launch(store: dir + "/store", seed: 1, durability: .batched, segmentSize: 1 << 20)
            let pid = try #require(Self.waitForReady(child))
            let error = #expect(throws: StoreError.self) { try openStore(dir) }
            #expect(error?.code == .locked)
            #expect(error?.message.contains("process \(pid)") == true)
            Self.kill(child)
            // The kernel released the dead owner's lock.
            let store = try openStore(dir)
            try store.close()
        }
    }
}
