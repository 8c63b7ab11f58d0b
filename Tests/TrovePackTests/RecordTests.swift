import Foundation
import Testing
import TroveCore
import TroveTestSupport

@testable import TrovePack

@Suite struct RecordTests {
    static let link = LinkRecord(
        url: "https://example.com/a.jpg", variant: "w256-fit", blobHash: ContentHash(high: 1, low: 2),
        blobLength: 12345, blobID: 4096, sequence: 99, createdAt: 1_700_000_000_000,
        expiresAt: 1_800_000_000_000, etag: "\"abc\"", lastModified: "Tue, 01 Jan 2030 00:00:00 GMT")

    @Test func linkRoundTrip() {
        let body = RecordEncoder.body(of: Self.link)
        #expect(body.count == PackFormat.linkFixedSize + 16 + Self.link.url.utf8.count + 8 + 5 + 29)
        #expect(body.withUnsafeBytes { RecordDecoder.link($0) } == Self.link)
    }

    @Test func linkWithoutOptionalFields() {
        var link = Self.link
        link.etag = nil
        link.lastModified = nil
        link.expiresAt = nil
        let decoded = RecordEncoder.body(of: link).withUnsafeBytes { RecordDecoder.link($0) }
        #expect(decoded == link)
        // An empty ETag is not the same as none.
        link.etag = ""
        #expect(RecordEncoder.body(of: link).withUnsafeBytes { RecordDecoder.link($0) }?.etag == "")
    }

    @Test func tombstoneRoundTrip() {
        let tombstone = TombstoneRecord(url: "u", variant: "", sequence: 7, removedAt: 123)
        #expect(RecordEncoder.body(of: tombstone).withUnsafeBytes { RecordDecoder.tombstone($0) } == tombstone)
    }

    @Test func malformedBodiesAreRefused() {
        let body = RecordEncoder.body(of: Self.link)
        for cut in [0, 10, 63, 64, body.count - 1] {
            #expect(Array(body[0..<cut]).withUnsafeBytes { RecordDecoder.link($0) } == nil)
        }
        #expect((body + [0]).withUnsafeBytes { RecordDecoder.link($0) } == nil)
        var reserved = body
        reserved[28] = 1
        #expect(reserved.withUnsafeBytes { RecordDecoder.link($0) } == nil)
        var badFlags = body
        badFlags[27] = 0x80
        #expect(badFlags.withUnsafeBytes { RecordDecoder.link($0) } == nil)
    }

    @Test func headerLayout() {
        let record = RecordEncoder.record(type: .tombstone, body: [1, 2, 3])
        #expect(record.count == PackFormat.recordHeaderSize + 3)
        #expect(Array(record[0..<4]) == Array("TRVR".utf8))
        #expect(record[4] == RecordType.tombstone.rawValue)
        #expect(record[5] == PackFormat.version)
        #expect(record[8] == 3)
        let header = record.withUnsafeBytes { try? RecordDecoder.header(UnsafeRawBufferPointer(rebasing: $0[0..<24])).get() }
        #expect(header?.type == .tombstone)
        #expect(header?.bodyLength == 3)
    }

    @Test func everyHeaderByteIsCovered() {
        let record = RecordEncoder.record(type: .link, body: RecordEncoder.body(of: Self.link))
        for i in 0..<record.count {
            var damaged = record
            damaged[i] ^= 0x01
            let accepted = damaged.withUnsafeBytes { raw -> Bool in
                let header = UnsafeRawBufferPointer(rebasing: raw[0..<24])
                guard case .success(let h) = RecordDecoder.header(header), h.bodyLength == UInt64(raw.count - 24)
                else { return false }
                return RecordDecoder.verify(rawHeader: header, body: UnsafeRawBufferPointer(rebasing: raw[24...]))
            }
            #expect(!accepted, "a flip of byte \(i) went unnoticed")
        }
    }

    @Test func segmentFileNames() {
        #expect(PackFormat.fileName(forSegment: 1) == "00000001.pack")
        #expect(PackFormat.fileName(forSegment: 12_345_678) == "12345678.pack")
        #expect(PackFormat.segmentID(fromFileName: "00000042.pack") == 42)
        for name in ["42.pack", "0000000a.pack", "00000000.pack", "00000001.pack.damaged", "00000001.pak", "../00000001.pack"] {
            #expect(PackFormat.segmentID(fromFileName: name) == nil, "\(name)")
        }
    }
}
