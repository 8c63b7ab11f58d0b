import Foundation
import Testing
import TroveCore
import TroveTestSupport

#if canImport(Glibc)
    import Glibc
#endif

@testable import TrovePack

// MARK: An independent encoder (the code before 6a2e172, restated)

func le(_ v: UInt64, _ width: Int) -> [UInt8] { (0..<width).map { UInt8(truncatingIfNeeded: v >> (8 * UInt64($0))) } }
func be(_ v: UInt64) -> [UInt8] { (0..<8).reversed().map { UInt8(truncatingIfNeeded: v >> (8 * UInt64($0))) } }
func string(_ s: String) -> [UInt8] { le(UInt64(s.utf8.count), 4) + Array(s.utf8) }

func referenceLinkBody(_ link: LinkRecord) -> [UInt8] {
    var flags: UInt64 = 0
    if link.expiresAt != nil { flags |= 1 }
    if link.etag != nil { flags |= 2 }
    if link.lastModified != nil { flags |= 4 }
    if link.cachePolicy != nil { flags |= 8 }
    var b: [UInt8] = le(link.blobID, 8)
    b += be(link.blobHash.high)
    b += be(link.blobHash.low)
    b += le(link.blobLength, 8)
    b += le(flags, 4)
    b += le(link.sequence, 8)
    b += le(UInt64(bitPattern: link.createdAt), 8)
    b += le(UInt64(bitPattern: link.expiresAt ?? 0), 8)
    b += string(link.url)
    b += string(link.variant)
    b += string(link.etag ?? "")
    b += string(link.lastModified ?? "")
    if let policy = link.cachePolicy { b += string(policy) }
    return b
}

func referenceTombstoneBody(_ t: TombstoneRecord) -> [UInt8] {
    le(t.sequence, 8) + le(UInt64(bitPattern: t.removedAt), 8) + string(t.url) + string(t.variant)
}

func referenceRecord(
    _ type: RecordType, sequence: UInt64, digest: ContentHash, body: [UInt8], format: SegmentFormat, segment: UInt32,
    offset: UInt64
) -> [UInt8] {
    let bodyChecksum = body.withUnsafeBytes { XXH3.hash64($0, seed: format.bodySeed(type)) }
    var h: [UInt8] = le(UInt64(PackFormat.recordMagic), 4)
    h += [type.rawValue, 2]
    h += le(0, 2)
    h += le(UInt64(body.count), 4)
    h += le(sequence, 8)
    h += be(digest.high)
    h += be(digest.low)
    h += le(bodyChecksum, 8)
    precondition(h.count == 44)
    let checksum = h.withUnsafeBytes { XXH3.hash64($0, seed: format.positionSeed(segment: segment, offset: offset)) }
    return h + le(checksum, 8) + body
}

// MARK: Texts that stress the encoding

let scratchTexts: [String] = [
    "", "a", "é", "e\u{301}", "日本語のURL", "🙂🧑‍🧑‍🧒", "\u{0}", "a\u{0}b", "\u{FEFF}bom", "\u{10FFFF}",
    String(repeating: "x", count: 300), String(repeating: "ü", count: 40_000),  // 80 000 bytes
    String(repeating: "🙂", count: 17_000),  // 68 000 bytes: past a 16-bit length
    String(decoding: Array("http://nsstring/é".utf8), as: UTF8.self),
    NSString(string: "https://foundation.example/ß/ø").description,
    String(format: "%@/%d/%@", "https://fmt.example", 42, "ñ"),
    String(data: "utf16 → text ✓".data(using: .utf16)!, encoding: .utf16)!,
    "https://e/" + String(repeating: "long/", count: 2_000),
]

func randomText(_ g: inout SeededGenerator) -> String {
    scratchTexts[Int(g.next() % UInt64(scratchTexts.count))]
}

func randomOptional(_ g: inout SeededGenerator) -> String? {
    g.next() % 3 == 0 ? nil : randomText(&g)
}

