/// Encoders, for tools and for making test images.
public enum ImageEncoder {
    /// WebP, lossy at `quality` (alpha kept) or lossless when `quality` is nil.
    public static func webp(_ image: RGBAImage, quality: Int? = 80) throws(CodecError) -> [UInt8] {
        try WebP.encode(image, quality: quality ?? 100, lossless: quality == nil)
    }

    /// JPEG (alpha dropped) at `quality`, 4:2:0 unless told; progressive on request.
    public static func jpeg(
        _ image: RGBAImage, quality: Int = 90, subsampling: JPEGSubsampling = .s420, progressive: Bool = false
    ) throws(CodecError) -> [UInt8] {
        try TurboJPEG(compressing: true).encode(image, quality: quality, subsampling: subsampling, progressive: progressive)
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
}
