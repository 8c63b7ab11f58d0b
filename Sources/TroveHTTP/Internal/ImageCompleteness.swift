import TroveCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Whether an image's bytes reach the end its own format marks: the last line of defence
/// against a partial body that HTTP framing cannot reveal.
///
/// A body framed by a `Content-Length` that understates it, or by the connection's close (no
/// length, no chunked encoding) when the connection is cut, arrives as a complete HTTP message
/// holding the first part of an image. Each format says where it ends, and checking that costs
/// one pass at most:
///
/// - **JPEG**: the markers are walked from SOI — segments skipped by their lengths (so a
///   thumbnail's end marker inside APP1 is never mistaken for the image's), entropy-coded data
///   scanned for the next marker (`FF 00` stuffing and restart markers are part of it) — until
///   EOI. Bytes after EOI (a Motion Photo's video) are allowed, as decoders allow them; so are
///   stray bytes between segments, which libjpeg skips.
/// - **PNG**: the chunks are walked by their lengths until IEND (CRCs are the decoder's job).
/// - **WebP**: the RIFF header's size must fit in the bytes received.
///
/// The structure is checked, not the pixels: the codec still refuses a complete but corrupt image.
/// Cost: for a JPEG, one `memchr` pass over the entropy-coded data (a few µs per 64 KiB); for
/// PNG and WebP, a few header reads.
enum ImageCompleteness {
    /// Whether `bytes`, sniffed as `format`, are whole.
    static func isComplete(_ bytes: UnsafeRawBufferPointer, format: ImageFormat) -> Bool {
        switch format {
        case .jpeg: jpegReachesEndOfImage(bytes)
        case .png: pngReachesEnd(bytes)
        case .webp: webpFits(bytes)
        }
    }

    private static func jpegReachesEndOfImage(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let count = bytes.count
        var index = 2  // after SOI
        while true {
            // The next marker: skip anything up to an FF, then fill bytes (FF FF …).
            index = nextFF(in: bytes, from: index)
            while index < count, bytes[index] == 0xFF { index += 1 }
            guard index < count else { return false }
            let marker = bytes[index]
            index += 1
            switch marker {
            case 0xD9:
                return true  // EOI
            case 0x00, 0x01, 0xD0...0xD8:
                continue  // stuffing out of place, TEM, RSTn, SOI: no length follows
            default:
                guard index + 2 <= count else { return false }
                let length = Int(bytes[index]) << 8 | Int(bytes[index + 1])
                guard length >= 2 else { return false }
                index += length
                guard index <= count else { return false }
                guard marker == 0xDA else { continue }
                // SOS: entropy-coded data up to the next marker other than FF 00 and RSTn.
                while true {
                    index = nextFF(in: bytes, from: index)
                    guard index + 1 < count else { return false }
                    let next = bytes[index + 1]
                    if next == 0x00 || (0xD0...0xD7).contains(next) {
                        index += 2
                    } else if next == 0xFF {
                        index += 1  // a fill byte: the marker comes later
                    } else {
                        break  // a marker: read by the outer loop
                    }
                }
            }
        }
    }

    /// The index of the first `FF` at or after `start`, or `bytes.count`. `memchr` rather than
    /// a loop: entropy-coded data is most of a JPEG, and an `FF` comes about every 256 bytes.
    private static func nextFF(in bytes: UnsafeRawBufferPointer, from start: Int) -> Int {
        guard start < bytes.count, let base = bytes.baseAddress else { return bytes.count }
        guard let found = memchr(base + start, 0xFF, bytes.count - start) else { return bytes.count }
        return base.distance(to: UnsafeRawPointer(found))
    }

    private static func pngReachesEnd(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let count = bytes.count
        var index = 8  // after the signature
        let iend: [UInt8] = Array("IEND".utf8)
        while index + 12 <= count {
            let length =
                Int(bytes[index]) << 24 | Int(bytes[index + 1]) << 16 | Int(bytes[index + 2]) << 8
                | Int(bytes[index + 3])
            let isEnd = (0..<4).allSatisfy { bytes[index + 4 + $0] == iend[$0] }
            // length, type, data, CRC
            guard length <= count - index - 12 else { return false }
            index += 12 + length
            if isEnd { return true }
        }
        return false
    }

    private static func webpFits(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count >= 12 else { return false }
        let size = Int(bytes[4]) | Int(bytes[5]) << 8 | Int(bytes[6]) << 16 | Int(bytes[7]) << 24
        return size >= 4 && size <= bytes.count - 8
    }
}
