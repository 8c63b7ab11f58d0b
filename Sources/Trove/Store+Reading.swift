public import Foundation
public import TroveCore
import TroveIndex
import TrovePack

extension Store {
    /// The entry for `key`: its bytes, verified, and its metadata; nil when there is none.
    ///
    /// A warm read is one lookup in the in-memory location map and one `pread`; a cold read
    /// adds one indexed SQLite lookup on a read-only connection. The read time is noted in
    /// memory and written to the index later, so a read never waits for an index write.
    ///
    /// - Throws: ``StoreError`` with code `.corruptRecord` when the stored record fails its
    ///   checksum (the entry — and every key sharing that blob — is dropped from the index,
    ///   and later reads return nil), `.io`, `.index` or `.closed`.
    public func entry(for key: CacheKey) throws -> Entry? {
        guard let found = try locate(key, noteRead: true) else { return nil }
        let data = try readBlob(of: found, key: key)
        return Entry(data: data, info: info(found))
    }

    /// The bytes stored under `key`, verified; nil when there are none. See ``entry(for:)``.
    public func data(for key: CacheKey) throws -> Data? {
        try entry(for: key)?.data
    }

    /// What the store knows about `key`'s entry, without reading its bytes; nil when there is
    /// none. Does not count as a read for LRU order.
    public func info(for key: CacheKey) throws -> EntryInfo? {
        try locate(key, noteRead: false).map { info($0) }
    }

    /// Whether the store has an entry for `key`. Does not read the bytes.
    public func contains(_ key: CacheKey) throws -> Bool {
        try locate(key, noteRead: false) != nil
    }

    /// Every entry of `url` (the original and its variants), by variant.
    public func entries(url: String) throws -> [EntryInfo] {
        try flush()
        return try readIndex { try $0.entries(url: url) }.map { info($0) }
    }

    /// Calls `body` with every entry, in key order. Pending writes are committed first; the
    /// enumeration sees one consistent snapshot of the index.
    ///
    /// - Complexity: O(n) rows read from the index; bytes are not read.
    public func forEachEntry(_ body: (EntryInfo) throws -> Void) throws {
        try flush()
        var thrown: (any Error)?
        try readIndex { index in
            try index.reading {
                try index.forEachEntry { indexed in
                    do {
                        try body(info(indexed))
                        return true
                    } catch {
                        thrown = error
                        return false
                    }
                }
            }
        }
        if let thrown { throw thrown }
    }

    // MARK: Internals

    /// Finds `key`'s entry: the location map first, the index on a miss.
    func locate(_ key: CacheKey, noteRead: Bool) throws(StoreError) -> IndexedEntry? {
        // The returned entry's accessedAt is the last read *before* this one: a read time not
        // yet flushed is taken from memory, in the same lock hold that notes this read.
        let now = configuration.clock()
        let (slot, previousRead, generation, closed) = shared.withLock { state in
            let slot = state.slots[key]
            let previous = state.readTimes[key]
            if noteRead, case .present = slot { state.readTimes[key] = now }
            return (slot, previous, state.generation, state.isClosed)
        }
        if closed { throw Self.closedError(directory) }
        switch slot {
        case .present(let found): return found.readBefore(previousRead)
        case .removed: return nil
        case nil: break
        }
        let found = try readIndex { try $0.entry(digest: key.digest) }
        guard let found, found.entry.key == key else { return nil }
        shared.withLock { state in
            // Only if no write touched the map since this read began: the row cannot be stale.
            if state.generation == generation && state.slots[key] == nil {
                state.slots[key] = .present(found)
            }
            if noteRead { state.readTimes[key] = now }
        }
        return found.readBefore(previousRead)
    }

    /// Reads and verifies `found`'s blob; drops the entry (and its blob's other keys) when
    /// the record is damaged or its segment file is gone.
    ///
    /// Before calling a failed read damage, the key is looked up again: the compactor may have
    /// moved the blob (and deleted the old file) since `found` was read.
    func readBlob(of found: IndexedEntry, key: CacheKey) throws(StoreError) -> Data {
        let reason: String
        let underlying: any Error & Sendable
        switch readBlobOnce(found.blob) {
        case .success(let data): return data
        case .failure(.other(let error)): throw error
        case .failure(.damaged(let why, let cause)): (reason, underlying) = (why, cause)
        }
        if let fresh = try? readIndex({ try $0.entry(digest: key.digest) }), fresh.entry.key == key,
            fresh.blob.id == found.blob.id,
            fresh.blob.segment != found.blob.segment || fresh.blob.offset != found.blob.offset,
            case .success(let data) = readBlobOnce(fresh.blob)
        {
            shared.withLock { state in
                if case .present(let slot) = state.slots[key], slot.blob.id == fresh.blob.id {
                    state.slots[key] = .present(fresh)
                }
            }
            return data
        }
        throw dropDamaged(found.blob, key: key, reason: reason, underlying: underlying)
    }

    enum DamagedRead: Error {
        case damaged(String, any Error & Sendable)
        case other(StoreError)
    }

    /// One read of `blob`'s record: its bytes, or why not.
    private func readBlobOnce(_ blob: BlobRow) -> Result<Data, DamagedRead> {
        let file: SegmentFile
        do {
            file = try segmentFile(blob.segment)
        } catch {
            guard (error.underlying as? PackError)?.errno == ENOENT || error.code == .corruptRecord else {
                return .failure(.other(error))
            }
            return .failure(.damaged(error.message, error))
        }
        do {
            return .success(
                try file.readBlob(at: blob.offset, payloadLength: blob.length, hash: blob.hash, id: UInt64(bitPattern: blob.id)))
        } catch let error as PackError where error.code == .corruptRecord || error.code == .truncatedRecord {
            return .failure(.damaged(error.message, error))
        } catch {
            return .failure(.other(StoreError(pack: error)))
        }
    }

    /// Drops a blob whose record cannot be served, and returns the error to throw.
    private func dropDamaged(
        _ blob: BlobRow, key: CacheKey, reason: String, underlying: any Error & Sendable
    ) -> StoreError {
        let dropped = (try? dropDamagedBlob(blob)) ?? []
        return StoreError(
            code: .corruptRecord,
            message: "\(key): \(reason); dropped \(dropped.count) entr\(dropped.count == 1 ? "y" : "ies") "
                + "that shared the record",
            key: key, underlying: underlying)
    }

    /// The public view of an index row. Read times not yet flushed are not looked up here:
    /// ``locate(_:noteRead:)`` overlays them, and enumerations flush them first.
    func info(_ indexed: IndexedEntry) -> EntryInfo {
        let row = indexed.entry
        return EntryInfo(
            key: row.key,
            metadata: EntryMetadata(
                etag: row.etag, lastModified: row.lastModified, expiresAt: row.expiresAt.map { date(milliseconds: $0) }),
            createdAt: date(milliseconds: row.createdAt),
            accessedAt: date(milliseconds: row.accessedAt),
            cost: Int(row.cost), contentHash: indexed.blob.hash)
    }

    /// Runs `body` on a reader connection.
    func readIndex<T>(_ body: (IndexDatabase) throws -> T) throws(StoreError) -> T {
        do { return try readers.withReader(body) } catch { throw StoreError(index: error) }
    }
}

extension IndexedEntry {
    /// This entry with `accessedAt` raised to `read`, a read time not yet flushed, if later.
    func readBefore(_ read: Int64?) -> IndexedEntry {
        guard let read, read > entry.accessedAt else { return self }
        var copy = self
        copy.entry.accessedAt = read
        return copy
    }
}
