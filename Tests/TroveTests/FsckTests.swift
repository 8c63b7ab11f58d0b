import Foundation
import Testing
import TroveCore
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@testable import TroveStore
@testable import TroveIndex

/// Each fault is injected into a real store; fsck must find it, and --repair (or
/// --rebuild-index) must bring back every intact entry, byte for byte.
@Suite struct FsckTests {
    static let count = 30

    func populate(_ dir: String) throws {
        let store = try openStore(dir, segmentSize: 40 << 10) { $0.compactionInterval = nil }
        for i in 0..<Self.count { try store.put(value(i), for: key(i), metadata: EntryMetadata(etag: "e\(i)")) }
        try store.close()
    }

    func open(_ dir: String) throws -> Store {
        try openStore(dir, segmentSize: 40 << 10) { $0.compactionInterval = nil }
    }

    /// Runs fsck, then repair, then fsck again; returns the kinds first found and the keys lost.
    func checkAndRepair(_ dir: String, _ body: (Store, FsckReport) throws -> Void = { _, _ in }) throws -> (
        Set<FsckReport.Finding.Kind>, Int
    ) {
        let store = try open(dir)
        let found = try store.fsck()
        try body(store, found)
        let repaired = try store.fsck(repair: true)
        #expect(repaired.isRepaired || repaired.isClean)
        let again = try store.fsck()
        #expect(again.isClean, "after repair: \(again.findings)")
        var lost = 0
        for i in 0..<Self.count {
            if let entry = try store.entry(for: key(i)) {
                #expect(entry.data == value(i))
                #expect(entry.etag == "e\(i)")
            } else {
                lost += 1
            }
        }
        try store.close()
        return (Set(found.findings.map(\.kind)), lost)
    }

    @Test func aCleanStoreIsClean() async throws {
        try await withTemporaryDirectory { dir in
            try populate(dir)
            let store = try open(dir)
            let report = try store.fsck()
            #expect(report.isClean)
            #expect(report.recordsVerified == 2 * Self.count)
            #expect(report.segmentsChecked >= 3)
        }
    }

    @Test func aFlippedBitInAPayload() async throws {
        try await withTemporaryDirectory { dir in
            try populate(dir)
            try StoreFiles(root: dir).flip(StoreFiles(root: dir).segment(1), at: PackFormat.segmentHeaderSize + 200)
            let (kinds, lost) = try checkAndRepair(dir)
            #expect(kinds.contains(.corruptRecord))
            #expect(lost == 1)
        }
    }

    @Test func aFlippedBitInARecordHeader() async throws {
        try await withTemporaryDirectory { dir in
            try populate(dir)
            try StoreFiles(root: dir).flip(StoreFiles(root: dir).segment(2), at: PackFormat.segmentHeaderSize + 9)
            let (kinds, lost) = try checkAndRepair(dir)
            #expect(kinds.contains(.corruptRecord))
            #expect(lost == 1)
        }
    }

    @Test func aTruncatedSealedSegment() async throws {
        try await withTemporaryDirectory { dir in
            try populate(dir)
            let files = StoreFiles(root: dir)
            try files.truncate(files.segment(1), to: try files.size(files.segment(1)) - 100)
            let (kinds, lost) = try checkAndRepair(dir)
            #expect(kinds.contains(.truncatedSegment) || kinds.contains(.corruptRecord))
            #expect(lost >= 1 && lost <= 2)
        }
    }

    @Test func aDeletedSegment() async throws {
        try await withTemporaryDirectory { dir in
            try populate(dir)
            try FileManager.default.removeItem(atPath: StoreFiles(root: dir).segment(2))
            let (kinds, lost) = try checkAndRepair(dir)
            #expect(kinds.contains(.missingSegment))
            #expect(lost >= 1 && lost < Self.count)
        }
    }

    @Test func aStaleIndexRow() async throws {
        try await withTemporaryDirectory { dir in
            try populate(dir)
            // Point key 5's row at key 6's link record.
            do {
                let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
                let six = try #require(try index.entry(digest: key(6).digest)).entry
                try index.connection.execute(
                    "UPDATE entries SET link_offset = \(six.linkOffset), link_segment = \(six.linkSegment) WHERE url = '\(key(5).url)'"
                )
            }
            let (kinds, lost) = try checkAndRepair(dir)
            #expect(kinds == [.staleIndexRow])
            #expect(lost == 0)
        }
    }

