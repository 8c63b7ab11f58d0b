public import TroveCore
import CTurboJPEG

/// An image decoded from JPEG, PNG or WebP, as small as was asked (shrink-on-load).
public struct DecodedImage: Sendable {
    /// The pixels, as stored (not yet oriented).
    public var image: RGBAImage
    /// The encoded format.
    public var format: ImageFormat
    /// The size the header gives.
    public var sourceWidth: Int
    public var sourceHeight: Int
    /// The EXIF orientation (JPEG only; `.up` otherwise).
    public var orientation: Orientation
}

/// A finished variant.
public struct Thumbnail: Sendable {
    /// The WebP bytes.
    public var data: [UInt8]
    /// The output size.
    public var width: Int
    public var height: Int
    /// The source's format and size (as stored).
    public var sourceFormat: ImageFormat
    public var sourceWidth: Int
    public var sourceHeight: Int
    /// The size decoded before resampling (smaller than the source with shrink-on-load).
    public var decodedWidth: Int
    public var decodedHeight: Int
}

/// Decoding with shrink-on-load, and the whole decode → orient → resample → encode path.
public enum ImageDecoder {
    /// Decodes `data`, at least `minimum` pixels wide and high when given (in stored, not
    /// oriented, space) — as small as the format allows: JPEG by DCT scaling (1/8 … 1), WebP by
    /// libwebp's scaler; PNG always at full size.
    ///
    /// The header is checked against `limits` before any pixel memory is allocated.
    public static func decode(_ data: [UInt8], minimum: (Int, Int)? = nil, limits: DecodeLimits = DecodeLimits())
        throws(CodecError) -> DecodedImage
    {
        guard data.count <= limits.maxInputBytes else {
            throw CodecError(.tooLarge, "\(data.count) bytes is over the input limit of \(limits.maxInputBytes)")
        }
        guard let format = ImageFormat.sniff(data) else { throw CodecError(.unknownFormat, "not JPEG, PNG or WebP") }
        return try withBytes(data) { (raw) throws(CodecError) -> DecodedImage in
            switch format {
            case .jpeg:
                let jpeg = try TurboJPEG(compressing: false)
                let header = try jpeg.header(raw)
                try limits.check(width: header.width, height: header.height)
                guard header.colorspace != Int32(TJCS_CMYK.rawValue), header.colorspace != Int32(TJCS_YCCK.rawValue) else {
                    throw CodecError(.unsupported, "CMYK JPEG: convert it to RGB first")
                }
                let factor = shrinkFactor(width: header.width, height: header.height, minimum: minimum)
                let image = try jpeg.decode(raw, header: header, factor: factor)
                return DecodedImage(
                    image: image, format: .jpeg, sourceWidth: header.width, sourceHeight: header.height,
                    orientation: Orientation.fromJPEG(data))
            case .png:
                let (w, h) = try SPNG.dimensions(raw)
                try limits.check(width: w, height: h)
                let image = try SPNG.decode(raw, limits: limits)
                return DecodedImage(image: image, format: .png, sourceWidth: w, sourceHeight: h, orientation: .up)
            case .webp:
                let features = try WebP.features(raw)
                try limits.check(width: features.width, height: features.height)
                var size: (Int, Int)?
                if let minimum, minimum.0 < features.width || minimum.1 < features.height {
                    // Scale to the smallest size still covering `minimum`, aspect kept.
                    let s = max(Double(minimum.0) / Double(features.width), Double(minimum.1) / Double(features.height))
                    size = (
                        max(1, Int((Double(features.width) * s).rounded(.up))),
                        max(1, Int((Double(features.height) * s).rounded(.up)))
                    )
                }
                let image = try WebP.decode(raw, size: size)
                return DecodedImage(
                    image: image, format: .webp, sourceWidth: features.width, sourceHeight: features.height,
                    orientation: .up)
            }
        }
    }

    /// The smallest DCT scaling factor whose output still covers `minimum` (1 when none given).
    static func shrinkFactor(width: Int, height: Int, minimum: (Int, Int)?) -> tjscalingfactor {
        let one = tjscalingfactor(num: 1, denom: 1)
        guard let minimum else { return one }
        var best = one
        for factor in TurboJPEG.scalingFactors where factor.num <= factor.denom {
            let (w, h) = TurboJPEG.scaled(width, height, by: factor)
            if w >= minimum.0 && h >= minimum.1 { best = factor } else { break }
        }
        return best
    }

    /// The DCT scale a JPEG of `width × height` would be decoded at for `minimum`, as num/denom
    /// (exposed for tests and tools).
    public static func jpegShrink(width: Int, height: Int, minimum: (Int, Int)) -> (num: Int, denom: Int) {
        let f = shrinkFactor(width: width, height: height, minimum: minimum)
        return (Int(f.num), Int(f.denom))
    }

