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

    /// `image` reduced by the integer factor `k` in each direction with a box filter, in
    /// premultiplied alpha (each output pixel is the average of a k × k block; a partial block
    /// at the right or bottom edge averages what it has).
    public static func reduce(_ image: RGBAImage, by k: Int) -> RGBAImage {
        precondition(k >= 1)
        if k == 1 { return image }
        let w = (image.width + k - 1) / k
        let h = (image.height + k - 1) / k
        var out = [UInt8](repeating: 0, count: w * h * 4)
        image.pixels.withUnsafeBufferPointer { src in
            out.withUnsafeMutableBufferPointer { dst in
                var sums = [UInt32](repeating: 0, count: w * 4)
                var counts = [UInt32](repeating: 0, count: w)
                for oy in 0..<h {
                    for i in 0..<sums.count { sums[i] = 0 }
                    for i in 0..<counts.count { counts[i] = 0 }
                    for y in (oy * k)..<min(image.height, oy * k + k) {
                        var s = y * image.width * 4
                        for x in 0..<image.width {
                            let a = UInt32(src[s + 3])
                            let o = (x / k) * 4
                            sums[o] += UInt32(src[s]) * a
                            sums[o + 1] += UInt32(src[s + 1]) * a
                            sums[o + 2] += UInt32(src[s + 2]) * a
                            sums[o + 3] += a
                            counts[x / k] += 1
                            s += 4
                        }
                    }
                    for ox in 0..<w {
                        let a = sums[ox * 4 + 3]
                        let d = (oy * w + ox) * 4
                        if a > 0 {
                            dst[d] = UInt8(min(255, (sums[ox * 4] + a / 2) / a))
                            dst[d + 1] = UInt8(min(255, (sums[ox * 4 + 1] + a / 2) / a))
                            dst[d + 2] = UInt8(min(255, (sums[ox * 4 + 2] + a / 2) / a))
                        }
                        dst[d + 3] = UInt8(min(255, (a + counts[ox] / 2) / max(1, counts[ox])))
                    }
                }
            }
        }
        return RGBAImage(width: w, height: h, pixels: out)
    }

    /// `image` resized to `width × height`, first box-reduced by an integer factor while it
    /// stays at least twice the target (the expensive Lanczos then runs on a small image; the
    /// same trade Pillow makes with its reducing gap of 2), then Lanczos-3.
    public static func thumbnail(_ image: RGBAImage, width: Int, height: Int) -> RGBAImage {
        let k = min(image.width / (2 * width), image.height / (2 * height))
        return resize(k >= 2 ? reduce(image, by: k) : image, width: width, height: height)
    }

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
