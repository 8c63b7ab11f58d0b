/// A downsampled rendition of an image: a target box, how the image fits it, and the WebP
/// encoding. Its canonical text is the variant part of a ``CacheKey``.
///
/// Text form, every field always present and in this order, so one variant has one text:
/// `w256-h256-inside-q80` (`fit` is `inside`, `fill` or `exact`; `q` is 1–100, or `lossless`),
/// then `-upscale` when upscaling is allowed. Parsing is strict: any other spelling is refused.
public struct Variant: Hashable, Sendable, CustomStringConvertible {
    /// How the image fits the box.
    public enum Fit: String, Sendable, CaseIterable {
        /// The whole image inside the box, aspect kept (one side may be shorter).
        case inside
        /// The box covered, aspect kept, the excess cropped from the centre.
        case fill
        /// Exactly the box, stretched.
        case exact
    }

    /// Box width, 1–16383 (WebP's limit).
    public var width: Int
    /// Box height, 1–16383.
    public var height: Int
    /// How the image fits the box.
    public var fit: Fit
    /// WebP quality 1–100 for lossy encoding; nil for lossless.
    public var quality: Int?
    /// Whether an image smaller than the box may be enlarged. Default: no.
    public var allowsUpscaling: Bool

    /// The largest box side.
    public static let maximumSide = 16383

    /// Makes a variant. Default: fit inside, quality 80, no upscaling.
    public init(width: Int, height: Int, fit: Fit = .inside, quality: Int? = 80, allowsUpscaling: Bool = false) {
        self.width = width
        self.height = height
        self.fit = fit
        self.quality = quality
        self.allowsUpscaling = allowsUpscaling
    }

    /// Whether the fields are in range.
    public var isValid: Bool {
        (1...Self.maximumSide).contains(width) && (1...Self.maximumSide).contains(height)
            && (quality.map { (1...100).contains($0) } ?? true)
    }

    /// The canonical text.
    public var description: String {
        "w\(width)-h\(height)-\(fit.rawValue)-\(quality.map { "q\($0)" } ?? "lossless")" + (allowsUpscaling ? "-upscale" : "")
    }

    /// Parses the canonical text strictly; nil for anything else.
    public init?(parsing text: String) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 4 || parts.count == 5 && parts[4] == "upscale" else { return nil }
        func number(_ s: String, prefix: Character) -> Int? {
            guard s.first == prefix, s.count >= 2, s.dropFirst().allSatisfy(\.isASCII), s.dropFirst().allSatisfy(\.isNumber),
                s.dropFirst().first != "0", let v = Int(s.dropFirst())
            else { return nil }
            return v
        }
        guard let w = number(parts[0], prefix: "w"), let h = number(parts[1], prefix: "h"),
            let fit = Fit(rawValue: parts[2])
        else { return nil }
        let quality: Int?
        if parts[3] == "lossless" {
            quality = nil
        } else if let q = number(parts[3], prefix: "q") {
            quality = q
        } else {
            return nil
        }
        self.init(width: w, height: h, fit: fit, quality: quality, allowsUpscaling: parts.count == 5)
        guard isValid else { return nil }
    }

    /// The size the image is resampled to (before a `fill` crop), and the final size, for a
    /// source of `width × height` (already upright).
    public func sizes(forSourceWidth sw: Int, height sh: Int) -> (resampled: (Int, Int), final: (Int, Int)) {
        let bw = Double(width)
        let bh = Double(height)
        let w = Double(sw)
        let h = Double(sh)
        func clamp(_ s: Double) -> Double { allowsUpscaling ? s : min(s, 1) }
        func size(_ scale: Double) -> (Int, Int) { (max(1, Int((w * scale).rounded())), max(1, Int((h * scale).rounded()))) }
        switch fit {
        case .inside:
            let s = size(clamp(min(bw / w, bh / h)))
            return (s, s)
        case .fill:
            let s = size(clamp(max(bw / w, bh / h)))
            return (s, (min(width, s.0), min(height, s.1)))
        case .exact:
            let s = allowsUpscaling ? (width, height) : (min(width, sw), min(height, sh))
            return (s, s)
        }
    }
}
