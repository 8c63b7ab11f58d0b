import Foundation
import Testing
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore
@testable import TrovePack

/// Outside attack on b99492e (attack26): a link record in a real pack whose URL bytes are
/// rewritten to invalid UTF-8, with its body checksum and header checksum recomputed (what an
/// attacker with the pack file and its segment header can do), and its header's key digest set
/// to the key that the *repaired* text (U+FFFD for the bad sequence) would spell. If the reader
/// ever accepted repaired text, a cold get, a recovery scan or a rebuild of the index would
/// find the entry under that repaired key. Neither key may ever serve the value again.
@Suite struct LinkStringAttackTests {
    static let original = "https://x.example/abcd"
    static let value = Data(testBytes(seed: 26, count: 5_000))

    /// Each replacement is the same length as "abcd", so no later record moves.
    static let replacements: [[UInt8]] = [
        [0xF0, 0x90, 0x80, 0x41],  // a truncated 4-byte sequence: repaired to EF BF BD 41, same length
        [0x61, 0xC3, 0x28, 0x64],  // a lead byte without its continuation
        [0xED, 0xA0, 0x80, 0x64],  // a surrogate
        [0xC0, 0x80, 0x63, 0x64],  // an overlong NUL
    ]

    struct Found {
        var segment: UInt32
        var offset: UInt64
        var length: UInt64
        var format: SegmentFormat
    }

    static func linkRecord(of key: CacheKey, in packs: String) throws -> Found {
        for id in try PackDirectory.segmentIDs(in: packs) {
            let file = try SegmentFile.open(id: id, in: packs, writable: false)
            var found: (UInt64, UInt64)?
            _ = try SegmentScanner.scan(file) {
                if case .link(let l) = $0.content, l.key == key { found = ($0.offset, $0.length) }
            }
            if let found, let header = SegmentFile.header(atPath: PackDirectory.segmentPath(id, in: packs)) {
                return Found(segment: id, offset: found.0, length: found.1, format: header.format)
            }
        }
        throw StoreError(code: .io, message: "no link record for \(key)")
    }

    /// Rewrites the link record's URL tail to `replacement`, its header's digest to `digest`, and
    /// both checksums so that the header and body verify.
    static func rewrite(_ found: Found, packs: String, replacement: [UInt8], digest: ContentHash) throws {
        let path = PackDirectory.segmentPath(found.segment, in: packs)
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.seek(toOffset: found.offset)
        var record = [UInt8](try handle.read(upToCount: Int(found.length)) ?? Data())
        #expect(record.count == Int(found.length))
        let headerSize = PackFormat.Version2.recordHeaderSize
        var body = Array(record[headerSize...])
        let tail = Array("abcd".utf8)
        let urlBytes = Array(original.utf8)
        // The URL's bytes follow its length prefix; find them in the body.
        let start = try #require(
            (0...(body.count - urlBytes.count)).first { Array(body[$0..<$0 + urlBytes.count]) == urlBytes })
        let at = start + urlBytes.count - tail.count
        body.replaceSubrange(at..<at + 4, with: replacement)
        record.replaceSubrange(headerSize..., with: body)
        let bodyChecksum = body.withUnsafeBytes { XXH3.hash64($0, seed: found.format.bodySeed(.link)) }
        withUnsafeBytes(of: bodyChecksum.littleEndian) { record.replaceSubrange(36..<44, with: $0) }
        withUnsafeBytes(of: digest.high.bigEndian) { record.replaceSubrange(20..<28, with: $0) }
        withUnsafeBytes(of: digest.low.bigEndian) { record.replaceSubrange(28..<36, with: $0) }
        let headerChecksum = record[0..<PackFormat.Version2.checksummedHeaderPrefix].withUnsafeBytes {
            XXH3.hash64($0, seed: found.format.positionSeed(segment: found.segment, offset: found.offset))
        }
        withUnsafeBytes(of: headerChecksum.littleEndian) { record.replaceSubrange(44..<52, with: $0) }
        // The header verifies as written at that place.
        let verifies = record.withUnsafeBytes {
            if case .success = RecordCodec.headerV2(
                UnsafeRawBufferPointer(rebasing: $0[0..<headerSize]), format: found.format, segment: found.segment,
                offset: found.offset)
            {
                return true
            }
            return false
        }
        #expect(verifies)
        try handle.seek(toOffset: found.offset)
        try handle.write(contentsOf: record)
    }

    static func repairedKey(_ replacement: [UInt8]) -> CacheKey {
        var bytes = Array(original.utf8)
        bytes.replaceSubrange(bytes.count - 4..<bytes.count, with: replacement)
        return CacheKey(url: String(decoding: bytes, as: UTF8.self))
    }

    /// Cold gets through the index's row (places and SQLite), then a rebuild of the index from
    /// the packs, then fsck: no key serves the value, and the damage is seen.
    @Test(arguments: 0..<4)
    func invalidUTF8LinkIsNeverServed(replacementIndex: Int) async throws {
        let replacement = Self.replacements[replacementIndex]
        let key = CacheKey(url: Self.original)
        let repaired = Self.repairedKey(replacement)
        try await withTemporaryDirectory { dir in
            try await offPool {
                do {
                    let store = try openStore(dir) { $0.compactionInterval = nil }
                    try store.put(Self.value, for: key)
                    try store.put(Data(testBytes(seed: 1, count: 700)), for: CacheKey(url: "https://x.example/other"))
                    try store.close()
                }
                let packs = dir + "/store/packs"
                let found = try Self.linkRecord(of: key, in: packs)
                try Self.rewrite(found, packs: packs, replacement: replacement, digest: repaired.digest)
                // The body no longer decodes, at the pack level.
                let file = try SegmentFile.open(id: found.segment, in: packs, writable: false)
                var decodedKeys: [CacheKey] = []
                _ = try SegmentScanner.scan(file) { if case .link(let l) = $0.content { decodedKeys.append(l.key) } }
                #expect(!decodedKeys.contains(repaired), "a scan decoded the repaired key")
                #expect(!decodedKeys.contains(key))

                // Cold gets: the index still names the record for `key`.
                do {
                    let store = try openStore(dir) { $0.compactionInterval = nil }
                    let served = try? store.data(for: key)
                    #expect(served.flatMap { $0 } == nil, "the damaged link's value served for its key")
                    #expect((try? store.data(for: repaired)).flatMap { $0 } == nil, "served for the repaired key")
                    let report = try store.fsck()
                    #expect(!report.isClean, "fsck did not see the damaged link")
                    try store.close()
                }
                // A rebuild of the index from the packs.
                _ = try Store.rebuildIndex(directory: dir + "/store", configuration: Store.Configuration())
                let store = try openStore(dir) { $0.compactionInterval = nil }
                #expect((try? store.data(for: key)).flatMap { $0 } == nil, "rebuilt index serves the damaged key")
                #expect((try? store.data(for: repaired)).flatMap { $0 } == nil, "rebuilt index serves the repaired key")
                #expect(try store.keys(url: repaired.url).isEmpty)
                #expect(try store.data(for: CacheKey(url: "https://x.example/other")) == Data(testBytes(seed: 1, count: 700)))
                try store.close()
            }
        }
    }
}
