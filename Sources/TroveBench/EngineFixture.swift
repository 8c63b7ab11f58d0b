public import Foundation

/// The three engines, each populated with the same small entries: the starting point of every
/// workload, for `trove bench` and for the Benchmarks/ package alike.
public final class EngineFixture {
    /// The engines by name of their default setting: `Trove`, `FilePerEntry`, `SQLiteBlob`.
    public let trove: TroveEngine
    public let files: FilePerEntryEngine
    public let sqlite: SQLiteBlobEngine
    /// Where values come from.
    public let pool = ContentPool()
    /// The directory holding the engines.
    public let directory: String

    /// All three, for loops.
    public var engines: [any BlobStoring] { [trove, files, sqlite] }

    /// Creates the engines under `directory` and puts `population` entries of 4 KiB into each
    /// (keys `pop-0` …; the same bytes in every engine and every run). Each engine starts
    /// empty: what an earlier run left in `directory/trove`, `files` or `sqlite` is set aside
    /// first, so that a reused directory's puts are new keys and new bytes again (kept, they
    /// made every put row of the next run an overwrite, and Trove's a deduplication).
    ///
    /// Set aside, not removed: removing an earlier run's ~100 000 files here would free as many
    /// inodes right before the timed rows, and ext4 without a journal steps past inodes freed
    /// in the last 60 s (360 s while their inode-table block is dirty) whenever it creates a
    /// file, so one file per entry's puts would pay for them (Docs/Benchmarks.md, "recently
    /// deleted inodes"). The run removes them after its last row (``removeSetAside(in:)``).
    public init(directory: String, population: Int) throws {
        self.directory = directory
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        for engine in ["trove", "files", "sqlite"] where FileManager.default.fileExists(atPath: directory + "/" + engine) {
            let aside = directory + "/" + engine + Self.setAsideMark + UUID().uuidString.prefix(8)
            try FileManager.default.moveItem(atPath: directory + "/" + engine, toPath: aside)
        }
        trove = try TroveEngine(directory: directory + "/trove")
        files = try FilePerEntryEngine(directory: directory + "/files")
        sqlite = try SQLiteBlobEngine(directory: directory + "/sqlite")
        for engine in [trove, files, sqlite] as [any BlobStoring] {
            try Self.populate(engine, population: population, pool: pool)
        }
    }

    /// Names an engine directory of an earlier run, set aside by ``init(directory:population:)``.
    static let setAsideMark = ".earlier-run-"

    /// Removes the engine directories that fixtures in `directory` set aside: call it once no
    /// timed row is left to run.
    public static func removeSetAside(in directory: String) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        for name in names where name.contains(setAsideMark) {
            try? FileManager.default.removeItem(atPath: directory + "/" + name)
        }
    }

    /// Puts the `population` entries into `engine` (as every fixture engine holds them).
    public static func populate(_ engine: any BlobStoring, population: Int, pool: ContentPool) throws {
        for i in 0..<population {
            try engine.put(populationValue(pool, i), key: populationKey(i), etag: "p\(i)")
        }
        try engine.flush()
    }

    /// The key of the `i`-th population entry.
    public static func populationKey(_ i: Int) -> String { "pop-\(i)" }

    /// The value of the `i`-th population entry.
    public static func populationValue(_ pool: ContentPool, _ i: Int) -> Data {
        pool.value(id: UInt64(1_000_000_000 + i), size: 4096)
    }

    /// Closes the engines.
    public func close() {
        for engine in engines { try? engine.close() }
    }
}
