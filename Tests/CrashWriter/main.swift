// The child process of the crash suite (Tests/TroveTests/CrashTests.swift).
//
// Usage: CrashWriter STORE SEED DURABILITY SEGMENT_SIZE [compact]
//
// With `compact`, a second thread runs compaction passes back to back while the writer writes,
// so that kills land in the middle of segment rewrites too.
//
// Opens the store and writes to it until it is killed. Before each operation it prints the
// operation on stdout, and "OK" once the store acknowledged it, each with one write(2) so that
// nothing sits in a buffer when SIGKILL arrives:
//   P <key> <contentSeed> <size>   put of testBytes(seed: contentSeed, count: size), etag "cs:size"
//   R <key>                        remove
//   G <key>                        get (the child checks its own reads; exit 3 on wrong bytes)
//   C <n>                          a compaction pass deleted n segments (not an operation)
// It prints "READY <pid>" once the store is open. With TROVE_PAUSE_AFTER=N in its environment it
// flushes after the Nth operation, prints "PAUSED" and waits to be killed.

import Foundation
import TroveStore
import TroveCore
import TroveTestSupport

#if canImport(Glibc)
    import Glibc
#endif

func emit(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    var done = 0
    while done < bytes.count {
        let n = bytes[done...].withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
        if n <= 0 { exit(4) }
        done += n
    }
}

let arguments = CommandLine.arguments
guard arguments.count == 5 || arguments.count == 6 && arguments[5] == "compact", let seed = UInt64(arguments[2]),
    let durability = Durability(rawValue: arguments[3]),
    let segmentSize = Int64(arguments[4])
else {
    FileHandle.standardError.write(Data("usage: CrashWriter STORE SEED DURABILITY SEGMENT_SIZE [compact]\n".utf8))
    exit(2)
}

var configuration = Store.Configuration(durability: durability)
configuration.segmentSize = segmentSize
configuration.compactionInterval = nil
// Zeros ahead of the writes at any level (the crash suite's ZeroFill rounds).
configuration.zeroFill = ProcessInfo.processInfo.environment["TROVE_ZERO_FILL"].flatMap(Int64.init) ?? 0
// The hole ahead of the writes (off by default in a store) is on in every kill round, so that
// kills land while one lies past the records; TROVE_WARM_AHEAD=0 turns it off.
configuration.warmAhead = ProcessInfo.processInfo.environment["TROVE_WARM_AHEAD"].flatMap(Int64.init) ?? 4 << 20
let store: Store
do {
    store = try Store(directory: arguments[1], configuration: configuration)
} catch {
    FileHandle.standardError.write(Data("CrashWriter: \(error)\n".utf8))
    exit(1)
}
emit("READY \(getpid())")

if arguments.count == 6 {
    Thread.detachNewThread {
        while true {
            do {
                let report = try store.compact()
                if report.segmentsDeleted > 0 { emit("C \(report.segmentsDeleted)") }
            } catch {
                FileHandle.standardError.write(Data("CrashWriter: compaction failed: \(error)\n".utf8))
                exit(5)
            }
            usleep(1_000)
        }
    }
}

var generator = SeededGenerator(seed: seed)
var counter: UInt64 = 0
// With TROVE_PAUSE_AFTER=N: after the Nth operation, flush, print "PAUSED" and wait to be killed.
let pauseAfter = ProcessInfo.processInfo.environment["TROVE_PAUSE_AFTER"].flatMap(UInt64.init) ?? 0
while true {
    counter += 1
    let k = Int.random(in: 0..<60, using: &generator)
    let key = CacheKey(url: "https://crash.example/\(k)")
    let roll = Int.random(in: 0..<100, using: &generator)
    do {
        if roll < 75 {
            // One put in five reuses a shared content, so deduplication happens under crashes too.
            let contentSeed =
                Int.random(in: 0..<5, using: &generator) == 0
                ? UInt64(Int.random(in: 1...5, using: &generator)) : seed &* 1_000_003 &+ counter
            // Shared contents have one size; others are mostly thumbnails, some large, a few empty.
            let sizeRoll = Int.random(in: 0..<100, using: &generator)
            let size =
                contentSeed <= 5
                ? 7_777
                : sizeRoll < 2
                    ? 0
                    : sizeRoll < 90
                        ? Int.random(in: 1...30_000, using: &generator)
                        : Int.random(in: 100_000...400_000, using: &generator)
            emit("P \(k) \(contentSeed) \(size)")
            try store.put(
                Data(testBytes(seed: contentSeed, count: size)), for: key,
                metadata: EntryMetadata(etag: "\(contentSeed):\(size)"))
        } else if roll < 90 {
            emit("R \(k)")
            try store.remove(key)
        } else {
            emit("G \(k)")
            if let entry = try store.entry(for: key) {
                let parts = (entry.etag ?? "").split(separator: ":").compactMap { UInt64($0) }
                guard parts.count == 2, entry.data == Data(testBytes(seed: parts[0], count: Int(parts[1]))) else {
                    FileHandle.standardError.write(Data("CrashWriter: wrong bytes for \(key)\n".utf8))
                    exit(3)
                }
            }
        }
        emit("OK")
        if counter == pauseAfter {
            // A moment with every write committed, for a kill that tears nothing (the hole the
            // writer keeps ahead of its records is all a kill leaves past them).
            try store.flush()
            emit("PAUSED")
            while true { sleep(60) }
        }
    } catch {
        FileHandle.standardError.write(Data("CrashWriter: \(error)\n".utf8))
        exit(1)
    }
}
