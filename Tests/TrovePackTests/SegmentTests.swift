import Foundation
import Testing
import TroveCore
import TroveTestSupport

@testable import TrovePack

#if canImport(Glibc)
    import Glibc
#endif

let testSecret = PackSecret(first: 0x1111_2222_3333_4444, second: 0x5555_6666_7777_8888)

func makeWriter(_ dir: String, id: UInt32 = 1, limit: UInt64 = 1 << 30, faults: FaultInjector? = nil) throws -> PackWriter {
    let file = try SegmentFile.create(
        id: id, in: dir, createdAt: 1, format: .version2(secret: testSecret), synchronize: false, faults: faults)
    return PackWriter(segment: file, end: file.headerSize, segmentSizeLimit: limit)
}

/// Writes a version-1 segment the way Trove did before format version 2: returns the offsets of
/// `records` (type, body) in order.
func writeVersion1Segment(_ dir: String, id: UInt32, records: [(RecordType, [UInt8])]) throws -> [UInt64] {
    var bytes = SegmentHeader(id: id, format: .version1, createdAt: 7).bytes
    var offsets: [UInt64] = []
    for (type, body) in records {
        offsets.append(UInt64(bytes.count))
        bytes += body.withUnsafeBytes { RecordCodec.headerV1(type: type, bodyParts: [$0]) } + body
    }
    try Data(bytes).write(to: URL(fileURLWithPath: dir + "/" + PackFormat.fileName(forSegment: id)))
    return offsets
}

func version1BlobBody(_ payload: [UInt8], id: UInt64) -> [UInt8] {
    var prefix = ContentHash(hashing: payload).bytes
    withUnsafeBytes(of: id.littleEndian) { prefix.append(contentsOf: $0) }
    return prefix + payload
}

