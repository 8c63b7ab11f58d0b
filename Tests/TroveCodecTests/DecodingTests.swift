import Foundation
import Testing
import TroveCore
import TroveTestSupport

@testable import TroveCodec

@Suite struct DecodingTests {
    @Test func formatsAreSniffed() throws {
        let image = smooth(16, 16)
        #expect(ImageFormat.sniff(try ImageEncoder.jpeg(image)) == .jpeg)
        #expect(ImageFormat.sniff(try ImageEncoder.png(image)) == .png)
        #expect(ImageFormat.sniff(try ImageEncoder.webp(image)) == .webp)
        #expect(ImageFormat.sniff(Array("GIF89a".utf8)) == nil)
        #expect(throws: CodecError.self) { try ImageDecoder.decode(Array("hello".utf8)) }
    }

    @Test(arguments: JPEGSubsampling.allCases)
    func jpegRoundTrips(subsampling: JPEGSubsampling) throws {
        for progressive in [false, true] {
            let image = smooth(96, 64)
            let data = try ImageEncoder.jpeg(image, quality: 95, subsampling: subsampling, progressive: progressive)
            let decoded = try ImageDecoder.decode(data)
            #expect(decoded.format == .jpeg)
            #expect(decoded.image.width == 96 && decoded.image.height == 64)
            #expect(decoded.image.isOpaque)
            if subsampling == .grey {
                let p = decoded.image[10, 10]
                #expect(p.r == p.g && p.g == p.b)
            } else {
                #expect(psnr(decoded.image, image) > 30, "\(subsampling) progressive \(progressive)")
            }
        }
    }

    /// An image cut short is `.truncated`, by the library's own code where it has one (PNG,
    /// WebP) and by TurboJPEG's message where only that tells (JPEG); a damaged one is not.
    @Test(arguments: [ImageFormat.jpeg, .png, .webp])
    func aCutImageIsTruncatedNotCorrupt(format: ImageFormat) throws {
        let image = smooth(64, 48)
        let data: [UInt8] =
            switch format {
            case .jpeg: try ImageEncoder.jpeg(image, quality: 90)
            case .png: try ImageEncoder.png(image)
            case .webp: try ImageEncoder.webp(image, quality: 80)
            }
        let cut = Array(data.prefix(data.count * 2 / 3))
        let error = #expect(throws: CodecError.self) { try ImageDecoder.decode(cut) }
        #expect(error?.code == .truncated, "\(format): \(error?.message ?? "")")
        #expect(TurboJPEG.isTruncation("Premature end of JPEG file"))
        #expect(!TurboJPEG.isTruncation("Corrupt JPEG data: bad Huffman code"))
    }

