import Foundation
import TroveCore
import TroveIndex
import TrovePack

/// The single writer of a store: the index's write connection, the active segment and the
/// open group-commit batch. Only ever used under `Store.writer`.
///
/// Ordering (Docs/Architecture.md): a record is appended to the pack before the index row
/// that points at it is written, and the pack is synced (unless durability is `none`)
/// before that row is committed. `indexed_bytes` of the active segment is committed in the
/// same transaction as the rows, so recovery knows exactly which records to replay.
///
/// `@unchecked Sendable`: it owns an SQLite connection and the active segment, and every use
/// happens inside `Store.writer.withLock`, which is the only place a `Writer` is reachable
/// from. The mutex, not the type system, confines it to one thread at a time.
final class Writer: @unchecked Sendable {
    let index: IndexDatabase
    let pack: PackWriter
    /// The sequence number of the next link or tombstone record.
    var nextSequence: UInt64
    /// Writes in the open batch (the index transaction).
    var pendingWrites = 0
    /// When the open batch started; nil when none is open.
    var batchStartedAt: ContinuousClock.Instant?
    /// When read times were last written to the index.
    var lastReadTimeFlush = ContinuousClock.now

    init(index: IndexDatabase, pack: PackWriter, nextSequence: UInt64) {
        self.index = index
        self.pack = pack
        self.nextSequence = nextSequence
    }

    /// Runs an index call, mapping its error to a StoreError.
    @discardableResult
    func indexCall<T>(_ body: () throws -> T) throws(StoreError) -> T {
        do { return try body() } catch { throw StoreError(index: error) }
    }

    /// Runs a pack call, mapping its error to a StoreError.
    func packCall<T>(_ body: () throws -> T) throws(StoreError) -> T {
        do { return try body() } catch { throw StoreError(pack: error) }
    }

    // MARK: Put and remove

    func put(
        _ bytes: UnsafeRawBufferPointer, hash: ContentHash, key: CacheKey, metadata: EntryMetadata, store: Store
    ) throws(StoreError) {
        let digest = key.digest
        let now = store.configuration.clock()
        // A different key with the same digest: refuse before writing anything.
        if let existing = try indexCall({ try index.entry(digest: digest) }), existing.entry.key != key {
            throw StoreError(
                code: .keyCollision,
                message: "\(key) has the same 128-bit digest as the stored key \(existing.entry.key); not stored",
                key: key)
        }
        let length = UInt64(bytes.count)
        var blob = try equalBlob(bytes, hash: hash, store: store)
        var link = LinkRecord(
            url: key.url, variant: key.variant, blobHash: hash, blobLength: length, blobSegment: 0, blobOffset: 0,
            sequence: nextSequence, createdAt: now, expiresAt: metadata.expiresAt.map(milliseconds),
            etag: metadata.etag, lastModified: metadata.lastModified)
        let linkLength = PackWriter.linkRecordLength(link)
        let blobLength = blob == nil ? PackWriter.blobRecordLength(payloadLength: bytes.count) : 0
        if pack.needsRotation(forAppending: blobLength + linkLength) {
            try rotate(store: store)
        }
        try openBatch()
        try savepoint { () throws(StoreError) in
            if blob == nil {
                let offset = try packCall { try pack.appendBlob(hash: hash, payload: bytes) }
                let segment = pack.segment.id
                let id = try indexCall {
                    try index.insertBlob(hash: hash, length: length, segment: segment, offset: offset, recordBytes: blobLength)
                }
                blob = BlobRow(
                    id: id, hash: hash, length: length, segment: segment, offset: offset, recordBytes: blobLength,
                    references: 0)
            }
            link.blobSegment = blob!.segment
            link.blobOffset = blob!.offset
            let linkOffset = try packCall { try pack.appendLink(link) }
            let row = EntryRow(
                keyDigest: digest, url: key.url, variant: key.variant, blobID: blob!.id, linkSegment: pack.segment.id,
                linkOffset: linkOffset, linkLength: linkLength, sequence: link.sequence, etag: metadata.etag,
                lastModified: metadata.lastModified, expiresAt: link.expiresAt, createdAt: now, accessedAt: now,
                cost: Int64(length))
            try indexCall { try index.link(row) }
            nextSequence += 1
            blob!.references += 1
            let entry = IndexedEntry(entry: row, blob: blob!)
            store.shared.withLock { state in
                state.slots[key] = .present(entry)
                state.generation &+= 1
            }
        }
        pendingWrites += 1
        try commitIfDue(store: store, now: .now)
    }

