import Foundation
import Testing
import TroveCore
@testable import TroveIndex
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

/// Every path that changes what a key serves, or where its bytes are, tells the one observer
/// (`Configuration.keyChanges`): the hook a memory tier in front of the store relies on.
@Suite struct KeyChangeTests {
    /// The changes an observer saw, in order.
    final class Recorder: Sendable {
        let seen = Locked<[KeyChange]>([])
        var observer: @Sendable (KeyChange) -> Void { { change in self.seen.withLock { $0.append(change) } } }
        /// Takes what was seen so far.
        func take() -> [KeyChange] {
            seen.withLock { seen in
                defer { seen = [] }
                return seen
            }
        }
    }

    func open(_ dir: String, _ recorder: Recorder, _ configure: (inout Store.Configuration) -> Void = { _ in }) throws -> Store {
        try openStore(dir, segmentSize: 16 << 10) {
            $0.compactionInterval = nil
            $0.keyChanges = recorder.observer
            configure(&$0)
        }
    }

    @Test func putsAndRemovalsAreReported() async throws {
        try await withTemporaryDirectory { dir in
            let recorder = Recorder()
            let store = try open(dir, recorder)
            let thumb = CacheKey(url: key(1).url, variant: "w64")
            try store.put(value(1), for: key(1))
            try store.put(value(2), for: thumb)
            #expect(recorder.take() == [KeyChange(key: key(1), kind: .stored), KeyChange(key: thumb, kind: .stored)])
            try store.remove(key(1))
            #expect(recorder.take() == [KeyChange(key: key(1), kind: .removed)])
            try store.put(value(1), for: key(1))
            _ = recorder.take()
            #expect(try store.removeAll(url: key(1).url) == 2)
            #expect(Set(recorder.take()) == [KeyChange(key: key(1), kind: .removed), KeyChange(key: thumb, kind: .removed)])
            // A read changes nothing.
            #expect(try store.data(for: key(1)) == nil)
            #expect(recorder.take().isEmpty)
        }
    }

    @Test func expiryAndEvictionAreReported() async throws {
        try await withTemporaryDirectory { dir in
            let recorder = Recorder()
            let clock = TestClock(start: 1_000_000)
            let store = try open(dir, recorder) { $0.clock = clock.now }
            try store.put(value(1), for: key(1), metadata: EntryMetadata(expiresAt: Date(timeIntervalSince1970: 1_010)))
            try store.put(value(2), for: key(2))
            _ = recorder.take()
            clock.advance(by: 20_000)
            #expect(try store.compact().expiredEntries == 1)
            #expect(recorder.take().filter { $0.kind == .removed } == [KeyChange(key: key(1), kind: .removed)])

        }
        try await withTemporaryDirectory { dir in
            let recorder = Recorder()
            let store = try open(dir, recorder) { $0.capacity = 60_000 }
            for i in 10..<40 { try store.put(Data(testBytes(seed: UInt64(i), count: 4_000)), for: key(i)) }
            _ = recorder.take()
            let pass = try store.compact()
            #expect(pass.evictedEntries > 0)
            let removed = recorder.take().filter { $0.kind == .removed }.map(\.key)
            #expect(removed.count == pass.evictedEntries)
            for key in removed { #expect(try store.data(for: key) == nil) }
        }
    }

    @Test func compactionMovesAreReported() async throws {
        try await withTemporaryDirectory { dir in
            let recorder = Recorder()
            let store = try open(dir, recorder)
            for i in 0..<12 { try store.put(Data(testBytes(seed: UInt64(i), count: 3_000)), for: key(i)) }
            for i in stride(from: 0, to: 12, by: 2) { try store.remove(key(i)) }
            try store.flush()
            _ = recorder.take()
            let pass = try store.compact()
            #expect(pass.segmentsRewritten > 0)
            let moved = recorder.take()
            #expect(!moved.isEmpty)
            #expect(moved.allSatisfy { $0.kind == .relocated })
            // Only survivors move, and each still serves its bytes.
            for change in moved {
                let i = try #require((0..<12).first { key($0) == change.key })
                #expect(i % 2 == 1)
                #expect(try store.data(for: change.key) == Data(testBytes(seed: UInt64(i), count: 3_000)))
            }
        }
    }

    @Test func aDamagedBlobDroppedByAReadIsReported() async throws {
        try await withTemporaryDirectory { dir in
            let recorder = Recorder()
            let shared = Data(testBytes(seed: 5, count: 2_000))
            do {
                let store = try open(dir, recorder)
                try store.put(shared, for: key(1))
                try store.put(shared, for: key(2))
                try store.close()
            }
            // The payload's last byte: inside the one blob record the two keys share.
            let files = StoreFiles(root: dir)
            let segment = try #require(try files.segmentIDs().first)
            let blobRow = try #require(
                try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: true).entry(digest: key(1).digest)?.blob)
            try files.flip(files.segment(segment), at: Int(blobRow.offset + blobRow.recordBytes) - 1)
            let store = try open(dir, recorder)
            _ = recorder.take()
            #expect(throws: StoreError.self) { try store.data(for: key(1)) }
            #expect(Set(recorder.take()) == [KeyChange(key: key(1), kind: .removed), KeyChange(key: key(2), kind: .removed)])
        }
    }

    @Test func repairAndRebuildReportWhatTheyChange() async throws {
        try await withTemporaryDirectory { dir in
            let recorder = Recorder()
            do {
                let store = try open(dir, recorder)
                for i in 0..<3 { try store.put(value(i), for: key(i)) }
                try store.close()
            }
            // A row whose ETag column was damaged: repair rewrites it from its link record.
            let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
            try index.connection.execute("UPDATE entries SET etag = 'x' WHERE url = '\(key(1).url)'")
            let store = try open(dir, recorder)
            _ = recorder.take()
            let report = try store.fsck(repair: true)
            #expect(!report.isClean)
            #expect(recorder.take() == [KeyChange(key: key(1), kind: .stored)])
            #expect(try store.data(for: key(1)) == value(1))
            try store.close()

            _ = recorder.take()
            var configuration = Store.Configuration()
            configuration.keyChanges = recorder.observer
            _ = try Store.rebuildIndex(directory: dir + "/store", configuration: configuration)
            #expect(Set(recorder.take()) == Set((0..<3).map { KeyChange(key: key($0), kind: .stored) }))
        }
    }
}
