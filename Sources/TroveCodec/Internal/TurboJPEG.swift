import CTurboJPEG

/// A TurboJPEG handle (2.x API), owned: destroyed in `deinit`. Not shared between threads.
final class TurboJPEG {
    private let handle: tjhandle

    /// What a JPEG header says.
    struct Header {
        var width: Int
        var height: Int
        var subsampling: Int32
        var colorspace: Int32

        /// CMYK or YCCK: Trove does not decode those.
        var isCMYK: Bool { colorspace == Int32(TJCS_CMYK.rawValue) || colorspace == Int32(TJCS_YCCK.rawValue) }
    }

    init(compressing: Bool) throws(CodecError) {
        guard let handle = compressing ? tjInitCompress() : tjInitDecompress() else {
            throw CodecError(.libraryFailure, "TurboJPEG could not start a \(compressing ? "compressor" : "decompressor")")
        }
        self.handle = handle
    }

    deinit { tjDestroy(handle) }

    private var errorText: String { String(cString: tjGetErrorStr2(handle)) }

    /// The error for a failed call on `data`: truncated when the data stops before the JPEG's
    /// end-of-image marker (FF D9) or libjpeg says it ended early; corrupt otherwise.
    private func failure(_ what: String, _ data: UnsafeRawBufferPointer) -> CodecError {
        let text = errorText
        return CodecError(!Self.endsWithEOI(data) || Self.isTruncation(text) ? .truncated : .corrupt, "JPEG \(what): \(text)")
    }

    /// Whether `data` ends with the end-of-image marker (FF D9): a JPEG that does not was cut.
    static func endsWithEOI(_ data: UnsafeRawBufferPointer) -> Bool {
        data.count >= 2 && data[data.count - 2] == 0xFF && data[data.count - 1] == 0xD9
    }

    /// Whether TurboJPEG's message says the data ended early. The 2.x API reports a warning or
    /// a fatal error (`tjGetErrorCode`), not which one: only libjpeg's message text ("Premature
    /// end of JPEG file", JWRN_JPEG_EOF) tells truncation apart. This is the one place that
    /// reads it; PNG (`SPNG_EOF`) and WebP (`VP8_STATUS_NOT_ENOUGH_DATA`) say it by code.
    static func isTruncation(_ message: String) -> Bool {
        message.lowercased().contains("premature end")
    }

    func header(_ data: UnsafeRawBufferPointer) throws(CodecError) -> Header {
        var width: Int32 = 0
        var height: Int32 = 0
        var subsampling: Int32 = 0
        var colorspace: Int32 = 0
        let base = data.baseAddress!.assumingMemoryBound(to: UInt8.self)
        guard tjDecompressHeader3(handle, base, UInt(data.count), &width, &height, &subsampling, &colorspace) == 0 else {
            throw failure("header", data)
        }
        // A header cut before its frame can parse as 0×0.
        if (width <= 0 || height <= 0) && !Self.endsWithEOI(data) {
            throw CodecError(.truncated, "JPEG header: the data ends before the frame header")
        }
        return Header(width: Int(width), height: Int(height), subsampling: subsampling, colorspace: colorspace)
    }

    /// The DCT scaling factors TurboJPEG offers, largest first.
    static let scalingFactors: [tjscalingfactor] = {
        var count: Int32 = 0
        guard let factors = tjGetScalingFactors(&count) else { return [tjscalingfactor(num: 1, denom: 1)] }
        return (0..<Int(count)).map { factors[$0] }.sorted { $0.num * $1.denom > $1.num * $0.denom }
    }()

    /// The smallest DCT scale (num/denom) whose output still covers `minimum` (1/1 when none).
    static func shrinkScale(width: Int, height: Int, minimum: (Int, Int)?) -> (num: Int, denom: Int) {
        var best = tjscalingfactor(num: 1, denom: 1)
        if let minimum {
            for factor in scalingFactors where factor.num <= factor.denom {
                let (w, h) = scaled(width, height, by: factor)
                if w >= minimum.0 && h >= minimum.1 { best = factor } else { break }
            }
        }
        return (Int(best.num), Int(best.denom))
    }

    /// The size of a `width × height` image decoded at `factor`.
    static func scaled(_ width: Int, _ height: Int, by factor: tjscalingfactor) -> (Int, Int) {
        (Int(CTurboJPEG_scaled(Int32(width), factor)), Int(CTurboJPEG_scaled(Int32(height), factor)))
    }

    /// Decodes at `factor` into RGBA. Warnings (truncated or damaged data) are errors: a
    /// partial image is never returned.
    func decode(_ data: UnsafeRawBufferPointer, header: Header, scale: (num: Int, denom: Int)) throws(CodecError) -> RGBAImage {
        let factor = tjscalingfactor(num: Int32(scale.num), denom: Int32(scale.denom))
        let (width, height) = Self.scaled(header.width, header.height, by: factor)
        var pixels = [UInt8](repeating: 0, count: width * height * 4)
        let base = data.baseAddress!.assumingMemoryBound(to: UInt8.self)
        let status = pixels.withUnsafeMutableBufferPointer { out in
            tjDecompress2(
                handle, base, UInt(data.count), out.baseAddress, Int32(width), Int32(width * 4), Int32(height),
                Int32(TJPF_RGBA.rawValue), TJFLAG_STOPONWARNING)
        }
        guard status == 0 else { throw failure("data", data) }
        return RGBAImage(width: width, height: height, pixels: pixels)
    }

    /// Encodes RGBA as a baseline (or progressive) JPEG. For making test images and for tools.
    /// - Parameter cmyk: read the four bytes of each pixel as C, M, Y, K and write a CMYK JPEG
    ///   (for tests of the refusal of CMYK input).
    func encode(
        _ image: RGBAImage, quality: Int, subsampling: JPEGSubsampling = .s420, progressive: Bool = false,
        cmyk: Bool = false
    ) throws(CodecError) -> [UInt8] {
        var out: UnsafeMutablePointer<UInt8>?
        var size: UInt = 0
        let status = image.pixels.withUnsafeBufferPointer { pixels in
            tjCompress2(
                handle, pixels.baseAddress, Int32(image.width), Int32(image.width * 4), Int32(image.height),
                Int32(cmyk ? TJPF_CMYK.rawValue : TJPF_RGBA.rawValue), &out, &size, subsampling.turboValue, Int32(quality),
                progressive ? TJFLAG_PROGRESSIVE : 0)
        }
        defer { tjFree(out) }
        guard status == 0, let out else { throw CodecError(.encodeFailed, "JPEG: \(errorText)") }
        return Array(UnsafeBufferPointer(start: out, count: Int(size)))
    }
}

extension JPEGSubsampling {
    /// TurboJPEG's constant for this subsampling.
    var turboValue: Int32 {
        switch self {
        case .s444: Int32(TJSAMP_444.rawValue)
        case .s422: Int32(TJSAMP_422.rawValue)
        case .s420: Int32(TJSAMP_420.rawValue)
        case .grey: Int32(TJSAMP_GRAY.rawValue)
        }
    }
}
