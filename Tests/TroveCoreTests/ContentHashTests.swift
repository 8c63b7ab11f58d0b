import Testing
import TroveCore
import TroveTestSupport

@Suite struct ContentHashTests {
    @Test func knownVectors() {
        // Reference values of XXH3 (xxHash 0.8 specification test vectors for empty input).
        let empty = [UInt8]().withUnsafeBytes { XXH3.hash128($0) }
        #expect(empty.description == "99aa06d3014798d86001c324468d497f")
        #expect([UInt8]().withUnsafeBytes { XXH3.hash64($0) } == 0x2D06_8005_38D3_94C2)
    }

    @Test func bytesRoundTrip() throws {
        let hash = ContentHash(hashing: testBytes(seed: 7, count: 1000))
        #expect(hash.bytes.count == 16)
        #expect(ContentHash(bytes: hash.bytes) == hash)
        #expect(ContentHash(bytes: [1, 2, 3]) == nil)
        #expect(hash.description.count == 32)
    }

    @Test func differentBytesDifferentHashes() {
        var seen = Set<ContentHash>()
        for seed in 0..<1000 { seen.insert(ContentHash(hashing: testBytes(seed: UInt64(seed), count: 64))) }
        #expect(seen.count == 1000)
    }

    @Test(arguments: [[0], [5, 0, 7], [1, 1000, 3, 65536], [0, 0, 0]])
    func streamingEqualsOneShot(partSizes: [Int]) {
        let parts = partSizes.enumerated().map { testBytes(seed: UInt64($0.offset), count: $0.element) }
        let joined = parts.flatMap { $0 }
        let oneShot = joined.withUnsafeBytes { XXH3.hash64($0, seed: 42) }
        func streamed(_ index: Int, _ buffers: [UnsafeRawBufferPointer]) -> UInt64 {
            if index == parts.count { return XXH3.hash64(parts: buffers, seed: 42) }
            return parts[index].withUnsafeBytes { streamed(index + 1, buffers + [$0]) }
        }
        #expect(streamed(0, []) == oneShot)
    }
}

@Suite struct CacheKeyTests {
    @Test func digestSeparatesURLAndVariant() {
        #expect(CacheKey(url: "a", variant: "bc").digest != CacheKey(url: "ab", variant: "c").digest)
        #expect(CacheKey(url: "a").digest == CacheKey(url: "a", variant: "").digest)
        #expect(CacheKey(url: "a", variant: "v").urlDigest == CacheKey(url: "a").urlDigest)
    }

    /// The digest is XXH3-128 of the URL, a 0x00 byte and the variant (joined without an array
    /// now): the same value as hashing the joined bytes, for short, long and non-ASCII keys.
    @Test func digestIsTheHashOfTheJoinedBytes() {
        let texts = ["", "a", "https://example.com/a.jpg?x=1", "é/日本語", "\u{1F600}", String(repeating: "long/", count: 4_000)]
        for url in texts {
            for variant in texts {
                let key = CacheKey(url: url, variant: variant)
                let joined = Array(url.utf8) + [0] + Array(variant.utf8)
                #expect(key.digest == ContentHash(hashing: joined), "\(url.prefix(20)) [\(variant.prefix(20))]")
                #expect(key.urlDigest == Int64(bitPattern: Array(url.utf8).withUnsafeBytes { XXH3.hash64($0) }))
            }
        }
        // A string made from a slice of another is hashed by its own bytes.
        let long = "https://example.com/" + String(repeating: "p", count: 100)
        let sliced = String(long.dropFirst(8))
        #expect(CacheKey(url: sliced).digest == ContentHash(hashing: Array(sliced.utf8) + [0]))
    }

    /// Equality, hashing and order are the UTF-8 bytes', like the digest: canonically
    /// equivalent spellings are different keys (Swift's `String` would call them equal).
    @Test func keysAreTheirBytes() {
        let composed = CacheKey(url: "https://x/caf\u{E9}")
        let decomposed = CacheKey(url: "https://x/cafe\u{301}")
        #expect(composed.url == decomposed.url, "String equality is canonical equivalence")
        #expect(composed != decomposed)
        #expect(Set([composed, decomposed]).count == 2)
        #expect((composed < decomposed) != (decomposed < composed), "a strict order between them")
        #expect(CacheKey(url: "a", variant: "b") != CacheKey(url: "ab"))
        #expect(Set([CacheKey(url: "a", variant: "bc"), CacheKey(url: "ab", variant: "c")]).count == 2)
        #expect(CacheKey(url: "https://x/y", variant: "v") == CacheKey(url: String("xhttps://x/y".dropFirst()), variant: "v"))
        // Byte order: U+00E9 (C3 A9) sorts after "e" + U+0301 (65 CC 81).
        #expect(decomposed < composed)
        #expect(
            [CacheKey(url: "b"), CacheKey(url: "a", variant: "z"), CacheKey(url: "a")].sorted().map(\.description) == [
                "a", "a [z]", "b",
            ])
        #expect("".hasSameUTF8(as: ""))
        #expect(!"caf\u{E9}".hasSameUTF8(as: "cafe\u{301}"))
    }

    @Test func description() {
        #expect(CacheKey(url: "https://x/y").description == "https://x/y")
        #expect(CacheKey(url: "https://x/y", variant: "w256").description == "https://x/y [w256]")
    }
}

@Suite struct ByteCountTests {
    @Test(arguments: [
        (0, "0 B"), (1023, "1023 B"), (1024, "1.00 KiB"), (1536, "1.50 KiB"), (64 << 20, "64.0 MiB"),
        (3 << 30, "3.00 GiB"),
    ])
    func formats(value: Int, text: String) {
        #expect(ByteCount(value).description == text)
    }

    @Test(arguments: [
        ("1048576", 1_048_576), ("64K", 65536), ("64KiB", 65536), ("1.5M", 1_572_864), ("2GiB", 2 << 30),
        (" 10 MB ", 10 << 20),
    ])
    func parses(text: String, value: Int64) {
        #expect(ByteCount(parsing: text)?.value == value)
    }

    @Test(arguments: ["", "abc", "-5", "10XB", "1e30G"])
    func rejects(text: String) {
        #expect(ByteCount(parsing: text) == nil)
    }
}
