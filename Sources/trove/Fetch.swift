import ArgumentParser
import Foundation
import Trove
import TroveCodec
import TroveCore
import TroveHTTP

#if canImport(Glibc)
    import Glibc
#endif

extension TroveCommand {
    struct Fetch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Fetch images by URL through the image pipeline: memory, then the store, then the origin.",
            discussion: """
                Every URL of the call goes through one ImagePipeline on the store, all at once: \
                fresh copies come from memory or the store, stale ones are revalidated (a 304 \
                keeps the stored bytes), the rest are downloaded and stored. http, https and \
                file URLs are fetched. With --size each URL's WebP variant is fetched (made \
                from the original, and stored, when the store has none).

                Prints one line per URL argument, in argument order, so scripts can zip them \
                with their arguments: source, HTTP status (- when the origin was not asked), \
                bytes, milliseconds, URL. The source is memory, disk, revalidated, network, \
                stale-while-revalidate or stale-if-error; a variant made in this call shows \
                its original's source followed by +made. A failed URL prints failed, the \
                status if there was one, and the error's code and message. --json prints one \
                JSON object per line instead (url, variant, source, status, bytes, \
                milliseconds, contentHash, madeVariant, file, error).

                A URL named more than once is fetched once: its later mentions are asked for \
                when the first has finished (and are then usually memory hits), or repeat its \
                error without asking again. Each gets its own line.

                -O DIR writes each image into DIR (created if missing) under a name made from \
                the last part of the URL's path: path separators, control characters and \
                leading dots removed, the variant appended before the extension (.webp for \
                variants), a -2, -3, … suffix when two URLs of the call would share a name. \
                Files already there are replaced. Neither -o nor -O writes into the store.

                Exit codes: 0 every URL was fetched; 1 at least one failed (the others are \
                still fetched and printed); 2 the store failed; 64 bad arguments; 73 an output \
                file cannot be written.
                """)

        @OptionGroup var store: StoreOptions

        @Argument(help: ArgumentHelp("The images' URLs (http, https or file).", valueName: "url"))
        var urls: [String]

        @Option(help: ArgumentHelp("Fetch the WebP variant that fits this box, WIDTHxHEIGHT.", valueName: "size"))
        var size: String?

        @Flag(help: "How the variant fits the box: inside it (default), covering it, or stretched to it.")
        var fit: Thumb.Fit?

        @Option(help: "WebP quality of the variant, 1–100 (default 80).")
        var quality: Int?

        @Option(name: .shortAndLong, help: ArgumentHelp("Write the image to this file (one URL only).", valueName: "file"))
        var output: String?

        @Option(
            name: [.customShort("O"), .customLong("output-directory")],
            help: ArgumentHelp("Write each image into this directory.", valueName: "dir"))
        var outputDirectory: String?

        @Flag(help: "Print one JSON object per URL, one per line.")
        var json = false

        /// The box of `--size`, when it reads WIDTHxHEIGHT.
        private var box: (width: Int, height: Int)? {
            guard let size else { return nil }
            let parts = size.lowercased().split(separator: "x", omittingEmptySubsequences: false)
            guard parts.count == 2, let width = Int(parts[0]), let height = Int(parts[1]) else { return nil }
            return (width, height)
        }

        /// The variant asked for; nil for the originals.
        private var variant: Variant? {
            box.map { Variant(width: $0.width, height: $0.height, fit: (fit ?? .fit).variantFit, quality: quality ?? 80) }
        }

        func validate() throws {
            if let size {
                guard box != nil else { throw ValidationError("--size must be WIDTHxHEIGHT, such as 256x256, not \(size)") }
                guard variant?.isValid == true else {
                    throw ValidationError(
                        "--size sides must be 1–\(Variant.maximumSide) and --quality 1–100, not \(size) and \(quality ?? 80)")
                }
            } else if quality != nil || fit != nil {
                throw ValidationError("--quality, --fit, --fill and --exact shape a variant: add --size WIDTHxHEIGHT")
            }
            if output != nil && outputDirectory != nil {
                throw ValidationError("-o writes one file and -O a directory of them: give one or the other")
            }
            if output != nil && urls.count != 1 {
                throw ValidationError("-o takes exactly one URL, not \(urls.count); use -O DIR to write several")
            }
        }

        func run() async throws {
            var storeConfiguration = Store.Configuration(durability: store.durability)
            // A command-line run is short: compaction happens when asked for (`trove compact`).
            storeConfiguration.compactionInterval = nil
            storeConfiguration.createsMissingStore = true
            let directory = store.directory
            // A Result, not a typed `catch` that calls `fail` (that crashes the 6.3.1 compiler).
            let pipeline: ImagePipeline
            switch Result(catching: { () throws(StoreError) in
                try ImagePipeline.open(directory: directory, storeConfiguration: storeConfiguration)
            }) {
            case .success(let opened): pipeline = opened
            case .failure(let error): try fail(error.message)
            }
            warnAboutDamage(pipeline.store)

            // The store exists now, so the output checks can tell whether a path leads into it.
            let outcome: Result<Int32, any Error>
            do {
                try prepareOutputs()
                outcome = .success(try await fetchAll(with: pipeline))
            } catch {
                outcome = .failure(error)
            }
            var closeError: (any Error)?
            do { try await pipeline.shutdown() } catch { closeError = error }

            let code = try outcome.get()
            if let error = closeError as? StoreError { try fail(error.message) }
            if let closeError { try fail("closing the pipeline failed: \(closeError)") }
            if code != ExitCodes.success { throw ExitCode(code) }
        }

        // MARK: Fetching

        /// Fetches every URL, first mentions at once and repeats after their first, and emits
        /// the results in argument order as soon as each one's predecessors are done.
        /// Returns the exit code the results call for.
        private func fetchAll(with pipeline: ImagePipeline) async throws -> Int32 {
            let urls = urls
            let variant = variant
            // By the URL's key (its bytes): `String` keys would take a canonically equivalent
            // spelling of a URL for a repeat of it.
            var firstMention: [CacheKey: Int] = [:]
            var repeats: [Int: [Int]] = [:]
            for (index, url) in urls.enumerated() {
                let key = CacheKey(url: url)
                if let first = firstMention[key] { repeats[first, default: []].append(index) } else { firstMention[key] = index }
            }
            var emitter = Emitter(
                urls: urls, variant: variant, json: json, output: output, outputDirectory: outputDirectory,
                storeDirectory: store.directory)
            try await withThrowingTaskGroup(of: (Int, Fetched).self) { group in
                for (index, url) in urls.enumerated() where firstMention[CacheKey(url: url)] == index {
                    group.addTask { (index, await Self.fetch(url, variant: variant, with: pipeline)) }
                }
                var results = [Fetched?](repeating: nil, count: urls.count)
                var next = 0
                while let (index, fetched) = try await group.next() {
                    results[index] = fetched
                    for later in repeats[index] ?? [] {
                        if fetched.failure == nil {
                            let url = urls[later]
                            group.addTask { (later, await Self.fetch(url, variant: variant, with: pipeline)) }
                        } else {
                            // Asking again would only repeat the origin's answer (or its cost).
                            results[later] = fetched
                        }
                    }
                    while next < urls.count, let ready = results[next] {
                        try emitter.emit(ready, at: next)
                        results[next] = nil
                        next += 1
                    }
                }
            }
            emitter.finish()
            return emitter.exitCode
        }

        /// One request through the pipeline, timed; its error is kept, not thrown.
        private static func fetch(_ url: String, variant: Variant?, with pipeline: ImagePipeline) async -> Fetched {
            let clock = ContinuousClock()
            let start = clock.now
            do {
                let response = try await pipeline.image(for: url, variant: variant)
                return Fetched(response: response, failure: nil, elapsed: clock.now - start)
            } catch {
                return Fetched(response: nil, failure: Failure(error), elapsed: clock.now - start)
            }
        }

        // MARK: Output files

        /// Refuses output paths that lead into the store, and creates `-O`'s directory.
        private func prepareOutputs() throws {
            if let output { try store.refuseOutputInsideStore(output) }
            guard let outputDirectory else { return }
            // The nearest directory that exists decides where a missing one would be made.
            var existing = outputDirectory
            while !FileManager.default.fileExists(atPath: existing) {
                let parent = (existing as NSString).deletingLastPathComponent
                if parent.isEmpty || parent == existing { break }
                existing = parent
            }
            try store.refuseOutputInsideStore((existing as NSString).appendingPathComponent("file"))
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: outputDirectory, isDirectory: &isDirectory) {
                if !isDirectory.boolValue {
                    try fail("cannot write into \(outputDirectory): it is not a directory", code: ExitCodes.cannotWrite)
                }
                return
            }
            do {
                try FileManager.default.createDirectory(atPath: outputDirectory, withIntermediateDirectories: true)
            } catch {
                try fail(
                    "cannot create \(outputDirectory): \((error as NSError).localizedDescription)", code: ExitCodes.cannotWrite)
            }
        }

        /// Prints, on stderr, what the store knows is damaged and not yet repaired (as every
        /// command does, until `trove fsck --repair`).
        private func warnAboutDamage(_ store: Store) {
            guard let damage = try? store.unrepairedDamage(), !damage.isEmpty else { return }
            for item in damage.prefix(5) { printError("warning: \(item.kind.rawValue): \(item.message)") }
            if damage.count > 5 { printError("warning: … and \(damage.count - 5) more") }
            printError("warning: the store has unrepaired damage; `trove fsck` says more, `trove fsck --repair` deals with it")
        }
    }
}

