/// The encoded image formats Trove knows (decoded by TroveCodec, sniffed by TroveHTTP).
public enum ImageFormat: String, Sendable, CaseIterable {
    case jpeg, png, webp

    /// The format of `data`, from its first bytes; nil when it is none of these.
    public static func sniff(_ data: some Collection<UInt8>) -> ImageFormat? {
        let head = Array(data.prefix(12))
        if head.starts(with: [0xFF, 0xD8, 0xFF]) { return .jpeg }
        if head.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return .png }
        if head.count >= 12, head.starts(with: Array("RIFF".utf8)), Array(head[8..<12]) == Array("WEBP".utf8) {
            return .webp
        }
        return nil
    }
}
