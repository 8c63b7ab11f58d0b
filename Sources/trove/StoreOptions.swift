public import ArgumentParser
import Foundation
public import Trove
import TroveCore

/// Options every subcommand that opens a store shares.
struct StoreOptions: ParsableArguments {
    @Option(
        name: .customLong("store"),
        help: ArgumentHelp(
            "The store directory.", discussion: "Default: $XDG_CACHE_HOME/trove, else ~/.cache/trove.",
            valueName: "path"))
    var path: String?

    @Option(help: "Durability of writes: none, batched or full.")
    var durability: Durability = .batched

    var directory: String { path ?? Store.defaultDirectory }

    /// Opens the store, runs `body`, closes the store; store errors become exit code 2.
    func withStore<T>(configure: (inout Store.Configuration) -> Void = { _ in }, _ body: (Store) throws -> T) throws -> T {
        do {
            var configuration = Store.Configuration(durability: durability)
            // A command-line run is short: compaction happens when asked for (`trove compact`).
            configuration.compactionInterval = nil
            configure(&configuration)
            let store = try Store(directory: directory, configuration: configuration)
            do {
                let result = try body(store)
                try store.close()
                return result
            } catch {
                try? store.close()
                throw error
            }
        } catch let error as StoreError {
            fail(error.message)
        } catch let error as ExitCode {
            throw error
        } catch {
            fail("\(error)")
        }
    }
}

extension Durability: ExpressibleByArgument {}

/// Options naming one key.
struct KeyOptions: ParsableArguments {
    @Argument(help: "The entry's key: usually the URL the bytes came from.")
    var key: String

    @Option(help: "The variant of the key (empty: the original).")
    var variant: String = ""

    var cacheKey: CacheKey { CacheKey(url: key, variant: variant) }
}

/// Prints `message` to stderr and exits with `code`.
func fail(_ message: String, code: Int32 = ExitCodes.storeFailure) -> Never {
    FileHandle.standardError.write(Data("trove: \(message)\n".utf8))
    TroveCommand.exit(withError: ExitCode(code))
}

/// The exit codes of `trove`: a contract for scripts.
enum ExitCodes {
    static let success: Int32 = 0
    /// The key is not in the store.
    static let notFound: Int32 = 1
    /// The store failed: locked by another process, damaged, or an I/O error.
    static let storeFailure: Int32 = 2
    /// `trove fsck` found damage it did not repair.
    static let damaged: Int32 = 3
}

/// Writes `text` to stdout.
func printOut(_ text: String) {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
}

/// Writes `value` to stdout as pretty-printed JSON with sorted keys (stable for scripts).
func printJSON(_ value: some Encodable) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    printOut(String(decoding: try encoder.encode(value), as: UTF8.self))
}

/// Milliseconds-free ISO 8601 text of `date`, in UTC.
func iso8601(_ date: Date) -> String {
    date.formatted(.iso8601)
}