// MARK: - Results

/// What one request gave: a response or a failure, and how long it took.
private struct Fetched: Sendable {
    var response: ImageResponse?
    var failure: Failure?
    var elapsed: Duration

    var milliseconds: Double {
        let ms = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
        return (ms * 10).rounded() / 10
    }
}

/// A failed request, as the output shows it.
private struct Failure: Sendable, Encodable {
    /// The pipeline's layer: `origin`, `store`, `codec` (or `shutDown`, `cancelled`, `unknown`).
    var code: String
    /// The layer's own code (`status`, `timeout`, `notAnImage`, `corrupt`, …), when there is one.
    var reason: String?
    /// What happened and what to do, naming the URL.
    var message: String
    /// The origin's HTTP status, for `origin` failures with one.
    var status: Int?

    var isStoreFailure: Bool { code == PipelineError.Code.store.description }

    init(_ error: any Error) {
        if let error = error as? PipelineError {
            code = error.code.description
            message = error.message
            if let origin = error.originError {
                reason = origin.code.description
                status = origin.status
            } else if let store = error.storeError {
                reason = store.code.description
            } else if let codec = error.codecError {
                reason = codec.code.description
            }
        } else if error is CancellationError {
            code = "cancelled"
            message = "the request was cancelled"
        } else {
            code = "unknown"
            message = "\(error)"
        }
    }

