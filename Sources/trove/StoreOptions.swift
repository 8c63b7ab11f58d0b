public import ArgumentParser
import Foundation
public import Trove
import TroveCore

#if canImport(Glibc)
    import Glibc
#endif

/// Options every subcommand that opens a store shares.
struct StoreOptions: ParsableArguments {
    @Option(
        name: .customLong("store"),
        help: ArgumentHelp(
            "The store directory.",
            discussion: "Default: $TROVE_STORE when set, else $XDG_CACHE_HOME/trove, else ~/.cache/trove.",
            valueName: "path"))
    var path: String?

    @Option(help: "Durability of writes: none, batched or full.")
    var durability: Durability = .batched

    var directory: String { path ?? Self.defaultDirectory }

    /// The store every command uses without `--store`: `$TROVE_STORE` when set and not empty,
    /// else the library's default (`$XDG_CACHE_HOME/trove`, else `~/.cache/trove`).
    static var defaultDirectory: String {
        if let named = ProcessInfo.processInfo.environment["TROVE_STORE"], !named.isEmpty { return named }
        return Store.defaultDirectory
    }

    /// Opens the store, runs `body`, closes the store — also when `body` fails. Store errors
    /// become exit code 2; damage the store knows of and has not repaired is printed on stderr
    /// first, by every command, until `trove fsck --repair`.
    ///
    /// - Parameter creating: whether a missing store is created (only commands that write do;
    ///   reading a mistyped path is an error, not a new empty store).
    func withStore<T>(
        creating: Bool = false, configure: (inout Store.Configuration) -> Void = { _ in }, _ body: (Store) throws -> T
    ) throws -> T {
        var configuration = Store.Configuration(durability: durability)
        // A command-line run is short: compaction happens when asked for (`trove compact`).
        configuration.compactionInterval = nil
        configuration.createsMissingStore = creating
        configure(&configuration)
        // A Result, not a typed `catch` that calls `fail` (a `Never` function there crashes the
        // 6.3.1 compiler; PLATFORM.md).
        let store: Store
        switch Result(catching: { () throws(StoreError) in try Store(directory: directory, configuration: configuration) }) {
        case .success(let opened): store = opened
        case .failure(let error): try fail(error.message)
        }
        warnAboutDamage(store)
        do {
            let result = try body(store)
            try store.close()
            return result
        } catch let error as StoreError {
            try? store.close()
            try fail(error.message)
        } catch {
            try? store.close()
            throw error
        }
    }

    /// Refuses an output file inside the store directory: `-o` must never overwrite the
    /// store's own files.
    func refuseOutputInsideStore(_ path: String) throws {
        func resolved(_ path: String) -> String? {
            guard let real = realpath(path, nil) else { return nil }
            defer { free(real) }
            return String(cString: real)
        }
        let parent = (path as NSString).deletingLastPathComponent
        guard let store = resolved(directory), let target = resolved(parent.isEmpty ? "." : parent) else { return }
        if target == store || target.hasPrefix(store + "/") {
            try fail("cannot write \(path): it is inside the store \(directory)", code: ExitCodes.cannotWrite)
        }
    }

