import ArgumentParser
import Foundation
import Trove
import TroveCore

extension TroveCommand {
    struct Get: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write the bytes stored under a key to standard output or a file.",
            discussion: "Exits with 1 and a one-line message when the key is not in the store.")

        @OptionGroup var store: StoreOptions
        @OptionGroup var key: KeyOptions

        @Option(name: .shortAndLong, help: "Write to this file instead of standard output.")
        var output: String?

        func run() throws {
            if let output { try store.refuseOutputInsideStore(output) }
            let cacheKey = key.cacheKey
            guard let entry = try store.withStore({ try $0.entry(for: cacheKey) }) else {
                try fail("no entry for \(cacheKey)", code: ExitCodes.notFound)
            }
            if let output {
                try writeOutput(entry.data, to: output, outside: store.directory)
            } else {
                FileHandle.standardOutput.write(entry.data)
            }
        }
    }
}
