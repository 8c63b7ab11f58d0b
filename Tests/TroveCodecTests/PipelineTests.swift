import Foundation
import Testing
import TroveCore
import TroveTestSupport

@testable import TroveCodec

@Suite struct OrientationTests {
    @Test(arguments: Orientation.allCases)
    func everyOrientationComesOutUpright(orientation: Orientation) throws {
        // An upright 120×80 picture, stored as the camera would for this orientation.
        let upright = quadrants(120, 80)
        let raw = stored(upright, for: orientation)
        #expect(orientation.apply(to: raw) == upright)
        for bigEndian in [false, true] {
            let jpeg = withExifOrientation(
                try ImageEncoder.jpeg(raw, quality: 95, subsampling: .s444), orientation.rawValue, bigEndian: bigEndian)
            #expect(Orientation.fromJPEG(jpeg) == orientation)
            let thumb = try ImageDecoder.thumbnail(jpeg, variant: Variant(width: 60, height: 60, quality: nil))
            #expect(thumb.width == 60 && thumb.height == 40, "\(orientation)")
            let image = try ImageDecoder.decode(thumb.data).image
            // Quadrant centres: red top left, green top right, blue bottom left, white bottom right.
            func near(_ p: (r: UInt8, g: UInt8, b: UInt8, a: UInt8), _ c: (Int, Int, Int)) -> Bool {
                abs(Int(p.r) - c.0) < 40 && abs(Int(p.g) - c.1) < 40 && abs(Int(p.b) - c.2) < 40
            }
            #expect(near(image[15, 10], (230, 20, 20)), "\(orientation): top left")
            #expect(near(image[45, 10], (20, 230, 20)), "\(orientation): top right")
            #expect(near(image[15, 30], (20, 20, 230)), "\(orientation): bottom left")
            #expect(near(image[45, 30], (240, 240, 240)), "\(orientation): bottom right")
        }
    }

    @Test func hostileExifIsIgnored() throws {
        let jpeg = try ImageEncoder.jpeg(smooth(8, 8))
        var broken = withExifOrientation(jpeg, 6)
        broken[20] = 0xFF  // IFD offset far past the segment
        broken[21] = 0xFF
        #expect(Orientation.fromJPEG(broken) == .up)
        #expect(Orientation.fromJPEG(withExifOrientation(jpeg, 9)) == .up)  // not an orientation
        #expect(Orientation.fromJPEG([0xFF, 0xD8, 0xFF, 0xE1, 0xFF, 0xFF]) == .up)  // length past the end
        #expect(Orientation.fromJPEG(jpeg) == .up)
    }
}

@Suite struct ResamplingTests {
    @Test(arguments: [(800, 600, 200, 150), (1000, 1000, 256, 256), (640, 480, 97, 73), (300, 200, 150, 100)])
    func downsamplingIsCloseToTheSampledPicture(sw: Int, sh: Int, dw: Int, dh: Int) {
        let result = Resampler.resize(smooth(sw, sh), width: dw, height: dh)
        // The reference: the same smooth function sampled directly at the output's pixel centres.
        let reference = smooth(dw, dh)
        #expect(psnr(result, reference) > 38, "\(sw)×\(sh) → \(dw)×\(dh): \(psnr(result, reference)) dB")
    }

    @Test func upsamplingKeepsFlatAreasFlat() {
        let flat = RGBAImage(width: 10, height: 10, filledWith: (90, 160, 30, 255))
        let big = Resampler.resize(flat, width: 37, height: 23)
        #expect(big.pixels == RGBAImage(width: 37, height: 23, filledWith: (90, 160, 30, 255)).pixels)
    }

    @Test func boxReductionKeepsFlatAreasAndAlphaEdgesClean() {
        let flat = RGBAImage(width: 101, height: 67, filledWith: (90, 160, 30, 200))
        let reduced = Resampler.reduce(flat, by: 4)
        #expect(reduced.width == 26 && reduced.height == 17)
        #expect(reduced.pixels == RGBAImage(width: 26, height: 17, filledWith: (90, 160, 30, 200)).pixels)
        // Half opaque red, half fully transparent black: the mixed blocks stay pure red.
        var image = RGBAImage(width: 8, height: 8, filledWith: (0, 0, 0, 0))
        for y in 0..<8 { for x in 0..<3 { let i = (y * 8 + x) * 4; (image.pixels[i], image.pixels[i + 3]) = (255, 255) } }
        let half = Resampler.reduce(image, by: 2)
        #expect(half[1, 0] == (255, 0, 0, 128))
        // The thumbnail path (reduce, then Lanczos) is as close to the sampled picture as Lanczos alone.
        let big = smooth(2000, 1500)
        #expect(psnr(Resampler.thumbnail(big, width: 200, height: 150), smooth(200, 150)) > 38)
    }

