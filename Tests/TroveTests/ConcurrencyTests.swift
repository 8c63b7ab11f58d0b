import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

@testable import TroveStore

@Suite struct ConcurrencyTests {
    /// Many tasks put, get and remove overlapping keys at once. Each key's content names the
    /// key and a version in its first bytes, so any value read can be checked: it must be a
    /// complete value that some task wrote for that key.
    @Test(arguments: [Durability.none, .batched, .full])
    func manyTasksAtOnce(durability: Durability) async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir, durability: durability, segmentSize: 256 << 10)
            let keys = 40
            func value(key k: Int, version: Int) -> Data {
                var bytes = testBytes(seed: UInt64(k * 1000 + version), count: 500 + (k * 37 + version * 101) % 6000)
                bytes[0] = UInt8(k)
                bytes[1] = UInt8(version % 256)
                return Data(bytes)
            }
            let opsPerTask = durability == .full ? 60 : 300
            let failures = try await withThrowingTaskGroup(of: Int.self) { group in
                for task in 0..<8 {
                    group.addTask {
                        var generator = SeededGenerator(seed: UInt64(task))
                        var bad = 0
                        for op in 0..<opsPerTask {
                            let k = Int.random(in: 0..<keys, using: &generator)
                            switch Int.random(in: 0..<10, using: &generator) {
                            case 0..<6:
                                if let data = try store.data(for: key(k)) {
                                    if data != value(key: k, version: Int(data[1])) { bad += 1 }
                                }
                            case 6..<9:
                                // Version < 256 so that byte 1 names it exactly.
                                try store.put(value(key: k, version: (task * opsPerTask + op) % 256), for: key(k))
                            default:
                                try store.remove(key(k))
                            }
                        }
                        return bad
                    }
                }
                return try await group.reduce(0, +)
            }
            #expect(failures == 0)
            // A last write per key from one task, then every key reads back exactly.
            for k in 0..<keys { try store.put(value(key: k, version: 7), for: key(k)) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<4 {
                    group.addTask { () throws -> Void in
                        for k in 0..<keys {
                            let data = try store.data(for: key(k))
                            #expect(data == value(key: k, version: 7))
                        }
                    }
                }
                try await group.waitForAll()
            }
            let stats = try store.statistics()
            #expect(stats.entries == keys)
            try store.close()
            let reopened = try openStore(dir, durability: durability, segmentSize: 256 << 10)
            #expect(reopened.recoveryReport.isClean)
            for k in 0..<keys { #expect(try reopened.data(for: key(k)) == value(key: k, version: 7)) }
        }
    }

    @Test func readsTakeNeitherWriteLock() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.batchInterval = .seconds(3600) }
            try store.put(Data([1]), for: key(1))
            try store.flush()
            // Hold the committer (as a long fdatasync would) and the appender (as a write would)
            // and read meanwhile: a get that needed either lock would deadlock here (the locks
            // are not recursive).
            let read = try store.committer.withLock { _ in
                try store.appender.withLock { _ in try store.data(for: key(1)) }
            }
            #expect(read == Data([1]))
        }
    }
}