func randomLink(_ g: inout SeededGenerator, sequence: UInt64, blobID: UInt64, hash: ContentHash, length: UInt64)
    -> LinkRecord
{
    LinkRecord(
        url: randomText(&g), variant: randomText(&g), blobHash: hash, blobLength: length, blobID: blobID,
        sequence: sequence, createdAt: Int64(bitPattern: g.next()),
        expiresAt: g.next() % 2 == 0 ? nil : Int64(bitPattern: g.next()),
        etag: randomOptional(&g), lastModified: randomOptional(&g), cachePolicy: randomOptional(&g))
}

/// Outside attack on the writer's scratch buffer (6a2e172): every byte the writer puts in a
/// segment is compared with an encoder written here from the format (the pre-6a2e172 code, field
/// by field), not with `RecordCodec.header`, which now shares `writeHeader` with the writer.
@Suite struct WriterScratchAttackTests {
    /// Drives a writer with a random mix of every kind of append (put, link alone, blob alone,
    /// tombstone, a compaction move of an earlier link), long records before short ones and the
    /// reverse; `expected` mirrors each segment's bytes from the reference encoder. Returns the
    /// offsets of the links written (for moves).
    final class Driver {
        var g: SeededGenerator
        let dir: String
        var writer: PackWriter
        var expected: [UInt32: [UInt8]] = [:]
        var links: [(segment: UInt32, offset: UInt64, length: UInt64)] = []
        var sequence: UInt64 = 1
        var failures = 0
        var successes = 0

        init(seed: UInt64, dir: String, writer: PackWriter) throws {
            g = SeededGenerator(seed: seed)
            self.dir = dir
            self.writer = writer
            expected[writer.segment.id] = try [UInt8](Data(contentsOf: URL(fileURLWithPath: writer.segment.path)))
        }

        var format: SegmentFormat { writer.segment.format }
        var segment: UInt32 { writer.segment.id }

        func record(_ type: RecordType, _ seq: UInt64, _ digest: ContentHash, _ body: [UInt8], at offset: UInt64) -> [UInt8] {
            referenceRecord(type, sequence: seq, digest: digest, body: body, format: format, segment: segment, offset: offset)
        }

        /// One random append; an injected failure leaves `expected` as it was.
        func step() throws {
            let start = writer.end
            #expect(UInt64(expected[segment]!.count) == start)
            let payload = testBytes(seed: g.next(), count: [0, 1, 51, 52, 53, 700, 70_000][Int(g.next() % 7)])
            let hash = ContentHash(hashing: payload)
            let blobID = sequence
            sequence += 1
            let seq = sequence
            sequence += 1
            let link = randomLink(&g, sequence: seq, blobID: blobID, hash: hash, length: UInt64(payload.count))
            var bytes: [UInt8] = []
            var newLink: UInt64?
            do {
                switch g.next() % 6 {
                case 0, 1:
                    let (b, l) = try payload.withUnsafeBytes {
                        try writer.appendBlob(hash: hash, id: blobID, payload: $0, thenLink: link, digest: link.key.digest)
                    }
                    #expect(b == start)
                    bytes = record(.blob, blobID, hash, payload, at: b)
                    #expect(l == start + UInt64(bytes.count))
                    bytes += record(.link, seq, link.key.digest, referenceLinkBody(link), at: l)
                    newLink = l
                case 2:
                    let giveDigest = g.next() % 2 == 0
                    let o = try writer.appendLink(link, digest: giveDigest ? link.key.digest : nil)
                    bytes = record(.link, seq, link.key.digest, referenceLinkBody(link), at: o)
                    newLink = o
                case 3:
                    let o = try payload.withUnsafeBytes { try writer.appendBlob(hash: hash, id: blobID, payload: $0) }
                    bytes = record(.blob, blobID, hash, payload, at: o)
                case 4:
                    let t = TombstoneRecord(url: link.url, variant: link.variant, sequence: seq, removedAt: link.createdAt)
                    let o = try writer.appendTombstone(t)
                    bytes = record(.tombstone, seq, t.key.digest, referenceTombstoneBody(t), at: o)
                default:
                    // A compaction move of an earlier link (possibly from an older segment).
                    guard let old = links.isEmpty ? nil : links[Int(g.next() % UInt64(links.count))] else { return }
                    let file =
                        old.segment == segment ? writer.segment : try SegmentFile.open(id: old.segment, in: dir, writable: false)
                    let movable = try file.readMovable(at: old.offset, limit: old.offset + old.length)
                    let o = try writer.append(movable)
                    bytes = record(movable.identity.type, movable.identity.sequence, movable.identity.digest, movable.body, at: o)
                    newLink = o
                }
            } catch let error as PackError {
                #expect(error.code == .io, "\(error)")
                #expect(writer.end == start, "a failed write moved the end")
                failures += 1
                return
            }
            successes += 1
            expected[segment]! += bytes
            #expect(writer.end == UInt64(expected[segment]!.count))
            if let newLink { links.append((segment, newLink, writer.end - newLink)) }
        }

