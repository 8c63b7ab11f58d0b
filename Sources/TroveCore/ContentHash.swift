/// The XXH3-128 hash of a blob's bytes: the address of content in a store.
///
/// A hash alone never proves that two blobs are equal: the store compares bytes before it
/// lets two keys share a blob (Docs/Architecture.md, invariant 4).
public struct ContentHash: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The high 64 bits of the hash.
    public var high: UInt64
    /// The low 64 bits of the hash.
    public var low: UInt64

    /// Makes a hash from its two halves.
    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// Hashes `bytes`.
    public init(hashing bytes: UnsafeRawBufferPointer) {
        self = XXH3.hash128(bytes)
    }

    /// Hashes the bytes of an array.
    public init(hashing bytes: [UInt8]) {
        self = bytes.withUnsafeBytes { XXH3.hash128($0) }
    }

    /// The 16 bytes of the hash, big-endian (the order of its hexadecimal form).
    public var bytes: [UInt8] {
        var out = [UInt8](repeating: 0, count: 16)
        for i in 0..<8 {
            out[i] = UInt8(truncatingIfNeeded: high >> (56 - 8 * UInt64(i)))
            out[8 + i] = UInt8(truncatingIfNeeded: low >> (56 - 8 * UInt64(i)))
        }
        return out
    }

    /// Makes a hash from 16 big-endian bytes; nil when `bytes` is not 16 bytes long.
    ///
    /// The buffer and array forms are what index rows and record headers use: concrete, so no
    /// generic dispatch on a read path.
    public init?(bytes: UnsafeRawBufferPointer) {
        guard bytes.count == 16 else { return nil }
        var high: UInt64 = 0
        var low: UInt64 = 0
        for i in 0..<8 {
            high = high << 8 | UInt64(bytes[i])
            low = low << 8 | UInt64(bytes[8 + i])
        }
        self.init(high: high, low: low)
    }

    /// Makes a hash from 16 big-endian bytes; nil when `bytes` is not 16 bytes long.
    public init?(bytes: [UInt8]) {
        guard let hash = bytes.withUnsafeBytes({ ContentHash(bytes: $0) }) else { return nil }
        self = hash
    }

    /// Makes a hash from 16 big-endian bytes; nil when `bytes` is not 16 bytes long.
    public init?(bytes: some Collection<UInt8>) {
        guard bytes.count == 16 else { return nil }
        var high: UInt64 = 0
        var low: UInt64 = 0
        for (i, b) in bytes.enumerated() {
            if i < 8 { high = high << 8 | UInt64(b) } else { low = low << 8 | UInt64(b) }
        }
        self.init(high: high, low: low)
    }

    /// 32 lowercase hexadecimal digits.
    public var description: String {
        func hex(_ v: UInt64) -> String {
            let s = String(v, radix: 16)
            return String(repeating: "0", count: 16 - s.count) + s
        }
        return hex(high) + hex(low)
    }

    public static func < (a: ContentHash, b: ContentHash) -> Bool {
        (a.high, a.low) < (b.high, b.low)
    }
}
