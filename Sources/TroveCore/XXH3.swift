import CXXHash

/// XXH3 hashing of byte buffers, the one entry point to xxHash.
///
/// Trove uses XXH3-128 to address content (``ContentHash``) and XXH3-64 as the record
/// checksum of pack files (see Docs/PackFormat.md). The code is libxxhash's, compiled twice in
/// the CXXHash module — a baseline build and, on x86-64, an AVX2 build chosen at run time when
/// the CPU has it (``build``). Both give the same hashes.
public enum XXH3 {
    /// The 64-bit XXH3 hash of `bytes`, optionally seeded.
    ///
    /// - Complexity: O(n); about 1.3 µs per 64 KiB with the AVX2 build, 1.7 µs with the baseline
    ///   build (Docs/Benchmarks.md).
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
        return withPartArrays(parts) { trove_xxh3_64_parts($0, $1, parts.count, seed) }
    }

    /// The builds of XXH3 Trove carries; every build gives the same hashes.
    public enum Build: String, Sendable, CaseIterable {
        /// The vector unit the target always has: SSE2 on x86-64, NEON on arm64.
        case baseline
        /// AVX2, x86-64 only; used when the CPU and the kernel support it.
        case avx2
    }

    /// The build the hash functions use on this machine.
    public static var build: Build { Build(rawValue: String(cString: trove_xxh3_implementation())) ?? .baseline }

    /// The builds this machine can run (detected once: the build-specific functions check it on
    /// every call, inside benchmark loops too).
    public static let supportedBuilds: [Build] = trove_xxh3_avx2_supported() == 1 ? [.baseline, .avx2] : [.baseline]

    @usableFromInline
    static func _hash64(_ base: UnsafeRawPointer?, _ count: Int, _ seed: UInt64) -> UInt64 {
        trove_xxh3_64(base, count, seed)
    }

    @usableFromInline
    static func _hash128(_ base: UnsafeRawPointer?, _ count: Int) -> ContentHash {
        let h = trove_xxh3_128(base, count)
        return ContentHash(high: h.high64, low: h.low64)
    }
}

// MARK: - Comparing builds

extension XXH3 {
    /// ``hash64(_:seed:)`` computed by `build`, for tests and benchmarks that compare builds.
    ///
    /// - Precondition: `build` is in ``supportedBuilds``.
    public static func hash64(_ bytes: UnsafeRawBufferPointer, seed: UInt64 = 0, build: Build) -> UInt64 {
        precondition(supportedBuilds.contains(build), "XXH3 build \(build) is not supported here")
        return switch build {
        case .baseline: trove_xxh3_64_baseline(bytes.baseAddress, bytes.count, seed)
        case .avx2: trove_xxh3_64_avx2(bytes.baseAddress, bytes.count, seed)
        }
    }

    /// ``hash128(_:)`` computed by `build`.
    ///
    /// - Precondition: `build` is in ``supportedBuilds``.
    public static func hash128(_ bytes: UnsafeRawBufferPointer, build: Build) -> ContentHash {
        precondition(supportedBuilds.contains(build), "XXH3 build \(build) is not supported here")
        let h =
            switch build {
            case .baseline: trove_xxh3_128_baseline(bytes.baseAddress, bytes.count)
            case .avx2: trove_xxh3_128_avx2(bytes.baseAddress, bytes.count)
            }
        return ContentHash(high: h.high64, low: h.low64)
    }

    /// ``hash64(parts:seed:)`` computed by `build`.
    ///
    /// - Precondition: `build` is in ``supportedBuilds``.
    public static func hash64(parts: [UnsafeRawBufferPointer], seed: UInt64 = 0, build: Build) -> UInt64 {
        precondition(supportedBuilds.contains(build), "XXH3 build \(build) is not supported here")
        return withPartArrays(parts) { bases, lengths in
            switch build {
            case .baseline: trove_xxh3_64_parts_baseline(bases, lengths, parts.count, seed)
            case .avx2: trove_xxh3_64_parts_avx2(bases, lengths, parts.count, seed)
            }
        }
    }

    /// The parts as the C arrays of base addresses and lengths the streaming functions take,
    /// on the stack: a put checksums its record this way, so it should not allocate.
    static func withPartArrays<R>(
        _ parts: [UnsafeRawBufferPointer],
        _ body: (UnsafePointer<UnsafeRawPointer?>?, UnsafePointer<Int>?) -> R
    ) -> R {
        withUnsafeTemporaryAllocation(of: UnsafeRawPointer?.self, capacity: parts.count) { bases in
            withUnsafeTemporaryAllocation(of: Int.self, capacity: parts.count) { lengths in
                for (i, part) in parts.enumerated() {
                    bases.initializeElement(at: i, to: part.baseAddress)
                    lengths.initializeElement(at: i, to: part.count)
                }
                return body(UnsafePointer(bases.baseAddress), UnsafePointer(lengths.baseAddress))
            }
        }
    }
}

// MARK: - Streaming

extension XXH3 {
    /// XXH3-64 of bytes that arrive in pieces: a record checked while it is read from disk in
    /// chunks, so that a large record is never held in memory whole.
    ///
    /// ```swift
    /// var stream = XXH3.Stream64(seed: seed)
    /// stream.update(firstChunk)
    /// stream.update(secondChunk)
    /// let checksum = stream.digest()   // == XXH3.hash64(firstChunk + secondChunk, seed: seed)
    /// ```
    public struct Stream64: ~Copyable {
        private let state: UnsafeMutableRawPointer

        /// Starts a hash with `seed`.
        public init(seed: UInt64 = 0) {
            state = UnsafeMutableRawPointer.allocate(
                byteCount: trove_xxh3_state_size(), alignment: trove_xxh3_state_alignment())
            trove_xxh3_64_stream_reset(state, seed)
        }

        deinit { state.deallocate() }

        /// Adds `bytes` to the hashed input.
        public mutating func update(_ bytes: UnsafeRawBufferPointer) {
            trove_xxh3_64_stream_update(state, bytes.baseAddress, bytes.count)
        }

        /// The hash of everything added so far (more may still be added).
        public func digest() -> UInt64 {
            trove_xxh3_64_stream_digest(state)
        }
    }
}