    @Test func transparentSurroundingsDoNotDarkenEdges() {
        // An opaque red disc on fully transparent black.
        var image = RGBAImage(width: 200, height: 200, filledWith: (0, 0, 0, 0))
        for y in 0..<200 {
            for x in 0..<200 where (x - 100) * (x - 100) + (y - 100) * (y - 100) < 70 * 70 {
                let i = (y * 200 + x) * 4
                (image.pixels[i], image.pixels[i + 3]) = (255, 255)
            }
        }
        let small = Resampler.resize(image, width: 37, height: 37)
        var edge = 0
        for i in stride(from: 0, to: small.pixels.count, by: 4) where small.pixels[i + 3] > 8 {
            #expect(small.pixels[i] > 235, "a dark fringe at \(i / 4): r \(small.pixels[i]) a \(small.pixels[i + 3])")
            if small.pixels[i + 3] < 250 { edge += 1 }
        }
        #expect(edge > 10)  // there are semi-transparent edge pixels, and none is dark
    }
}

@Suite struct VariantTests {
    @Test func canonicalTextRoundTrips() {
        let variants = [
            Variant(width: 256, height: 256), Variant(width: 1, height: 16383, fit: .fill, quality: 1),
            Variant(width: 640, height: 480, fit: .exact, quality: nil, allowsUpscaling: true),
        ]
        for v in variants {
            #expect(Variant(parsing: v.description) == v, "\(v)")
        }
        #expect(Variant(width: 256, height: 256).description == "w256-h256-inside-q80")
        #expect(
            Variant(width: 64, height: 32, fit: .exact, quality: nil, allowsUpscaling: true).description
                == "w64-h32-exact-lossless-upscale")
    }

    @Test(arguments: [
        "", "w256", "w256-h256-inside", "w256-h256-inside-q80-", "W256-h256-inside-q80", "w256-h256-Inside-q80",
        "w0256-h256-inside-q80", "w0-h256-inside-q80", "w16384-h1-inside-q80", "w256-h256-inside-q0", "w256-h256-inside-q101",
        "w256-h256-inside-q80-upscale-upscale", "w256-h256-inside-q80-x", "w-1-h256-inside-q80", "w256-h256-cover-q80",
        "w25x-h256-inside-q80", "w256-h256-inside-lossless-q80", " w256-h256-inside-q80", "w256-h256-inside-q８０",
    ])
    func strictParsingRefuses(text: String) {
        #expect(Variant(parsing: text) == nil)
    }

    @Test func sizesForEachFit() {
        let inside = Variant(width: 256, height: 256)
        #expect(inside.sizes(forSourceWidth: 4000, height: 3000).final == (256, 192))
        #expect(inside.sizes(forSourceWidth: 100, height: 50).final == (100, 50))  // no upscaling
        #expect(
            Variant(width: 256, height: 256, allowsUpscaling: true).sizes(forSourceWidth: 100, height: 50).final == (256, 128))
        let fill = Variant(width: 256, height: 256, fit: .fill)
        let f = fill.sizes(forSourceWidth: 4000, height: 3000)
        #expect(f.resampled == (341, 256))
        #expect(f.final == (256, 256))
        #expect(Variant(width: 300, height: 100, fit: .exact).sizes(forSourceWidth: 4000, height: 3000).final == (300, 100))
        #expect(Variant(width: 300, height: 100, fit: .exact).sizes(forSourceWidth: 200, height: 50).final == (200, 50))
    }

    @Test func fillCropsTheCentre() throws {
        let thumb = try ImageDecoder.thumbnail(
            try ImageEncoder.png(quadrants(400, 200)), variant: Variant(width: 100, height: 100, fit: .fill, quality: nil))
        #expect(thumb.width == 100 && thumb.height == 100)
        let image = try ImageDecoder.decode(thumb.data).image
        // The centre of a 2:1 picture: all four quadrants meet in the middle.
        #expect(image[25, 25].r > 200 && image[75, 25].g > 200)
    }

    @Test func alphaSurvivesThePipeline() throws {
        var image = smooth(300, 300)
        for i in stride(from: 3, to: image.pixels.count, by: 4) where (i / 4) % 300 < 150 { image.pixels[i] = 0 }
        let thumb = try ImageDecoder.thumbnail(try ImageEncoder.png(image), variant: Variant(width: 100, height: 100))
        let out = try ImageDecoder.decode(thumb.data).image
        #expect(out[10, 50].a < 10)
        #expect(out[90, 50].a > 245)
    }
}