@Suite struct SegmentTests {
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
            #expect(reopened.format == .version2(secret: testSecret))
            let read = try reopened.readBlob(at: offset, payloadLength: UInt64(size), hash: hash, id: 77)
            #expect(Array(read) == bytes)
        }
    }

    /// The writer encodes a put's headers and link body in a buffer it keeps from one append to
    /// the next: every record is byte for byte what ``RecordCodec`` encodes on its own, whatever
    /// a longer record before it left in that buffer.
    @Test func recordsEncodedInTheWritersBufferAreTheCodecsBytes() async throws {
        try await withTemporaryDirectory { dir in
            let writer = try makeWriter(dir)
            let format = writer.segment.format
            var expected = [UInt8](repeating: 0, count: Int(writer.end))
            func record(_ type: RecordType, sequence: UInt64, digest: ContentHash, body: [UInt8]) -> [UInt8] {
                let seed = format.bodySeed(type)
                let header = RecordCodec.header(
                    identity: RecordIdentity(type: type, sequence: sequence, digest: digest), bodyLength: body.count,
                    bodyChecksum: body.withUnsafeBytes { XXH3.hash64($0, seed: seed) }, format: format,
                    segment: writer.segment.id, offset: UInt64(expected.count))
                return header + body
            }
            // Long metadata first, then shorter and shorter: stale bytes would show.
            for (n, url) in ["https://example.com/" + String(repeating: "long/", count: 60), "https://e/b", "u"].enumerated() {
                let payload = (0..<(300 + n * 7)).map { UInt8(truncatingIfNeeded: $0 * 31 + n) }
                let hash = payload.withUnsafeBytes { XXH3.hash128($0) }
                let id = UInt64(10 * n + 1)
                var link = LinkRecord(
                    url: url, variant: n == 0 ? "w=320" : "", blobHash: hash, blobLength: UInt64(payload.count), blobID: id,
                    sequence: id + 1, createdAt: 5, expiresAt: n == 1 ? 99 : nil, etag: n == 0 ? "\"etag\"" : nil,
                    lastModified: nil, cachePolicy: n == 0 ? "max-age=60" : nil)
                let digest = link.key.digest
                _ = try payload.withUnsafeBytes {
                    try writer.appendBlob(hash: hash, id: id, payload: $0, thenLink: link, digest: digest)
                }
                expected += record(.blob, sequence: id, digest: hash, body: payload)
                expected += record(.link, sequence: id + 1, digest: digest, body: RecordCodec.linkBody(link))
                // A link alone (a repeat of known bytes), with and without the digest given.
                link.sequence = id + 2
                _ = try writer.appendLink(link, digest: n == 2 ? nil : digest)
                expected += record(.link, sequence: id + 2, digest: digest, body: RecordCodec.linkBody(link))
            }
            let written = try [UInt8](Data(contentsOf: URL(fileURLWithPath: writer.segment.path)))
            #expect(written.count == expected.count)
            #expect(written.dropFirst(Int(writer.segment.headerSize)) == expected.dropFirst(Int(writer.segment.headerSize)))
        }
    }

    /// A record with a long key grows the writer's buffer; the next append lets it go, so the
    /// writer does not keep the largest record's size for its life.
    @Test func aBufferGrownByALongKeyIsNotKept() async throws {
        try await withTemporaryDirectory { dir in
            let writer = try makeWriter(dir)
            func link(_ url: String, _ sequence: UInt64) -> LinkRecord {
                LinkRecord(
                    url: url, variant: "", blobHash: ContentHash(high: 1, low: 2), blobLength: 3, blobID: 1,
                    sequence: sequence, createdAt: 4)
            }
            _ = try writer.appendLink(link("https://e/" + String(repeating: "u", count: 200_000), 2))
            #expect(writer.scratchCapacity > PackWriter.scratchKeptCapacity)
            _ = try writer.appendLink(link("https://e/short", 3))
            #expect(writer.scratchCapacity <= PackWriter.scratchKeptCapacity)
            _ = try writer.appendLink(link("https://e/short/again", 4))
            #expect(writer.scratchCapacity <= PackWriter.scratchKeptCapacity)
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

    @Test func aRecordReadAtAnotherOffsetOrInAnotherSegmentIsRefused() async throws {
        try await withTemporaryDirectory { dir in
            let writer = try makeWriter(dir)
            let bytes = testBytes(seed: 3, count: 500)
            let hash = ContentHash(hashing: bytes)
            let offset = try bytes.withUnsafeBytes { try writer.appendBlob(hash: hash, id: 5, payload: $0) }
            // The same record bytes copied verbatim into segment 2 at the same offset, and into
            // segment 1 again further on: neither copy verifies.
            let record = try Data(contentsOf: URL(fileURLWithPath: writer.segment.path))[Int(offset)...]
            let second = try makeWriter(dir, id: 2)
            try record.withUnsafeBytes { try second.segment.write([$0], at: offset) }
            #expect(throws: PackError.self) { try second.segment.readBlob(at: offset, payloadLength: 500, hash: hash, id: 5) }
            let later = writer.end + 100
            try record.withUnsafeBytes { try writer.segment.write([$0], at: later) }
            #expect(throws: PackError.self) { try writer.segment.readBlob(at: later, payloadLength: 500, hash: hash, id: 5) }
            #expect(try writer.segment.readBlob(at: offset, payloadLength: 500, hash: hash, id: 5).count == 500)
        }
    }

    /// The cold read's one `pread` of a blob and the link after it serves the payload only when
    /// both are exactly what the caller names; anything else is nil (the caller checks them apart).
    @Test func aBlobReadWithItsLinkNeedsBothToBeTheOnesNamed() async throws {
        try await withTemporaryDirectory { dir in
            let writer = try makeWriter(dir)
            let bytes = testBytes(seed: 3, count: 5_000)
            let hash = ContentHash(hashing: bytes)
            let link = LinkRecord(
                url: "https://fused/a", variant: "", blobHash: hash, blobLength: 5_000, blobID: 10, sequence: 11,
                createdAt: 9, etag: "\"e\"")
            let digest = link.key.digest
            let offsets = try bytes.withUnsafeBytes {
                try writer.appendBlob(hash: hash, id: 10, payload: $0, thenLink: link, digest: digest)
            }
            let file = writer.segment
            let identity = RecordIdentity(type: .link, sequence: 11, digest: digest)
            let body = RecordCodec.linkBody(link)
            func read(_ identity: RecordIdentity, _ body: [UInt8], hash: ContentHash = hash, id: UInt64 = 10) throws -> Data? {
                try file.readBlob(
                    at: offsets.blob, payloadLength: 5_000, hash: hash, id: id, thenLinkAt: offsets.link, identity: identity,
                    body: body)
            }
            #expect(try read(identity, body).map(Array.init) == bytes)
            // Another sequence or key, another body (an older version's metadata): not that link.
            #expect(try read(RecordIdentity(type: .link, sequence: 12, digest: digest), body) == nil)
            #expect(try read(RecordIdentity(type: .link, sequence: 11, digest: ContentHash(high: 1, low: 1)), body) == nil)
            var other = link
            other.etag = "\"f\""
            #expect(try read(identity, RecordCodec.linkBody(other)) == nil)
            // The link named anywhere but where the blob record ends (whatever a caller counted).
            for elsewhere in [offsets.link - 1, offsets.link + 1, offsets.blob, 0] {
                #expect(
                    try file.readBlob(
                        at: offsets.blob, payloadLength: 5_000, hash: hash, id: 10, thenLinkAt: elsewhere, identity: identity,
                        body: body) == nil)
            }
            // The blob's own checks still throw.
            #expect(throws: PackError.self) { try read(identity, body, id: 9) }
            // A link header cut off by the end of the file: nil, the blob's bytes are not served.
            // (Like holdsLink, the header alone proves the link: its body's checksum is in it.)
            #expect(truncate(file.path, off_t(offsets.link) + off_t(PackFormat.Version2.recordHeaderSize) - 1) == 0)
            #expect(try read(identity, body) == nil)
            #expect(truncate(file.path, off_t(offsets.link)) == 0)
            #expect(try read(identity, body) == nil)
            #expect(try file.readBlob(at: offsets.blob, payloadLength: 5_000, hash: hash, id: 10).count == 5_000)
            // Every flipped bit of the link's header makes it not that link.
            #expect(truncate(file.path, 0) == 0)
            let fresh = try makeWriter(dir, id: 2)
            let again = try bytes.withUnsafeBytes {
                try fresh.appendBlob(hash: hash, id: 10, payload: $0, thenLink: link, digest: digest)
            }
            let fd = open(fresh.segment.path, O_RDWR)
            defer { close(fd) }
            for bit in stride(from: 0, to: PackFormat.Version2.recordHeaderSize * 8, by: 7) {
                let at = off_t(again.link) + off_t(bit / 8)
                var byte: UInt8 = 0
                #expect(pread(fd, &byte, 1, at) == 1)
                var flipped = byte ^ UInt8(1 << (bit % 8))
                #expect(pwrite(fd, &flipped, 1, at) == 1)
                let served = try fresh.segment.readBlob(
                    at: again.blob, payloadLength: 5_000, hash: hash, id: 10, thenLinkAt: again.link, identity: identity,
                    body: body)
                #expect(served == nil, "bit \(bit)")
                #expect(pwrite(fd, &byte, 1, at) == 1)
            }
            #expect(
                try fresh.segment.readBlob(
                    at: again.blob, payloadLength: 5_000, hash: hash, id: 10, thenLinkAt: again.link, identity: identity,
                    body: body)?.count == 5_000)
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

    @Test func wrongHashOrIDIsRefused() async throws {
        try await withTemporaryDirectory { dir in
            let writer = try makeWriter(dir)
            let hash = ContentHash(hashing: [1, 2, 3])
            let offset = try [1, 2, 3].withUnsafeBytes { try writer.appendBlob(hash: hash, id: 5, payload: $0) }
            let wrongHash = #expect(throws: PackError.self) {
                try writer.segment.readBlob(at: offset, payloadLength: 3, hash: ContentHash(high: 0, low: 1), id: 5)
            }
            #expect(wrongHash?.code == .recordMismatch)
            let wrongID = #expect(throws: PackError.self) {
                try writer.segment.readBlob(at: offset, payloadLength: 3, hash: hash, id: 6)
            }
            #expect(wrongID?.code == .recordMismatch)
        }
    }

    @Test func openRefusesOtherFiles() async throws {
        try await withTemporaryDirectory { dir in
            try Data("not a pack at all, just some text!!".utf8).write(to: URL(fileURLWithPath: dir + "/00000001.pack"))
            let error = #expect(throws: PackError.self) { try SegmentFile.open(id: 1, in: dir, writable: false) }
            #expect(error?.code == .notASegment)
            // A real segment opened under another id is refused too: the id is in the header.
            _ = try makeWriter(dir, id: 2)
            try FileManager.default.moveItem(atPath: dir + "/00000002.pack", toPath: dir + "/00000003.pack")
            #expect(throws: PackError.self) { try SegmentFile.open(id: 3, in: dir, writable: false) }
            #expect(SegmentFile.header(atPath: dir + "/00000003.pack")?.id == 2)
            let missing = #expect(throws: PackError.self) { try SegmentFile.open(id: 9, in: dir, writable: false) }
            #expect(missing?.errno == ENOENT)
            #expect(throws: PackError.self) {
                try SegmentFile.create(id: 3, in: dir, createdAt: 5, format: .version2(secret: testSecret), synchronize: false)
            }
        }
    }

    /// A symbolic link, a directory or a FIFO in a segment's place is refused at once: never
    /// followed, never blocked on.
    @Test func openRefusesLinksDirectoriesAndFIFOs() async throws {
        try await withTemporaryDirectory { dir in
            _ = try makeWriter(dir, id: 1)
            try FileManager.default.createSymbolicLink(
                atPath: dir + "/00000002.pack", withDestinationPath: dir + "/00000001.pack")
            let link = #expect(throws: PackError.self) { try SegmentFile.open(id: 2, in: dir, writable: true) }
            #expect(link?.code == .notASegment)
            try FileManager.default.createDirectory(atPath: dir + "/00000003.pack", withIntermediateDirectories: false)
            let directory = #expect(throws: PackError.self) { try SegmentFile.open(id: 3, in: dir, writable: true) }
            #expect(directory?.code == .notASegment)
            #expect(mkfifo(dir + "/00000004.pack", 0o644) == 0)
            let fifo = #expect(throws: PackError.self) { try SegmentFile.open(id: 4, in: dir, writable: false) }
            #expect(fifo?.code == .notASegment)
            #expect(SegmentFile.header(atPath: dir + "/00000004.pack") == nil)
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
            writer.rotate(
                to: try SegmentFile.create(
                    id: 2, in: dir, createdAt: 1, format: .version2(secret: testSecret), synchronize: false))
            #expect(writer.end == UInt64(PackFormat.segmentHeaderSize))
            #expect(writer.segment.id == 2)
            #expect(try PackDirectory.segmentIDs(in: dir) == [1, 2])
        }
    }

    /// Segments of format version 1 (stores written before version 2) are read, scanned and
    /// copied forward into version 2.
    @Test func versionOneSegmentsAreStillReadAndCopiedForward() async throws {
        try await withTemporaryDirectory { dir in
            let payload = testBytes(seed: 11, count: 2000)
            let hash = ContentHash(hashing: payload)
            let link = LinkRecord(
                url: "https://v1/a", variant: "", blobHash: hash, blobLength: 2000, blobID: 3, sequence: 4, createdAt: 9,
                etag: "\"e\"")
            let tombstone = TombstoneRecord(url: "https://v1/b", variant: "w", sequence: 5, removedAt: 10)
            let offsets = try writeVersion1Segment(
                dir, id: 1,
                records: [
                    (.blob, version1BlobBody(payload, id: 3)), (.link, RecordCodec.linkBody(link, version: 1)),
                    (.tombstone, RecordCodec.tombstoneBody(tombstone)),
                ])
            let file = try SegmentFile.open(id: 1, in: dir, writable: false)
            #expect(file.format.version == 1)
            #expect(try Array(file.readBlob(at: offsets[0], payloadLength: 2000, hash: hash, id: 3)) == payload)
            // Version 1's records carry no header that proves the link: checked apart, never fused.
            let identity = RecordIdentity(type: .link, sequence: 4, digest: link.key.digest)
            #expect(
                try file.readBlob(
                    at: offsets[0], payloadLength: 2000, hash: hash, id: 3, thenLinkAt: offsets[1], identity: identity,
                    body: RecordCodec.linkBody(link, version: 1)) == nil)
            var seen: [RecordIdentity] = []
            let report = try SegmentScanner.scan(file) { seen.append($0.identity) }
            #expect(report.damage.isEmpty)
            #expect(
                seen == [
                    RecordIdentity(type: .blob, sequence: 3, digest: hash),
                    RecordIdentity(type: .link, sequence: 4, digest: link.key.digest),
                    RecordIdentity(type: .tombstone, sequence: 5, digest: tombstone.key.digest),
                ])
            // Copied forward: each record gets a version-2 header and reads back the same.
            let writer = try makeWriter(dir, id: 2)
            let size = try file.size()
            let copies = try offsets.map { try writer.append(try file.readMovable(at: $0, limit: size)) }
            #expect(try Array(writer.segment.readBlob(at: copies[0], payloadLength: 2000, hash: hash, id: 3)) == payload)
            var copied: [ScannedRecord.Content] = []
            _ = try SegmentScanner.scan(writer.segment) { copied.append($0.content) }
            guard copied.count == 3, case .link(let l) = copied[1], case .tombstone(let t) = copied[2] else {
                Issue.record("copies: \(copied)")
                return
            }
            #expect(l == link)
            #expect(t == tombstone)
        }
    }

    @Test func aVersionTwoCopyKeepsItsBodyChecksum() async throws {
        try await withTemporaryDirectory { dir in
            let writer = try makeWriter(dir)
            let link = LinkRecord(
                url: "https://x/a", variant: "", blobHash: ContentHash(high: 1, low: 1), blobLength: 1, blobID: 1,
                sequence: 8, createdAt: 0)
            let offset = try writer.appendLink(link)
            let movable = try writer.segment.readMovable(at: offset, limit: writer.end)
            #expect(movable.checksum != nil)
            let copy = try writer.append(movable)
            let read = try writer.segment.readRecord(at: copy, limit: writer.end)
            guard case .link(let back) = read.record.content else {
                Issue.record("not a link")
                return
            }
            #expect(back == link)
        }
    }
}

