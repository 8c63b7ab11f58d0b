import Foundation
import Testing
import Trove
import TroveCodec
import TroveCore
import TroveTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Runs the built `trove` executable with whole command lines, as a person or script would.
@Suite struct CLITests {
    func trove(_ arguments: [String], stdin: Data? = nil) async throws -> ProcessOutput {
        try await runProcess(productsDirectory + "/trove", arguments, stdin: stdin)
    }

    @Test func putGetListStatsRemove() async throws {
        try await withTemporaryDirectory { dir in
            let store = dir + "/store"
            let file = dir + "/photo.jpg"
            let bytes = Data(testBytes(seed: 5, count: 70_000))
            try bytes.write(to: URL(fileURLWithPath: file))

            #expect(try await trove(["put", "--store", store, "https://x/a.jpg", file, "--etag", "\"v1\""]).status == 0)
            #expect(try await trove(["put", "--store", store, "https://x/b.jpg", file]).status == 0)
            #expect(try await trove(["put", "--store", store, "https://x/c.txt", "-"], stdin: Data("hello".utf8)).status == 0)

            let got = try await trove(["get", "--store", store, "https://x/a.jpg"])
            #expect(got.status == 0)
            #expect(got.stdout == bytes)
            #expect(try await trove(["get", "--store", store, "https://x/c.txt"]).stdout == Data("hello".utf8))
            let out = dir + "/out.jpg"
            #expect(try await trove(["get", "--store", store, "https://x/b.jpg", "-o", out]).status == 0)
            #expect(try Data(contentsOf: URL(fileURLWithPath: out)) == bytes)

            let list = try await trove(["ls", "--store", store])
            #expect(list.status == 0)
            #expect(list.stdoutText.split(separator: "\n").count == 3)
            #expect(list.stdoutText.contains("\"v1\"  https://x/a.jpg"))

            let json = try await trove(["ls", "--store", store, "--json"])
            let rows = try #require(try JSONSerialization.jsonObject(with: json.stdout) as? [[String: Any]])
            #expect(rows.map { $0["url"] as? String } == ["https://x/a.jpg", "https://x/b.jpg", "https://x/c.txt"])
            #expect(rows.first?["etag"] as? String == "\"v1\"")
            #expect(rows.first?["bytes"] as? Int == 70_000)

            let stats = try await trove(["stats", "--store", store, "--json"])
            let object = try #require(try JSONSerialization.jsonObject(with: stats.stdout) as? [String: Any])
            #expect(object["entries"] as? Int == 3)
            #expect(object["blobs"] as? Int == 2)
            #expect(object["dedupSavedBytes"] as? Int == 70_000)
            #expect(object["segments"] as? Int == 1)
            let text = try await trove(["stats", "--store", store])
            #expect(text.stdoutText.contains("entries         3"))
            #expect(text.stdoutText.contains("dedup savings"))

            #expect(try await trove(["rm", "--store", store, "https://x/a.jpg"]).status == 0)
            let gone = try await trove(["get", "--store", store, "https://x/a.jpg"])
            #expect(gone.status == 1)
            #expect(gone.stdout.isEmpty)
            #expect(gone.stderrText == "trove: no entry for https://x/a.jpg\n")
            #expect(try await trove(["rm", "--store", store, "https://x/a.jpg"]).status == 1)
        }
    }

    @Test func variantsAndRemovingAllOfThem() async throws {
        try await withTemporaryDirectory { dir in
            let store = dir + "/store"
            for variant in ["", "w64", "w128"] {
                let r = try await trove(
                    ["put", "--store", store, "https://x/a.jpg", "-", "--variant", variant], stdin: Data(variant.utf8))
                #expect(r.status == 0)
            }
            #expect(try await trove(["get", "--store", store, "https://x/a.jpg", "--variant", "w64"]).stdout == Data("w64".utf8))
            #expect(try await trove(["rm", "--store", store, "https://x/a.jpg", "--all-variants"]).status == 0)
            #expect(try await trove(["ls", "--store", store]).stdoutText.isEmpty)
        }
    }

