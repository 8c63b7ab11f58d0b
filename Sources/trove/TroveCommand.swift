import ArgumentParser

/// `trove`: operate a Trove store from the command line.
@main
struct TroveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "trove",
        abstract: "Operate a Trove store: a content-addressed cache of images and other blobs.",
        discussion: """
            Exit codes: 0 success; 1 the key is not in the store; 2 the store failed (locked, \
            damaged, I/O); 64 bad arguments.
            """,
        version: "0.1.0",
        subcommands: [Put.self, Get.self, Remove.self, List.self, Stats.self, Compact.self, Bench.self])
}