/// A failed fdatasync is final for the opening of a segment file: Linux reports a failed
/// writeback to one sync only and marks the pages clean, so a retry could report success for
/// bytes the disk never got.
@Suite struct SyncFailureTests {
    @Test func aFailedSyncIsKeptAndNeverAskedAgain() async throws {
        try await withTemporaryDirectory { dir in
            // The kernel's shape: one sync fails, every later one would succeed.
            let syncs = Locked(0)
            let faults = FaultInjector { operation, _ in
                guard operation == .sync else { return nil }
                return syncs.withLock {
                    $0 += 1; return $0
                } == 2 ? .error(EIO) : nil
            }
            let writer = try makeWriter(dir, faults: faults)
            let file = writer.segment
            try file.synchronize()
            #expect(file.syncFailure == nil)
            _ = try [UInt8](repeating: 7, count: 100).withUnsafeBytes {
                try writer.appendBlob(hash: ContentHash(high: 1, low: 2), id: 1, payload: $0)
            }
            let first = #expect(throws: PackError.self) { try file.synchronize() }
            #expect(first?.code == .syncFailed)
            #expect(first?.errno == EIO)
            #expect(first?.message.contains("reopened") == true)
            // Later syncs throw the same failure without reaching the kernel (or the injector).
            for _ in 0..<3 {
                let again = #expect(throws: PackError.self) { try file.synchronize() }
                #expect(again?.code == .syncFailed)
                #expect(again?.errno == EIO)
            }
            #expect(syncs.withLock { $0 } == 2)
            #expect(file.syncFailure?.code == .syncFailed)
            // A new opening of the file starts clean.
            let reopened = try SegmentFile.open(id: 1, in: dir, writable: true, faults: faults)
            try reopened.synchronize()
            #expect(reopened.syncFailure == nil)
            #expect(syncs.withLock { $0 } == 3)
        }
    }