    @Test func theDefaultStoreFollowsXDGCacheHome() async throws {
        try await withTemporaryDirectory { dir in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: productsDirectory + "/trove")
            process.arguments = ["put", "https://x/1", "-"]
            let input = Pipe()
            process.standardInput = input
            process.environment = ["XDG_CACHE_HOME": dir + "/cache", "HOME": dir]
            process.standardOutput = Pipe()
            try process.run()
            input.fileHandleForWriting.write(Data("v".utf8))
            try input.fileHandleForWriting.close()
            process.waitUntilExit()
            #expect(process.terminationStatus == 0)
            #expect(FileManager.default.fileExists(atPath: dir + "/cache/trove/index.sqlite"))
        }
    }

    @Test func theDefaultStoreComesFromTROVE_STOREFirst() async throws {
        try await withTemporaryDirectory { dir in
            let environment = ["TROVE_STORE": dir + "/env-store", "XDG_CACHE_HOME": dir + "/cache", "HOME": dir]
            let trove = productsDirectory + "/trove"
            #expect(
                try await runProcess(trove, ["put", "https://x/1", "-"], stdin: Data("v".utf8), environment: environment).status
                    == 0)
            #expect(FileManager.default.fileExists(atPath: dir + "/env-store/index.sqlite"))
            #expect(!FileManager.default.fileExists(atPath: dir + "/cache/trove"))
            #expect(try await runProcess(trove, ["get", "https://x/1"], environment: environment).stdout == Data("v".utf8))
            // --store wins over the variable.
            let other = try await runProcess(trove, ["get", "--store", dir + "/other", "https://x/1"], environment: environment)
            #expect(other.status == 2)
            // An empty variable is unset.
            var empty = environment
            empty["TROVE_STORE"] = ""
            #expect(
                try await runProcess(trove, ["put", "https://x/2", "-"], stdin: Data("w".utf8), environment: empty).status == 0)
            #expect(FileManager.default.fileExists(atPath: dir + "/cache/trove/index.sqlite"))
        }
    }

    @Test func errorsSayWhatIsWrongAndExitNonZero() async throws {
        try await withTemporaryDirectory { dir in
            let store = dir + "/store"
            let missingFile = try await trove(["put", "--store", store, "k", dir + "/nope.jpg"])
            #expect(missingFile.status == 66)
            #expect(missingFile.stderrText.hasPrefix("trove: cannot read \(dir)/nope.jpg"))

            let badArguments = try await trove(["put", "--store", store])
            #expect(badArguments.status == 64)
            #expect(try await trove(["frobnicate"]).status == 64)
            #expect(try await trove(["put", "--store", store, "k", "-", "--expires-in", "-3"], stdin: Data()).status == 64)

            try Data("file".utf8).write(to: URL(fileURLWithPath: dir + "/plain"))
            let notADirectory = try await trove(["put", "--store", dir + "/plain", "k", dir + "/plain"])
            #expect(notADirectory.status == 2)
            #expect(notADirectory.stderrText.contains("is not a directory"))

            // A store held by another process: exit 2 and a message naming that process.
            let holder = try Store(directory: store)
            let locked = try await trove(["ls", "--store", store])
            #expect(locked.status == 2)
            #expect(locked.stderrText.contains("in use by process \(getpid())"))
            try holder.close()
            #expect(try await trove(["ls", "--store", store]).status == 0)
        }
    }
}

/// The command line's answers to hostile or mistaken input: typed, with their own exit codes,
/// and never a new store where one was only to be read.
@Suite struct InputCommandTests {
    func trove(_ arguments: [String], stdin: Data? = nil) async throws -> ProcessOutput {
        try await runProcess(productsDirectory + "/trove", arguments, stdin: stdin)
    }

    /// Keys are text: two byte strings that are not UTF-8 must not collapse into one key.
    @Test func argumentsThatAreNotUTF8AreRefused() async throws {
        try await withTemporaryDirectory { dir in
            let store = dir + "/store"
            let file = dir + "/f"
            try Data("v".utf8).write(to: URL(fileURLWithPath: file))
            // Process arguments are C strings: run through sh to pass raw bytes.
            let run = try await runProcess(
                "/bin/sh",
                ["-c", "\"$0\" put --store \"$1\" \"$(printf 'k\\377')\" \"$2\"", productsDirectory + "/trove", store, file])
            #expect(run.status == 64)
            #expect(run.stderrText.contains("not valid UTF-8"))
            #expect(!FileManager.default.fileExists(atPath: store + "/index.sqlite"))
        }
    }

