public import TroveCore

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
