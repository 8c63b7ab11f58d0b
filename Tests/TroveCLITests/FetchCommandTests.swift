import Foundation
import Testing
import TroveCodec
import TroveCore
import TroveOrigin
import TroveTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// `trove fetch` against a real origin on loopback, and `trove origin` as a child process.
@Suite struct FetchCommandTests {
    func trove(_ arguments: [String], environment: [String: String]? = nil) async throws -> ProcessOutput {
        try await runProcess(productsDirectory + "/trove", arguments, environment: environment)
    }

    /// A small JPEG of one colour.
    func jpeg(_ shade: UInt8, width: Int = 320, height: Int = 240) throws -> [UInt8] {
        try ImageEncoder.jpeg(RGBAImage(width: width, height: height, filledWith: (shade, 90, 200 - shade, 255)))
    }

    /// Runs `body` with an origin on loopback serving `paths` as JPEGs that caches may keep
    /// for an hour (their bodies by path), and stops the origin afterwards.
    func withOrigin(
        _ paths: [String], _ body: (OriginServer, [String: [UInt8]]) async throws -> Void
    ) async throws {
        let origin = try await OriginServer.start()
        var bodies: [String: [UInt8]] = [:]
        for (index, path) in paths.enumerated() {
            let bytes = try jpeg(UInt8(20 + index * 20))
            bodies[path] = bytes
            origin.set(path, OriginResource(body: bytes, etag: "\"\(index)\"", cacheControl: "max-age=3600"))
        }
        do {
            try await body(origin, bodies)
        } catch {
            try? await origin.shutdown()
            throw error
        }
        try await origin.shutdown()
    }

    /// The width and height in an image's header.
    func size(_ bytes: [UInt8]) throws -> [Int] {
        let (width, height) = try ImageDecoder.dimensions(bytes)
        return [width, height]
    }

    /// The whitespace-separated columns of each output line.
    func columns(_ output: ProcessOutput) -> [[String]] {
        output.stdoutText.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
    }

    @Test func originalsAndVariantsComeFromTheOriginThenFromTheStore() async throws {
        try await withTemporaryDirectory { dir in
            try await withOrigin(["/a.jpg", "/b.jpg"]) { origin, bodies in
                let store = dir + "/store"
                let urls = [origin.url("/a.jpg"), origin.url("/b.jpg")]

                let first = try await trove(["fetch", "--store", store] + urls)
                #expect(first.status == 0, "\(first.stderrText)")
                let lines = columns(first)
                #expect(lines.map { $0[0] } == ["network", "network"])
                #expect(lines.map { $0[1] } == ["200", "200"])
                #expect(lines.map { Int($0[2]) } == [bodies["/a.jpg"]!.count, bodies["/b.jpg"]!.count])
                #expect(lines.allSatisfy { Double($0[3]) != nil && $0[4] == "ms" })
                #expect(lines.map { $0.last } == urls)

                let again = try await trove(["fetch", "--store", store] + urls)
                #expect(again.status == 0)
                #expect(columns(again).map { $0[0] } == ["disk", "disk"])
                #expect(columns(again).map { $0[1] } == ["-", "-"])
                #expect(origin.requestCount(for: "/a.jpg") == 1)

                // A variant is made from the stored original, then read from the store.
                let variant = try await trove([
                    "fetch", "--store", store, "--size", "64x64", "--fill", "--quality", "70", urls[0],
                ])
                #expect(variant.status == 0, "\(variant.stderrText)")
                #expect(columns(variant).first?.first == "disk+made")
                let stored = try await trove(["fetch", "--store", store, "--size", "64x64", "--fill", "--quality", "70", urls[0]])
                #expect(columns(stored).first?.first == "disk")
                #expect(origin.requestCount(for: "/a.jpg") == 1)

                // -o writes exactly the bytes, here a 64×64 WebP.
                let out = dir + "/a.webp"
                let written = try await trove([
                    "fetch", "--store", store, "--size", "64x64", "--fill", "--quality", "70", urls[0], "-o", out,
                ])
                #expect(written.status == 0)
                let webp = [UInt8](try Data(contentsOf: URL(fileURLWithPath: out)))
                #expect(try size(webp) == [64, 64])
                #expect(Int(columns(written)[0][2]) == webp.count)
                let original = dir + "/a.jpg"
                #expect(try await trove(["fetch", "--store", store, urls[0], "-o", original]).status == 0)
                #expect([UInt8](try Data(contentsOf: URL(fileURLWithPath: original))) == bodies["/a.jpg"])
            }
        }
    }

