import ArgumentParser
import Foundation
import Trove
import TroveCore

extension TroveCommand {
    struct Put: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Store a file's bytes under a key.",
            discussion: "Replaces any entry for the key. Use - as FILE to read standard input.")

        @OptionGroup var store: StoreOptions
        @OptionGroup var key: KeyOptions

        @Argument(help: "The file to store, or - for standard input.")
        var file: String

        @Option(help: "The origin's ETag to keep with the bytes.")
        var etag: String?

        @Option(help: "The origin's Last-Modified to keep with the bytes.")
        var lastModified: String?

        @Option(help: "Seconds until the entry expires (at most 10^12, about 31 700 years).")
        var expiresIn: Int?

        static let maximumExpiresIn = 1_000_000_000_000

        func validate() throws {
            if let expiresIn, !(0...Self.maximumExpiresIn).contains(expiresIn) {
                throw ValidationError("--expires-in must be 0 to \(Self.maximumExpiresIn) seconds, not \(expiresIn)")
            }
        }

        func run() throws {
            let data = try readInput(file, limit: Store.maximumValueLength)
            let metadata = EntryMetadata(
                etag: etag, lastModified: lastModified,
                expiresAt: expiresIn.map { Date().addingTimeInterval(TimeInterval($0)) })
            try store.withStore(creating: true) { try $0.put(data, for: key.cacheKey, metadata: metadata) }
        }
    }
}
