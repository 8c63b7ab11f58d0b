import Foundation
import Testing
import TroveCore
import TroveTestSupport

@testable import TrovePack

@Suite struct SegmentTests {
    func makeWriter(_ dir: String, id: UInt32 = 1, limit: UInt64 = 1 << 30) throws -> PackWriter {
        let file = try SegmentFile.create(id: id, in: dir, createdAt: 1, synchronize: false)
        return PackWriter(segment: file, end: UInt64(PackFormat.segmentHeaderSize), segmentSizeLimit: limit)
    }

    @Test(arguments: [0, 1, 4096, 3 << 20])
    func blobRoundTrip(size: Int) async throws {
        try await withTemporaryDirectory { dir in
            let writer = try makeWriter(dir)
            let bytes = testBytes(seed: UInt64(size), count: size)
            let hash = ContentHash(hashing: bytes)
            let offset = try bytes.withUnsafeBytes { try writer.appendBlob(hash: hash, id: 77, payload: $0) }
            #expect(offset == UInt64(PackFormat.segmentHeaderSize))
            #expect(writer.end == offset + PackWriter.blobRecordLength(payloadLength: size))
            let reopened = try SegmentFile.open(id: 1, in: dir, writable: false)
            let read = try reopened.readBlob(at: offset, payloadLength: UInt64(size), hash: hash, id: 77)
            #expect(Array(read) == bytes)
        }
    }

    @Test func everyFlippedBitOfABlobRecordIsDetected() async throws {
        try await withTemporaryDirectory { dir in
            let writer = try makeWriter(dir)
            let bytes = testBytes(seed: 1, count: 300)
            let hash = ContentHash(hashing: bytes)
            let offset = try bytes.withUnsafeBytes { try writer.appendBlob(hash: hash, id: 77, payload: $0) }
            let path = writer.segment.path
            let original = try Data(contentsOf: URL(fileURLWithPath: path))
            for position in Int(offset)..<original.count {
                var damaged = original
                damaged[position] ^= 0x10
                try damaged.write(to: URL(fileURLWithPath: path))
                let file = try SegmentFile.open(id: 1, in: dir, writable: false)
                #expect(throws: PackError.self, "flip at \(position)") {
                    try file.readBlob(at: offset, payloadLength: 300, hash: hash, id: 77)
                }
            }
        }
    }

    @Test func readPastEndIsTruncatedRecord() async throws {
        try await withTemporaryDirectory { dir in
            let writer = try makeWriter(dir)
            let bytes = testBytes(seed: 2, count: 1000)
            let hash = ContentHash(hashing: bytes)
            let offset = try bytes.withUnsafeBytes { try writer.appendBlob(hash: hash, id: 77, payload: $0) }
            try writer.segment.truncate(to: writer.end - 1)
            let error = #expect(throws: PackError.self) {
                try writer.segment.readBlob(at: offset, payloadLength: 1000, hash: hash, id: 77)
            }
            #expect(error?.code == .truncatedRecord)
        }
    }

    @Test func wrongHashIsRefused() async throws {
        try await withTemporaryDirectory { dir in
            let writer = try makeWriter(dir)
            let hash = ContentHash(hashing: [1, 2, 3])
            let offset = try [1, 2, 3].withUnsafeBytes { try writer.appendBlob(hash: hash, id: 5, payload: $0) }
            let wrongHash = #expect(throws: PackError.self) {
                try writer.segment.readBlob(at: offset, payloadLength: 3, hash: ContentHash(high: 0, low: 1), id: 5)
            }
            #expect(wrongHash?.code == .corruptRecord)
            let wrongID = #expect(throws: PackError.self) {
                try writer.segment.readBlob(at: offset, payloadLength: 3, hash: hash, id: 6)
            }
            #expect(wrongID?.code == .corruptRecord)
        }
    }

    @Test func openRefusesOtherFiles() async throws {
        try await withTemporaryDirectory { dir in
            try Data("not a pack at all, just some text!!".utf8).write(to: URL(fileURLWithPath: dir + "/00000001.pack"))
            let error = #expect(throws: PackError.self) { try SegmentFile.open(id: 1, in: dir, writable: false) }
            #expect(error?.code == .notASegment)
            // A real segment opened under another id is refused too: the id is in the header.
            _ = try SegmentFile.create(id: 2, in: dir, createdAt: 5, synchronize: true)
            try FileManager.default.moveItem(atPath: dir + "/00000002.pack", toPath: dir + "/00000003.pack")
            #expect(throws: PackError.self) { try SegmentFile.open(id: 3, in: dir, writable: false) }
            let missing = #expect(throws: PackError.self) { try SegmentFile.open(id: 9, in: dir, writable: false) }
            #expect(missing?.errno == ENOENT)
            #expect(throws: PackError.self) { try SegmentFile.create(id: 3, in: dir, createdAt: 5, synchronize: false) }
        }
    }

    @Test func rotationThreshold() async throws {
        try await withTemporaryDirectory { dir in
            let writer = try makeWriter(dir, limit: 1000)
            // An empty segment takes any record, however large.
            #expect(!writer.needsRotation(forAppending: 5000))
            _ = try [UInt8](repeating: 1, count: 500).withUnsafeBytes {
                try writer.appendBlob(hash: ContentHash(high: 0, low: 0), id: 1, payload: $0)
            }
            #expect(!writer.needsRotation(forAppending: 400))
            #expect(writer.needsRotation(forAppending: 500))
            writer.rotate(to: try SegmentFile.create(id: 2, in: dir, createdAt: 1, synchronize: false))
            #expect(writer.end == UInt64(PackFormat.segmentHeaderSize))
            #expect(writer.segment.id == 2)
            #expect(try PackDirectory.segmentIDs(in: dir) == [1, 2])
        }
    }
}

