import Foundation
import Testing
import TroveCore
import TroveTestSupport

@testable import TrovePack

/// Outside attack on b99492e (attack26): `ByteReader.readString` decodes with the repairing
/// `String(decoding:as:)` and compares bytes, `readSpan`/`readHash` read in place. Each test
/// holds the reader to `String(validating:as:)` (the reader before b99492e) on inputs the
/// commit's own tests do not reach: every 1- and 2-byte string, every 3- and 4-byte string over
/// the bytes that decide UTF-8 validity, long strings (native, not small, storage) with the
/// broken byte late, lengths near UInt32.max, empty buffers without a base address, and link
/// bodies at every alignment.
@Suite struct ByteReaderAttackTests {
    /// What the pre-b99492e reader made of `bytes` behind a length prefix.
    static func reference(_ bytes: [UInt8]) -> String? { String(validating: bytes, as: UTF8.self) }

    /// The reader's answer for `bytes` behind a length prefix, at byte offset `shift` of a buffer
    /// (to move the in-place span off any alignment); nil also when the reader stopped anywhere
    /// but the end.
    static func read(_ bytes: [UInt8], shift: Int = 0) -> (text: String?, consumedAll: Bool) {
        var body = [UInt8](repeating: 0xAA, count: shift)
        body += withUnsafeBytes(of: UInt32(bytes.count).littleEndian) { Array($0) }
        body += bytes
        return body.withUnsafeBytes { raw in
            var reader = ByteReader(UnsafeRawBufferPointer(rebasing: raw[shift...]))
            let text = reader.readString()
            return (text, reader.remaining == 0)
        }
    }

    /// Counts disagreements (and records the first few), so an exhaustive loop does not record
    /// millions of issues.
    struct Mismatches {
        var count = 0
        mutating func check(_ bytes: [UInt8], shift: Int = 0) {
            let expected = ByteReaderAttackTests.reference(bytes)
            let (text, consumed) = ByteReaderAttackTests.read(bytes, shift: shift)
            let sameBytes = text.map { Array($0.utf8) == bytes } ?? true
            let agrees = (text == nil) == (expected == nil) && sameBytes && (text == nil || consumed)
            if !agrees {
                count += 1
                if count <= 5 {
                    Issue.record(
                        "\(bytes.map { String($0, radix: 16) }): reader \(String(describing: text)), reference \(String(describing: expected))"
                    )
                }
            }
        }
    }

    /// Every string of one and two bytes.
    @Test func everyOneAndTwoByteString() {
        var m = Mismatches()
        for a in 0...255 {
            m.check([UInt8(a)])
            for b in 0...255 { m.check([UInt8(a), UInt8(b)]) }
        }
        #expect(m.count == 0)
    }

    /// The bytes that decide a sequence's validity: each lead class and each continuation range
    /// edge (80, 8F/90, 9F/A0, BF), and ASCII.
    static let deciding: [UInt8] = [
        0x00, 0x41, 0x7F, 0x80, 0x81, 0x8F, 0x90, 0x9F, 0xA0, 0xBD, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED,
        0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xF8, 0xFE, 0xFF,
    ]

    /// Every 3-byte string whose lead is any byte, over the deciding bytes after it; and every
    /// 4-byte string over the deciding bytes (29^4 ≈ 707 000).
    @Test func everyThreeAndFourByteStringOverTheDecidingBytes() {
        var m = Mismatches()
        for a in 0...255 {
            for b in Self.deciding { for c in Self.deciding { m.check([UInt8(a), b, c]) } }
        }
        for a in Self.deciding {
            for b in Self.deciding { for c in Self.deciding { for d in Self.deciding { m.check([a, b, c, d]) } } }
        }
        #expect(m.count == 0)
    }