        /// Seals the segment (cutting whatever a failed write left past the end) and goes on in a
        /// new one.
        func rotate() throws {
            try writer.finishSegment()
            let next = segment + 1
            let file = try SegmentFile.create(
                id: next, in: dir, createdAt: 1, format: format, synchronize: false, faults: writer.segment.faults)
            writer.rotate(to: file)
            expected[next] = try [UInt8](Data(contentsOf: URL(fileURLWithPath: file.path)))
        }

        /// Every segment's file against the reference bytes, and every record read back verified.
        func check() throws {
            try writer.finishSegment()
            for (id, bytes) in expected.sorted(by: { $0.key < $1.key }) {
                let path = dir + "/" + PackFormat.fileName(forSegment: id)
                let written = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
                #expect(written.count == bytes.count, "segment \(id)")
                if written != bytes {
                    let first =
                        (0..<min(written.count, bytes.count)).first { written[$0] != bytes[$0] }
                        ?? min(written.count, bytes.count)
                    Issue.record("segment \(id): first differing byte at \(first) of \(bytes.count)")
                }
            }
            for link in links {
                let file = try SegmentFile.open(id: link.segment, in: dir, writable: false)
                let read = try file.readRecord(at: link.offset, limit: link.offset + link.length)
                guard case .link = read.record.content else {
                    Issue.record("no link at \(link)")
                    continue
                }
            }
        }
    }

    @Test(arguments: [1, 2, 3, 4, 5] as [UInt64])
    func randomMixesOfAppendsAreTheReferenceBytes(seed: UInt64) async throws {
        try await withTemporaryDirectory { dir in
            let driver = try Driver(seed: seed, dir: dir, writer: makeWriter(dir))
            for _ in 0..<300 { try driver.step() }
            try driver.check()
            #expect(driver.successes > 250)
        }
    }

    /// Rotation every few appends: the scratch carries a long record's bytes from one segment to
    /// the next, where the header names another segment and offset.
    @Test(arguments: [11, 12, 13] as [UInt64])
    func appendsAcrossRotationsAreTheReferenceBytes(seed: UInt64) async throws {
        try await withTemporaryDirectory { dir in
            let driver = try Driver(seed: seed, dir: dir, writer: makeWriter(dir, limit: 64 << 10))
            for i in 0..<300 {
                if driver.writer.needsRotation(forAppending: 4096) || i % 37 == 36 { try driver.rotate() }
                try driver.step()
            }
            try driver.check()
            #expect(driver.expected.count > 5)
        }
    }

