/// EXIF orientation: how the stored pixels must be transformed to appear upright.
public enum Orientation: Int, Sendable, CaseIterable {
    case up = 1, upMirrored, down, downMirrored, leftMirrored, right, rightMirrored, left

    /// Whether the transform swaps width and height (values 5–8).
    public var swapsDimensions: Bool { rawValue >= 5 }

    /// The orientation in a JPEG's EXIF (APP1) segment; `.up` when there is none or it cannot
    /// be read. Every offset is bounds-checked: hostile EXIF is ignored, never trusted.
    public static func fromJPEG(_ data: some Collection<UInt8>) -> Orientation {
        let bytes = Array(data.prefix(256 << 10))
        guard bytes.count >= 4, bytes[0] == 0xFF, bytes[1] == 0xD8 else { return .up }
        var i = 2
        while i + 4 <= bytes.count {
            guard bytes[i] == 0xFF else { return .up }
            let marker = bytes[i + 1]
            if marker == 0xD8 || marker == 0x01 || (0xD0...0xD7).contains(marker) {
                i += 2
                continue
            }
            if marker == 0xDA || marker == 0xD9 { return .up }  // start of scan / end of image
            let length = Int(bytes[i + 2]) << 8 | Int(bytes[i + 3])
            guard length >= 2, i + 2 + length <= bytes.count else { return .up }
            if marker == 0xE1, let o = exifOrientation(bytes[(i + 4)..<(i + 2 + length)]) { return o }
            i += 2 + length
        }
        return .up
    }

    private static func exifOrientation(_ segment: ArraySlice<UInt8>) -> Orientation? {
        let s = Array(segment)
        guard s.count >= 14, Array(s[0..<6]) == Array("Exif\0\0".utf8) else { return nil }
        let tiff = Array(s[6...])
        let little: Bool
        switch (tiff[0], tiff[1]) {
        case (0x49, 0x49): little = true
        case (0x4D, 0x4D): little = false
        default: return nil
        }
        func u16(_ at: Int) -> Int? {
            guard at >= 0, at + 2 <= tiff.count else { return nil }
            return little ? Int(tiff[at]) | Int(tiff[at + 1]) << 8 : Int(tiff[at]) << 8 | Int(tiff[at + 1])
        }
        func u32(_ at: Int) -> Int? {
            guard let a = u16(at), let b = u16(at + 2) else { return nil }
            return little ? a | b << 16 : a << 16 | b
        }
        guard u16(2) == 42, let ifd = u32(4), let count = u16(ifd), count < 1000 else { return nil }
        for n in 0..<count {
            let entry = ifd + 2 + n * 12
            guard let tag = u16(entry) else { return nil }
            if tag == 0x0112 {
                guard u16(entry + 2) == 3, let value = u16(entry + 8) else { return nil }
                return Orientation(rawValue: value)
            }
        }
        return nil
    }

    /// `image` transformed to appear upright.
    public func apply(to image: RGBAImage) -> RGBAImage {
        if self == .up { return image }
        let w = image.width
        let h = image.height
        let (ow, oh) = swapsDimensions ? (h, w) : (w, h)
        var out = [UInt8](repeating: 0, count: image.pixels.count)
        image.pixels.withUnsafeBufferPointer { src in
            out.withUnsafeMutableBufferPointer { dst in
                for y in 0..<oh {
                    for x in 0..<ow {
                        let (sx, sy): (Int, Int)
                        switch self {
                        case .up: (sx, sy) = (x, y)
                        case .upMirrored: (sx, sy) = (w - 1 - x, y)
                        case .down: (sx, sy) = (w - 1 - x, h - 1 - y)
                        case .downMirrored: (sx, sy) = (x, h - 1 - y)
                        case .leftMirrored: (sx, sy) = (y, x)
                        case .right: (sx, sy) = (y, h - 1 - x)
                        case .rightMirrored: (sx, sy) = (w - 1 - y, h - 1 - x)
                        case .left: (sx, sy) = (w - 1 - y, x)
                        }
                        let s = (sy * w + sx) * 4
                        let d = (y * ow + x) * 4
                        dst[d] = src[s]
                        dst[d + 1] = src[s + 1]
                        dst[d + 2] = src[s + 2]
                        dst[d + 3] = src[s + 3]
                    }
                }
            }
        }
        return RGBAImage(width: ow, height: oh, pixels: out)
    }
}
