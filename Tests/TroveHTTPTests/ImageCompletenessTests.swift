import Testing
import TroveCore
import TroveTestSupport

@testable import TroveHTTP

/// The structural end-of-image check that catches bodies HTTP framing cannot reveal as cut.
@Suite("ImageCompleteness")
struct ImageCompletenessTests {
    private func isComplete(_ bytes: [UInt8]) -> Bool {
        guard let format = ImageFormat.sniff(bytes) else { return false }
        return bytes.withUnsafeBytes { ImageCompleteness.isComplete($0, format: format) }
    }

    /// A JPEG with the parts a marker walk must get right: an EXIF thumbnail whose own EOI sits
    /// inside APP1, fill bytes, two scans with stuffed FF 00 bytes and a restart marker, stray
    /// bytes between segments, and data after EOI (as in a Motion Photo).
    private var trickyJPEG: [UInt8] {
        let thumbnail: [UInt8] = [0xFF, 0xD8, 0xFF, 0xDB, 0x00, 0x03, 0x01, 0xFF, 0xD9]
        let app1 = [0xFF, 0xE1, 0x00, UInt8(2 + 6 + thumbnail.count)] + Array("Exif\0\0".utf8) + thumbnail
        let quantization: [UInt8] = [0xFF, 0xDB, 0x00, 0x04, 0x00, 0x01]
        let firstScan: [UInt8] =
            [0xFF, 0xDA, 0x00, 0x03, 0x01] + [0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD0, 0x56, 0xFF, 0x00, 0xFF, 0xFF]
        let secondScan: [UInt8] = [0xFF, 0xDA, 0x00, 0x03, 0x02] + [0x78, 0xFF, 0x00, 0x9A]
        return [0xFF, 0xD8] + app1 + [0xFF, 0xFF] + quantization + [0x00, 0x00] + firstScan + [0xFF, 0xC4, 0x00, 0x02]
            + secondScan + [0xFF, 0xD9] + Array("ftypmp42 and a video".utf8)
    }

    @Test func aJPEGIsWholeOnlyFromItsEndOfImageMarkerOn() {
        let jpeg = trickyJPEG
        let end = jpeg.count - "ftypmp42 and a video".utf8.count
        #expect(isComplete(jpeg))
        #expect(isComplete(Array(jpeg[..<end])))
        for cut in 3..<end {
            #expect(!isComplete(Array(jpeg[..<cut])), "cut at \(cut) of \(end)")
        }
    }

    @Test func generatedImagesAreWholeAndEveryPrefixIsNot() {
        for bytes in [jpegLike(count: 200_000), jpegLike(count: 8), pngLike(count: 5000), webpLike(count: 5000)] {
            #expect(isComplete(bytes))
            for cut in stride(from: 12, to: bytes.count, by: max(1, bytes.count / 200)) {
                #expect(!isComplete(Array(bytes[..<cut])), "cut at \(cut) of \(bytes.count)")
            }
        }
        #expect(isComplete(pngLike(count: 100) + [1, 2, 3]), "bytes after IEND are allowed")
    }

    @Test func aLengthFieldPastTheEndIsIncomplete() {
        var png = pngLike(count: 100)
        png[8...11] = [0x7F, 0xFF, 0xFF, 0xFF]  // the first chunk claims 2 GiB
        #expect(!isComplete(png))
        var webp = webpLike(count: 100)
        webp[4...7] = [0xFF, 0xFF, 0xFF, 0xFF]
        #expect(!isComplete(webp))
    }
}
