import ArgumentParser

/// `trove`: operate a Trove store from the command line.
@main
struct TroveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "trove",
        abstract: "Operate a Trove store: a content-addressed cache of images and other blobs.",
        discussion: """
            Exit codes: 0 success; 1 the key is not in the store (fsck: repaired); 2 the store \
            failed (locked, damaged, I/O); 3 fsck found damage it did not repair; 64 bad arguments.
            """,
        version: "0.1.0",
        subcommands: [Put.self, Get.self, Remove.self, List.self, Stats.self, Compact.self, Fsck.self, Thumb.self, Bench.self])
}