    /// A stored blob whose bytes equal `bytes`, if any (hash and length select candidates;
    /// the bytes decide). A candidate that cannot be read is not equal.
    private func equalBlob(_ bytes: UnsafeRawBufferPointer, hash: ContentHash, store: Store) throws(StoreError) -> BlobRow? {
        let candidates = try indexCall { try index.blobs(hash: hash, length: UInt64(bytes.count)) }
        for candidate in candidates {
            guard let file = try? store.segmentFile(candidate.segment),
                let stored = try? file.readBlob(at: candidate.offset, payloadLength: candidate.length, hash: candidate.hash)
            else { continue }
            let equal = stored.withUnsafeBytes { s in
                s.count == bytes.count && (s.count == 0 || memcmp(s.baseAddress!, bytes.baseAddress!, s.count) == 0)
            }
            if equal { return candidate }
        }
        return nil
    }

    /// Removes the entries of `keys` that exist, appending a tombstone for each.
    /// - Returns: how many were removed.
    func remove(_ keys: [CacheKey], store: Store) throws(StoreError) -> Int {
        var removed = 0
        for key in keys {
            let digest = key.digest
            guard let existing = try indexCall({ try index.entry(digest: digest) }), existing.entry.key == key else {
                continue
            }
            let tombstone = TombstoneRecord(
                url: key.url, variant: key.variant, sequence: nextSequence, removedAt: store.configuration.clock())
            let length = UInt64(PackFormat.recordHeaderSize + RecordEncoder.body(of: tombstone).count)
            if pack.needsRotation(forAppending: length) { try rotate(store: store) }
            try openBatch()
            try savepoint { () throws(StoreError) in
                _ = try packCall { try pack.appendTombstone(tombstone) }
                _ = try indexCall { try index.removeEntry(digest: digest) }
                nextSequence += 1
                store.shared.withLock { state in
                    state.slots[key] = .removed
                    state.readTimes[key] = nil
                    state.generation &+= 1
                }
            }
            pendingWrites += 1
            removed += 1
        }
        if removed > 0 { try commitIfDue(store: store, now: .now) }
        return removed
    }

    /// Drops blob `blobID` and every entry linked to it after its record failed verification,
    /// and commits at once.
    /// - Returns: the dropped keys.
    func dropDamagedBlob(_ blobID: Int64, store: Store) throws(StoreError) -> [CacheKey] {
        try openBatch()
        let dropped = try indexCall { try index.dropBlob(blobID) }.map(\.key)
        store.shared.withLock { state in
            for key in dropped { state.slots[key] = .removed }
            state.generation &+= 1
        }
        pendingWrites += 1
        try commit(store: store, flushReadTimes: false)
        return dropped
    }

    // MARK: Batches

    private func openBatch() throws(StoreError) {
        if !index.isInTransaction {
            try indexCall { try index.begin() }
            batchStartedAt = .now
        }
    }

    /// Runs one write's statements in a savepoint, so a failure leaves the batch as it was.
    private func savepoint(_ body: () throws(StoreError) -> Void) throws(StoreError) {
        try indexCall { try index.savepoint() }
        do {
            try body()
            try indexCall { try index.releaseSavepoint() }
        } catch {
            try? index.rollbackToSavepoint()
            throw error
        }
    }

