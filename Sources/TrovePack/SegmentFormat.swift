import TroveCore

/// A store's secret: 16 random bytes kept in every version-2 segment header, mixed into every
/// record checksum's seed.
///
/// Bytes that a client stores (an image from the network) can never verify as a record of the
/// store: forging one would take the secret, which never leaves the store directory. It is not
/// a cryptographic key — XXH3 is not a MAC — and it does not protect against someone who can
/// read the store's files (Docs/PackFormat.md, "Binding").
public struct PackSecret: Hashable, Sendable, CustomStringConvertible {
    /// The first 8 bytes, little-endian.
    public var first: UInt64
    /// The last 8 bytes, little-endian.
    public var second: UInt64

    /// Makes a secret from its two halves.
    public init(first: UInt64, second: UInt64) {
        self.first = first
        self.second = second
    }

    /// A new random secret from the system's generator (getrandom).
    public static func random() -> PackSecret {
        var generator = SystemRandomNumberGenerator()
        return PackSecret(first: generator.next(), second: generator.next())
    }

    /// The 16 bytes as stored.
    public var bytes: [UInt8] {
        var w = ByteWriter(capacity: 16)
        w.append(first)
        w.append(second)
        return w.bytes
    }

    /// Only a fingerprint, never the secret itself, goes into messages.
    public var description: String {
        let fingerprint = bytes.withUnsafeBytes { XXH3.hash64($0) } >> 40
        return "secret #" + String(fingerprint, radix: 16)
    }
}

/// The version of one segment and, for version 2, the seeds its records are checksummed with.
///
/// Every record of a segment has the segment header's version. A version-2 record's header
/// checksum is seeded with ``positionSeed(segment:offset:)`` — a hash of the store secret, the
/// segment id and the record's offset — so a record verifies only at the place it was written,
/// in the store that wrote it. Its body checksum is seeded with ``bodySeed(_:)``, a hash of the
/// secret and the record type, so a body verifies only as the type it was written as.
public struct SegmentFormat: Sendable, Hashable {
    /// 1 or 2.
    public let version: UInt8
    /// The store secret (version 2 only).
    public let secret: PackSecret?
    private let bodySeeds: [UInt64]
    private let secretBytes: [UInt8]

    /// Version 1: no secret, no binding.
    public static let version1 = SegmentFormat(version: 1, secret: nil)

    /// Version 2 with `secret`.
    public static func version2(secret: PackSecret) -> SegmentFormat {
        SegmentFormat(version: 2, secret: secret)
    }

    private init(version: UInt8, secret: PackSecret?) {
        self.version = version
        self.secret = secret
        let secretBytes = secret?.bytes ?? []
        self.secretBytes = secretBytes
        self.bodySeeds = RecordType.allCases.map { type in
            (secretBytes + [type.rawValue]).withUnsafeBytes { XXH3.hash64($0, seed: 0x5452_5642) }  // "TRVB"
        }
    }

    /// The size of the segment header.
    public var headerSize: Int {
        version == 1 ? PackFormat.Version1.segmentHeaderSize : PackFormat.Version2.segmentHeaderSize
    }

    /// The size of a record header.
    public var recordHeaderSize: Int {
        version == 1 ? PackFormat.Version1.recordHeaderSize : PackFormat.Version2.recordHeaderSize
    }

    /// The total length of a blob record holding `payloadLength` bytes.
    public func blobRecordLength(payloadLength: UInt64) -> UInt64 {
        UInt64(recordHeaderSize) + payloadLength + (version == 1 ? UInt64(PackFormat.Version1.blobPrefixSize) : 0)
    }

    /// The seed of a version-2 body checksum of a record of `type`.
    public func bodySeed(_ type: RecordType) -> UInt64 {
        bodySeeds[Int(type.rawValue) - 1]
    }

    /// The seed of the header checksum of a version-2 record at `offset` of segment `segment`.
    public func positionSeed(segment: UInt32, offset: UInt64) -> UInt64 {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 28) { buffer in
            for i in 0..<16 { buffer[i] = secretBytes[i] }
            for i in 0..<4 { buffer[16 + i] = UInt8(truncatingIfNeeded: segment >> (8 * UInt32(i))) }
            for i in 0..<8 { buffer[20 + i] = UInt8(truncatingIfNeeded: offset >> (8 * UInt64(i))) }
            return XXH3.hash64(UnsafeRawBufferPointer(buffer), seed: 0x5452_5650)  // "TRVP"
        }
    }
}
