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
    }

    init(compressing: Bool) throws(CodecError) {
        guard let handle = compressing ? tjInitCompress() : tjInitDecompress() else {
            throw CodecError(.encodeFailed, "TurboJPEG could not start")
        }
        self.handle = handle
    }

    deinit { tjDestroy(handle) }

    private var errorText: String { String(cString: tjGetErrorStr2(handle)) }

    private func failure(_ what: String) -> CodecError {
        let text = errorText
        let truncated = text.contains("Premature end") || text.contains("premature end")
        return CodecError(truncated ? .truncated : .corrupt, "JPEG \(what): \(text)")
    }

    func header(_ data: UnsafeRawBufferPointer) throws(CodecError) -> Header {
        var width: Int32 = 0
        var height: Int32 = 0
        var subsampling: Int32 = 0
        var colorspace: Int32 = 0
        let base = data.baseAddress!.assumingMemoryBound(to: UInt8.self)
        guard tjDecompressHeader3(handle, base, UInt(data.count), &width, &height, &subsampling, &colorspace) == 0 else {
            throw failure("header")
        }
        return Header(width: Int(width), height: Int(height), subsampling: subsampling, colorspace: colorspace)
    }

    /// The DCT scaling factors TurboJPEG offers, largest first.
    static let scalingFactors: [tjscalingfactor] = {
        var count: Int32 = 0
        guard let factors = tjGetScalingFactors(&count) else { return [tjscalingfactor(num: 1, denom: 1)] }
        return (0..<Int(count)).map { factors[$0] }.sorted { $0.num * $1.denom > $1.num * $0.denom }
    }()

    /// The size of a `width × height` image decoded at `factor`.
    static func scaled(_ width: Int, _ height: Int, by factor: tjscalingfactor) -> (Int, Int) {
        (Int(CTurboJPEG_scaled(Int32(width), factor)), Int(CTurboJPEG_scaled(Int32(height), factor)))
    }

    /// Decodes at `factor` into RGBA. Warnings (truncated or damaged data) are errors: a
    /// partial image is never returned.
    func decode(_ data: UnsafeRawBufferPointer, header: Header, factor: tjscalingfactor) throws(CodecError) -> RGBAImage {
        let (width, height) = Self.scaled(header.width, header.height, by: factor)
        var pixels = [UInt8](repeating: 0, count: width * height * 4)
        let base = data.baseAddress!.assumingMemoryBound(to: UInt8.self)
        let status = pixels.withUnsafeMutableBufferPointer { out in
            tjDecompress2(
                handle, base, UInt(data.count), out.baseAddress, Int32(width), Int32(width * 4), Int32(height),
                Int32(TJPF_RGBA.rawValue), TJFLAG_STOPONWARNING)
        }
        guard status == 0 else { throw failure("data") }
        return RGBAImage(width: width, height: height, pixels: pixels)
    }

    /// Encodes RGBA as a baseline (or progressive) JPEG. For making test images and for tools.
    /// - Parameter cmyk: read the four bytes of each pixel as C, M, Y, K and write a CMYK JPEG
    ///   (for tests of the refusal of CMYK input).
    func encode(
        _ image: RGBAImage, quality: Int, subsampling: Int32 = Int32(TJSAMP_420.rawValue), progressive: Bool = false,
        cmyk: Bool = false
    ) throws(CodecError) -> [UInt8] {
        var out: UnsafeMutablePointer<UInt8>?
        var size: UInt = 0
        let status = image.pixels.withUnsafeBufferPointer { pixels in
            tjCompress2(
                handle, pixels.baseAddress, Int32(image.width), Int32(image.width * 4), Int32(image.height),
                Int32(cmyk ? TJPF_CMYK.rawValue : TJPF_RGBA.rawValue), &out, &size, subsampling, Int32(quality),
                progressive ? TJFLAG_PROGRESSIVE : 0)
        }
        defer { tjFree(out) }
        guard status == 0, let out else { throw CodecError(.encodeFailed, "JPEG: \(errorText)") }
        return Array(UnsafeBufferPointer(start: out, count: Int(size)))
    }
}
