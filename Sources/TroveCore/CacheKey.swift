#if canImport(Glibc)
    import Glibc
#endif

/// The key of a store entry: a URL and a variant.
///
/// The URL names the origin resource; the variant names one rendition of it in canonical
/// text (empty for the original bytes, `"w256-h256-fit-webp-q80"`-style for a downsampled
/// variant). Every variant of a URL can be listed and removed together.
///
/// Keys are data, never paths: nothing in a key reaches the file system.
///
/// Keys are compared, hashed and ordered by their UTF-8 bytes, like their ``digest``, the index
/// and the pack records — not by Swift's `String` equality, which treats canonically equivalent
/// spellings as equal ("é" as one scalar, U+00E9, and as "e" followed by U+0301). Such spellings
/// are different keys, as they are different URLs on the wire; a key that equalled another
/// whose digest differs would let the store's in-memory map and its index disagree about which
/// entry a key names (found by an outside attack: one key, two entries, and a removed value
/// served again).
public struct CacheKey: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The resource's URL, exactly as given.
    public var url: String
    /// The canonical text of the variant; empty for the original.
    public var variant: String

    /// Makes a key for `url`'s `variant` (the original when `variant` is empty).
    public init(url: String, variant: String = "") {
        self.url = url
        self.variant = variant
    }

    /// The key's 128-bit digest, by which the index finds the entry (unique among entries).
    ///
    /// It is XXH3-128 over the UTF-8 of the URL, one 0x00 byte, and the UTF-8 of the variant.
    /// Different keys can collide on purpose; the index stores the key itself and compares it.
    public var digest: ContentHash {
        // Joined in a temporary buffer (on the stack for the usual short key), not an array.
        let urlCount = url.utf8.count
        let count = urlCount + 1 + variant.utf8.count
        return withUnsafeTemporaryAllocation(byteCount: count, alignment: 1) { buffer in
            UnsafeMutableRawBufferPointer(rebasing: buffer[..<urlCount]).copyBytes(from: url.utf8)
            buffer[urlCount] = 0
            UnsafeMutableRawBufferPointer(rebasing: buffer[(urlCount + 1)...]).copyBytes(from: variant.utf8)
            return XXH3.hash128(UnsafeRawBufferPointer(buffer))
        }
    }

    /// The 64-bit XXH3 hash of the URL alone, which indexes all variants of a URL.
    public var urlDigest: Int64 {
        Self.urlDigest(url)
    }

    /// The 64-bit XXH3 hash of `url`, as stored by the index (a signed SQLite integer).
    public static func urlDigest(_ url: String) -> Int64 {
        var url = url
        return Int64(bitPattern: url.withUTF8 { XXH3.hash64(UnsafeRawBufferPointer($0)) })
    }

    /// The URL, then the variant in brackets when there is one.
    public var description: String {
        variant.isEmpty ? url : "\(url) [\(variant)]"
    }

    /// Whether the keys' URLs and variants have the same UTF-8 bytes.
    public static func == (a: CacheKey, b: CacheKey) -> Bool {
        a.url.hasSameUTF8(as: b.url) && a.variant.hasSameUTF8(as: b.variant)
    }

    /// Hashes the URL and the variant as strings: keys with equal bytes are equal strings, so
    /// their hashes agree (canonically equivalent spellings share a hash and differ by `==`).
    public func hash(into hasher: inout Hasher) {
        hasher.combine(url)
        hasher.combine(variant)
    }

    /// By the URL's UTF-8 bytes, then the variant's (consistent with `==`).
    public static func < (a: CacheKey, b: CacheKey) -> Bool {
        if !a.url.hasSameUTF8(as: b.url) { return a.url.utf8.lexicographicallyPrecedes(b.url.utf8) }
        return a.variant.utf8.lexicographicallyPrecedes(b.variant.utf8)
    }
}
