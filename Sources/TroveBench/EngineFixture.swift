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

    /// When the removal of what an earlier run left in `directory` ended (when the fixture
    /// started, if nothing was there): the last time a benchmark freed many inodes on this file
    /// system, unless another run ended just before this one started, which is earlier still.
    public let cleanedAt: ContinuousClock.Instant

    /// All three, for loops.
    public var engines: [any BlobStoring] { [trove, files, sqlite] }

    /// Creates the engines under `directory` and puts `population` entries of 4 KiB into each
    /// (keys `pop-0` …; the same bytes in every engine and every run). Each engine starts
    /// empty: what an earlier run left in `directory/trove`, `files` or `sqlite` is removed
    /// first, so that a reused directory's puts are new keys and new bytes again (kept, they
    /// made every put row of the next run an overwrite, and Trove's a deduplication).
    public init(directory: String, population: Int) throws {
        self.directory = directory
        for engine in ["trove", "files", "sqlite"] { try? FileManager.default.removeItem(atPath: directory + "/" + engine) }
        cleanedAt = .now
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        trove = try TroveEngine(directory: directory + "/trove")
        files = try FilePerEntryEngine(directory: directory + "/files")
        sqlite = try SQLiteBlobEngine(directory: directory + "/sqlite")
        for engine in [trove, files, sqlite] as [any BlobStoring] {
            try Self.populate(engine, population: population, pool: pool)
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
