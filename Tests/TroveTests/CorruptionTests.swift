import Foundation
import Testing
import TroveCore
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@testable import TroveStore

/// Damages pack files in every way a disk or a person can, and proves that a store never
/// returns wrong bytes: each read gives the exact bytes written, nothing, or a typed error.
@Suite struct CorruptionTests {
    static let entries = 40

    /// Sizes from empty to 40 KiB, with some values shared by several keys.
    static func expected(_ i: Int) -> Data {
        i % 7 == 3 ? value(1000, size: 5000) : Data(testBytes(seed: UInt64(i), count: (i * 997) % 40_000))
    }

    /// Builds a pristine store of several segments in `dir`; returns its files.
    func makePristine(_ dir: String) throws -> StoreFiles {
        let store = try openStore(dir, segmentSize: 96 << 10)
        for i in 0..<Self.entries {
            try store.put(Self.expected(i), for: key(i), metadata: EntryMetadata(etag: "e\(i)"))
        }
        try store.remove(key(11))
        try store.close()
        return StoreFiles(root: dir)
    }

    /// Opens the damaged copy and reads every key; returns how many were served intact.
    func checkNoWrongBytes(_ root: String, context: String) throws -> Int {
        let store: Store
        do {
            store = try openStore(root, segmentSize: 96 << 10)
        } catch let error as StoreError {
            // Refusing to open is allowed only with a typed error that says why.
            #expect(!error.message.isEmpty, "\(context)")
            return 0
        }
        var intact = 0
        for i in 0..<Self.entries {
            do {
                if let entry = try store.entry(for: key(i)) {
                    #expect(i != 11, "\(context): a removed key came back")
                    #expect(entry.data == Self.expected(i), "\(context): wrong bytes for key \(i)")
                    #expect(entry.etag == "e\(i)", "\(context): wrong metadata for key \(i)")
                    intact += 1
                }
            } catch let error as StoreError {
                #expect(error.code == .corruptRecord || error.code == .missingSegment, "\(context): \(error)")
                // Never served afterwards either: dropped (nil), or still refused until repair.
                do {
                    #expect(try store.data(for: key(i)) == nil, "\(context)")
                } catch let again as StoreError {
                    #expect(again.code == .corruptRecord || again.code == .missingSegment, "\(context): \(again)")
                }
            }
        }
        // The store keeps working after damage.
        try store.put(Data("after".utf8), for: key(500))
        #expect(try store.data(for: key(500)) == Data("after".utf8))
        try store.close()
        return intact
    }

    @Test func randomByteFlipsNeverServeWrongBytes() async throws {
        try await withTemporaryDirectory { dir in
            let pristine = try makePristine(dir)
            let segments = try pristine.segmentIDs()
            #expect(segments.count >= 3)
            var generator = SeededGenerator(seed: 2024)
            var damagedReads = 0
            for round in 0..<150 {
                let work = dir + "/round"
                try pristine.copyStore(to: work + "/store")
                let files = StoreFiles(root: work)
                var flips: [String] = []
                for _ in 0..<Int.random(in: 1...3, using: &generator) {
                    let id = segments.randomElement(using: &generator)!
                    let size = try files.size(files.segment(id))
                    let offset = Int.random(in: 0..<size, using: &generator)
                    let mask = UInt8.random(in: 1...255, using: &generator)
                    try files.flip(files.segment(id), at: offset, mask: mask)
                    flips.append("segment \(id) byte \(offset) ^ \(mask)")
                }
                let intact = try checkNoWrongBytes(work, context: "round \(round): \(flips)")
                if intact < Self.entries - 1 { damagedReads += 1 }
            }
            // The flips did hit data (otherwise this test proves nothing).
            #expect(damagedReads > 50)
        }
    }

    @Test func truncationAtEveryRecordBoundaryAndInsideRecords() async throws {
        try await withTemporaryDirectory { dir in
            let pristine = try makePristine(dir)
            let segments = try pristine.segmentIDs()
            for id in [segments.first!, segments.last!] {
                let size = try pristine.size(pristine.segment(id))
                var cuts = [0, 1, PackFormat.segmentHeaderSize - 1, PackFormat.segmentHeaderSize, size - 1]
                // Record boundaries and points inside records, found by scanning the pristine segment.
                let file = try SegmentFile.open(id: id, in: pristine.packs, writable: false)
                _ = try SegmentScanner.scan(file) { record in
                    cuts += [Int(record.offset), Int(record.offset) + 10, Int(record.offset + record.length) - 1]
                }
                for cut in Set(cuts).sorted() where cut < size {
                    let work = dir + "/cut"
                    try pristine.copyStore(to: work + "/store")
                    let files = StoreFiles(root: work)
                    try files.truncate(files.segment(id), to: cut)
                    _ = try checkNoWrongBytes(work, context: "segment \(id) cut at \(cut)")
                }
            }
        }
    }

    @Test func aDeletedSegmentAndGarbageFilesAreSurvived() async throws {
        try await withTemporaryDirectory { dir in
            let pristine = try makePristine(dir)
            let segments = try pristine.segmentIDs()
            for id in segments {
                let work = dir + "/deleted"
                try pristine.copyStore(to: work + "/store")
                let files = StoreFiles(root: work)
                try FileManager.default.removeItem(atPath: files.segment(id))
                // And a stray file that is not a segment.
                try Data("junk".utf8).write(to: URL(fileURLWithPath: files.packs + "/notes.txt"))
                let intact = try checkNoWrongBytes(work, context: "segment \(id) deleted")
                #expect(intact > 0)
            }
        }
    }
}