    /// Long strings (past the 15 bytes a small string holds inline, and past the standard
    /// library's ASCII fast path's 8- and 16-byte strides), with one broken or valid-but-odd
    /// sequence at every position.
    @Test func longStringsWithOneSequenceAtEveryPosition() {
        var m = Mismatches()
        let inserts: [[UInt8]] = [
            [0xFF], [0x80], [0xC3], [0xC0, 0x80], [0xED, 0xA0, 0x80], [0xF0, 0x90, 0x80], [0xF0, 0x90, 0x80, 0x41],
            [0xEF, 0xBF, 0xBD], [0xEF, 0xBF, 0xBF], [0xEF, 0xB7, 0x90], [0x00], [0xF4, 0x8F, 0xBF, 0xBF],
            [0xF4, 0x90, 0x80, 0x80], [0xE0, 0x9F, 0xBF], [0xEF, 0xBF, 0xBD, 0xEF, 0xBF],
        ]
        for length in [15, 16, 17, 31, 32, 33, 63, 64, 65, 200] {
            for insert in inserts {
                for position in 0...length {
                    var bytes = Array(repeating: UInt8(ascii: "a"), count: length)
                    bytes.insert(contentsOf: insert, at: position)
                    m.check(bytes)
                    // The same over a non-ASCII (but valid) background, so no ASCII fast path.
                    var wide = Array(String(repeating: "é", count: length / 2 + 1).utf8)
                    wide.insert(contentsOf: insert, at: min(position & ~1, wide.count))
                    m.check(wide)
                }
            }
        }
        // A megabyte with the broken byte last.
        var big = Array(repeating: UInt8(ascii: "x"), count: 1 << 20)
        m.check(big)
        big[big.count - 1] = 0xC3
        m.check(big)
        #expect(m.count == 0)
    }

    /// The span read in place at every offset mod 16 of the buffer (an odd base address).
    @Test func everyAlignment() {
        var m = Mismatches()
        let cases: [[UInt8]] = [
            [], Array("https://example.com/a.jpg".utf8), Array("é€😀\u{0}\u{FFFF}".utf8), [0xF0, 0x90, 0x80, 0x41],
            [0xEF, 0xBF, 0xBD, 0xF0, 0x90, 0x80], Array(repeating: 0x41, count: 40) + [0xC3],
        ]
        for shift in 0..<16 { for bytes in cases { m.check(bytes, shift: shift) } }
        #expect(m.count == 0)
    }

    /// Lengths that do not fit the buffer: UInt32.max, UInt32.max - 3, the buffer's count plus
    /// one. Nil, no trap, and the reader not moved past its end.
    @Test func hugeAndOffByOneLengths() {
        for n in [UInt32.max, UInt32.max - 3, UInt32(Int32.max), UInt32(Int32.max) + 1, 3, 4] {
            var body = withUnsafeBytes(of: n.littleEndian) { Array($0) }
            body += [0x41, 0x42, 0x43]
            body.withUnsafeBytes { raw in
                var reader = ByteReader(raw)
                let text = reader.readString()
                #expect((text == nil) == (n != 3), "\(n)")
                #expect(reader.remaining >= 0)
            }
        }
        // readSpan with a negative or huge count.
        [UInt8](repeating: 0, count: 8).withUnsafeBytes { raw in
            var reader = ByteReader(raw)
            #expect(reader.readSpan(-1) == nil)
            #expect(reader.readSpan(Int.max) == nil)
            #expect(reader.readSpan(9) == nil)
            #expect(reader.readSpan(8)?.count == 8)
            #expect(reader.readSpan(0)?.count == 0)
            #expect(reader.readSpan(1) == nil)
            #expect(reader.readHash() == nil)
        }
    }

