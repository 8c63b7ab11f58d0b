import Foundation

/// Pixels in memory: 8-bit red, green, blue and alpha per pixel, rows top to bottom, alpha not
/// premultiplied.
public struct RGBAImage: Sendable, Equatable {
    /// Width in pixels.
    public var width: Int
    /// Height in pixels.
    public var height: Int
    /// `width × height × 4` bytes.
    public var pixels: [UInt8]

    /// Makes an image; `pixels` must hold `width × height × 4` bytes.
    public init(width: Int, height: Int, pixels: [UInt8]) {
        precondition(width >= 0 && height >= 0 && pixels.count == width * height * 4)
        self.width = width
        self.height = height
        self.pixels = pixels
    }

    /// An image of one colour.
    public init(width: Int, height: Int, filledWith rgba: (UInt8, UInt8, UInt8, UInt8)) {
        var pixels = [UInt8](repeating: 0, count: width * height * 4)
        for i in stride(from: 0, to: pixels.count, by: 4) {
            (pixels[i], pixels[i + 1], pixels[i + 2], pixels[i + 3]) = rgba
        }
        self.init(width: width, height: height, pixels: pixels)
    }

    /// The pixel at (x, y).
    public subscript(x: Int, y: Int) -> (r: UInt8, g: UInt8, b: UInt8, a: UInt8) {
        let i = (y * width + x) * 4
        return (pixels[i], pixels[i + 1], pixels[i + 2], pixels[i + 3])
    }

    /// Whether every pixel is opaque.
    public var isOpaque: Bool {
        stride(from: 3, to: pixels.count, by: 4).allSatisfy { pixels[$0] == 255 }
    }

    /// Peak signal-to-noise ratio of the colour channels against `other` (same size), in dB;
    /// 99 for identical colour. A quality measure for tests and benchmarks.
    public func psnr(against other: RGBAImage) -> Double {
        precondition(width == other.width && height == other.height)
        var sum = 0.0
        for i in stride(from: 0, to: pixels.count, by: 4) {
            for c in 0..<3 {
                let d = Double(pixels[i + c]) - Double(other.pixels[i + c])
                sum += d * d
            }
        }
        guard sum > 0 else { return 99 }
        let mse = sum / Double(width * height * 3)
        return 10 * log10(255 * 255 / mse)
    }
}
