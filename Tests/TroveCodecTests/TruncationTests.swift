import Foundation
import Testing
import TroveCore
@testable import TroveCodec

/// A JPEG, PNG or WebP cut at any length is `.truncated` (or, cut inside PNG's last chunk,
/// still whole), never `.corrupt`, and never a crash or an untyped error.
@Suite struct TruncationTests {
    @Test(arguments: [ImageFormat.jpeg, .png, .webp])
    func everyPrefixIsTruncated(format: ImageFormat) throws {
        let image = smooth(40, 30)
        let data: [UInt8] =
            switch format {
            case .jpeg: try ImageEncoder.jpeg(image, quality: 90)
            case .png: try ImageEncoder.png(image)
            case .webp: try ImageEncoder.webp(image, quality: 80)
            }
        var bad: [String] = []
        for n in stride(from: 1, to: data.count, by: 1) {
            let cut = Array(data.prefix(n))
            for which in 0..<2 {
                do {
                    if which == 0 {
                        _ = try ImageDecoder.decode(cut)
                    } else {
                        _ = try ImageDecoder.thumbnail(cut, variant: Variant(width: 8, height: 8))
                    }
                    // A PNG cut inside IEND still holds the whole image.
                    if format != .png || n < data.count - 16 { bad.append("\(which) n=\(n): decoded") }
                } catch let e as CodecError {
                    // Too short to be sniffed at all.
                    if e.code != .truncated && !(e.code == .unknownFormat && n < 12) {
                        bad.append("\(which) n=\(n)/\(data.count): \(e.code) \(e.message)")
                    }
                } catch { bad.append("\(which) n=\(n): untyped \(error)") }
            }
        }
        #expect(bad.isEmpty, "\(format): \(bad.prefix(5))")
    }
}
