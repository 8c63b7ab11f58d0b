public import Foundation

/// A key → bytes store with an ETag per entry: what the benchmarks compare.
///
/// Trove and the two baselines users would otherwise pick (one file per entry, SQLite as a
/// blob store) conform, so every workload runs the same code against each.
public protocol BlobStoring: AnyObject {
    /// The name shown in results, including the durability setting.
    var name: String { get }
    /// Stores `data` under `key`, replacing any value.
    func put(_ data: Data, key: String, etag: String) throws
    /// The value under `key`, or nil.
    func get(_ key: String) throws -> Data?
    /// Makes every acknowledged put visible and as durable as the engine's setting promises.
    func flush() throws
    /// Closes the engine; no call follows.
    func close() throws
    /// The directory holding everything the engine wrote.
    var directory: String { get }
}

extension BlobStoring {
    /// Disk space the engine uses: allocated blocks (st_blocks × 512) of every file and
    /// directory under its directory, so block rounding and directories count as they do on disk.
    public func allocatedBytes() throws -> Int64 {
        try flush()
        return FileTree.allocatedBytes(under: directory)
    }
}
