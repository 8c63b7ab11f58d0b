import TroveCore
import TroveIndex

/// Read-only connections to the index, lent to concurrent gets.
///
/// A borrower gets a connection of its own (opening a new one when all are out) and returns
/// it after its query; at most `capacity` idle connections are kept.
final class ReaderPool: Sendable {
    private let path: String
    /// The writer's table, which every reader looks rows up through.
    private let digests: EntryDigestTable
    private let capacity: Int
    private let idle = Locked<[PooledReader]>([])

    init(path: String, digests: EntryDigestTable, capacity: Int) {
        self.path = path
        self.digests = digests
        self.capacity = max(1, capacity)
    }

    /// Runs `body` with a connection of its own.
    func withReader<T>(_ body: (IndexDatabase) throws -> T) throws -> T {
        let reader =
            try idle.withLock { $0.popLast() }
            ?? PooledReader(
                index: IndexDatabase(path: path, readOnly: true, digests: digests))
        defer {
            idle.withLock { pool in
                if pool.count < capacity { pool.append(reader) }
            }
        }
        return try body(reader.index)
    }

    /// Closes every idle connection.
    func closeAll() {
        idle.withLock { $0.removeAll() }
    }
}
