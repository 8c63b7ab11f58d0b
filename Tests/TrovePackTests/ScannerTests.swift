import Foundation
import Testing
import TroveCore
import TroveTestSupport

@testable import TrovePack

@Suite struct ScannerTests {
    struct Written {
        var file: SegmentFile
        /// Offsets of the records, in order: blob, link, blob, link, …, tombstone.
        var offsets: [UInt64]
        var links: [LinkRecord]
    }

    /// Writes a segment with five blobs and their links, then a tombstone.
    func populate(_ dir: String, faults: FaultInjector? = nil) throws -> Written {
        let writer = try makeWriter(dir, faults: faults)
        var offsets: [UInt64] = []
        var links: [LinkRecord] = []
        for i in 0..<5 {
            let bytes = testBytes(seed: UInt64(i), count: 100 * i + 50)
            let hash = ContentHash(hashing: bytes)
            offsets.append(try bytes.withUnsafeBytes { try writer.appendBlob(hash: hash, id: UInt64(10 + i), payload: $0) })
            let link = LinkRecord(
                url: "u\(i)", variant: "", blobHash: hash, blobLength: UInt64(bytes.count), blobID: UInt64(10 + i),
                sequence: UInt64(20 + i), createdAt: 0)
            links.append(link)
            offsets.append(try writer.appendLink(link))
        }
        offsets.append(try writer.appendTombstone(TombstoneRecord(url: "u0", variant: "", sequence: 30, removedAt: 0)))
        return Written(file: writer.segment, offsets: offsets, links: links)
    }

    func flip(_ path: String, at offset: UInt64, mask: UInt8 = 0x5A) throws {
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.seek(toOffset: offset)
        let byte = try handle.read(upToCount: 1)?.first ?? 0
        try handle.seek(toOffset: offset)
        try handle.write(contentsOf: [byte ^ mask])
    }

    /// `endsRecords(at:)` is true exactly at the ends of records, at every offset of a segment
    /// whose payloads and key text hold copies of its own records and the record magic (what an
    /// attacker who chose the bytes would put there), and false for a version-1 segment.
    @Test func endsRecordsExactlyAtTheEndsOfRecords() async throws {
        try await withTemporaryDirectory { dir in
            let writer = try makeWriter(dir)
            var offsets: [UInt64] = []
            func put(_ i: Int, _ payload: [UInt8], url: String) throws {
                let hash = ContentHash(hashing: payload)
                offsets.append(try payload.withUnsafeBytes { try writer.appendBlob(hash: hash, id: UInt64(i), payload: $0) })
                offsets.append(
                    try writer.appendLink(
                        LinkRecord(
                            url: url, variant: "", blobHash: hash, blobLength: UInt64(payload.count), blobID: UInt64(i),
                            sequence: UInt64(i), createdAt: 0)))
            }
            try put(1, testBytes(seed: 1, count: 700), url: "u1")
            var own = [UInt8](repeating: 0, count: Int(writer.end - writer.segment.headerSize))
            _ = try own.withUnsafeMutableBytes { try writer.segment.read(into: $0, at: writer.segment.headerSize) }
            let magic = PackFormat.recordMagicBytes
            let text = String(decoding: own.prefix(40).map { $0 & 0x7F | 0x20 }, as: UTF8.self)
            try put(2, own + magic + own + magic + [0, 0, 0], url: "TRVR" + text)
            try put(3, magic + magic + own.suffix(200) + magic, url: "u3TRVRTRVR")
            offsets.append(try writer.appendTombstone(TombstoneRecord(url: "TRVR", variant: "", sequence: 9, removedAt: 0)))
            let end = writer.end
            // The header's end counts: no record, and none cut, before it.
            let ends = Set(offsets.dropFirst() + [end, writer.segment.headerSize])
            let file = writer.segment
            var wrong: [UInt64] = []
            for offset in file.headerSize...end where try SegmentScanner.endsRecords(file, at: offset) != ends.contains(offset) {
                wrong.append(offset)
            }
            #expect(wrong.isEmpty, "wrong at \(wrong.prefix(20)) of \(file.headerSize)...\(end)")
            // A window too short for the last record says no (the caller scans instead).
            #expect(try !SegmentScanner.endsRecords(file, at: offsets[4], window: 16))
            #expect(try SegmentScanner.endsRecords(file, at: offsets[4], window: offsets[4] - offsets[3]))

            let v1 = try writeVersion1Segment(dir, id: 7, records: [(.blob, Array(repeating: 1, count: 60))])
            let old = try SegmentFile.open(id: 7, in: dir, writable: false)
            #expect(try !SegmentScanner.endsRecords(old, at: try old.size()))
            _ = v1
        }
    }