@Suite struct HostileInputTests {
    static let samples: [(String, [UInt8])] = {
        let image = smooth(64, 48, alpha: 200)
        return [
            ("jpeg", try! ImageEncoder.jpeg(image)), ("jpeg progressive", try! ImageEncoder.jpeg(image, progressive: true)),
            ("png", try! ImageEncoder.png(image)), ("png interlaced", try! ImageEncoder.png(image, interlaced: true)),
            ("webp lossy", try! ImageEncoder.webp(image)), ("webp lossless", try! ImageEncoder.webp(image, quality: nil)),
        ]
    }()

    @Test func thousandsOfMutationsGiveTypedErrorsOrWholeImages() {
        var generator = SeededGenerator(seed: 99)
        var failures = 0
        var decoded = 0
        for (name, data) in Self.samples {
            for round in 0..<500 {
                var bytes = data
                for _ in 0..<Int.random(in: 1...8, using: &generator) {
                    let i = Int.random(in: 0..<bytes.count, using: &generator)
                    switch Int.random(in: 0..<3, using: &generator) {
                    case 0: bytes[i] = UInt8.random(in: 0...255, using: &generator)
                    case 1: bytes[i] ^= 1 << UInt8.random(in: 0..<8, using: &generator)
                    default: bytes.insert(contentsOf: [0xFF, 0xFF, 0xFF, 0xFF], at: i)
                    }
                }
                do {
                    let image = try ImageDecoder.decode(bytes).image
                    #expect(image.pixels.count == image.width * image.height * 4, "\(name) round \(round)")
                    decoded += 1
                } catch {
                    failures += 1
                }
                _ = try? ImageDecoder.thumbnail(bytes, variant: Variant(width: 16, height: 16))
            }
        }
        // Both outcomes happened: the mutations were not all harmless, nor all fatal.
        #expect(failures > 300)
        #expect(decoded > 100)
    }

    @Test func truncationsAtEveryLengthClassAreRefused() {
        for (name, data) in Self.samples {
            var lengths = Array(0..<min(64, data.count))
            lengths += stride(from: 64, to: data.count - 16, by: 7)
            for n in lengths {
                let cut = Array(data.prefix(n))
                #expect(throws: CodecError.self, "\(name) cut to \(n) of \(data.count)") { try ImageDecoder.decode(cut) }
            }
        }
    }

    @Test func hugeDimensionsAreRefusedFromTheHeader() throws {
        // PNG: IHDR patched to 60000×60000 with its CRC recomputed.
        var png = try ImageEncoder.png(smooth(4, 4))
        let ihdr = 8 + 8  // signature, length and type
        for (k, v) in [(0, 60000), (4, 60000)] {
            png[ihdr + k] = UInt8(v >> 24)
            png[ihdr + k + 1] = UInt8((v >> 16) & 0xFF)
            png[ihdr + k + 2] = UInt8((v >> 8) & 0xFF)
            png[ihdr + k + 3] = UInt8(v & 0xFF)
        }
        let crc = crc32(png[12..<(12 + 4 + 13)])
        png[29] = UInt8(crc >> 24)
        png[30] = UInt8((crc >> 16) & 0xFF)
        png[31] = UInt8((crc >> 8) & 0xFF)
        png[32] = UInt8(crc & 0xFF)
        let pngError = #expect(throws: CodecError.self) { try ImageDecoder.decode(png) }
        #expect(pngError?.code == .tooLarge)

        // JPEG: the SOF0 frame header patched to 60000×60000.
        var jpeg = try ImageEncoder.jpeg(smooth(16, 16))
        let sof = try #require((0..<(jpeg.count - 1)).first { jpeg[$0] == 0xFF && jpeg[$0 + 1] == 0xC0 })
        jpeg[sof + 5] = 0xEA
        jpeg[sof + 6] = 0x60
        jpeg[sof + 7] = 0xEA
        jpeg[sof + 8] = 0x60
        let jpegError = #expect(throws: CodecError.self) { try ImageDecoder.decode(jpeg) }
        #expect(jpegError?.code == .tooLarge)
        let thumbError = #expect(throws: CodecError.self) {
            try ImageDecoder.thumbnail(jpeg, variant: Variant(width: 256, height: 256))
        }
        #expect(thumbError?.code == .tooLarge)

        // WebP's own maximum is 16383 a side: 16383×16383 is 268 MP, over the 100 MP default.
        var limits = DecodeLimits()
        limits.maxPixels = 1_000
        let webpError = #expect(throws: CodecError.self) {
            try ImageDecoder.decode(ImageEncoder.webp(smooth(64, 48)), limits: limits)
        }
        #expect(webpError?.code == .tooLarge)
        // And input over the byte limit is refused before it is parsed.
        limits = DecodeLimits()
        limits.maxInputBytes = 100
        #expect(throws: CodecError.self) { try ImageDecoder.decode(ImageEncoder.png(smooth(64, 48)), limits: limits) }
    }
}