    /// pwrite failures (errors, and short writes of every size through the headers, payload and
    /// link body) between appends: the next record overwrites what a failed one left, and its
    /// bytes are the reference's, never mixed with the failed record's.
    @Test(arguments: [21, 22, 23, 24] as [UInt64])
    func failedAndShortWritesLeaveNoStaleBytes(seed: UInt64) async throws {
        try await withTemporaryDirectory { dir in
            let writes = Locked(SeededGenerator(seed: seed &* 977))
            let armed = Locked(false)
            let faults = FaultInjector { operation, _ in
                guard operation == .write, armed.withLock({ $0 }) else { return nil }
                return writes.withLock { g -> FaultInjector.Fault? in
                    switch g.next() % 5 {
                    case 0: return .error(ENOSPC)
                    case 1: return .shortWrite(Int(g.next() % 200), EIO)
                    case 2: return .shortWrite(Int(g.next() % 80_000), ENOSPC)
                    default: return nil
                    }
                }
            }
            let driver = try Driver(seed: seed, dir: dir, writer: makeWriter(dir, limit: 256 << 10, faults: faults))
            armed.withLock { $0 = true }
            for i in 0..<400 {
                if driver.writer.needsRotation(forAppending: 4096) || i % 53 == 52 {
                    do { try driver.rotate() } catch let error as PackError { #expect(error.code == .io) }
                }
                try driver.step()
            }
            armed.withLock { $0 = false }
            try driver.check()
            #expect(driver.failures > 50)
            #expect(driver.successes > 100)
        }
    }

    /// `RecordCodec.header` (rewritten over `writeHeader`) against the reference, for extreme
    /// identities and offsets.
    @Test func headersAreTheReferenceBytesForExtremeFields() {
        let format = SegmentFormat.version2(secret: testSecret)
        var g = SeededGenerator(seed: 99)
        for i in 0..<2_000 {
            let type: RecordType = [.blob, .link, .tombstone][i % 3]
            let sequence = [0, 1, UInt64.max, UInt64(1) << 62, g.next()][i % 5]
            let digest = ContentHash(high: i % 7 == 0 ? 0 : g.next(), low: i % 11 == 0 ? .max : g.next())
            let bodyLength = [0, 1, 52, Int(UInt32.max), Int(PackFormat.maximumBodyLength), Int(g.next() % 1_000_000)][i % 6]
            let checksum = g.next()
            let segment = [0, 1, UInt32.max, UInt32(truncatingIfNeeded: g.next())][i % 4]
            let offset = [0, 52, UInt64(1) << 48, g.next() >> 1][i % 4]
            let header = RecordCodec.header(
                identity: RecordIdentity(type: type, sequence: sequence, digest: digest), bodyLength: bodyLength,
                bodyChecksum: checksum, format: format, segment: segment, offset: offset)
            var h: [UInt8] = le(UInt64(PackFormat.recordMagic), 4)
            h += [type.rawValue, 2]
            h += le(0, 2)
            h += le(UInt64(bodyLength), 4)
            h += le(sequence, 8)
            h += be(digest.high)
            h += be(digest.low)
            h += le(checksum, 8)
            let c = h.withUnsafeBytes { XXH3.hash64($0, seed: format.positionSeed(segment: segment, offset: offset)) }
            #expect(header == h + le(c, 8), "case \(i)")
        }
    }

    /// The writer's link body is `RecordCodec.linkBody`'s and the reference's for the texts
    /// above, in every combination of present and absent fields; and decodes back to the link.
    @Test func linkBodiesMatchTheReferenceAndRoundTrip() {
        var g = SeededGenerator(seed: 5)
        for i in 0..<3_000 {
            let link = randomLink(
                &g, sequence: g.next(), blobID: g.next(), hash: ContentHash(high: g.next(), low: g.next()),
                length: g.next())
            let body = RecordCodec.linkBody(link)
            #expect(body == referenceLinkBody(link), "case \(i)")
            #expect(body.count == RecordCodec.linkBodyLength(link), "case \(i)")
            #expect(body.withUnsafeBytes { RecordCodec.link($0) } == link, "case \(i)")
        }
    }
}
