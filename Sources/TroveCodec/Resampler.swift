import Foundation

/// Resizes images with a separable Lanczos-3 filter (Docs/Codecs.md says why), in
/// premultiplied alpha so that transparent pixels do not bleed dark fringes into edges.
///
/// Edges are handled by renormalising the weights over the taps that fall inside the image
/// (equivalent to clamping to the edge for a box, and it never darkens borders).
public enum Resampler {
    /// Lanczos window radius.
    static let radius = 3.0

    static func lanczos(_ x: Double) -> Double {
        if x == 0 { return 1 }
        if abs(x) >= radius { return 0 }
        let px = Double.pi * x
        return radius * sin(px) * sin(px / radius) / (px * px)
    }

    /// For each output index, the first input index and the normalised weights.
    static func weights(input: Int, output: Int) -> [(start: Int, weights: [Float])] {
        let scale = Double(input) / Double(output)
        let filterScale = max(1, scale)  // widen the filter when shrinking (antialiasing)
        let support = radius * filterScale
        return (0..<output).map { o in
            let center = (Double(o) + 0.5) * scale
            let first = max(0, Int((center - support).rounded(.down)))
            let last = min(input - 1, Int((center + support).rounded(.up)))
            var ws: [Double] = []
            for i in first...max(first, last) { ws.append(lanczos((Double(i) + 0.5 - center) / filterScale)) }
            let sum = ws.reduce(0, +)
            return (first, ws.map { Float(sum == 0 ? 0 : $0 / sum) })
        }
    }

    @inline(__always)
    static func byte(_ v: Float) -> UInt8 { UInt8(min(255, max(0, v)).rounded()) }

    /// `image` resized to `width × height`.
    public static func resize(_ image: RGBAImage, width: Int, height: Int) -> RGBAImage {
        precondition(width > 0 && height > 0)
        if width == image.width && height == image.height { return image }
        let sw = image.width
        let sh = image.height
        // Premultiply into floats.
        var src = [Float](repeating: 0, count: sw * sh * 4)
        for i in stride(from: 0, to: src.count, by: 4) {
            let a = Float(image.pixels[i + 3]) / 255
            src[i] = Float(image.pixels[i]) * a
            src[i + 1] = Float(image.pixels[i + 1]) * a
            src[i + 2] = Float(image.pixels[i + 2]) * a
            src[i + 3] = Float(image.pixels[i + 3])
        }
        // Horizontal pass: sw → width, for every source row.
        let horizontal = weights(input: sw, output: width)
        var mid = [Float](repeating: 0, count: width * sh * 4)
        src.withUnsafeBufferPointer { s in
            mid.withUnsafeMutableBufferPointer { m in
                for y in 0..<sh {
                    let row = y * sw * 4
                    for (x, tap) in horizontal.enumerated() {
                        var r: Float = 0, g: Float = 0, b: Float = 0, a: Float = 0
                        var i = row + tap.start * 4
                        for w in tap.weights {
                            r += s[i] * w
                            g += s[i + 1] * w
                            b += s[i + 2] * w
                            a += s[i + 3] * w
                            i += 4
                        }
                        let o = (y * width + x) * 4
                        m[o] = r
                        m[o + 1] = g
                        m[o + 2] = b
                        m[o + 3] = a
                    }
                }
            }
        }
        // Vertical pass: sh → height, then unpremultiply.
        let vertical = weights(input: sh, output: height)
        var out = [UInt8](repeating: 0, count: width * height * 4)
        mid.withUnsafeBufferPointer { m in
            out.withUnsafeMutableBufferPointer { o in
                for (y, tap) in vertical.enumerated() {
                    for x in 0..<width {
                        var r: Float = 0, g: Float = 0, b: Float = 0, a: Float = 0
                        var i = (tap.start * width + x) * 4
                        for w in tap.weights {
                            r += m[i] * w
                            g += m[i + 1] * w
                            b += m[i + 2] * w
                            a += m[i + 3] * w
                            i += width * 4
                        }
                        let d = (y * width + x) * 4
                        // Premultiplied c·a/255 back to c: multiply by 255/a.
                        let alpha = min(255, max(0, a))
                        let k: Float = alpha > 0.5 ? 255 / alpha : 0
                        o[d] = byte(r * k)
                        o[d + 1] = byte(g * k)
                        o[d + 2] = byte(b * k)
                        o[d + 3] = byte(alpha)
                    }
                }
            }
        }
        return RGBAImage(width: width, height: height, pixels: out)
    }
}