    /// Prints, on stderr, what the store knows is damaged and not yet repaired.
    private func warnAboutDamage(_ store: Store) {
        guard let damage = try? store.unrepairedDamage(), !damage.isEmpty else { return }
        for item in damage.prefix(5) { printError("warning: \(item.kind.rawValue): \(item.message)") }
        if damage.count > 5 { printError("warning: … and \(damage.count - 5) more") }
        printError("warning: the store has unrepaired damage; `trove fsck` says more, `trove fsck --repair` deals with it")
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

/// Prints `message` to stderr and exits with `code`, by throwing: every `withStore` on the way
/// out closes its store first.
func fail(_ message: String, code: Int32 = ExitCodes.storeFailure) throws -> Never {
    printError(message)
    throw ExitCode(code)
}

/// Writes `trove: <message>` to stderr.
func printError(_ message: String) {
    FileHandle.standardError.write(Data("trove: \(message)\n".utf8))
}

/// The exit codes of `trove`: a contract for scripts (sysexits.h numbers for file problems).
enum ExitCodes {
    static let success: Int32 = 0
    /// The key is not in the store.
    static let notFound: Int32 = 1
    /// The store failed: locked by another process, damaged, missing, or an I/O error in it.
    static let storeFailure: Int32 = 2
    /// `trove fsck` found damage it did not repair.
    static let damaged: Int32 = 3
    /// Bad arguments (ArgumentParser's usage error).
    static let usage: Int32 = 64
    /// The input is not usable data (not an image the codec takes, or over its limits).
    static let badInput: Int32 = 65
    /// An input file cannot be read (missing, a directory, unreadable, over the size limit).
    static let cannotRead: Int32 = 66
    /// An output file cannot be written.
    static let cannotWrite: Int32 = 73
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

/// The bytes of an input file, or of standard input for "-": regular files, pipes and FIFOs
/// (`<(curl …)`) alike, read up to `limit` bytes — a device such as /dev/zero that never ends
/// is refused once it passes the limit. Fails with exit code 66.
func readInput(_ path: String, limit: Int) throws -> Data {
    let fd = path == "-" ? dup(0) : open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { try fail("cannot read \(path): \(String(cString: strerror(errno)))", code: ExitCodes.cannotRead) }
    defer { close(fd) }
    var st = stat()
    if fstat(fd, &st) == 0 && st.st_mode & S_IFMT == S_IFDIR {
        try fail("cannot read \(path): it is a directory", code: ExitCodes.cannotRead)
    }
    var data = Data()
    var chunk = [UInt8](repeating: 0, count: 1 << 16)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        if n < 0 { try fail("cannot read \(path): \(String(cString: strerror(errno)))", code: ExitCodes.cannotRead) }
        if n == 0 { return data }
        data.append(contentsOf: chunk[0..<n])
        if data.count > limit {
            try fail("cannot read \(path): it holds more than the limit of \(limit) bytes", code: ExitCodes.cannotRead)
        }
    }
}

/// Writes `data` to the file at `path` (created or replaced). Fails with exit code 73.
///
/// With `store`, refuses — before changing a byte — a `path` that is one of the store's files
/// by any name (a symbolic or hard link to `index.sqlite` or a segment) or that leads into
/// the store directory (a dangling link there): `-o` must never damage the store.
func writeOutput(_ data: Data, to path: String, outside store: String? = nil) throws {
    var before = stat()
    let existed = stat(path, &before) == 0
    // No O_TRUNC: the file is checked before it is emptied.
    let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
    guard fd >= 0 else { try fail("cannot write \(path): \(String(cString: strerror(errno)))", code: ExitCodes.cannotWrite) }
    defer { close(fd) }
    var st = stat()
    guard fstat(fd, &st) == 0 else {
        try fail("cannot write \(path): \(String(cString: strerror(errno)))", code: ExitCodes.cannotWrite)
    }
    if let store, let reason = storeFile(fd, st, in: store) {
        // A file this call created inside the store is removed again (by its real path).
        if !existed, let real = realPath(ofDescriptor: fd) { unlink(real) }
        try fail("cannot write \(path): \(reason) — -o never writes into the store", code: ExitCodes.cannotWrite)
    }
    if (st.st_mode & S_IFMT) == S_IFREG && ftruncate(fd, 0) != 0 {
        try fail("cannot write \(path): \(String(cString: strerror(errno)))", code: ExitCodes.cannotWrite)
    }
    var done = 0
    while done < data.count {
        let n = data.withUnsafeBytes { write(fd, $0.baseAddress! + done, $0.count - done) }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { try fail("cannot write \(path): \(String(cString: strerror(errno)))", code: ExitCodes.cannotWrite) }
        done += n
    }
}

/// Why the open file `fd` (with status `st`) belongs to the store at `directory`, or nil:
/// it is inside the store directory, or it is the same file as one of the store's.
private func storeFile(_ fd: Int32, _ st: stat, in directory: String) -> String? {
    guard let storeReal = realPath(directory) else { return nil }
    if let real = realPath(ofDescriptor: fd), real == storeReal || real.hasPrefix(storeReal + "/") {
        return "it is inside the store \(directory)"
    }
    for folder in [storeReal, storeReal + "/packs"] {
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] {
            var other = stat()
            if lstat(folder + "/" + name, &other) == 0 && other.st_dev == st.st_dev && other.st_ino == st.st_ino {
                return "it is the store's file \(folder)/\(name) under another name"
            }
        }
    }
    return nil
}

private func realPath(_ path: String) -> String? {
    guard let real = realpath(path, nil) else { return nil }
    defer { free(real) }
    return String(cString: real)
}

/// The path the kernel has for an open file (Linux: the `/proc/self/fd` link).
private func realPath(ofDescriptor fd: Int32) -> String? {
    realPath("/proc/self/fd/\(fd)")
}