@Suite struct ScannerTests {
    /// Writes a segment with blobs, links and tombstones; returns the file and record offsets.
    func populate(_ dir: String) throws -> (SegmentFile, [UInt64]) {
        let file = try SegmentFile.create(id: 1, in: dir, createdAt: 1, synchronize: false)
        let writer = PackWriter(segment: file, end: UInt64(PackFormat.segmentHeaderSize), segmentSizeLimit: 1 << 30)
        var offsets: [UInt64] = []
        for i in 0..<5 {
            let bytes = testBytes(seed: UInt64(i), count: 100 * i)
            let hash = ContentHash(hashing: bytes)
            let blob = try bytes.withUnsafeBytes { try writer.appendBlob(hash: hash, id: 77, payload: $0) }
            offsets.append(blob)
            offsets.append(
                try writer.appendLink(
                    LinkRecord(
                        url: "u\(i)", variant: "", blobHash: hash, blobLength: UInt64(bytes.count), blobID: UInt64(i),
                        sequence: UInt64(i), createdAt: 0)))
        }
        offsets.append(try writer.appendTombstone(TombstoneRecord(url: "u0", variant: "", sequence: 9, removedAt: 0)))
        return (file, offsets)
    }

    @Test func visitsEveryRecord() async throws {
        try await withTemporaryDirectory { dir in
            let (file, offsets) = try populate(dir)
            var seen: [UInt64] = []
            var kinds: [String] = []
            let outcome = try SegmentScanner.scan(file) { record in
                seen.append(record.offset)
                switch record.content {
                case .blob: kinds.append("b")
                case .link: kinds.append("l")
                case .tombstone: kinds.append("t")
                }
            }
            #expect(seen == offsets)
            #expect(kinds.joined() == "blblblblblt")
            #expect(outcome.defect == nil)
            #expect(outcome.validEnd == (try file.size()))
            #expect(outcome.recordCount == 11)
        }
    }

    @Test func stopsAtATornTail() async throws {
        try await withTemporaryDirectory { dir in
            let (file, offsets) = try populate(dir)
            let size = try file.size()
            // Cut inside the last record, then inside the one before it.
            for cut in [size - 1, offsets[offsets.count - 1] + 3, offsets[offsets.count - 2] + 30] {
                try file.truncate(to: cut)
                let outcome = try SegmentScanner.scan(file) { _ in }
                let lastWhole = offsets.last(where: { $0 < cut })!
                #expect(outcome.validEnd == lastWhole)
                #expect(outcome.defect?.offset == lastWhole)
            }
        }
    }

    @Test func stopsAtGarbage() async throws {
        try await withTemporaryDirectory { dir in
            let (file, offsets) = try populate(dir)
            let end = try file.size()
            try [UInt8](repeating: 0, count: 100).withUnsafeBytes { try file.write([$0], at: end) }
            let zeroes = try SegmentScanner.scan(file) { _ in }
            #expect(zeroes.validEnd == end)
            #expect(zeroes.defect?.offset == end)
            // A flipped byte in the middle stops the scan at that record.
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: file.path))
            try handle.seek(toOffset: offsets[4] + 30)
            try handle.write(contentsOf: [0xFF])
            try handle.close()
            var count = 0
            let flipped = try SegmentScanner.scan(file) { _ in count += 1 }
            #expect(flipped.validEnd == offsets[4])
            #expect(count == 4)
        }
    }

    @Test func startsAtAnOffset() async throws {
        try await withTemporaryDirectory { dir in
            let (file, offsets) = try populate(dir)
            var seen: [UInt64] = []
            _ = try SegmentScanner.scan(file, from: offsets[6]) { seen.append($0.offset) }
            #expect(seen == Array(offsets[6...]))
        }
    }
}
