import Foundation
public import TroveCodec
import TroveCore

/// 256 px WebP thumbnails of large JPEGs and PNGs, made by Trove (with and without
/// shrink-on-load), by `vipsthumbnail` (all files in one call, so its start-up is paid once) and
/// by Pillow (`draft` + `thumbnail(LANCZOS)` + WebP save, timed in-process by Python), on the
/// same files at the same quality, in one run.
///
/// Each output is decoded and compared (PSNR) with a reference: the source decoded at full
/// size, oriented and resampled with Lanczos-3 to the output's size.
public enum ThumbnailBenchmark {
    /// One tool's result on one file.
    public struct Row: Codable, Sendable {
        public var tool: String
        public var file: String
        public var sourcePixels: Int
        public var milliseconds: Double
        public var outputBytes: Int
        public var psnr: Double
    }

    static let box = 256
    static let quality = 80

    /// Generates the images in `directory`, runs the tools, and returns every row.
    public static func run(directory: String, progress: (String) -> Void = { _ in }) throws -> [Row] {
        try FileManager.default.createDirectory(atPath: directory + "/out", withIntermediateDirectories: true)
        let specs: [(String, Int, Int)] = [
            ("photo-12mp-1.jpg", 4000, 3000), ("photo-12mp-2.jpg", 3000, 4000), ("photo-12mp-3.jpg", 4000, 3000),
            ("photo-16mp.jpg", 4608, 3456), ("screen-4mp.png", 2400, 1600), ("screen-8mp.png", 3840, 2160),
        ]
        var files: [(path: String, bytes: [UInt8], pixels: Int)] = []
        for (i, spec) in specs.enumerated() {
            progress("thumbnails: generating \(spec.0)")
            let image = photoLike(spec.1, spec.2, seed: UInt32(i + 1))
            let bytes = spec.0.hasSuffix(".png") ? try ImageEncoder.png(image) : try ImageEncoder.jpeg(image, quality: 90)
            let path = directory + "/" + spec.0
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            files.append((path, bytes, spec.1 * spec.2))
        }
        var rows: [Row] = []
        let variant = Variant(width: box, height: box, quality: quality)
        for shrink in [true, false] {
            let tool = shrink ? "Trove" : "Trove, no shrink-on-load"
            progress("thumbnails: \(tool)")
            for file in files {
                _ = try ImageDecoder.thumbnail(file.bytes, variant: variant, shrinkOnLoad: shrink)  // warm
                let clock = ContinuousClock()
                var best = Duration.seconds(3600)
                var output: [UInt8] = []
                for _ in 0..<3 {
                    let start = clock.now
                    output = try ImageDecoder.thumbnail(file.bytes, variant: variant, shrinkOnLoad: shrink).data
                    best = min(best, clock.now - start)
                }
                rows.append(try row(tool, file, output: output, milliseconds: milliseconds(best)))
            }
        }
        progress("thumbnails: vipsthumbnail")
        if let vips = which("vipsthumbnail") {
            // One call per kind (JPEGs, PNGs), so start-up is paid once per call and the two
            // kinds' times stay apart.
            for kind in [".jpg", ".png"] {
                let group = files.filter { $0.path.hasSuffix(kind) }
                let clock = ContinuousClock()
                let start = clock.now
                try runTool(
                    vips, group.map(\.path) + ["--size", "\(box)x\(box)", "-o", directory + "/out/%s.vips.webp[Q=\(quality)]"])
                let each = milliseconds(clock.now - start) / Double(group.count)
                for file in group {
                    let name = URL(fileURLWithPath: file.path).deletingPathExtension().lastPathComponent
                    let output = [UInt8](try Data(contentsOf: URL(fileURLWithPath: directory + "/out/\(name).vips.webp")))
                    rows.append(try row("vipsthumbnail (one call per kind)", file, output: output, milliseconds: each))
                }
            }
        }
        progress("thumbnails: Pillow")
        if let python = which("python3") {
            let script = directory + "/pillow_thumbnails.py"
            try pillowScript.write(toFile: script, atomically: true, encoding: .utf8)
            let out = try runTool(python, [script, directory + "/out", String(box), String(quality)] + files.map(\.path))
            for line in out.split(separator: "\n") {
                let parts = line.split(separator: "\t")
                guard parts.count == 2, let ms = Double(parts[1]), let file = files.first(where: { $0.path == parts[0] }) else {
                    continue
                }
                let name = URL(fileURLWithPath: file.path).deletingPathExtension().lastPathComponent
                let output = [UInt8](try Data(contentsOf: URL(fileURLWithPath: directory + "/out/\(name).pillow.webp")))
                rows.append(try row("Pillow (draft + LANCZOS)", file, output: output, milliseconds: ms))
            }
        }
        return rows
    }

