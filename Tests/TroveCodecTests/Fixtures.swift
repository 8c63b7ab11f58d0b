import Foundation
import TroveCodec
import TroveTestSupport

/// A smooth test picture: low-frequency gradients, so resampling can be compared with the
/// function it samples.
func smooth(_ width: Int, _ height: Int, alpha: UInt8 = 255) -> RGBAImage {
    var pixels = [UInt8](repeating: alpha, count: width * height * 4)
    for y in 0..<height {
        for x in 0..<width {
            let (r, g, b) = smoothColor(Double(x) + 0.5, Double(y) + 0.5, width, height)
            let i = (y * width + x) * 4
            pixels[i] = r
            pixels[i + 1] = g
            pixels[i + 2] = b
        }
    }
    return RGBAImage(width: width, height: height, pixels: pixels)
}

func smoothColor(_ x: Double, _ y: Double, _ width: Int, _ height: Int) -> (UInt8, UInt8, UInt8) {
    let u = x / Double(width)
    let v = y / Double(height)
    let r = 128 + 100 * sin(2 * .pi * u)
    let g = 128 + 100 * cos(2 * .pi * v)
    let b = 40 + 180 * u * v
    return (UInt8(r.rounded()), UInt8(g.rounded()), UInt8(b.rounded()))
}

/// Four flat quadrants: red (top left), green (top right), blue (bottom left), white.
func quadrants(_ width: Int, _ height: Int) -> RGBAImage {
    var pixels = [UInt8](repeating: 255, count: width * height * 4)
    for y in 0..<height {
        for x in 0..<width {
            let c: (UInt8, UInt8, UInt8) =
                y < height / 2
                ? (x < width / 2 ? (230, 20, 20) : (20, 230, 20)) : (x < width / 2 ? (20, 20, 230) : (240, 240, 240))
            let i = (y * width + x) * 4
            (pixels[i], pixels[i + 1], pixels[i + 2]) = c
        }
    }
    return RGBAImage(width: width, height: height, pixels: pixels)
}

/// Peak signal-to-noise ratio of the colour channels, in dB.
func psnr(_ a: RGBAImage, _ b: RGBAImage) -> Double { a.psnr(against: b) }

/// A JPEG with an EXIF APP1 segment giving `orientation`, spliced in after SOI.
func withExifOrientation(_ jpeg: [UInt8], _ orientation: Int, bigEndian: Bool = false) -> [UInt8] {
    var tiff: [UInt8] = bigEndian ? [0x4D, 0x4D, 0x00, 0x2A, 0, 0, 0, 8] : [0x49, 0x49, 0x2A, 0x00, 8, 0, 0, 0]
    func u16(_ v: Int) -> [UInt8] { bigEndian ? [UInt8(v >> 8), UInt8(v & 0xFF)] : [UInt8(v & 0xFF), UInt8(v >> 8)] }
    func u32(_ v: Int) -> [UInt8] { bigEndian ? u16(v >> 16) + u16(v & 0xFFFF) : u16(v & 0xFFFF) + u16(v >> 16) }
    tiff += u16(1)  // one IFD entry
    tiff += u16(0x0112) + u16(3) + u32(1) + u16(orientation) + u16(0)
    tiff += u32(0)  // no next IFD
    let payload = Array("Exif\0\0".utf8) + tiff
    let length = payload.count + 2
    return [0xFF, 0xD8, 0xFF, 0xE1, UInt8(length >> 8), UInt8(length & 0xFF)] + payload + Array(jpeg[2...])
}

/// The stored pixels that `orientation` turns into `upright` (its inverse applied).
func stored(_ upright: RGBAImage, for orientation: Orientation) -> RGBAImage {
    // Each orientation's inverse is itself except 6 and 8, which invert each other.
    switch orientation {
    case .right: return Orientation.left.apply(to: upright)
    case .left: return Orientation.right.apply(to: upright)
    default: return orientation.apply(to: upright)
    }
}

/// CRC-32 (PNG's), for patching chunk headers.
func crc32(_ bytes: some Sequence<UInt8>) -> UInt32 {
    var crc: UInt32 = 0xFFFF_FFFF
    for byte in bytes {
        crc ^= UInt32(byte)
        for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
    }
    return ~crc
}
