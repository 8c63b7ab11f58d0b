import ArgumentParser
import Foundation

/// `trove`: operate a Trove store from the command line.
@main
struct TroveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "trove",
        abstract: "Operate a Trove store: a content-addressed cache of images and other blobs.",
        discussion: """
            Exit codes: 0 success; 1 the key is not in the store (fsck: repaired); 2 the store \
            failed (locked, damaged, missing, I/O); 3 fsck found damage it did not repair; \
            64 bad arguments; 65 an input that is not usable (not an image, over a limit); \
            66 an input file that cannot be read; 69 trove origin cannot listen; 73 an output file \
            that cannot be written. trove fetch: 1 at least one URL failed.
            """,
        version: "0.1.0",
        subcommands: [
            Put.self, Get.self, Remove.self, List.self, Stats.self, Compact.self, Fsck.self, Thumb.self, Fetch.self, Origin.self,
            Bench.self, BenchWorker.self,
        ])

    /// Refuses arguments that are not valid UTF-8 before parsing them: keys are text, and two
    /// different byte strings must never turn into the same key (`k\xff` and `k\xfe` would both
    /// become `k\u{FFFD}`).
    static func main() async {
        for index in 1..<Int(CommandLine.argc) {
            guard let raw = CommandLine.unsafeArgv[index], String(validatingCString: raw) == nil else { continue }
            FileHandle.standardError.write(
                Data("trove: argument \(index) is not valid UTF-8; keys, paths and options must be UTF-8 text\n".utf8))
            Foundation.exit(ExitCodes.usage)
        }
        await main(nil)
    }
}