    @Test func cmykJPEGIsRefusedClearly() throws {
        let cmyk = try TurboJPEG(compressing: true).encode(smooth(16, 16), quality: 90, cmyk: true)
        let error = #expect(throws: CodecError.self) { try ImageDecoder.decode(cmyk) }
        #expect(error?.code == .unsupported)
        #expect(error?.message.contains("CMYK") == true)
        let thumbnail = #expect(throws: CodecError.self) {
            try ImageDecoder.thumbnail(cmyk, variant: Variant(width: 8, height: 8))
        }
        #expect(thumbnail?.code == .unsupported)
    }

    @Test func pngColourTypesDecodeToTheExpectedPixels() throws {
        let w = 5
        let h = 3
        // Grey 8.
        let grey = (0..<(w * h)).map { UInt8($0 * 17) }
        let g8 = try ImageDecoder.decode(ImageEncoder.png(width: w, height: h, colorType: 0, bitDepth: 8, samples: grey))
        #expect(g8.image[4, 2] == (238, 238, 238, 255))
        // Grey 16 (libspng takes host-endian samples): the high byte survives.
        let grey16: [UInt8] = grey.flatMap { [0x7F, $0] as [UInt8] }
        let g16 = try ImageDecoder.decode(ImageEncoder.png(width: w, height: h, colorType: 0, bitDepth: 16, samples: grey16))
        #expect(g16.image[1, 0].r == 17)
        // Grey + alpha.
        let ga: [UInt8] = grey.flatMap { [$0, 255 - $0] as [UInt8] }
        let gaImage = try ImageDecoder.decode(ImageEncoder.png(width: w, height: h, colorType: 4, bitDepth: 8, samples: ga)).image
        #expect(gaImage[2, 0] == (34, 34, 34, 221))
        // RGB 8 and RGBA 16.
        let rgb: [UInt8] = (0..<(w * h)).flatMap { [UInt8($0), 100, UInt8(255 - $0)] as [UInt8] }
        let rgbImage = try ImageDecoder.decode(ImageEncoder.png(width: w, height: h, colorType: 2, bitDepth: 8, samples: rgb))
            .image
        #expect(rgbImage[3, 1] == (8, 100, 247, 255))
        let rgba16: [UInt8] = (0..<(w * h)).flatMap { [0, UInt8($0), 0, 200, 0, 50, 0, 128] as [UInt8] }
        let r16 = try ImageDecoder.decode(ImageEncoder.png(width: w, height: h, colorType: 6, bitDepth: 16, samples: rgba16))
            .image
        #expect(r16[0, 1] == (5, 200, 50, 128))
        // Palette, and interlaced RGBA.
        let palette: [(UInt8, UInt8, UInt8)] = [(255, 0, 0), (0, 255, 0), (0, 0, 255)]
        let indices = (0..<(w * h)).map { UInt8($0 % 3) }
        let p = try ImageDecoder.decode(
            ImageEncoder.png(width: w, height: h, colorType: 3, bitDepth: 8, samples: indices, palette: palette)
        ).image
        #expect(p[1, 0] == (0, 255, 0, 255))
        let image = smooth(33, 17, alpha: 200)
        let interlaced = try ImageDecoder.decode(ImageEncoder.png(image, interlaced: true)).image
        #expect(interlaced.pixels == image.pixels, "interlaced RGBA did not round-trip")
    }

    @Test func webpLossyLosslessAndAlpha() throws {
        var image = smooth(64, 48)
        for i in stride(from: 3, to: image.pixels.count, by: 4) { image.pixels[i] = UInt8((i / 4) % 256) }
        let lossless = try ImageDecoder.decode(ImageEncoder.webp(image, quality: nil)).image
        // Exact wherever a pixel is visible (WebP may drop the colour of fully transparent ones).
        var exact = true
        for i in stride(from: 0, to: image.pixels.count, by: 4) where image.pixels[i + 3] > 0 {
            if Array(lossless.pixels[i..<i + 4]) != Array(image.pixels[i..<i + 4]) { exact = false }
        }
        #expect(exact)
        let lossy = try ImageDecoder.decode(ImageEncoder.webp(image, quality: 90))
        #expect(!lossy.image.isOpaque)
        #expect(psnr(lossy.image, image) > 25)
        let scaled = try ImageDecoder.decode(ImageEncoder.webp(smooth(400, 300)), minimum: (100, 50))
        #expect(scaled.image.width == 100 && scaled.image.height == 75)
    }

    @Test func shrinkOnLoadPicksTheSmallestFactorThatStillCovers() throws {
        var generator = SeededGenerator(seed: 3)
        for _ in 0..<500 {
            let w = Int.random(in: 16...8000, using: &generator)
            let h = Int.random(in: 16...8000, using: &generator)
            let mw = Int.random(in: 1...w, using: &generator)
            let mh = Int.random(in: 1...h, using: &generator)
            let f = ImageDecoder.jpegShrink(width: w, height: h, minimum: (mw, mh))
            let scaled = { (num: Int, denom: Int) in ((w * num + denom - 1) / denom, (h * num + denom - 1) / denom) }
            let (sw, sh) = scaled(f.num, f.denom)
            #expect(sw >= mw && sh >= mh, "\(w)×\(h) for \(mw)×\(mh): \(f)")
            // No smaller factor offered by TurboJPEG would still cover the minimum.
            for smaller in [(7, 8), (3, 4), (5, 8), (1, 2), (3, 8), (1, 4), (1, 8)] where smaller.0 * f.denom < f.num * smaller.1
            {
                let (tw, th) = scaled(smaller.0, smaller.1)
                #expect(tw < mw || th < mh, "\(w)×\(h) for \(mw)×\(mh): \(smaller) would do")
            }
        }
        // A 12 MP photo for a 256 px thumbnail decodes at 1/8.
        #expect(ImageDecoder.jpegShrink(width: 4000, height: 3000, minimum: (256, 192)) == (1, 8))
        #expect(ImageDecoder.jpegShrink(width: 400, height: 300, minimum: (400, 300)) == (1, 1))
    }

    @Test func jpegShrinkOnLoadDecodesLess() throws {
        let data = try ImageEncoder.jpeg(smooth(800, 600))
        let small = try ImageDecoder.decode(data, minimum: (100, 75))
        #expect(small.image.width == 100 && small.image.height == 75)
        #expect(small.sourceWidth == 800)
        #expect(psnr(small.image, Resampler.resize(smooth(800, 600), width: 100, height: 75)) > 25)
    }
}
