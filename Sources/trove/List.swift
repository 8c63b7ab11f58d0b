import ArgumentParser
import Foundation
import Trove
import TroveCore

extension TroveCommand {
    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ls",
            abstract: "List the entries: size, creation time, ETag and key.")

        @OptionGroup var store: StoreOptions

        @Flag(help: "Print a JSON array of entries.")
        var json = false

        struct Row: Codable {
            var url: String
            var variant: String
            var bytes: Int
            var contentHash: String
            var etag: String?
            var lastModified: String?
            var expiresAt: String?
            var createdAt: String
            var accessedAt: String
        }

        func run() throws {
            var rows: [Row] = []
            try store.withStore { store in
                try store.forEachEntry { info in
                    rows.append(
                        Row(
                            url: info.key.url, variant: info.key.variant, bytes: info.cost,
                            contentHash: info.contentHash.description, etag: info.etag, lastModified: info.lastModified,
                            expiresAt: info.expiresAt.map(iso8601), createdAt: iso8601(info.createdAt),
                            accessedAt: iso8601(info.accessedAt)))
                }
            }
            if json {
                try printJSON(rows)
                return
            }
            for row in rows {
                let size = ByteCount(row.bytes).description
                let key = row.variant.isEmpty ? row.url : "\(row.url) [\(row.variant)]"
                printOut(
                    size.padding(toLength: 11, withPad: " ", startingAt: 0) + "  " + row.createdAt + "  "
                        + (row.etag ?? "-") + "  " + key)
            }
        }
    }
}
