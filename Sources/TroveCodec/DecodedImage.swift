public import TroveCore

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
