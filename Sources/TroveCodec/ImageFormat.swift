/// Bounds checked against an image's header before any pixel memory is allocated.
public struct DecodeLimits: Sendable, Hashable {
    /// The largest width or height accepted. Default: 30 000.
    public var maxDimension: Int = 30_000
    /// The largest pixel count (width × height) accepted. Default: 100 000 000 (100 MP, 400 MB
    /// of RGBA at full size — shrink-on-load usually decodes far less).
    public var maxPixels: Int = 100_000_000
    /// The largest encoded input accepted, in bytes. Default: 64 MiB.
    public var maxInputBytes: Int = 64 << 20

    /// The defaults.
    public init() {}

    func check(width: Int, height: Int) throws(CodecError) {
        guard width > 0, height > 0 else { throw CodecError(.corrupt, "the header gives a \(width)×\(height) image") }
        guard width <= maxDimension, height <= maxDimension else {
            throw CodecError(.tooLarge, "\(width)×\(height) is over the limit of \(maxDimension) pixels a side")
        }
        guard width.multipliedReportingOverflow(by: height).partialValue <= maxPixels else {
            throw CodecError(.tooLarge, "\(width)×\(height) is over the limit of \(maxPixels) pixels")
        }
    }
}