    @Test func inputFilesOfEveryKind() async throws {
        try await withTemporaryDirectory { dir in
            let store = dir + "/store"
            // A directory, a missing file: 66, and nothing stored.
            let directory = try await trove(["put", "--store", store, "k", dir])
            #expect(directory.status == 66)
            #expect(directory.stderrText.contains("is a directory"))
            // A FIFO (as from `<(curl …)`) is read to its end.
            #expect(mkfifo(dir + "/fifo", 0o644) == 0)
            Thread.detachNewThread {
                if let handle = FileHandle(forWritingAtPath: dir + "/fifo") {
                    handle.write(Data("through a fifo".utf8))
                    try? handle.close()
                }
            }
            #expect(try await trove(["put", "--store", store, "k", dir + "/fifo"]).status == 0)
            #expect(try await trove(["get", "--store", store, "k"]).stdout == Data("through a fifo".utf8))
            // An output that cannot be written: 73, not "the store failed".
            let output = try await trove(["get", "--store", store, "k", "-o", dir])
            #expect(output.status == 73)
            #expect(output.stderrText.contains("cannot write"))
        }
    }

    /// `-o` never writes into the store, by any name: a symbolic or hard link to one of its
    /// files, or a dangling link into its directory. The store's files are unchanged.
    @Test func anOutputNeverOverwritesTheStore() async throws {
        try await withTemporaryDirectory { dir in
            let store = dir + "/store"
            #expect(try await trove(["put", "--store", store, "k", "-"], stdin: Data("value".utf8)).status == 0)
            let segment = store + "/packs/00000001.pack"
            let index = store + "/index.sqlite"
            let before = try Data(contentsOf: URL(fileURLWithPath: segment))
            try FileManager.default.createSymbolicLink(atPath: dir + "/to-index", withDestinationPath: index)
            try FileManager.default.linkItem(atPath: segment, toPath: dir + "/hard-segment")
            try FileManager.default.createSymbolicLink(
                atPath: dir + "/dangling", withDestinationPath: store + "/packs/00000009.pack")
            for target in [dir + "/to-index", dir + "/hard-segment", dir + "/dangling", store + "/packs/out", index] {
                let run = try await trove(["get", "--store", store, "k", "-o", target])
                #expect(run.status == 73, "\(target): \(run.stderrText)")
                #expect(run.stderrText.contains("never writes into the store") || run.stderrText.contains("inside the store"))
            }
            #expect(!FileManager.default.fileExists(atPath: store + "/packs/00000009.pack"))
            #expect(!FileManager.default.fileExists(atPath: store + "/packs/out"))
            // The segment is byte for byte what it was; the index (which closing may checkpoint)
            // is still a SQLite database.
            #expect(try Data(contentsOf: URL(fileURLWithPath: segment)) == before)
            #expect(try Data(contentsOf: URL(fileURLWithPath: index)).prefix(15) == Data("SQLite format 3".utf8))
            #expect(try await trove(["get", "--store", store, "k"]).stdout == Data("value".utf8))
            // An ordinary output still works, and replaces what was there.
            try Data(repeating: 7, count: 100).write(to: URL(fileURLWithPath: dir + "/out"))
            #expect(try await trove(["get", "--store", store, "k", "-o", dir + "/out"]).status == 0)
            #expect(try Data(contentsOf: URL(fileURLWithPath: dir + "/out")) == Data("value".utf8))
        }
    }

    /// Reading a mistyped path is an error, not a new empty store.
    @Test func readsDoNotCreateStores() async throws {
        try await withTemporaryDirectory { dir in
            for command in [["get", "k"], ["ls"], ["stats"], ["rm", "k"], ["fsck"], ["compact"]] {
                let run = try await trove([command[0], "--store", dir + "/typo"] + command.dropFirst())
                #expect(run.status == 2, "\(command)")
                #expect(run.stderrText.contains("no Trove store at"), "\(command): \(run.stderrText)")
            }
            #expect(!FileManager.default.fileExists(atPath: dir + "/typo"))
        }
    }

    /// `--expires-in 9223372036854775` used to crash converting a Double to Int64.
    @Test func anExpiryOutOfRangeIsAUsageError() async throws {
        try await withTemporaryDirectory { dir in
            let run = try await trove(
                ["put", "--store", dir + "/s", "k", "-", "--expires-in", "9223372036854775"], stdin: Data("v".utf8))
            #expect(run.status == 64)
            #expect(run.stderrText.contains("--expires-in"))
        }
    }

