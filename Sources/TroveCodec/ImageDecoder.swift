public import TroveCore

/// Decoding with shrink-on-load, and the whole decode → orient → resample → encode path.
public enum ImageDecoder {
    /// What the header of an image says, read once: format, stored size, EXIF orientation, and
    /// for a JPEG the rest of its header (the decode needs it).
    struct Probe {
        var format: ImageFormat
        var width: Int
        var height: Int
        var orientation: Orientation
        var jpeg: TurboJPEG.Header?
    }

    /// Reads the header of `data` (and a JPEG's EXIF orientation), checking it against `limits`
    /// before any pixel memory is allocated.
    static func probe(_ data: [UInt8], limits: DecodeLimits) throws(CodecError) -> Probe {
        guard data.count <= limits.maxInputBytes else {
            throw CodecError(.tooLarge, "\(data.count) bytes is over the input limit of \(limits.maxInputBytes)")
        }
        var probe = try header(data)
        if probe.format == .jpeg { probe.orientation = Orientation.fromJPEG(data) }
        try limits.check(width: probe.width, height: probe.height)
        return probe
    }

    /// Decodes `data`, at least `minimum` pixels wide and high when given (in stored, not
    /// oriented, space) — as small as the format allows: JPEG by DCT scaling (1/8 … 1), WebP by
    /// libwebp's scaler; PNG always at full size.
    ///
    /// The header is checked against `limits` before any pixel memory is allocated.
    public static func decode(_ data: [UInt8], minimum: (Int, Int)? = nil, limits: DecodeLimits = DecodeLimits())
        throws(CodecError) -> DecodedImage
    {
        try decode(data, probe(data, limits: limits), minimum: minimum, limits: limits)
    }

    /// Decodes `data`, whose header `probe` has read.
    static func decode(_ data: [UInt8], _ probe: Probe, minimum: (Int, Int)?, limits: DecodeLimits) throws(CodecError)
        -> DecodedImage
    {
        let image = try withBytes(data) { (raw) throws(CodecError) -> RGBAImage in
            switch probe.format {
            case .jpeg:
                guard let header = probe.jpeg else { throw CodecError(.corrupt, "JPEG: no header") }
                guard !header.isCMYK else { throw CodecError(.unsupported, "CMYK JPEG: convert it to RGB first") }
                let scale = TurboJPEG.shrinkScale(width: header.width, height: header.height, minimum: minimum)
                return try TurboJPEG(compressing: false).decode(raw, header: header, scale: scale)
            case .png:
                return try SPNG.decode(raw, limits: limits)
            case .webp:
                var size: (Int, Int)?
                if let minimum, minimum.0 < probe.width || minimum.1 < probe.height {
                    // Scale to the smallest size still covering `minimum`, aspect kept.
                    let s = max(Double(minimum.0) / Double(probe.width), Double(minimum.1) / Double(probe.height))
                    size = (
                        max(1, Int((Double(probe.width) * s).rounded(.up))),
                        max(1, Int((Double(probe.height) * s).rounded(.up)))
                    )
                }
                return try WebP.decode(raw, size: size)
            }
        }
        return DecodedImage(
            image: image, format: probe.format, sourceWidth: probe.width, sourceHeight: probe.height,
            orientation: probe.orientation)
    }

    /// The DCT scale a JPEG of `width × height` would be decoded at for `minimum`, as num/denom
    /// (exposed for tests and tools).
    public static func jpegShrink(width: Int, height: Int, minimum: (Int, Int)) -> (num: Int, denom: Int) {
        TurboJPEG.shrinkScale(width: width, height: height, minimum: minimum)
    }

    /// Makes `variant` of the image in `data`: decode with shrink-on-load, orient, resample
    /// (Lanczos-3, premultiplied), crop for `fill`, encode WebP. The header and the EXIF
    /// orientation are read once.
    ///
    /// - Parameter shrinkOnLoad: decode at the smallest size that still covers the output (the
    ///   default); false decodes at full size (for comparisons).
    public static func thumbnail(
        _ data: [UInt8], variant: Variant, limits: DecodeLimits = DecodeLimits(), shrinkOnLoad: Bool = true
    ) throws(CodecError) -> Thumbnail {
        guard variant.isValid else { throw CodecError(.unsupported, "variant \(variant) is out of range") }
        // The header first: the sizes (and the limits) are known before decoding.
        let source = try probe(data, limits: limits)
        let orientation = source.orientation
        let (uw, uh) = orientation.swapsDimensions ? (source.height, source.width) : (source.width, source.height)
        let sizes = variant.sizes(forSourceWidth: uw, height: uh)
        // The output obeys the limits the input does (an upscaled 1×1 PNG must not become a
        // 268-megapixel WebP that Trove itself would refuse to decode).
        do throws(CodecError) {
            try limits.check(width: sizes.resampled.0, height: sizes.resampled.1)
        } catch {
            throw CodecError(.tooLarge, "the output, \(sizes.resampled.0)×\(sizes.resampled.1), is too large: \(error.message)")
        }
        let needed = orientation.swapsDimensions ? (sizes.resampled.1, sizes.resampled.0) : sizes.resampled
        let decoded = try decode(data, source, minimum: shrinkOnLoad ? needed : nil, limits: limits)
        let upright = decoded.orientation.apply(to: decoded.image)
        var image = Resampler.thumbnail(upright, width: sizes.resampled.0, height: sizes.resampled.1)
        if sizes.final != sizes.resampled {
            image = crop(image, width: sizes.final.0, height: sizes.final.1)
        }
        let webp = try WebP.encode(image, quality: variant.quality ?? 100, lossless: variant.quality == nil)
        return Thumbnail(
            data: webp, width: image.width, height: image.height, sourceFormat: source.format, sourceWidth: source.width,
            sourceHeight: source.height, decodedWidth: decoded.image.width, decodedHeight: decoded.image.height)
    }

    /// The width and height an image's header states, without decoding it.
    ///
    /// - Throws: ``CodecError`` — `.unknownFormat` for bytes that are not JPEG, PNG or WebP,
    ///   `.corrupt` or `.truncated` for a header that cannot be read.
    public static func dimensions(_ data: [UInt8]) throws(CodecError) -> (width: Int, height: Int) {
        let probe = try header(data)
        return (probe.width, probe.height)
    }

    /// The format and what its header says (orientation left `.up`): no limits, no EXIF.
    static func header(_ data: [UInt8]) throws(CodecError) -> Probe {
        guard let format = ImageFormat.sniff(data) else { throw CodecError(.unknownFormat, "not JPEG, PNG or WebP") }
        return try withBytes(data) { (raw) throws(CodecError) -> Probe in
            switch format {
            case .jpeg:
                let header = try TurboJPEG(compressing: false).header(raw)
                return Probe(format: .jpeg, width: header.width, height: header.height, orientation: .up, jpeg: header)
            case .png:
                let (w, h) = try SPNG.dimensions(raw)
                return Probe(format: .png, width: w, height: h, orientation: .up, jpeg: nil)
            case .webp:
                let features = try WebP.features(raw)
                return Probe(format: .webp, width: features.width, height: features.height, orientation: .up, jpeg: nil)
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
