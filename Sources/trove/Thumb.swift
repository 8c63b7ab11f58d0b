import ArgumentParser
import Foundation
import Trove
import TroveCodec
import TroveCore

extension TroveCommand {
    struct Thumb: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make a downsampled WebP variant of an image file or of an image in the store.",
            discussion: """
                SOURCE is a file path, or a key (URL) already in the store, whose variant is then \
                stored too. Prints the output's size, bytes and the time taken. Without -o the \
                WebP bytes are not written anywhere but the store.
                """)

        enum Fit: String, EnumerableFlag {
            case fit, fill, exact
            var variantFit: Variant.Fit { self == .fit ? .inside : self == .fill ? .fill : .exact }
        }

        @OptionGroup var store: StoreOptions

        @Argument(help: "An image file, or a key in the store.")
        var source: String

        @Option(help: ArgumentHelp("The box, WIDTHxHEIGHT.", valueName: "size"))
        var size: String

        @Flag(help: "How the image fits the box: inside it (default), covering it, or stretched to it.")
        var fit: Fit = .fit

        @Option(help: "WebP quality, 1–100 (default 80).")
        var quality: Int?

        @Flag(help: "Encode lossless instead.")
        var lossless = false

        @Flag(help: "Allow enlarging an image smaller than the box.")
        var upscale = false

        @Option(name: .shortAndLong, help: "Write the WebP here.")
        var output: String?

        var box: (Int, Int)? {
            let parts = size.lowercased().split(separator: "x")
            guard parts.count == 2, let w = Int(parts[0]), let h = Int(parts[1]) else { return nil }
            return (w, h)
        }

        var variant: Variant {
            Variant(
                width: box!.0, height: box!.1, fit: fit.variantFit, quality: lossless ? nil : quality ?? 80,
                allowsUpscaling: upscale)
        }

        func validate() throws {
            guard box != nil else { throw ValidationError("--size must be WIDTHxHEIGHT, such as 256x256, not \(size)") }
            if lossless && quality != nil {
                throw ValidationError("--quality has no effect with --lossless; give one or the other")
            }
            guard variant.isValid else {
                throw ValidationError("--size sides must be 1–\(Variant.maximumSide) and --quality 1–100")
            }
        }

        func run() throws {
            if let output { try store.refuseOutputInsideStore(output) }
            let variant = variant
            let clock = ContinuousClock()
            let start = clock.now
            let bytes: [UInt8]
            let outputSize: (Int, Int)
            var detail = ""
            if FileManager.default.fileExists(atPath: source) {
                let input = [UInt8](try readInput(source, limit: DecodeLimits().maxInputBytes))
                // A Result, not do/catch: Swift 6.3.1 crashes compiling a typed-throws catch that
                // calls a Never-returning function here.
                switch Result(catching: { () throws(CodecError) in try ImageDecoder.thumbnail(input, variant: variant) }) {
                case .success(let thumbnail):
                    bytes = thumbnail.data
                    outputSize = (thumbnail.width, thumbnail.height)
                    detail =
                        " (decoded at \(thumbnail.decodedWidth)×\(thumbnail.decodedHeight) from a "
                        + "\(thumbnail.sourceWidth)×\(thumbnail.sourceHeight) \(thumbnail.sourceFormat.rawValue.uppercased()))"
                case .failure(let error):
                    try fail("\(source): \(error.message)", code: ExitCodes.badInput)
                }
            } else {
                let source = source
                let made = try store.withStore(creating: true) { store -> Result<Entry?, CodecError> in
                    do {
                        return .success(try ImageCache(store: store).variant(variant, for: source))
                    } catch let error as CodecError {
                        return .failure(error)
                    }
                }
                switch made {
                case .failure(let error): try fail("\(source): \(error.message)", code: ExitCodes.badInput)
                case .success(nil): try fail("no file and no entry for \(source)", code: ExitCodes.notFound)
                case .success(let entry?):
                    bytes = [UInt8](entry.data)
                    // The size from the WebP's header: the variant is not decoded again.
                    guard
                        case .success(let size) = Result(catching: { () throws(CodecError) in try ImageDecoder.dimensions(bytes) }
                        )
                    else { try fail("\(source): the stored variant is not a readable WebP", code: ExitCodes.storeFailure) }
                    outputSize = size
                    detail = " (stored as \(source) [\(variant)])"
                }
            }
            let elapsed = clock.now - start
            if let output { try writeOutput(Data(bytes), to: output, outside: store.directory) }
            let ms = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
            printOut(
                "\(outputSize.0)×\(outputSize.1) WebP, \(ByteCount(bytes.count)), " + String(format: "%.1f ms", ms) + detail)
        }
    }
}
