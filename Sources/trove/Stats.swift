import ArgumentParser
import Foundation
import Trove
import TroveCore

extension TroveCommand {
    struct Stats: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print counts and sizes: entries, blobs, payload, disk, segments, dedup savings.")

        @OptionGroup var store: StoreOptions

        @Flag(help: "Print a JSON object.")
        var json = false

        func run() throws {
            let directory = store.directory
            let (stats, backgroundError) = try store.withStore { store in (try store.statistics(), store.backgroundError) }
            if let backgroundError {
                FileHandle.standardError.write(Data("trove: background error: \(backgroundError.message)\n".utf8))
            }
            if json {
                try printJSON(stats)
                return
            }
            func bytes(_ v: Int64) -> String { "\(ByteCount(v)) (\(v) B)" }
            let lines: [(String, String)] = [
                ("store", directory),
                ("entries", "\(stats.entries)"),
                ("blobs", "\(stats.blobs)"),
                ("payload", bytes(stats.payloadBytes)),
                ("stored payload", bytes(stats.storedPayloadBytes)),
                ("dedup savings", bytes(stats.dedupSavedBytes)),
                ("disk", bytes(stats.diskBytes)),
                ("  packs", bytes(stats.packBytes)),
                ("  index", bytes(stats.indexBytes)),
                ("segments", "\(stats.segments)"),
            ]
            for (name, value) in lines {
                printOut(name.padding(toLength: 16, withPad: " ", startingAt: 0) + value)
            }
        }
    }
}
