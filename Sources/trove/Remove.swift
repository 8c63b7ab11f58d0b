import ArgumentParser
import Trove
import TroveCore

extension TroveCommand {
    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rm",
            abstract: "Remove the entry stored under a key.",
            discussion: "Exits with 1 when there was no such entry.")

        @OptionGroup var store: StoreOptions
        @OptionGroup var key: KeyOptions

        @Flag(help: "Remove the original and every variant of the URL.")
        var allVariants = false

        func run() throws {
            let cacheKey = key.cacheKey
            let all = allVariants
            let removed = try store.withStore { store in
                all ? try store.removeAll(url: cacheKey.url) : (try store.remove(cacheKey) ? 1 : 0)
            }
            if removed == 0 { try fail("no entry for \(all ? cacheKey.url : cacheKey.description)", code: ExitCodes.notFound) }
        }
    }
}
