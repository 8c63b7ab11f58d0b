import TroveCore

#if canImport(Glibc)
    import Glibc
#endif

// Little-endian encoding and decoding of the fixed-width fields of the pack format.

struct ByteWriter {
    var bytes: [UInt8]

    init(capacity: Int) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    /// A writer that appends to `storage`'s buffer, emptied (its capacity kept): `storage` is
    /// left empty until the caller takes ``bytes`` back, so that the buffer is not copied.
    init(reusing storage: inout [UInt8]) {
        bytes = []
        swap(&bytes, &storage)
        bytes.removeAll(keepingCapacity: true)
    }

    /// `count` zero bytes (room for fields written later in place).
    mutating func appendZeros(_ count: Int) { bytes.append(contentsOf: repeatElement(0, count: count)) }

    mutating func append(_ v: UInt8) { bytes.append(v) }
    mutating func append(_ v: UInt16) { appendLE(UInt64(v), width: 2) }
    mutating func append(_ v: UInt32) { appendLE(UInt64(v), width: 4) }
    mutating func append(_ v: UInt64) { appendLE(v, width: 8) }
    mutating func append(_ v: Int64) { appendLE(UInt64(bitPattern: v), width: 8) }
    mutating func append(contentsOf b: [UInt8]) { bytes.append(contentsOf: b) }

    /// The hash's 16 bytes, big-endian (``ContentHash/bytes``), without making that array.
    mutating func append(_ hash: ContentHash) {
        withUnsafeBytes(of: hash.high.bigEndian) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: hash.low.bigEndian) { bytes.append(contentsOf: $0) }
    }

    /// A UInt32 length, then the UTF-8 bytes (copied from the string's own storage).
    mutating func appendString(_ s: String) {
        append(UInt32(s.utf8.count))
        bytes.append(contentsOf: s.utf8)
    }

    private mutating func appendLE(_ v: UInt64, width: Int) {
        withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: $0[0..<width])) }
    }
}

/// Reads fields from a buffer; every read is bounds-checked and fails with nil past the end.
struct ByteReader {
    let buffer: UnsafeRawBufferPointer
    var position = 0

    init(_ buffer: UnsafeRawBufferPointer) { self.buffer = buffer }

    var remaining: Int { buffer.count - position }

    mutating func readUInt32() -> UInt32? { readLE(4).map { UInt32(truncatingIfNeeded: $0) } }
    mutating func readUInt64() -> UInt64? { readLE(8) }
    mutating func readInt64() -> Int64? { readLE(8).map { Int64(bitPattern: $0) } }

    /// The next `n` bytes, in place (valid while the buffer is), or nil past the end.
    mutating func readSpan(_ n: Int) -> UnsafeRawBufferPointer? {
        guard n >= 0, remaining >= n else { return nil }
        defer { position += n }
        return UnsafeRawBufferPointer(rebasing: buffer[position..<position + n])
    }

    /// A content hash: 16 bytes, big-endian (``ContentHash/init(bytes:)``).
    mutating func readHash() -> ContentHash? { readSpan(16).flatMap { ContentHash(bytes: $0) } }

    /// A UInt32 length, then that many bytes of valid UTF-8; nil past the end or when they
    /// are not valid UTF-8.
    mutating func readString() -> String? {
        guard let n = readUInt32(), let raw = readSpan(Int(n)) else { return nil }
        return raw.withMemoryRebound(to: UInt8.self) { bytes -> String? in
            // Decoding (concrete, unlike the generic `String(validating:as:)`) repairs invalid
            // UTF-8, each bad sequence becoming U+FFFD, so the text holds exactly the bytes
            // read only when they were valid.
            var text = String(decoding: bytes, as: UTF8.self)
            let valid = text.withUTF8 { utf8 in
                utf8.count == bytes.count && (bytes.isEmpty || memcmp(utf8.baseAddress!, bytes.baseAddress!, bytes.count) == 0)
            }
            return valid ? text : nil
        }
    }

    private mutating func readLE(_ width: Int) -> UInt64? {
        guard remaining >= width else { return nil }
        var v: UInt64 = 0
        for i in 0..<width { v |= UInt64(buffer[position + i]) << (8 * UInt64(i)) }
        position += width
        return v
    }
}

extension UnsafeRawBufferPointer {
    /// The little-endian integer at `offset`; the caller has checked the bounds.
    func loadLE(_: UInt64.Type, at offset: Int) -> UInt64 {
        var v: UInt64 = 0
        for i in 0..<8 { v |= UInt64(self[offset + i]) << (8 * UInt64(i)) }
        return v
    }

    func loadLE(_: UInt32.Type, at offset: Int) -> UInt32 {
        var v: UInt32 = 0
        for i in 0..<4 { v |= UInt32(self[offset + i]) << (8 * UInt32(i)) }
        return v
    }
}
