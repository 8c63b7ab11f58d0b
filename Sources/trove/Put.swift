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

        @Option(help: "Seconds until the entry expires.")
        var expiresIn: Int?

        func validate() throws {
            if let expiresIn, expiresIn < 0 { throw ValidationError("--expires-in must be 0 or more seconds") }
        }

        func run() throws {
            let data: Data
            do {
                data =
                    file == "-"
                    ? FileHandle.standardInput.readDataToEndOfFile()
                    : try Data(contentsOf: URL(fileURLWithPath: file))
            } catch {
                fail("cannot read \(file): \((error as NSError).localizedDescription)")
            }
            let metadata = EntryMetadata(
                etag: etag, lastModified: lastModified,
                expiresAt: expiresIn.map { Date().addingTimeInterval(TimeInterval($0)) })
            try store.withStore { try $0.put(data, for: key.cacheKey, metadata: metadata) }
        }
    }
}