    /// A table: per tool, mean time per image for the JPEGs and the PNGs, output size and PSNR.
    public static func table(_ rows: [Row]) -> String {
        var lines = ["tool                                 JPEG ms/image   PNG ms/image   mean KiB   mean PSNR dB"]
        lines.append(String(repeating: "-", count: 92))
        var tools: [String] = []
        for row in rows where !tools.contains(row.tool) { tools.append(row.tool) }
        func mean(_ xs: [Double]) -> Double { xs.isEmpty ? .nan : xs.reduce(0, +) / Double(xs.count) }
        for tool in tools {
            let mine = rows.filter { $0.tool == tool }
            let jpeg = mean(mine.filter { $0.file.hasSuffix(".jpg") }.map(\.milliseconds))
            let png = mean(mine.filter { $0.file.hasSuffix(".png") }.map(\.milliseconds))
            let kib = mean(mine.map { Double($0.outputBytes) / 1024 })
            let psnr = mean(mine.map(\.psnr))
            func pad(_ s: String, _ n: Int) -> String { s.count >= n ? s : String(repeating: " ", count: n - s.count) + s }
            lines.append(
                tool.padding(toLength: 36, withPad: " ", startingAt: 0) + pad(String(format: "%.1f", jpeg), 14)
                    + pad(String(format: "%.1f", png), 15) + pad(String(format: "%.1f", kib), 11)
                    + pad(String(format: "%.1f", psnr), 14))
        }
        return lines.joined(separator: "\n")
    }

    // MARK: Helpers

    private static func row(
        _ tool: String, _ file: (path: String, bytes: [UInt8], pixels: Int), output: [UInt8], milliseconds: Double
    )
        throws -> Row
    {
        let decoded = try ImageDecoder.decode(output).image
        let source = try ImageDecoder.decode(file.bytes)
        let upright = source.orientation.apply(to: source.image)
        let reference = Resampler.resize(upright, width: decoded.width, height: decoded.height)
        return Row(
            tool: tool, file: URL(fileURLWithPath: file.path).lastPathComponent, sourcePixels: file.pixels,
            milliseconds: milliseconds, outputBytes: output.count, psnr: decoded.psnr(against: reference))
    }

    private static func milliseconds(_ d: Duration) -> Double {
        Double(d.components.seconds) * 1000 + Double(d.components.attoseconds) / 1e15
    }

    /// Smooth gradients with fine noise: compresses and resamples like a photograph.
    public static func photoLike(_ width: Int, _ height: Int, seed: UInt32) -> RGBAImage {
        var pixels = [UInt8](repeating: 255, count: width * height * 4)
        var state = seed
        for y in 0..<height {
            for x in 0..<width {
                state = state &* 1_664_525 &+ 1_013_904_223
                let noise = Int(state >> 28)
                let i = (y * width + x) * 4
                pixels[i] = UInt8(clamping: 128 + Int(100 * sin(Double(x) / 300)) + noise)
                pixels[i + 1] = UInt8(clamping: 128 + Int(100 * cos(Double(y) / 200)) + noise)
                pixels[i + 2] = UInt8(clamping: (x / 3 + y / 5) % 256)
            }
        }
        return RGBAImage(width: width, height: height, pixels: pixels)
    }

    private static func which(_ tool: String) -> String? {
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin").split(separator: ":") {
            let path = "\(dir)/\(tool)"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return nil
    }

    @discardableResult
    private static func runTool(_ path: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw BenchmarkError("\(URL(fileURLWithPath: path).lastPathComponent) exited with \(process.terminationStatus)")
        }
        return String(decoding: data, as: UTF8.self)
    }

    static let pillowScript = """
        import os, sys, time
        from PIL import Image
        out, box, quality = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
        for path in sys.argv[4:]:
            name = os.path.splitext(os.path.basename(path))[0]
            best = None
            for _ in range(3):
                start = time.perf_counter()
                image = Image.open(path)
                image.draft("RGB", (box, box))
                image.thumbnail((box, box), Image.LANCZOS)
                image.save(os.path.join(out, name + ".pillow.webp"), "WEBP", quality=quality)
                elapsed = (time.perf_counter() - start) * 1000
                best = elapsed if best is None else min(best, elapsed)
            print(path + "\\t" + str(best))
        """
}
