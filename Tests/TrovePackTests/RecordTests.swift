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

    /// A record equals only a record that says the same bytes: every field counts, and a text
    /// spelled another way (canonically equivalent, as `String`'s `==` would accept) is another
    /// record — a row is held to its link record by this (`verifyLink`, the compactor).
    @Test func recordsAreEqualByEveryFieldAndByBytes() {
        let base = Self.link
        #expect(Mirror(reflecting: base).children.count == 11, "a new field must join `==` and this test")
        let changes: [(String, (inout LinkRecord) -> Void)] = [
            ("url", { $0.url += "x" }), ("variant", { $0.variant = "" }),
            ("blobHash", { $0.blobHash = ContentHash(high: 1, low: 3) }), ("blobLength", { $0.blobLength += 1 }),
            ("blobID", { $0.blobID += 1 }), ("sequence", { $0.sequence += 1 }), ("createdAt", { $0.createdAt += 1 }),
            ("expiresAt", { $0.expiresAt = nil }), ("etag", { $0.etag = nil }),
            ("lastModified", { $0.lastModified = "x" }), ("cachePolicy", { $0.cachePolicy = "" }),
        ]
        for (field, change) in changes {
            var other = base
            change(&other)
            #expect(other != base, "\(field)")
        }
        // Canonically equivalent spellings: equal as Swift strings, other bytes.
        let composed = "caf\u{E9}"
        let decomposed = "cafe\u{301}"
        #expect(composed == decomposed)
        let spellings: [(inout LinkRecord, String) -> Void] = [
            { $0.url = $1 }, { $0.variant = $1 }, { $0.etag = $1 }, { $0.lastModified = $1 }, { $0.cachePolicy = $1 },
        ]
        for (i, set) in spellings.enumerated() {
            var a = base
            var b = base
            set(&a, composed)
            set(&b, decomposed)
            #expect(a != b, "text \(i)")
            #expect(a == a)
        }
        let tombstone = TombstoneRecord(url: composed, variant: "", sequence: 7, removedAt: 1)
        #expect(Mirror(reflecting: tombstone).children.count == 4)
        #expect(tombstone != TombstoneRecord(url: decomposed, variant: "", sequence: 7, removedAt: 1))
        #expect(tombstone == TombstoneRecord(url: composed, variant: "", sequence: 7, removedAt: 1))
        #expect(tombstone != TombstoneRecord(url: composed, variant: "", sequence: 8, removedAt: 1))
        #expect(tombstone != TombstoneRecord(url: composed, variant: "", sequence: 7, removedAt: 2))
        #expect(tombstone != TombstoneRecord(url: composed, variant: "v", sequence: 7, removedAt: 1))
    }

    /// `linkBodyLength` is what a put asks before it knows the sequence numbers, instead of
    /// encoding the body twice: it must equal the encoded length for every link.
    @Test(arguments: [UInt8(1), 2])
    func linkBodyLengthIsTheEncodedLength(version: UInt8) {
        var generator = SeededGenerator(seed: 11)
        let texts = ["", "a", "https://example.com/a.jpg", "é", "日本語/画像", String(repeating: "x", count: 5_000), "\u{1F600}"]
        for _ in 0..<500 {
            let link = LinkRecord(
                url: texts.randomElement(using: &generator)!, variant: texts.randomElement(using: &generator)!,
                blobHash: ContentHash(high: generator.next(), low: generator.next()), blobLength: generator.next(),
                blobID: generator.next(), sequence: generator.next(), createdAt: Int64(bitPattern: generator.next()),
                expiresAt: Bool.random(using: &generator) ? Int64(bitPattern: generator.next()) : nil,
                etag: Bool.random(using: &generator) ? texts.randomElement(using: &generator)! : nil,
                lastModified: Bool.random(using: &generator) ? texts.randomElement(using: &generator)! : nil,
                cachePolicy: Bool.random(using: &generator) ? texts.randomElement(using: &generator)! : nil)
            #expect(RecordCodec.linkBodyLength(link, version: version) == RecordCodec.linkBody(link, version: version).count)
        }
    }

    /// The version-2 link body, byte for byte, against an encoding written out here field by
    /// field (Docs/PackFormat.md): the writer's faster field appends must not change a byte.
    @Test func linkBodyBytesAreTheDocumentedLayout() {
        var link = Self.link
        link.cachePolicy = "v1;f=1"
        link.blobHash = ContentHash(high: 0x0102_0304_0506_0708, low: 0x090A_0B0C_0D0E_0F10)
        var expected: [UInt8] = []
        func le(_ v: UInt64, _ width: Int) {
            for i in 0..<width { expected.append(UInt8(truncatingIfNeeded: v >> (8 * UInt64(i)))) }
        }
        func string(_ s: String) {
            le(UInt64(s.utf8.count), 4)
            expected += Array(s.utf8)
        }
        le(link.blobID, 8)
        expected += Array(1...16)  // the hash, big-endian
        le(link.blobLength, 8)
        le(15, 4)  // expiry, ETag, Last-Modified and cache policy present
        le(link.sequence, 8)
        le(UInt64(bitPattern: link.createdAt), 8)
        le(UInt64(bitPattern: link.expiresAt!), 8)
        for s in [link.url, link.variant, link.etag!, link.lastModified!, link.cachePolicy!] { string(s) }
        #expect(RecordCodec.linkBody(link) == expected)
        // And the header's identity field holds the digest big-endian too.
        let header = RecordCodec.header(
            identity: RecordIdentity(type: .link, sequence: 7, digest: link.blobHash), bodyLength: expected.count,
            bodyChecksum: 0, format: Self.format, segment: 1, offset: 48)
        #expect(Array(header[20..<36]) == Array(1...16))
        #expect(Array(header[8..<12]) == [UInt8(truncatingIfNeeded: expected.count), UInt8(expected.count >> 8), 0, 0])
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

/// A record's strings are accepted exactly when they are valid UTF-8, and read back as those
/// bytes: the reader checks validity by decoding and comparing, not with the standard library's
/// own validation, so the two must agree on every input.
@Suite struct ByteReaderStringTests {
    /// What the reader makes of `bytes` behind a length prefix (nil: rejected).
    static func read(_ bytes: [UInt8]) -> String? {
        var body = withUnsafeBytes(of: UInt32(bytes.count).littleEndian) { Array($0) }
        body += bytes
        return body.withUnsafeBytes { raw in
            var reader = ByteReader(raw)
            let text = reader.readString()
            return reader.remaining == 0 ? text : nil
        }
    }

    static func check(_ bytes: [UInt8]) {
        let expected = String(validating: bytes, as: UTF8.self)
        let text = read(bytes)
        #expect(text == expected, "\(bytes)")
        if let text { #expect(Array(text.utf8) == bytes, "\(bytes)") }
    }

    /// Invalid sequences chosen so that repairing them keeps the length, or yields U+FFFD's own
    /// bytes, or sits next to a valid U+FFFD: each must still be rejected.
    @Test func craftedSequences() {
        let cases: [[UInt8]] = [
            [], Array("https://example.com/a.jpg".utf8), Array("é€😀".utf8), [0xEF, 0xBF, 0xBD],
            [0xF0, 0x90, 0x80, 0x41],  // a truncated 4-byte sequence: repaired, still 4 bytes
            [0xE2, 0x82], [0xC0, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xFF], [0x80],
            [0xEF, 0xBF, 0xBD, 0xF0, 0x90, 0x80], [0x41, 0xE2, 0x82, 0x41, 0x42, 0x43], [0x00],
        ]
        for bytes in cases { Self.check(bytes) }
    }

    /// Random short strings over bytes that often make, and often break, UTF-8 sequences.
    @Test func randomBytes() {
        var generator = SeededGenerator(seed: 11)
        let alphabet: [UInt8] = [
            0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xE2, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF, 0xBD,
        ]
        for _ in 0..<20_000 {
            let count = Int.random(in: 0...9, using: &generator)
            Self.check((0..<count).map { _ in alphabet.randomElement(using: &generator)! })
        }
    }

    /// A length past the end of the body is rejected, whatever follows.
    @Test func aLengthPastTheEnd() {
        let body: [UInt8] = [5, 0, 0, 0, 0x41, 0x42]
        body.withUnsafeBytes { raw in
            var reader = ByteReader(raw)
            #expect(reader.readString() == nil)
        }
    }
}