    /// `rewriteUnchanged` writes a range again as it is (in chunks, so past 1 MiB too), and
    /// refuses a range past the end of the file with a typed error.
    @Test func aRewriteLeavesTheBytesAsTheyWere() async throws {
        try await withTemporaryDirectory { dir in
            let writes = Locked(0)
            let faults = FaultInjector { operation, _ in
                if operation == .write { writes.withLock { $0 += 1 } }
                return nil
            }
            let writer = try makeWriter(dir, faults: faults)
            let file = writer.segment
            let payload = testBytes(seed: 3, count: 3 << 20)
            _ = try payload.withUnsafeBytes { try writer.appendBlob(hash: ContentHash(high: 1, low: 2), id: 1, payload: $0) }
            let size = try file.size()
            let before = try Data(contentsOf: URL(fileURLWithPath: file.path))
            writes.withLock { $0 = 0 }
            try file.rewriteUnchanged(file.headerSize..<size)
            #expect(writes.withLock { $0 } == 4, "3 MiB and a little, in 1 MiB chunks")
            #expect(try Data(contentsOf: URL(fileURLWithPath: file.path)) == before)
            let past = #expect(throws: PackError.self) { try file.rewriteUnchanged(size - 10..<size + 10) }
            #expect(past?.code == .io)
            #expect(try Data(contentsOf: URL(fileURLWithPath: file.path)) == before)
        }
    }
}
