import Foundation
import Testing
import TroveCodec
import TroveCore
import TroveStoreTestSupport
import TroveTestSupport

@testable import Trove
@testable import TroveStore

@Suite struct ImageCacheTests {
    func picture(_ w: Int, _ h: Int, seed: UInt8 = 0) -> RGBAImage {
        var image = RGBAImage(width: w, height: h, filledWith: (seed, 120, 200, 255))
        for i in stride(from: 0, to: image.pixels.count, by: 4) { image.pixels[i + 1] = UInt8((i / 4) % 256) }
        return image
    }

    @Test func variantsAreMadeOnceStoredAndListed() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir)
            let images = ImageCache(store: store)
            let url = "https://img.example/photo.jpg"
            let jpeg = Data(try ImageEncoder.jpeg(picture(800, 600)))
            try images.storeOriginal(jpeg, for: url, metadata: EntryMetadata(etag: "\"p1\""))
            let v = Variant(width: 200, height: 200)
            let first = try #require(try images.variant(v, for: url))
            #expect(first.etag == "\"p1\"")
            let decoded = try ImageDecoder.decode([UInt8](first.data))
            #expect(decoded.format == .webp)
            #expect(decoded.image.width == 200 && decoded.image.height == 150)
            // The second request is a read of the stored variant, the same bytes.
            #expect(try images.variant(v, for: url)?.data == first.data)
            _ = try images.variant(Variant(width: 64, height: 64, fit: .fill), for: url)
            #expect(try images.variants(for: url).map(\.description).sorted() == ["w200-h200-inside-q80", "w64-h64-fill-q80"])
            #expect(try images.variant(v, for: "https://img.example/none.jpg") == nil)
        }
    }

    @Test func aChangedOriginalInvalidatesItsVariants() async throws {
        try await withTemporaryDirectory { dir in
            let images = ImageCache(store: try openStore(dir))
            let url = "https://img.example/a.png"
            try images.storeOriginal(Data(try ImageEncoder.png(picture(300, 300, seed: 1))), for: url)
            let old = try #require(try images.variant(Variant(width: 100, height: 100), for: url)).data
            // Re-storing the same bytes keeps the variants.
            try images.storeOriginal(Data(try ImageEncoder.png(picture(300, 300, seed: 1))), for: url)
            #expect(try images.variants(for: url).count == 1)
            // New bytes: the variants made from the old ones go.
            try images.storeOriginal(Data(try ImageEncoder.png(picture(300, 300, seed: 250))), for: url)
            #expect(try images.variants(for: url).isEmpty)
            let new = try #require(try images.variant(Variant(width: 100, height: 100), for: url)).data
            #expect(new != old)
            #expect(try images.removeAll(url: url) == 2)
        }
    }

    @Test func undecodableOriginalsAreRefusedAndNothingPartialIsStored() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir)
            let images = ImageCache(store: store)
            #expect(throws: CodecError.self) { try images.storeOriginal(Data("not an image".utf8), for: "u") }
            // A truncated JPEG is stored as an original (its header is fine) but yields no variant.
            let jpeg = try ImageEncoder.jpeg(picture(400, 300))
            try images.storeOriginal(Data(jpeg.prefix(jpeg.count / 2)), for: "t")
            let error = #expect(throws: CodecError.self) { try images.variant(Variant(width: 64, height: 64), for: "t") }
            #expect(error?.code == .truncated || error?.code == .corrupt)
            #expect(try images.variants(for: "t").isEmpty)
            #expect(try store.statistics().entries == 1)
        }
    }
}