    /// An empty buffer without a base address (what an empty `Data` or a zero-count buffer can
    /// hand over): nil everywhere, no force-unwrap of a nil base.
    @Test func emptyBufferWithoutBase() {
        let empty = UnsafeRawBufferPointer(start: nil, count: 0)
        var reader = ByteReader(empty)
        #expect(reader.readString() == nil)
        #expect(reader.readHash() == nil)
        #expect(reader.readSpan(0)?.count == 0)
        #expect(RecordCodec.link(empty, version: 1) == nil)
        #expect(RecordCodec.link(empty, version: 2) == nil)
        #expect(RecordCodec.tombstone(empty) == nil)
        // A zero-length string read from a span that ends exactly at the buffer's end.
        var prefix = ByteReader(UnsafeRawBufferPointer(start: nil, count: 0))
        _ = prefix.readSpan(0)
        [UInt8](repeating: 0, count: 4).withUnsafeBytes { raw in
            var r = ByteReader(raw)
            #expect(r.readString() == "")
            #expect(r.remaining == 0)
            #expect(r.readString() == nil)
        }
    }

    /// Link and tombstone bodies whose every string is each crafted sequence in turn, at every
    /// alignment, in both versions: decoded exactly when the pre-b99492e reader decoded them,
    /// and to the same bytes and hash.
    @Test func linkAndTombstoneBodiesAgreeWithTheReference() {
        let link = LinkRecord(
            url: "https://example.com/a.jpg", variant: "w1",
            blobHash: ContentHash(high: 0x0102_0304_0506_0708, low: 0xF1F2_F3F4_F5F6_F7F8),
            blobLength: 7, blobID: 9, sequence: 11, createdAt: 13, expiresAt: 17, etag: "\"e\"", lastModified: "LM",
            cachePolicy: "max-age=1")
        let sequences: [[UInt8]] = [
            [0xF0, 0x90, 0x80, 0x41], [0xEF, 0xBF, 0xBD], [0xC0, 0x80], [0xED, 0xA0, 0x80], [0x00], [0xEF, 0xBF, 0xBF], [0xFF],
        ]
        for version: UInt8 in [1, 2] {
            let fixed = version == 1 ? PackFormat.Version1.linkFixedSize : PackFormat.Version2.linkFixedSize
            let good = RecordCodec.linkBody(link, version: version)
            for field in 0..<(version == 2 ? 5 : 4) {
                for sequence in sequences {
                    // Rebuild the body with field `field`'s bytes replaced by `sequence`.
                    var strings: [[UInt8]] = [link.url, link.variant, link.etag!, link.lastModified!, link.cachePolicy!].map {
                        Array($0.utf8)
                    }
                    if version == 1 { strings.removeLast() }
                    strings[field] = sequence
                    var body = Array(good[0..<fixed])
                    for s in strings { body += withUnsafeBytes(of: UInt32(s.count).littleEndian) { Array($0) } + s }
                    let valid = strings.allSatisfy { String(validating: $0, as: UTF8.self) != nil }
                    for shift in [0, 1, 3, 7] {
                        let padded = [UInt8](repeating: 0, count: shift) + body
                        let decoded = padded.withUnsafeBytes {
                            RecordCodec.link(UnsafeRawBufferPointer(rebasing: $0[shift...]), version: version)
                        }
                        #expect((decoded != nil) == valid, "v\(version) field \(field) \(sequence) shift \(shift)")
                        if let decoded {
                            #expect(decoded.blobHash == link.blobHash)
                            #expect(RecordCodec.linkBody(decoded, version: version) == body)
                        }
                    }
                }
            }
        }
        for sequence in sequences {
            let tombstone = TombstoneRecord(url: "u", variant: "v", sequence: 1, removedAt: 2)
            var body = Array(RecordCodec.tombstoneBody(tombstone)[0..<16])
            body += withUnsafeBytes(of: UInt32(sequence.count).littleEndian) { Array($0) } + sequence
            body += withUnsafeBytes(of: UInt32(1).littleEndian) { Array($0) } + [0x76]
            let decoded = body.withUnsafeBytes { RecordCodec.tombstone($0) }
            #expect((decoded != nil) == (String(validating: sequence, as: UTF8.self) != nil), "\(sequence)")
            if let decoded { #expect(RecordCodec.tombstoneBody(decoded) == body) }
        }
    }
}