    @Test func thumbOutputsObeyTheInputLimitsAndOptionsMustAgree() async throws {
        try await withTemporaryDirectory { dir in
            let png = dir + "/one.png"
            try Data(try ImageEncoder.png(RGBAImage(width: 1, height: 1, pixels: [255, 0, 0, 255]))).write(
                to: URL(fileURLWithPath: png))
            // Upscaled to 16383×16383 (268 MP) it would be over the 100 MP decode limit: refused
            // before anything is allocated.
            let huge = try await trove(["thumb", png, "--upscale", "--size", "16383x16383"])
            #expect(huge.status == 65)
            #expect(huge.stderrText.contains("too large"))
            #expect(try await trove(["thumb", png, "--size", "64x64", "--lossless", "--quality", "50"]).status == 64)
            let ok = try await trove(["thumb", png, "--upscale", "--size", "64x64", "--lossless"])
            #expect(ok.status == 0)
            #expect(ok.stdoutText.hasPrefix("64×64 WebP"))
            let garbage = dir + "/garbage.jpg"
            try Data("not an image".utf8).write(to: URL(fileURLWithPath: garbage))
            #expect(try await trove(["thumb", garbage, "--size", "64x64"]).status == 65)
        }
    }
}

@Suite struct BenchCommandTests {
    func trove(_ arguments: [String]) async throws -> ProcessOutput {
        try await runProcess(productsDirectory + "/trove", arguments)
    }

    @Test func refusesPlansTooSmallToMeanAnything() async throws {
        #expect(try await trove(["bench", "--population", "5"]).status == 64)
        #expect(try await trove(["bench", "--scale-entries", "100"]).status == 64)
    }

    @Test func aQuickRunPrintsAReportWithEveryEngine() async throws {
        try await withTemporaryDirectory { dir in
            let run = try await trove([
                "bench", "--quick", "--json", "--population", "300", "--scale-entries", "10000", "--directory", dir,
            ])
            #expect(run.status == 0, "\(run.stderrText)")
            let report = try #require(try JSONSerialization.jsonObject(with: run.stdout) as? [String: Any])
            let results = try #require(report["results"] as? [[String: Any]])
            let engines = Set(results.compactMap { $0["engine"] as? String })
            #expect(engines.isSuperset(of: ["Trove", "Trove none", "Trove full", "FilePerEntry", "SQLiteBlob"]))
            #expect((report["targets"] as? [Any])?.isEmpty == false)
            #expect(run.stderrText.contains("bench: populating each engine"))
        }
    }
}

@Suite struct MaintenanceCommandTests {
    func trove(_ arguments: [String], stdin: Data? = nil) async throws -> ProcessOutput {
        try await runProcess(productsDirectory + "/trove", arguments, stdin: stdin)
    }

    func fill(_ store: String, count: Int) async throws {
        for i in 0..<count {
            let r = try await trove(
                ["put", "--store", store, "https://x/\(i)", "-"], stdin: Data(testBytes(seed: UInt64(i), count: 30_000)))
            #expect(r.status == 0)
        }
    }

    @Test func compactPrintsWhatItDidAndHoldsTheCapacity() async throws {
        try await withTemporaryDirectory { dir in
            let store = dir + "/store"
            try await fill(store, count: 40)
            let run = try await trove(["compact", "--store", store, "--capacity", "600K"])
            #expect(run.status == 0, "\(run.stderrText)")
            #expect(run.stdoutText.contains("evicted"))
            #expect(run.stdoutText.contains("reclaimed"))
            // stderr is a pipe here: no progress line.
            #expect(run.stderrText.isEmpty)
            let stats =
                try JSONSerialization.jsonObject(with: try await trove(["stats", "--store", store, "--json"]).stdout)
                as? [String: Any]
            #expect((stats?["diskBytes"] as? Int ?? .max) <= 600 * 1024)
            let json = try await trove(["compact", "--store", store, "--ttl", "0s", "--json"])
            let report = try JSONSerialization.jsonObject(with: json.stdout) as? [String: Any]
            #expect((report?["expiredEntries"] as? Int ?? 0) > 0)
            #expect(try await trove(["ls", "--store", store]).stdoutText.isEmpty)
            #expect(try await trove(["compact", "--store", store, "--capacity", "lots"]).status == 64)
            #expect(try await trove(["compact", "--store", store, "--ttl", "soon"]).status == 64)
        }
    }