    @Test func aURLNamedTwiceIsFetchedOnceAndPrintedTwice() async throws {
        try await withTemporaryDirectory { dir in
            try await withOrigin(["/a.jpg", "/b.jpg"]) { origin, _ in
                let a = origin.url("/a.jpg")
                let b = origin.url("/b.jpg")
                let result = try await trove(["fetch", "--store", dir + "/store", a, b, a, a])
                #expect(result.status == 0)
                let lines = columns(result)
                #expect(lines.map { $0.last } == [a, b, a, a])
                #expect(lines.map { $0[0] } == ["network", "network", "memory", "memory"])
                #expect(origin.requestCount(for: "/a.jpg") == 1)

                // The same for variants: one download, one variant made.
                let variants = try await trove(["fetch", "--store", dir + "/store2", "--size", "32x32", b, b])
                #expect(columns(variants).map { $0[0] } == ["network+made", "memory"])
                #expect(origin.requestCount(for: "/b.jpg") == 2)
            }
        }
    }

    @Test func outputDirectoryNamesAreSafeAndDistinct() async throws {
        try await withTemporaryDirectory { dir in
            let paths = ["/photos/cat.jpg", "/other/cat.jpg", "/.hidden.jpg", "/evil/..%2F..%2Fescape.jpg", "/noext", "/"]
            try await withOrigin(paths) { origin, bodies in
                let out = dir + "/out/nested"
                let urls = paths.map { origin.url($0) } + [origin.url("/photos/cat.jpg?size=large")]
                let result = try await trove(["fetch", "--store", dir + "/store", "-O", out] + urls)
                #expect(result.status == 0, "\(result.stdoutText) \(result.stderrText)")
                let names = try FileManager.default.contentsOfDirectory(atPath: out).sorted()
                #expect(
                    names
                        == ["_.._escape.jpg", "cat-2.jpg", "cat-3.jpg", "cat.jpg", "hidden.jpg", "image.jpg", "noext.jpg"]
                        .sorted())
                #expect(try FileManager.default.contentsOfDirectory(atPath: dir).sorted() == ["out", "store"])
                #expect([UInt8](try Data(contentsOf: URL(fileURLWithPath: out + "/cat-2.jpg"))) == bodies["/other/cat.jpg"])
                #expect(result.stdoutText.contains("→ \(out)/cat.jpg"))

                let variants = try await trove([
                    "fetch", "--store", dir + "/store", "-O", out, "--size", "40x30", urls[0], urls[1],
                ])
                #expect(variants.status == 0)
                for name in ["cat-w40-h30-inside-q80.webp", "cat-w40-h30-inside-q80-2.webp"] {
                    let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: out + "/" + name)))
                    #expect(try size(bytes) == [40, 30])
                }

                // Never into the store.
                let intoStore = try await trove(["fetch", "--store", dir + "/store", "-O", dir + "/store/packs/x", urls[0]])
                #expect(intoStore.status == 73)
                #expect(!FileManager.default.fileExists(atPath: dir + "/store/packs/x"))
                #expect(
                    try await trove(["fetch", "--store", dir + "/store", "-o", dir + "/store/index.sqlite", urls[0]]).status == 73
                )
            }
        }
    }

    @Test func aFailedURLExitsWith1AndTheOthersAreStillFetched() async throws {
        try await withTemporaryDirectory { dir in
            try await withOrigin(["/a.jpg", "/b.jpg"]) { origin, _ in
                let urls = [origin.url("/a.jpg"), origin.url("/missing.jpg"), origin.url("/b.jpg")]
                let result = try await trove(["fetch", "--store", dir + "/store"] + urls)
                #expect(result.status == 1)
                let lines = columns(result)
                #expect(lines.map { $0[0] } == ["network", "failed", "network"])
                #expect(lines[1][1] == "404")
                #expect(lines[1].contains("origin/status:"))
                #expect(result.stderrText.contains("1 of 3 URLs failed"))

                let json = try await trove(["fetch", "--store", dir + "/store", "--json"] + urls)
                #expect(json.status == 1)
                let objects = try json.stdoutText.split(separator: "\n").map {
                    try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
                }
                #expect(objects.map { $0["source"] as? String } == ["disk", nil, "disk"])
                let error = try #require(objects[1]["error"] as? [String: Any])
                #expect(error["code"] as? String == "origin")
                #expect(error["reason"] as? String == "status")
                #expect(objects[1]["status"] as? Int == 404)
                #expect((error["message"] as? String)?.contains("404") == true)
            }
        }
    }

    @Test func jsonLinesCarryEveryField() async throws {
        try await withTemporaryDirectory { dir in
            try await withOrigin(["/a.jpg"]) { origin, bodies in
                let result = try await trove(["fetch", "--store", dir + "/store", "--json", origin.url("/a.jpg")])
                #expect(result.status == 0)
                let object = try #require(try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any])
                #expect(
                    Set(object.keys)
                        == [
                            "url", "variant", "source", "status", "bytes", "milliseconds", "contentHash", "madeVariant", "file",
                            "error",
                        ])
                #expect(object["url"] as? String == origin.url("/a.jpg"))
                #expect(object["variant"] is NSNull)
                #expect(object["error"] is NSNull)
                #expect(object["source"] as? String == "network")
                #expect(object["status"] as? Int == 200)
                #expect(object["bytes"] as? Int == bodies["/a.jpg"]!.count)
                #expect((object["milliseconds"] as? Double).map { $0 >= 0 } == true)
                #expect((object["contentHash"] as? String)?.count == 32)

                let variant = try await trove([
                    "fetch", "--store", dir + "/store", "--json", "--size", "16x16", origin.url("/a.jpg"),
                ])
                let line = try #require(try JSONSerialization.jsonObject(with: variant.stdout) as? [String: Any])
                #expect(line["variant"] as? String == "w16-h16-inside-q80")
                #expect(line["madeVariant"] as? Bool == true)
            }
        }
    }

    @Test func usageErrorsExitWith64AndSayWhatToDo() async throws {
        try await withTemporaryDirectory { dir in
            let store = dir + "/store"
            let url = "http://127.0.0.1:9/a.jpg"
            let cases: [[String]] = [
                [],
                ["--size", "256", url],
                ["--size", "0x10", url],
                ["--size", "ax10", url],
                ["--size", "20000x10", url],
                ["--size", "10x10", "--quality", "0", url],
                ["--size", "10x10", "--quality", "101", url],
                ["--quality", "50", url],
                ["--fill", url],
                ["-o", dir + "/a", "-O", dir + "/b", url],
                ["-o", dir + "/a", url, url],
                ["--fit", "--fill", "--size", "10x10", url],
            ]
            for arguments in cases {
                let result = try await trove(["fetch", "--store", store] + arguments)
                #expect(result.status == 64, "\(arguments)")
                #expect(!result.stderrText.isEmpty)
                #expect(result.stdout.isEmpty)
            }
            #expect(!FileManager.default.fileExists(atPath: store))
            #expect(try await trove(["fetch", "--store", store, "--quality", "50", url]).stderrText.contains("add --size"))
        }
    }

    @Test func theStoreComesFromTROVE_STOREAndItsFailuresExitWith2() async throws {
        try await withTemporaryDirectory { dir in
            try await withOrigin(["/a.jpg"]) { origin, _ in
                let environment = ["TROVE_STORE": dir + "/env-store", "HOME": dir, "XDG_CACHE_HOME": dir + "/cache"]
                #expect(try await trove(["fetch", origin.url("/a.jpg")], environment: environment).status == 0)
                #expect(FileManager.default.fileExists(atPath: dir + "/env-store/index.sqlite"))
                #expect(!FileManager.default.fileExists(atPath: dir + "/cache"))
                #expect(try await trove(["ls"], environment: environment).stdoutText.contains(origin.url("/a.jpg")))

                try Data("file".utf8).write(to: URL(fileURLWithPath: dir + "/plain"))
                let notAStore = try await trove(["fetch", "--store", dir + "/plain", origin.url("/a.jpg")])
                #expect(notAStore.status == 2)
                #expect(notAStore.stderrText.contains("is not a directory"))
            }
        }
    }

    @Test func theOriginCommandServesSamplesUntilSIGTERM() async throws {
        try await withTemporaryDirectory { dir in
            let served = dir + "/images"
            let portFile = dir + "/port"
            let process = Process()
            process.executableURL = URL(fileURLWithPath: productsDirectory + "/trove")
            process.arguments = [
                "origin", served, "--make-samples", "2", "--port-file", portFile, "--cache-control", "max-age=60",
            ]
            let out = Pipe()
            process.standardOutput = out
            process.standardError = Pipe()
            try process.run()
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

            // Making the samples takes a few seconds in a debug build. The file is read once
            // more after every wait, deadline or not: this task may have waited far past the
            // deadline for a thread while the other suites ran.
            let deadline = ContinuousClock.now + .seconds(300)
            var port: Int?
            while true {
                port = (try? String(contentsOfFile: portFile, encoding: .utf8)).flatMap {
                    Int($0.trimmingCharacters(in: .whitespacesAndNewlines))
                }
                if port != nil || !process.isRunning || ContinuousClock.now >= deadline { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            let listening = try #require(port, "trove origin wrote no port file (running: \(process.isRunning))")

            let jpegFile = [UInt8](try Data(contentsOf: URL(fileURLWithPath: served + "/sample-1.jpg")))
            let pngFile = [UInt8](try Data(contentsOf: URL(fileURLWithPath: served + "/sample-2.png")))
            #expect(ImageFormat.sniff(jpegFile) == .jpeg)
            #expect(ImageFormat.sniff(pngFile) == .png)
            #expect(try size(jpegFile) == [1600, 1200])
            #expect(try size(pngFile) == [1600, 1200])
            #expect((50_000...2_000_000).contains(jpegFile.count))

            let url = "http://127.0.0.1:\(listening)/sample-1.jpg"
            let fetched = try await trove(["fetch", "--store", dir + "/store", url, "-o", dir + "/got.jpg"])
            #expect(fetched.status == 0, "\(fetched.stderrText)")
            #expect([UInt8](try Data(contentsOf: URL(fileURLWithPath: dir + "/got.jpg"))) == jpegFile)
            #expect(try await trove(["fetch", "--store", dir + "/store2", "http://127.0.0.1:\(listening)/nope.jpg"]).status == 1)

            kill(process.processIdentifier, SIGTERM)
            let stopBy = ContinuousClock.now + .seconds(20)
            while process.isRunning && ContinuousClock.now < stopBy { try await Task.sleep(for: .milliseconds(20)) }
            #expect(!process.isRunning, "trove origin did not stop on SIGTERM")
            guard !process.isRunning else { return }
            #expect(process.terminationStatus == 0)
            #expect(
                String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                    == "http://127.0.0.1:\(listening)\n")
            #expect(!FileManager.default.fileExists(atPath: portFile))
        }
    }

    @Test func theOriginCommandRefusesWhatItMustNotDo() async throws {
        try await withTemporaryDirectory { dir in
            #expect(try await trove(["origin", dir, "--host", "0.0.0.0"]).status == 64)
            #expect(try await trove(["origin", dir, "--port", "70000"]).status == 64)
            #expect(try await trove(["origin", dir, "--make-samples", "0"]).status == 64)
            #expect(try await trove(["origin", dir, "--cache-control", "max-age=1\r\nX: y"]).status == 64)
            let missing = try await trove(["origin", dir + "/missing"])
            #expect(missing.status == 66, "\(missing.stderrText)")
        }
    }
}
