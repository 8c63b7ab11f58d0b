import ArgumentParser
import Dispatch
import Foundation
import TroveCodec
import TroveOrigin

#if canImport(Glibc)
    import Glibc
#endif

extension TroveCommand {
    struct Origin: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Serve a directory's files over HTTP on loopback: an origin for demos and tests, not production.",
            discussion: """
                Serves the regular files under DIR (no listings, nothing outside it) over \
                HTTP/1.1 with ETag and Last-Modified validators and 304 answers to conditional \
                requests, until SIGINT (Ctrl-C) or SIGTERM. It listens on a loopback address \
                only. Prints its base URL (http://127.0.0.1:PORT) on standard output; with \
                --port-file it also writes the port to that file once it listens (and removes \
                the file when it stops), so a script can wait for the file.

                --make-samples N first writes N sample images into DIR: sample-1.jpg … as \
                1600×1200 JPEG landscapes and, when N is 2 or more, the last one as a \
                1600×1200 PNG with transparency, a few hundred KB each. The same N gives the \
                same bytes on every run (with the same codec libraries); files that already \
                hold them are left alone, so their validators stay the same.

                Exit codes: 0 stopped by a signal; 64 bad arguments; 66 DIR cannot be served; \
                69 the address cannot be listened on (the port is taken); 73 a sample or the \
                port file cannot be written.
                """)

        @Argument(help: ArgumentHelp("The directory to serve.", valueName: "dir"))
        var directory: String

        @Option(help: "The port to listen on; 0 (the default) picks a free one.")
        var port = 0

        @Option(help: "The loopback address to listen on: 127.0.0.1 (the default), another 127.x.y.z, ::1 or localhost.")
        var host = "127.0.0.1"

        @Option(
            help: ArgumentHelp("A Cache-Control header sent with every file, such as max-age=60 or no-cache.", valueName: "value")
        )
        var cacheControl: String?

        @Option(help: ArgumentHelp("Write the port to this file once listening.", valueName: "file"))
        var portFile: String?

        @Option(help: ArgumentHelp("First write this many sample images into the directory (1–100).", valueName: "n"))
        var makeSamples: Int?

        func validate() throws {
            guard (0...65_535).contains(port) else { throw ValidationError("--port must be 0–65535, not \(port)") }
            guard Self.isLoopback(host) else {
                throw ValidationError(
                    "--host must be a loopback address (127.0.0.1, ::1, localhost), not \(host): "
                        + "this origin is for demos and tests, not for serving a network")
            }
            if let cacheControl, cacheControl.isEmpty || !cacheControl.allSatisfy({ $0.isASCII && !$0.isNewline && $0 >= " " }) {
                throw ValidationError("--cache-control must be one line of printable ASCII, such as max-age=60")
            }
            if let makeSamples, !(1...100).contains(makeSamples) {
                throw ValidationError("--make-samples must be 1–100, not \(makeSamples)")
            }
        }

        func run() async throws {
            // Signals are caught from here on: one arriving while samples are made stops the
            // origin as soon as it listens, through the same clean path.
            let termination = TerminationSignals()
            if let portFile { unlink(portFile) }  // a stale port must never be read as this one's
            if let makeSamples { try SampleImages.write(makeSamples, into: directory) }

            let server: OriginServer
            switch await Result(catchingAsync: { () async throws(OriginServerError) -> OriginServer in
                try await OriginServer.start(serving: directory, cacheControl: cacheControl, host: host, port: port)
            }) {
            case .success(let started): server = started
            case .failure(let error):
                try fail(error.message, code: error.code == .invalidDirectory ? ExitCodes.cannotRead : ExitCodes.cannotListen)
            }

            let baseURL = "http://\(host.contains(":") ? "[\(host)]" : host):\(server.port)"
            if let portFile, let failure = Self.writePortFile(portFile, port: server.port) {
                try? await server.shutdown()
                try fail("cannot write \(portFile): \(failure)", code: ExitCodes.cannotWrite)
            }
            printOut(baseURL)
            printError("serving \(directory) at \(baseURL)/ until SIGINT (Ctrl-C) or SIGTERM")

            let signal = await termination.next()
            try? await server.shutdown()
            if let portFile { unlink(portFile) }
            printError("origin stopped (\(signal == SIGINT ? "SIGINT" : "SIGTERM"))")
        }

        /// Whether `host` names a loopback address.
        static func isLoopback(_ host: String) -> Bool {
            if host == "localhost" || host == "::1" { return true }
            let parts = host.split(separator: ".", omittingEmptySubsequences: false)
            return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { $0.allSatisfy(\.isASCII) && UInt8($0) != nil }
        }

        /// Writes `port` and a newline to `path` whole (a temporary file renamed into place, so
        /// a reader never sees half of it); returns why it failed, or nil.
        private static func writePortFile(_ path: String, port: Int) -> String? {
            let temporary = path + ".tmp-\(getpid())"
            do {
                try Data("\(port)\n".utf8).write(to: URL(fileURLWithPath: temporary))
            } catch {
                return (error as NSError).localizedDescription
            }
            guard rename(temporary, path) == 0 else {
                let reason = String(cString: strerror(errno))
                unlink(temporary)
                return reason
            }
            return nil
        }
    }
}