    @Test func fsckExitCodesSayCleanRepairedOrDamaged() async throws {
        try await withTemporaryDirectory { dir in
            let store = dir + "/store"
            try await fill(store, count: 10)
            let clean = try await trove(["fsck", "--store", store])
            #expect(clean.status == 0)
            #expect(clean.stdoutText.hasSuffix("clean\n"))
            // Damage one payload byte.
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: store + "/packs/00000001.pack"))
            try handle.seek(toOffset: 5_000)
            let byte = try handle.read(upToCount: 1)![0]
            try handle.seek(toOffset: 5_000)
            try handle.write(contentsOf: [byte ^ 0xFF])
            try handle.close()
            let damaged = try await trove(["fsck", "--store", store])
            #expect(damaged.status == 3)
            #expect(damaged.stdoutText.contains("corruptRecord"))
            let repaired = try await trove(["fsck", "--store", store, "--repair", "--json"])
            #expect(repaired.status == 1)
            let report = try JSONSerialization.jsonObject(with: repaired.stdout) as? [String: Any]
            #expect(report?["entriesLost"] as? Int == 1)
            #expect(try await trove(["fsck", "--store", store]).status == 0)
            // Every other entry is intact.
            for i in 1..<10 {
                #expect(
                    try await trove(["get", "--store", store, "https://x/\(i)"]).stdout
                        == Data(testBytes(seed: UInt64(i), count: 30_000)))
            }
            // A lost index: --rebuild-index brings the entries back.
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: store + "/index.sqlite" + suffix) }
            // Exit 1: rebuilt without an index to check the packs against, which it says.
            let rebuilt = try await trove(["fsck", "--store", store, "--rebuild-index"])
            #expect(rebuilt.status == 1, "\(rebuilt.stdoutText)\(rebuilt.stderrText)")
            #expect(rebuilt.stdoutText.contains("rebuiltIndex"))
            #expect(try await trove(["ls", "--store", store]).stdoutText.split(separator: "\n").count == 9)
        }
    }
}

@Suite struct ThumbCommandTests {
    func trove(_ arguments: [String]) async throws -> ProcessOutput {
        try await runProcess(productsDirectory + "/trove", arguments)
    }

    @Test func thumbnailsFromAFileAndFromAStoredKey() async throws {
        try await withTemporaryDirectory { dir in
            var image = RGBAImage(width: 640, height: 480, filledWith: (200, 100, 50, 255))
            for i in stride(from: 0, to: image.pixels.count, by: 4) { image.pixels[i + 2] = UInt8((i / 4) % 251) }
            let file = dir + "/photo.jpg"
            try Data(try ImageEncoder.jpeg(image)).write(to: URL(fileURLWithPath: file))
            let out = dir + "/thumb.webp"
            let fromFile = try await trove(["thumb", file, "--size", "160x160", "-o", out])
            #expect(fromFile.status == 0, "\(fromFile.stderrText)")
            #expect(fromFile.stdoutText.hasPrefix("160×120 WebP"))
            #expect(fromFile.stdoutText.contains("decoded at 160×120 from a 640×480 JPEG"))
            let written = try ImageDecoder.decode([UInt8](try Data(contentsOf: URL(fileURLWithPath: out))))
            #expect(written.format == .webp && written.image.width == 160)

            let store = dir + "/store"
            #expect(try await trove(["put", "--store", store, "https://x/p.jpg", file]).status == 0)
            let fromKey = try await trove([
                "thumb", "--store", store, "https://x/p.jpg", "--size", "64x64", "--fill", "--lossless",
            ])
            #expect(fromKey.status == 0, "\(fromKey.stderrText)")
            #expect(fromKey.stdoutText.hasPrefix("64×64 WebP"))
            #expect(try await trove(["ls", "--store", store]).stdoutText.contains("https://x/p.jpg [w64-h64-fill-lossless]"))

            #expect(try await trove(["thumb", "--store", store, "https://x/none.jpg", "--size", "64x64"]).status == 1)
            #expect(try await trove(["thumb", file, "--size", "64"]).status == 64)
            #expect(try await trove(["thumb", file, "--size", "64x64", "--quality", "0"]).status == 64)
            try Data("not an image".utf8).write(to: URL(fileURLWithPath: dir + "/bad.jpg"))
            let bad = try await trove(["thumb", dir + "/bad.jpg", "--size", "64x64"])
            #expect(bad.status == 65)
            #expect(bad.stderrText.contains("not JPEG, PNG or WebP"))
        }
    }
}