    /// Commits when the durability level says the open batch is due.
    func commitIfDue(store: Store, now: ContinuousClock.Instant) throws(StoreError) {
        let configuration = store.configuration
        let readTimesDue = now - lastReadTimeFlush >= configuration.accessTimeFlushInterval
        if let started = batchStartedAt {
            let due =
                configuration.durability == .full || pendingWrites >= configuration.batchSize
                || now - started >= configuration.batchInterval
            if due { try commit(store: store, flushReadTimes: readTimesDue) }
        } else if readTimesDue {
            try commit(store: store, flushReadTimes: true)
        }
    }

    /// Syncs the active segment (unless durability is `none`) and commits the open batch with
    /// the segment's indexed length and the sequence counter; optionally writes read times.
    func commit(store: Store, flushReadTimes: Bool) throws(StoreError) {
        var readTimes: [CacheKey: Int64] = [:]
        if flushReadTimes {
            readTimes = store.shared.withLock { state in
                defer { state.readTimes.removeAll(keepingCapacity: true) }
                return state.readTimes
            }
            lastReadTimeFlush = .now
        }
        guard index.isInTransaction || !readTimes.isEmpty else { return }
        do {
            if index.isInTransaction && store.configuration.durability != .none {
                try packCall { try pack.segment.synchronize() }
            }
            try openBatch()
            let segment = pack.segment.id
            let end = pack.end
            let sequence = Int64(bitPattern: nextSequence)
            try indexCall {
                try index.setIndexedBytes(end, segment: segment)
                try index.setMeta("sequence", sequence)
                try index.touch(readTimes.map { (digest: $0.key.digest, accessedAt: $0.value) })
                try index.commit()
            }
        } catch {
            // The read times go back for the next try; the batch stays open.
            if !readTimes.isEmpty {
                store.shared.withLock { state in
                    state.readTimes.merge(readTimes) { max($0, $1) }
                }
            }
            throw error
        }
        pendingWrites = 0
        batchStartedAt = nil
        // Every slot is committed now: the index answers for all of them.
        let limit = store.configuration.locationCacheLimit
        store.shared.withLock { state in
            if state.slots.count > limit {
                state.slots.removeAll()
            } else {
                state.slots = state.slots.filter { if case .removed = $0.value { false } else { true } }
            }
        }
    }

    /// Seals the active segment and continues in a new one.
    private func rotate(store: Store) throws(StoreError) {
        try commit(store: store, flushReadTimes: false)
        let old = pack.segment
        let id = old.id + 1
        let synchronize = store.configuration.durability != .none
        let file = try packCall {
            try SegmentFile.create(
                id: id, in: store.packsDirectory, createdAt: store.configuration.clock(), synchronize: synchronize)
        }
        try indexCall {
            try index.begin()
            try index.sealSegment(old.id)
            try index.insertSegment(id: id, indexedBytes: UInt64(PackFormat.segmentHeaderSize))
            try index.commit()
        }
        pack.rotate(to: file)
        store.shared.withLock { $0.segmentFiles[id] = file }
    }
}

func milliseconds(_ date: Date) -> Int64 {
    Int64((date.timeIntervalSince1970 * 1000).rounded())
}

func date(milliseconds: Int64) -> Date {
    Date(timeIntervalSince1970: Double(milliseconds) / 1000)
}

extension StoreError {
    init(index anyError: any Error) {
        guard let error = anyError as? IndexError else {
            self.init(pack: anyError)
            return
        }
        switch error.code {
        case .corrupt:
            self.init(
                code: .indexCorrupt,
                message: "the index is damaged: \(error.message); run `trove fsck --rebuild-index`",
                underlying: error)
        case .schemaTooNew:
            self.init(code: .schemaTooNew, message: error.message, underlying: error)
        default:
            self.init(code: .index, message: "index error: \(error)", underlying: error)
        }
    }

    init(pack anyError: any Error) {
        guard let error = anyError as? PackError else {
            self.init(code: .io, message: "\(anyError)")
            return
        }
        switch error.code {
        case .recordTooLarge: self.init(code: .valueTooLarge, message: error.message, underlying: error)
        case .corruptRecord, .truncatedRecord, .notASegment:
            self.init(code: .corruptRecord, message: error.message, underlying: error)
        default: self.init(code: .io, message: error.message, underlying: error)
        }
    }
}