    @Test func visitsEveryRecord() async throws {
        try await withTemporaryDirectory { dir in
            let written = try populate(dir)
            var seen: [UInt64] = []
            var kinds = ""
            let report = try SegmentScanner.scan(written.file) { record in
                seen.append(record.offset)
                switch record.content {
                case .blob: kinds += "b"
                case .link: kinds += "l"
                case .tombstone: kinds += "t"
                }
            }
            #expect(seen == written.offsets)
            #expect(kinds == "blblblblblt")
            #expect(report.damage.isEmpty)
            #expect(report.validEnd == (try written.file.size()))
            #expect(report.recordCount == 11)
            #expect(report.tornTail == nil)
        }
    }

    @Test func startsAtAnOffset() async throws {
        try await withTemporaryDirectory { dir in
            let written = try populate(dir)
            var seen: [UInt64] = []
            _ = try SegmentScanner.scan(written.file, from: written.offsets[6]) { seen.append($0.offset) }
            #expect(seen == Array(written.offsets[6...]))
        }
    }

    @Test func aCutInsideTheLastRecordIsATornTail() async throws {
        try await withTemporaryDirectory { dir in
            let written = try populate(dir)
            let size = try written.file.size()
            let last = written.offsets.last!
            for cut in [size - 1, last + 3, last + 60] {
                try written.file.truncate(to: cut)
                let report = try SegmentScanner.scan(written.file) { _ in }
                #expect(report.validEnd == last)
                #expect(report.tornTail?.start == last)
                #expect(report.tornTail?.end == cut)
                #expect(report.recordCount == written.offsets.count - 1)
            }
        }
    }

    @Test func zeroesAfterTheLastRecordAreATornTail() async throws {
        try await withTemporaryDirectory { dir in
            let written = try populate(dir)
            let end = try written.file.size()
            try [UInt8](repeating: 0, count: 100).withUnsafeBytes { try written.file.write([$0], at: end) }
            let report = try SegmentScanner.scan(written.file) { _ in }
            #expect(report.validEnd == end)
            #expect(report.tornTail?.start == end)
            #expect(report.recordCount == 11)
        }
    }

    /// A damaged blob payload: the header verifies, so the record is skipped whole, its identity
    /// known, and every record after it is still found.
    @Test func aDamagedBodyIsSkippedWithItsIdentity() async throws {
        try await withTemporaryDirectory { dir in
            let written = try populate(dir)
            try flip(written.file.path, at: written.offsets[4] + 60)  // inside blob 2's payload
            var seen: [UInt64] = []
            let report = try SegmentScanner.scan(written.file) { seen.append($0.offset) }
            #expect(seen == written.offsets.filter { $0 != written.offsets[4] })
            #expect(report.damage.count == 1)
            #expect(report.damage[0].start == written.offsets[4])
            #expect(report.damage[0].end == written.offsets[5])
            #expect(report.damage[0].identity?.type == .blob)
            #expect(report.damage[0].identity?.sequence == 12)
            #expect(report.tornTail == nil)
        }
    }

    /// A damaged link header: the scanner finds the next record, and the link's body — intact,
    /// matching the checksum its header stored — is salvaged.
    @Test func aLinkWithADamagedHeaderIsSalvaged() async throws {
        try await withTemporaryDirectory { dir in
            let written = try populate(dir)
            try flip(written.file.path, at: written.offsets[3] + 9)  // link 1's body length
            var links: [LinkRecord] = []
            let report = try SegmentScanner.scan(written.file) { record in
                if case .link(let link) = record.content { links.append(link) }
            }
            #expect(links == written.links)
            #expect(report.damage.count == 1)
            #expect(report.damage[0].salvaged)
            #expect(report.damage[0].identity == RecordIdentity(type: .link, sequence: 21, digest: written.links[1].key.digest))
            #expect(report.recordCount == 11)
        }
    }

    /// A damaged blob header: nothing of it is trusted (its id is only in the header), the next
    /// records are found.
    @Test func aBlobWithADamagedHeaderIsDamageWithoutIdentity() async throws {
        try await withTemporaryDirectory { dir in
            let written = try populate(dir)
            try flip(written.file.path, at: written.offsets[2] + 14)  // blob 1's id
            var seen: [UInt64] = []
            let report = try SegmentScanner.scan(written.file) { seen.append($0.offset) }
            #expect(seen == written.offsets.filter { $0 != written.offsets[2] })
            #expect(report.damage.count == 1)
            #expect(report.damage[0].identity == nil)
            #expect(report.damage[0].end == written.offsets[3])
        }
    }