    /// The index loses key 3's row; its records in a sealed segment are intact. The index
    /// committed past them and has no entry: from the packs alone, a removal whose tombstone
    /// was lost looks the same. Repair never brings back what may be a removed value — it
    /// reports the record, and a tombstone makes the decision durable, so a rebuild agrees.
    @Test func aRecordOlderThanTheIndexIsNotRestored() async throws {
        try await withTemporaryDirectory { dir in
            try populate(dir)
            do {
                let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
                try index.connection.execute("DELETE FROM entries WHERE url = '\(key(3).url)'")
            }
            let (kinds, lost) = try checkAndRepair(dir)
            #expect(kinds.contains(.unreflectedRecord))
            #expect(lost == 1)
            _ = try Store.rebuildIndex(directory: dir + "/store")
            let store = try open(dir)
            #expect(try store.data(for: key(3)) == nil)
            #expect(try store.data(for: key(4)) == value(4))
        }
    }

    /// A write whose index commit was lost (its records are newer than anything the index
    /// committed) is applied.
    @Test func aWriteTheIndexNeverCommittedIsApplied() async throws {
        try await withTemporaryDirectory { dir in
            try populate(dir)
            // The index loses its last commit: key 29's row, its blob and the counter past them.
            let last = Self.count - 1
            do {
                let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
                let row = try #require(try index.entry(digest: key(last).digest))
                try index.connection.execute("DELETE FROM entries WHERE url = '\(key(last).url)'")
                try index.connection.execute("DELETE FROM blobs WHERE id = \(row.blob.id)")
                try index.setCommittedSequence(UInt64(row.blob.id))
            }
            let (kinds, lost) = try checkAndRepair(dir)
            #expect(kinds.contains(.orphanRecord))
            #expect(lost == 0)
        }
    }

    @Test func aWrongReferenceCountAndLiveBytes() async throws {
        try await withTemporaryDirectory { dir in
            try populate(dir)
            do {
                let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
                try index.connection.execute("UPDATE blobs SET refs = refs + 4 WHERE id = (SELECT min(id) FROM blobs)")
                try index.connection.execute("UPDATE segments SET live_bytes = live_bytes + 999 WHERE id = 1")
            }
            let (kinds, lost) = try checkAndRepair(dir)
            #expect(kinds == [.wrongReferenceCount, .wrongLiveBytes])
            #expect(lost == 0)
        }
    }

    @Test func aDeletedIndexIsRebuiltFromThePacks() async throws {
        try await withTemporaryDirectory { dir in
            try populate(dir)
            do {
                let store = try open(dir)
                for i in stride(from: 0, to: Self.count, by: 5) { try store.remove(key(i)) }
                try store.close()
            }
            for suffix in ["", "-wal", "-shm"] {
                try? FileManager.default.removeItem(atPath: dir + "/store/index.sqlite" + suffix)
            }
            let rebuilt = try Store.rebuildIndex(directory: dir + "/store")
            // Without an index to check them against, the packs are all there is: it says so.
            #expect(rebuilt.findings.map(\.kind) == [.rebuiltIndex])
            let store = try open(dir)
            #expect(try store.fsck().isClean)
            for i in 0..<Self.count {
                let entry = try store.entry(for: key(i))
                if i % 5 == 0 {
                    #expect(entry == nil, "removed key \(i) came back")
                } else {
                    #expect(entry?.data == value(i))
                    #expect(entry?.etag == "e\(i)")
                }
            }
        }
    }

    @Test func aDamagedIndexIsSetAsideAndRebuilt() async throws {
        try await withTemporaryDirectory { dir in
            try populate(dir)
            let path = dir + "/store/index.sqlite"
            for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
            try Data(repeating: 0xEE, count: 8192).write(to: URL(fileURLWithPath: path))
            #expect(throws: StoreError.self) { try open(dir) }
            _ = try Store.rebuildIndex(directory: dir + "/store")
            let kept = try FileManager.default.contentsOfDirectory(atPath: dir + "/store").filter {
                $0.hasPrefix("index.sqlite.damaged-")
            }
            #expect(kept.count == 1)
            let (kinds, lost) = try checkAndRepair(dir)
            #expect(kinds.isEmpty || kinds == [.rebuiltIndex])
            #expect(lost == 0)
        }
    }
}
