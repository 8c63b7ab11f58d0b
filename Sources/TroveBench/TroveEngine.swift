public import Foundation
public import TroveStore
@_spi(Testing) import TroveStore
import TroveCore

/// Trove's ``Store`` as a benchmark engine.
///
/// Puts and gets may run on several threads at once (the store is thread-safe); ``reopen(durability:)``
/// only between workloads.
public final class TroveEngine: BlobStoring, @unchecked Sendable {
    public let directory: String
    /// The store; reopened by ``reopen(durability:)``.
    public private(set) var store: Store

    public var name: String {
        store.configuration.durability == .batched ? "Trove" : "Trove \(store.configuration.durability)"
    }

    /// Opens (creating) a store in `directory` with default settings and `durability`.
    public init(directory: String, durability: Durability = .batched) throws {
        self.directory = directory
        store = try Store(directory: directory, configuration: Store.Configuration(durability: durability))
    }

    /// Closes the store and opens it again with another durability level, then waits for what
    /// opening loads in the background (the dedup hints, the places): the baselines change their
    /// level without reopening, so the rows after a reopen time the puts and gets, not the open.
    public func reopen(durability: Durability) throws {
        try store.close()
        store = try Store(directory: directory, configuration: Store.Configuration(durability: durability))
        store.waitForLoads()
    }

    public func put(_ data: Data, key: String, etag: String) throws {
        try store.put(data, for: CacheKey(url: key), metadata: EntryMetadata(etag: etag))
    }

    public func get(_ key: String) throws -> Data? {
        try store.data(for: CacheKey(url: key))
    }

    public func flush() throws { try store.flush() }
    public func close() throws { try store.close() }
}