extension ExitCodes {
    /// `trove origin` cannot listen on the address (the port is taken, or the address is not
    /// this machine's).
    static let cannotListen: Int32 = 69
}

extension Result where Failure == OriginServerError {
    /// The result of an async throwing call with a typed error.
    fileprivate init(catchingAsync body: () async throws(OriginServerError) -> Success) async {
        do throws(OriginServerError) {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}

/// SIGINT and SIGTERM, caught from its creation on and delivered in order of arrival.
///
/// Dispatch signal sources on Linux read the signals through a signalfd, so they are received
/// even when the process started with them blocked (as children of Foundation's `Process` do).
private final class TerminationSignals {
    private let sources: [any DispatchSourceSignal]
    private let stream: AsyncStream<Int32>

    init() {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
        self.stream = stream
        sources = [SIGINT, SIGTERM].map { number in
            // Ignored by default handling, so only the source sees it (and never kills us
            // before the origin has stopped).
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { continuation.yield(number) }
            source.resume()
            return source
        }
    }

    /// The first signal received (waiting for one if none has come yet).
    func next() async -> Int32 {
        var iterator = stream.makeAsyncIterator()
        return await iterator.next() ?? SIGTERM
    }

    deinit {
        for source in sources { source.cancel() }
    }
}

// MARK: - Sample images

/// Deterministic sample pictures for demos and tests: landscapes (a sky gradient, a sun with
/// its glow, three ranges of hills, a fine grain so they compress like photographs) as JPEG,
/// and a graphic with transparency as PNG. Each is 1600×1200 and a few hundred KB.
enum SampleImages {
    static let width = 1600
    static let height = 1200

    /// The file names of `count` samples: `sample-1.jpg` …, the last a `.png` when `count` ≥ 2.
    static func names(_ count: Int) -> [String] {
        (1...count).map { $0 == count && count >= 2 ? "sample-\($0).png" : "sample-\($0).jpg" }
    }

    /// Writes `count` samples into `directory` (made if missing), leaving alone files that
    /// already hold the same bytes. Fails with exit code 73.
    static func write(_ count: Int, into directory: String) throws {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            try fail("cannot create \(directory): \((error as NSError).localizedDescription)", code: ExitCodes.cannotWrite)
        }
        for (index, name) in names(count).enumerated() {
            let path = (directory as NSString).appendingPathComponent(name)
            let encoded: Result<[UInt8], CodecError> =
                name.hasSuffix(".png")
                ? Result(catching: { () throws(CodecError) in try ImageEncoder.png(graphic(index)) })
                : Result(catching: { () throws(CodecError) in try ImageEncoder.jpeg(landscape(index), quality: 90) })
            guard case .success(let bytes) = encoded else {
                try fail("cannot encode sample \(name): \(encoded)", code: ExitCodes.cannotWrite)
            }
            let data = Data(bytes)
            if FileManager.default.contents(atPath: path) == data { continue }
            do {
                try data.write(to: URL(fileURLWithPath: path), options: .atomic)
            } catch {
                try fail("cannot write \(path): \((error as NSError).localizedDescription)", code: ExitCodes.cannotWrite)
            }
        }
    }

    private typealias Colour = (r: Double, g: Double, b: Double)

    /// Sky top and horizon, sun, and the hills from back to front.
    private static let palettes: [(skyTop: Colour, horizon: Colour, sun: Colour, hills: [Colour])] = [
        ((24, 48, 110), (250, 176, 120), (255, 236, 190), [(140, 110, 150), (86, 72, 118), (40, 36, 70)]),
        ((70, 140, 220), (200, 228, 250), (255, 252, 235), [(120, 170, 140), (70, 135, 90), (34, 90, 52)]),
        ((60, 30, 90), (240, 120, 140), (255, 210, 170), [(150, 90, 130), (100, 56, 100), (52, 28, 60)]),
        ((10, 20, 50), (40, 90, 120), (230, 235, 255), [(40, 70, 90), (24, 48, 66), (10, 26, 40)]),
    ]

    /// A landscape; `seed` picks the palette and places the sun and the hills.
    static func landscape(_ seed: Int) -> RGBAImage {
        let palette = palettes[seed % palettes.count]
        let w = Double(width)
        let h = Double(height)
        let phase = Double(seed) * 1.7
        let sunX = w * (0.2 + 0.6 * fraction(Double(seed) * 0.618 + 0.3))
        let sunY = h * (0.18 + 0.12 * fraction(Double(seed) * 0.414 + 0.5))
        let sunRadius = 80.0 + Double(seed % 3) * 15
        // Ridge heights per column, per range of hills.
        let ridges: [[Double]] = (0..<3).map { layer in
            let l = Double(layer)
            let base = h * (0.52 + 0.13 * l)
            let amplitude = h * (0.09 - 0.02 * l)
            return (0..<width).map { x in
                let t = Double(x) / w
                return base
                    - amplitude
                    * (0.6 * sin(t * (5 + 2 * l) + phase + l) + 0.3 * sin(t * (13 + 3 * l) + 2 * phase) + 0.1
                        * sin(t * 41 + l))
            }
        }
        var pixels = [UInt8](repeating: 255, count: width * height * 4)
        pixels.withUnsafeMutableBufferPointer { buffer in
            for y in 0..<height {
                let fy = Double(y)
                let t = min(1, fy / (h * 0.7))
                let sky = mix(palette.skyTop, palette.horizon, t * t * (3 - 2 * t))
                for x in 0..<width {
                    let fx = Double(x)
                    let distance = ((fx - sunX) * (fx - sunX) + (fy - sunY) * (fy - sunY)).squareRoot()
                    var colour = mix(sky, palette.sun, 0.55 * exp(-max(0, distance - sunRadius) / 140))
                    if distance < sunRadius {
                        // The disc, its edge anti-aliased into the glow.
                        colour = mix(palette.sun, colour, max(0, (distance - sunRadius + 1.5) / 1.5))
                    }
                    for layer in 0..<3 where fy >= ridges[layer][x] {
                        let depth = min(1, (fy - ridges[layer][x]) / 500)
                        // Anti-aliased ridge line, darker further below it.
                        let edge = min(1, fy - ridges[layer][x] + 0.5)
                        colour = mix(colour, scale(palette.hills[layer], 1 - 0.35 * depth), edge)
                    }
                    let grain = Double(noise(x, y, seed) % 9) - 4
                    let i = (y * width + x) * 4
                    buffer[i] = clamp(colour.r + grain)
                    buffer[i + 1] = clamp(colour.g + grain)
                    buffer[i + 2] = clamp(colour.b + grain)
                }
            }
        }
        return RGBAImage(width: width, height: height, pixels: pixels)
    }

    /// A graphic with a transparent background: overlapping soft discs and a ring.
    static func graphic(_ seed: Int) -> RGBAImage {
        let palette = palettes[(seed + 1) % palettes.count]
        let w = Double(width)
        let h = Double(height)
        var discs: [(x: Double, y: Double, radius: Double, colour: Colour)] = []
        for i in 0..<7 {
            let f = Double(i)
            discs.append(
                (
                    w * (0.15 + 0.7 * fraction(f * 0.618 + Double(seed) * 0.1)),
                    h * (0.2 + 0.6 * fraction(f * 0.414 + Double(seed) * 0.2)),
                    90 + 160 * fraction(f * 0.732),
                    i % 2 == 0 ? palette.hills[i % 3] : mix(palette.skyTop, palette.horizon, fraction(f * 0.3))
                ))
        }
        var pixels = [UInt8](repeating: 0, count: width * height * 4)
        pixels.withUnsafeMutableBufferPointer { buffer in
            for y in 0..<height {
                for x in 0..<width {
                    let fx = Double(x)
                    let fy = Double(y)
                    var colour: Colour = (0, 0, 0)
                    var alpha = 0.0
                    for disc in discs {
                        let distance = ((fx - disc.x) * (fx - disc.x) + (fy - disc.y) * (fy - disc.y)).squareRoot()
                        let cover = max(0, min(1, disc.radius - distance + 0.5))
                        guard cover > 0 else { continue }
                        // A radial shade, lighter at the centre, 85 % opaque.
                        let shaded = mix(scale(disc.colour, 1.25), disc.colour, distance / disc.radius)
                        let a = 0.85 * cover
                        colour = mix(colour, shaded, a / max(a, alpha + a * (1 - alpha)))
                        alpha = alpha + a * (1 - alpha)
                    }
                    let ring = abs(((fx - w / 2) * (fx - w / 2) + (fy - h / 2) * (fy - h / 2)).squareRoot() - 520)
                    let ringCover = max(0, min(1, 12 - ring + 0.5))
                    if ringCover > 0 {
                        colour = mix(colour, palette.sun, ringCover / max(ringCover, alpha + ringCover * (1 - alpha)))
                        alpha = alpha + ringCover * (1 - alpha)
                    }
                    let i = (y * width + x) * 4
                    buffer[i] = clamp(colour.r)
                    buffer[i + 1] = clamp(colour.g)
                    buffer[i + 2] = clamp(colour.b)
                    buffer[i + 3] = clamp(alpha * 255)
                }
            }
        }
        return RGBAImage(width: width, height: height, pixels: pixels)
    }

    private static func mix(_ a: Colour, _ b: Colour, _ t: Double) -> Colour {
        (a.r + (b.r - a.r) * t, a.g + (b.g - a.g) * t, a.b + (b.b - a.b) * t)
    }

    private static func scale(_ c: Colour, _ factor: Double) -> Colour {
        (c.r * factor, c.g * factor, c.b * factor)
    }

    private static func fraction(_ v: Double) -> Double { v - v.rounded(.down) }

    private static func clamp(_ v: Double) -> UInt8 { UInt8(max(0, min(255, v.rounded()))) }

    /// A hash of the pixel's place and the seed: the grain, the same on every machine.
    private static func noise(_ x: Int, _ y: Int, _ seed: Int) -> UInt64 {
        var z = UInt64(truncatingIfNeeded: x &* 73_856_093 ^ y &* 19_349_663 ^ seed &* 83_492_791)
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
