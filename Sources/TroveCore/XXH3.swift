import CXXHash

/// XXH3 hashing of byte buffers, the one entry point to libxxhash.
///
/// Trove uses XXH3-128 to address content (``ContentHash``) and XXH3-64 as the record
/// checksum of pack files (see Docs/PackFormat.md).
public enum XXH3 {
    /// The 64-bit XXH3 hash of `bytes`, optionally seeded.
    ///
    /// - Complexity: O(n); about 4.6 µs per 64 KiB with Debian's SSE2 build of libxxhash.
    @inlinable
    public static func hash64(_ bytes: UnsafeRawBufferPointer, seed: UInt64 = 0) -> UInt64 {
        _hash64(bytes.baseAddress, bytes.count, seed)
    }

    /// The 128-bit XXH3 hash of `bytes`.
    @inlinable
    public static func hash128(_ bytes: UnsafeRawBufferPointer) -> ContentHash {
        _hash128(bytes.baseAddress, bytes.count)
    }

    /// The 64-bit XXH3 hash of the concatenation of `parts`, without joining them.
    ///
    /// Equal to ``hash64(_:seed:)`` of the joined bytes.
    public static func hash64(parts: [UnsafeRawBufferPointer], seed: UInt64 = 0) -> UInt64 {
        if parts.count == 1 { return hash64(parts[0], seed: seed) }
        // The streaming state is 576 bytes with 64-byte alignment, which only XXH3_createState
        // guarantees; one allocation per call is negligible next to hashing a payload.
        guard let state = XXH3_createState() else {
            // No memory for the state: hash a joined copy instead (same result, one copy).
            var joined = [UInt8]()
            for part in parts { joined.append(contentsOf: part) }
            return joined.withUnsafeBytes { hash64($0, seed: seed) }
        }
        defer { XXH3_freeState(state) }
        XXH3_64bits_reset_withSeed(state, seed)
        for part in parts where part.count > 0 {
            XXH3_64bits_update(state, part.baseAddress, part.count)
        }
        return XXH3_64bits_digest(state)
    }

    @usableFromInline
    static func _hash64(_ base: UnsafeRawPointer?, _ count: Int, _ seed: UInt64) -> UInt64 {
        XXH3_64bits_withSeed(base, count, seed)
    }

    @usableFromInline
    static func _hash128(_ base: UnsafeRawPointer?, _ count: Int) -> ContentHash {
        let h = XXH3_128bits(base, count)
        return ContentHash(high: h.high64, low: h.low64)
    }
}