    /// Makes `variant` of the image in `data`: decode with shrink-on-load, orient, resample
    /// (Lanczos-3, premultiplied), crop for `fill`, encode WebP.
    ///
    /// - Parameter shrinkOnLoad: decode at the smallest size that still covers the output (the
    ///   default); false decodes at full size (for comparisons).
    public static func thumbnail(
        _ data: [UInt8], variant: Variant, limits: DecodeLimits = DecodeLimits(), shrinkOnLoad: Bool = true
    ) throws(CodecError) -> Thumbnail {
        guard variant.isValid else { throw CodecError(.unsupported, "variant \(variant) is out of range") }
        guard let format = ImageFormat.sniff(data) else { throw CodecError(.unknownFormat, "not JPEG, PNG or WebP") }
        // The header first: the sizes (and the limits) are known before decoding.
        let (sw, sh) = try dimensions(data, format: format)
        try limits.check(width: sw, height: sh)
        let orientation = format == .jpeg ? Orientation.fromJPEG(data) : .up
        let (uw, uh) = orientation.swapsDimensions ? (sh, sw) : (sw, sh)
        let sizes = variant.sizes(forSourceWidth: uw, height: uh)
        // The output obeys the limits the input does (an upscaled 1×1 PNG must not become a
        // 268-megapixel WebP that Trove itself would refuse to decode).
        do throws(CodecError) {
            try limits.check(width: sizes.resampled.0, height: sizes.resampled.1)
        } catch {
            throw CodecError(.tooLarge, "the output, \(sizes.resampled.0)×\(sizes.resampled.1), is too large: \(error.message)")
        }
        let needed = orientation.swapsDimensions ? (sizes.resampled.1, sizes.resampled.0) : sizes.resampled
        let decoded = try decode(data, minimum: shrinkOnLoad ? needed : nil, limits: limits)
        let upright = decoded.orientation.apply(to: decoded.image)
        var image = Resampler.thumbnail(upright, width: sizes.resampled.0, height: sizes.resampled.1)
        if sizes.final != sizes.resampled {
            image = crop(image, width: sizes.final.0, height: sizes.final.1)
        }
        let webp = try WebP.encode(image, quality: variant.quality ?? 100, lossless: variant.quality == nil)
        return Thumbnail(
            data: webp, width: image.width, height: image.height, sourceFormat: format, sourceWidth: sw, sourceHeight: sh,
            decodedWidth: decoded.image.width, decodedHeight: decoded.image.height)
    }

    /// The width and height an image's header states, without decoding it.
    ///
    /// - Throws: ``CodecError`` — `.unknownFormat` for bytes that are not JPEG, PNG or WebP,
    ///   `.corrupt` or `.truncated` for a header that cannot be read.
    public static func dimensions(_ data: [UInt8]) throws(CodecError) -> (width: Int, height: Int) {
        guard let format = ImageFormat.sniff(data) else { throw CodecError(.unknownFormat, "not JPEG, PNG or WebP") }
        return try dimensions(data, format: format)
    }

    static func dimensions(_ data: [UInt8], format: ImageFormat) throws(CodecError) -> (width: Int, height: Int) {
        try withBytes(data) { (raw) throws(CodecError) -> (Int, Int) in
            switch format {
            case .jpeg:
                let h = try TurboJPEG(compressing: false).header(raw)
                return (h.width, h.height)
            case .png: return try SPNG.dimensions(raw)
            case .webp:
                let f = try WebP.features(raw)
                return (f.width, f.height)
            }
        }
    }

    /// The centre `width × height` of `image`.
    static func crop(_ image: RGBAImage, width: Int, height: Int) -> RGBAImage {
        let x0 = (image.width - width) / 2
        let y0 = (image.height - height) / 2
        var out = [UInt8]()
        out.reserveCapacity(width * height * 4)
        for y in 0..<height {
            let start = ((y0 + y) * image.width + x0) * 4
            out.append(contentsOf: image.pixels[start..<start + width * 4])
        }
        return RGBAImage(width: width, height: height, pixels: out)
    }
}

/// Runs `body` on the bytes of `data`, keeping its typed error (`withUnsafeBytes` only rethrows).
func withBytes<T>(_ data: [UInt8], _ body: (UnsafeRawBufferPointer) throws(CodecError) -> T) throws(CodecError) -> T {
    let result = data.withUnsafeBytes { raw in Result { () throws(CodecError) -> T in try body(raw) } }
    return try result.get()
}

/// Encoders, for tools and for making test images.
public enum ImageEncoder {
    /// WebP, lossy at `quality` (alpha kept) or lossless when `quality` is nil.
    public static func webp(_ image: RGBAImage, quality: Int? = 80) throws(CodecError) -> [UInt8] {
        try WebP.encode(image, quality: quality ?? 100, lossless: quality == nil)
    }

    /// JPEG (alpha dropped) at `quality`, 4:2:0 unless told; progressive on request.
    public static func jpeg(
        _ image: RGBAImage, quality: Int = 90, subsampling: JPEGSubsampling = .s420, progressive: Bool = false
    )
        throws(CodecError) -> [UInt8]
    {
        try TurboJPEG(compressing: true).encode(
            image, quality: quality, subsampling: subsampling.turboValue, progressive: progressive)
    }

    /// PNG as RGBA, 8 bits.
    public static func png(_ image: RGBAImage, interlaced: Bool = false) throws(CodecError) -> [UInt8] {
        try SPNG.encode(
            width: image.width, height: image.height, colorType: 6, bitDepth: 8, pixels: image.pixels, interlaced: interlaced)
    }

    /// PNG of raw samples in the given colour type and bit depth (16-bit samples in host byte
    /// order, as libspng takes them), with a palette for colour type 3.
    public static func png(
        width: Int, height: Int, colorType: UInt8, bitDepth: UInt8, samples: [UInt8],
        palette: [(UInt8, UInt8, UInt8)] = [], interlaced: Bool = false
    ) throws(CodecError) -> [UInt8] {
        try SPNG.encode(
            width: width, height: height, colorType: colorType, bitDepth: bitDepth, pixels: samples, palette: palette,
            interlaced: interlaced)
    }
}

/// JPEG chroma subsampling.
public enum JPEGSubsampling: Sendable, CaseIterable {
    case s444, s422, s420, grey

    var turboValue: Int32 {
        switch self {
        case .s444: Int32(TJSAMP_444.rawValue)
        case .s422: Int32(TJSAMP_422.rawValue)
        case .s420: Int32(TJSAMP_420.rawValue)
        case .grey: Int32(TJSAMP_GRAY.rawValue)
        }
    }
}