    /// `origin/status: <message>`.
    var text: String { code + (reason.map { "/" + $0 } ?? "") + ": " + message }
}

/// One line of `--json` output. Every key is always present (null when it does not apply).
private struct Line: Encodable {
    var url: String
    var variant: String?
    var source: String?
    var status: Int?
    var bytes: Int?
    var milliseconds: Double
    var contentHash: String?
    var madeVariant: Bool
    var file: String?
    var error: Failure?

    enum CodingKeys: String, CodingKey {
        case url, variant, source, status, bytes, milliseconds, contentHash, madeVariant, file, error
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(url, forKey: .url)
        try container.encode(variant, forKey: .variant)
        try container.encode(source, forKey: .source)
        try container.encode(status, forKey: .status)
        try container.encode(bytes, forKey: .bytes)
        try container.encode(milliseconds, forKey: .milliseconds)
        try container.encode(contentHash, forKey: .contentHash)
        try container.encode(madeVariant, forKey: .madeVariant)
        try container.encode(file, forKey: .file)
        try container.encode(error, forKey: .error)
    }
}

/// Writes the files and prints the lines, in argument order: JSON lines at once, the text
/// table at the end (its columns are as wide as their widest value).
private struct Emitter {
    let urls: [String]
    let variant: Variant?
    let json: Bool
    let output: String?
    let outputDirectory: String?
    let storeDirectory: String

    private(set) var exitCode = ExitCodes.success
    private var failures = 0
    private var rows: [[String]] = []
    private var names = OutputNames()
    /// The file each URL was written to (a repeated URL is written once).
    private var written: [CacheKey: String] = [:]
    private let encoder: JSONEncoder
    private let progress = isatty(STDERR_FILENO) != 0
    private var done = 0

    init(urls: [String], variant: Variant?, json: Bool, output: String?, outputDirectory: String?, storeDirectory: String) {
        self.urls = urls
        self.variant = variant
        self.json = json
        self.output = output
        self.outputDirectory = outputDirectory
        self.storeDirectory = storeDirectory
        encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    }

    mutating func emit(_ fetched: Fetched, at index: Int) throws {
        let url = urls[index]
        var file: String?
        if let response = fetched.response {
            file = try write(response, for: url)
        }
        if let failure = fetched.failure {
            failures += 1
            exitCode = failure.isStoreFailure ? ExitCodes.storeFailure : max(exitCode, ExitCodes.notFound)
        }
        let line = Line(
            url: url, variant: variant?.description, source: fetched.response.map { $0.source.description },
            status: fetched.response?.status ?? fetched.failure?.status, bytes: fetched.response?.data.count,
            milliseconds: fetched.milliseconds,
            contentHash: fetched.response.map { ($0.info?.contentHash ?? ContentHash(hashing: [UInt8]($0.data))).description },
            madeVariant: fetched.response?.madeVariant ?? false, file: file, error: fetched.failure)
        done += 1
        if json {
            clearProgress()
            printOut(String(decoding: try encoder.encode(line), as: UTF8.self))
        } else {
            var row = [
                line.source.map { $0 + (line.madeVariant ? "+made" : "") } ?? "failed", line.status.map(String.init) ?? "-",
                line.bytes.map(String.init) ?? "-", String(format: "%.1f ms", line.milliseconds), url,
            ]
            if let file { row.append("→ " + file) }
            if let failure = line.error { row.append(failure.text) }
            rows.append(row)
        }
        drawProgress()
    }

