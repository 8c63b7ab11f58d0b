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
    static let secret = PackSecret(first: 0x0123_4567_89AB_CDEF, second: 0xFEDC_BA98_7654_3210)
    static let format = SegmentFormat.version2(secret: secret)

    @Test(arguments: [UInt8(1), 2])
    func linkRoundTrip(version: UInt8) {
        let body = RecordCodec.linkBody(Self.link, version: version)
        let fixed = version == 1 ? PackFormat.Version1.linkFixedSize : PackFormat.Version2.linkFixedSize
        #expect(body.count == fixed + 16 + Self.link.url.utf8.count + 8 + 5 + 29)
        #expect(body.withUnsafeBytes { RecordCodec.link($0, version: version) } == Self.link)
    }

    @Test func linkWithoutOptionalFields() {
        var link = Self.link
        link.etag = nil
        link.lastModified = nil
        link.expiresAt = nil
        let decoded = RecordCodec.linkBody(link).withUnsafeBytes { RecordCodec.link($0) }
        #expect(decoded == link)
        // An empty ETag is not the same as none.
        link.etag = ""
        #expect(RecordCodec.linkBody(link).withUnsafeBytes { RecordCodec.link($0) }?.etag == "")
    }

    /// A cache policy is flag 8 and a fifth string; without one, the body is exactly what
    /// builds before the field wrote (so they still read it).
    @Test func linkWithACachePolicy() {
        var link = Self.link
        link.cachePolicy = "v1;f=1700000000000"
        let body = RecordCodec.linkBody(link)
        #expect(body.count == RecordCodec.linkBody(Self.link).count + 4 + link.cachePolicy!.utf8.count)
        #expect(body.withUnsafeBytes { RecordCodec.link($0) } == link)
        #expect(body[32] & 8 != 0)
        #expect(RecordCodec.linkBody(Self.link)[32] & 8 == 0, "no policy, no flag")
        // The flag without its string, or the string without the flag, is malformed.
        var flagOnly = RecordCodec.linkBody(Self.link)
        flagOnly[32] |= 8
        #expect(flagOnly.withUnsafeBytes { RecordCodec.link($0) } == nil)
        var stringOnly = body
        stringOnly[32] &= ~8
        #expect(stringOnly.withUnsafeBytes { RecordCodec.link($0) } == nil)
        // Version 1 never had the field.
        var v1 = RecordCodec.linkBody(Self.link, version: 1)
        v1[24] |= 8  // the version-1 flags word is bytes 24–27
        #expect(v1.withUnsafeBytes { RecordCodec.link($0, version: 1) } == nil)
    }

    @Test func tombstoneRoundTrip() {
        let tombstone = TombstoneRecord(url: "u", variant: "", sequence: 7, removedAt: 123)
        #expect(RecordCodec.tombstoneBody(tombstone).withUnsafeBytes { RecordCodec.tombstone($0) } == tombstone)
    }

    @Test func malformedBodiesAreRefused() {
        let body = RecordCodec.linkBody(Self.link)
        for cut in [0, 10, 59, 60, body.count - 1] {
            #expect(Array(body[0..<cut]).withUnsafeBytes { RecordCodec.link($0) } == nil)
        }
        #expect((body + [0]).withUnsafeBytes { RecordCodec.link($0) } == nil)
        var badFlags = body
        badFlags[35] = 0x80  // the flags word is bytes 32–35
        #expect(badFlags.withUnsafeBytes { RecordCodec.link($0) } == nil)
        var v1Reserved = RecordCodec.linkBody(Self.link, version: 1)
        v1Reserved[28] = 1
        #expect(v1Reserved.withUnsafeBytes { RecordCodec.link($0, version: 1) } == nil)
    }

    func header(offset: UInt64 = 48, segment: UInt32 = 1, format: SegmentFormat = Self.format) -> [UInt8] {
        RecordCodec.header(
            identity: RecordIdentity(type: .link, sequence: 99, digest: Self.link.key.digest), bodyLength: 3,
            bodyChecksum: 0xAB, format: format, segment: segment, offset: offset)
    }

    @Test func versionTwoHeaderLayout() {
        let raw = header()
        #expect(raw.count == PackFormat.Version2.recordHeaderSize)
        #expect(Array(raw[0..<4]) == Array("TRVR".utf8))
        #expect(raw[4] == RecordType.link.rawValue)
        #expect(raw[5] == 2)
        #expect(raw[8] == 3)
        #expect(raw[12] == 99)
        #expect(Array(raw[20..<36]) == Self.link.key.digest.bytes)
        #expect(raw[36] == 0xAB)
        let parsed = raw.withUnsafeBytes { RecordCodec.headerV2($0, format: Self.format, segment: 1, offset: 48) }
        let h = try? parsed.get()
        #expect(h?.type == .link)
        #expect(h?.bodyLength == 3)
        #expect(h?.identity == RecordIdentity(type: .link, sequence: 99, digest: Self.link.key.digest))
        #expect(h?.bodyChecksum == 0xAB)
    }

    @Test func everyHeaderByteIsCovered() {
        let raw = header()
        for i in 0..<raw.count {
            for mask: UInt8 in [0x01, 0x80] {
                var damaged = raw
                damaged[i] ^= mask
                let accepted = damaged.withUnsafeBytes {
                    (try? RecordCodec.headerV2($0, format: Self.format, segment: 1, offset: 48).get()) != nil
                }
                #expect(!accepted, "a flip of header byte \(i) went unnoticed")
            }
        }
    }

    /// A header verifies only at the offset and in the segment and store it was written for:
    /// the same bytes anywhere else, or made with another secret, are refused.
    @Test func aHeaderIsBoundToItsPlaceAndStore() {
        let raw = header(offset: 48, segment: 1)
        func verifies(_ bytes: [UInt8], segment: UInt32, offset: UInt64, format: SegmentFormat = Self.format) -> Bool {
            bytes.withUnsafeBytes {
                (try? RecordCodec.headerV2($0, format: format, segment: segment, offset: offset).get()) != nil
            }
        }
        #expect(verifies(raw, segment: 1, offset: 48))
        #expect(!verifies(raw, segment: 1, offset: 49))
        #expect(!verifies(raw, segment: 1, offset: 48 + 1 << 32))
        #expect(!verifies(raw, segment: 2, offset: 48))
        let other = SegmentFormat.version2(secret: PackSecret(first: 1, second: 2))
        #expect(!verifies(raw, segment: 1, offset: 48, format: other))
        #expect(!verifies(header(format: other), segment: 1, offset: 48))
    }

    @Test func bodySeedsDifferByTypeAndStore() {
        let seeds = RecordType.allCases.map { Self.format.bodySeed($0) }
        #expect(Set(seeds).count == 3)
        let other = SegmentFormat.version2(secret: PackSecret(first: 1, second: 2))
        #expect(other.bodySeed(.link) != Self.format.bodySeed(.link))
    }

    @Test func versionOneHeaderStillParses() {
        let body: [UInt8] = [1, 2, 3]
        let raw = body.withUnsafeBytes { RecordCodec.headerV1(type: .tombstone, bodyParts: [$0]) }
        #expect(raw.count == PackFormat.Version1.recordHeaderSize)
        let h = raw.withUnsafeBytes { try? RecordCodec.headerV1($0).get() }
        #expect(h?.type == .tombstone)
        #expect(h?.bodyLength == 3)
        #expect(h?.identity == nil)
        let seed = raw.withUnsafeBytes { RecordCodec.bodySeedV1($0) }
        #expect(body.withUnsafeBytes { XXH3.hash64($0, seed: seed) } == h?.bodyChecksum)
    }

    @Test func secretsAreRandomAndNeverPrinted() {
        let a = PackSecret.random()
        let b = PackSecret.random()
        #expect(a != b)
        #expect(!a.description.contains(String(a.first, radix: 16)))
        #expect(a.bytes.count == 16)
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