    /// A payload that carries well-formed records — made with another store's secret, or with
    /// this store's secret but for another place — is never taken for records, even when the
    /// scanner has to search through it after damage to the real record's header.
    @Test func recordsForgedInsideAPayloadAreNeverAccepted() async throws {
        try await withTemporaryDirectory { dir in
            let writer = try makeWriter(dir)
            let victim = LinkRecord(
                url: "https://bank.example/logo.png", variant: "", blobHash: ContentHash(high: 9, low: 9), blobLength: 4,
                blobID: 1 << 40, sequence: 1 << 40, createdAt: 0)
            // The forgeries: the attacker's idea of what a record here would look like.
            func forged(_ format: SegmentFormat, segment: UInt32, offset: UInt64) -> [UInt8] {
                let body = RecordCodec.linkBody(victim)
                let checksum = body.withUnsafeBytes { XXH3.hash64($0, seed: format.bodySeed(.link)) }
                return RecordCodec.header(
                    identity: RecordIdentity(type: .link, sequence: victim.sequence, digest: victim.key.digest),
                    bodyLength: body.count, bodyChecksum: checksum, format: format, segment: segment, offset: offset)
                    + body
            }
            let foreign = SegmentFormat.version2(secret: PackSecret.random())
            let start = writer.end + UInt64(PackFormat.recordHeaderSize)  // where the payload will sit
            var payload: [UInt8] = []
            payload += forged(foreign, segment: 1, offset: start)
            payload += forged(writer.segment.format, segment: 1, offset: 0)  // this store, wrong place
            payload += forged(writer.segment.format, segment: 2, offset: start + UInt64(payload.count))  // wrong segment
            payload += [UInt8](repeating: 0x54, count: 1000)
            let hash = ContentHash(hashing: payload)
            let offset = try payload.withUnsafeBytes { try writer.appendBlob(hash: hash, id: 7, payload: $0) }
            _ = try writer.appendTombstone(TombstoneRecord(url: "after", variant: "", sequence: 8, removedAt: 0))
            for damagedByte in [0, 4, 9, 13, 30, 44] {
                try flip(writer.segment.path, at: offset + UInt64(damagedByte))
                var accepted: [ScannedRecord.Content] = []
                _ = try SegmentScanner.scan(writer.segment) { accepted.append($0.content) }
                for content in accepted {
                    if case .link(let link) = content { Issue.record("accepted a forged link: \(link)") }
                }
                #expect(accepted.count == 1, "only the tombstone after the payload")
                try flip(writer.segment.path, at: offset + UInt64(damagedByte))
            }
        }
    }

    /// Version-1 segments are not scanned past damage: their records are not bound to their
    /// place, so bytes past it could be a payload.
    @Test func aVersionOneSegmentStopsAtDamage() async throws {
        try await withTemporaryDirectory { dir in
            let tombstones = (0..<4).map { TombstoneRecord(url: "k\($0)", variant: "", sequence: UInt64($0), removedAt: 0) }
            let offsets = try writeVersion1Segment(
                dir, id: 1, records: tombstones.map { (.tombstone, RecordCodec.tombstoneBody($0)) })
            try flip(dir + "/00000001.pack", at: offsets[1] + 30)
            let file = try SegmentFile.open(id: 1, in: dir, writable: false)
            var count = 0
            let report = try SegmentScanner.scan(file) { _ in count += 1 }
            #expect(count == 1)
            #expect(report.stoppedAtDamage)
            #expect(report.damage.map(\.start) == [offsets[1]])
            #expect(report.damage.first?.end == (try file.size()))
        }
    }

    /// Scanning costs one read per buffer's worth of file, however the damage looks: a 48 MiB
    /// record with a flipped byte, and 8 MiB of fake record headers inside a payload.
    @Test func scanningPastDamageIsLinear() async throws {
        try await withTemporaryDirectory { dir in
            let reads = Locked(0)
            let faults = FaultInjector { operation, _ in
                if operation == .read { reads.withLock { $0 += 1 } }
                return nil
            }
            let writer = try makeWriter(dir, faults: faults)
            let big = [UInt8](repeating: 7, count: 48 << 20)
            let bigOffset = try big.withUnsafeBytes {
                try writer.appendBlob(hash: ContentHash(high: 1, low: 1), id: 1, payload: $0)
            }
            var fakes: [UInt8] = []
            while fakes.count < 8 << 20 { fakes += Array("TRVR".utf8) + [2, 2, 0, 0] + [UInt8](repeating: 1, count: 44) }
            let fakeOffset = try fakes.withUnsafeBytes {
                try writer.appendBlob(hash: ContentHash(high: 2, low: 2), id: 2, payload: $0)
            }
            _ = try writer.appendTombstone(TombstoneRecord(url: "end", variant: "", sequence: 3, removedAt: 0))
            try flip(writer.segment.path, at: bigOffset + 100)
            try flip(writer.segment.path, at: fakeOffset + 2)
            reads.withLock { $0 = 0 }
            var found = 0
            let report = try SegmentScanner.scan(writer.segment) { _ in found += 1 }
            #expect(found == 1)
            #expect(report.damage.count == 2)
            let megabytes = Int(try writer.segment.size() >> 20)
            let used = reads.withLock { $0 }
            #expect(used <= 3 * megabytes + 10, "\(used) reads for a \(megabytes) MiB segment")
        }
    }
}