    /// Prints the text table.
    mutating func finish() {
        clearProgress()
        let widths = (0..<4).map { column in rows.map { $0[column].count }.max() ?? 0 }
        for row in rows {
            var text = row[0].padding(toLength: widths[0], withPad: " ", startingAt: 0)
            for column in 1..<4 {
                text += "  " + String(repeating: " ", count: widths[column] - row[column].count) + row[column]
            }
            text += "  " + row[4...].joined(separator: "  ")
            printOut(text)
        }
        if failures > 0 {
            printError("\(failures) of \(urls.count) URLs failed; their lines say why")
        }
    }

    /// Writes a response where -o or -O says; returns the path.
    private mutating func write(_ response: ImageResponse, for url: String) throws -> String? {
        if let output {
            try writeOutput(response.data, to: output, outside: storeDirectory)
            return output
        }
        guard let outputDirectory else { return nil }
        if let path = written[CacheKey(url: url)] { return path }
        let name = names.name(for: url, variant: variant, format: response.format)
        let path = (outputDirectory as NSString).appendingPathComponent(name)
        try writeOutput(response.data, to: path, outside: storeDirectory)
        written[CacheKey(url: url)] = path
        return path
    }

    private func drawProgress() {
        guard progress, urls.count > 1 else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[Kfetched \(done) of \(urls.count)".utf8))
    }

    private func clearProgress() {
        guard progress, urls.count > 1 else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[K".utf8))
    }
}

// MARK: - File names

/// Safe, distinct file names for the images of one call, made from their URLs.
struct OutputNames {
    private var used: Set<String> = []

    /// The name for `url`'s image: the last component of its path (percent-decoded; `/`, `\`
    /// and control characters replaced by `_`; leading dots and spaces removed; at most about
    /// 150 bytes; `image` when nothing is left), with `-<variant>.webp` for a variant, the
    /// format's extension when an original's name has none, and `-2`, `-3`, … when the call
    /// has used the name already.
    mutating func name(for url: String, variant: Variant?, format: ImageFormat?) -> String {
        var (stem, ext) = Self.stemAndExtension(Self.lastPathComponent(of: url))
        if let variant {
            stem += "-\(variant)"
            ext = "webp"
        } else if ext.isEmpty, let format {
            ext = format == .jpeg ? "jpg" : format.rawValue
        }
        func joined(_ stem: String) -> String { ext.isEmpty ? stem : stem + "." + ext }
        var name = joined(stem)
        var suffix = 2
        while used.contains(name) {
            name = joined("\(stem)-\(suffix)")
            suffix += 1
        }
        used.insert(name)
        return name
    }

    /// The last non-empty component of `url`'s path, without query or fragment, percent-decoded.
    static func lastPathComponent(of url: String) -> String {
        var text = Substring(url)
        if let hash = text.firstIndex(of: "#") { text = text[..<hash] }
        if let question = text.firstIndex(of: "?") { text = text[..<question] }
        if let scheme = text.range(of: "://") {
            // Past the authority: the path starts at the next slash (none: no path).
            let rest = text[scheme.upperBound...]
            text = rest.firstIndex(of: "/").map { rest[$0...] } ?? ""
        }
        let last = text.split(separator: "/").last.map(String.init) ?? ""
        return last.removingPercentEncoding ?? last
    }

    /// A safe stem and extension for `component`: no separators or control characters, no
    /// leading dot, not empty, not too long.
    static func stemAndExtension(_ component: String) -> (stem: String, ext: String) {
        var safe = String(
            String.UnicodeScalarView(
                component.unicodeScalars.map { scalar in
                    scalar == "/" || scalar == "\\" || scalar.value < 0x20 || scalar.value == 0x7F ? "_" : scalar
                }))
        while let first = safe.first, first == "." || first == " " { safe.removeFirst() }
        while let last = safe.last, last == " " { safe.removeLast() }
        var stem = safe
        var ext = ""
        if let dot = safe.lastIndex(of: "."), dot != safe.startIndex {
            let candidate = safe[safe.index(after: dot)...]
            if (1...10).contains(candidate.count) && candidate.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) {
                stem = String(safe[..<dot])
                ext = String(candidate)
            }
        }
        // Names are at most 255 bytes; leave room for a variant's text and a suffix.
        while stem.utf8.count > 150 { stem.removeLast() }
        if stem.isEmpty { stem = "image" }
        return (stem, ext)
    }
}
