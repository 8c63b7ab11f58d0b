public import Foundation
public import TroveCore
import TroveIndex
import TrovePack

extension Store {
    /// The entry for `key`: its bytes, verified, and its metadata; nil when there is none.
    ///
    /// A warm read is one lookup in the in-memory location map and one `pread`; a cold read
    /// of a row whose place the entry digest table holds (a put of new bytes) is one `pread`
    /// too, checked against the place, and any other adds one indexed SQLite lookup on a
    /// read-only connection. The read time is noted in
    /// memory and written to the index later, so a read never waits for an index write.
    ///
    /// An entry past its expiry is not returned: it is gone for readers at once, and the
    /// compactor removes it from disk later.
    ///
    /// - Throws: ``StoreError`` with code `.corruptRecord` when the stored record fails its
    ///   checksum (when the record is the one the index names, the entry — and every key
    ///   sharing that blob — is dropped and later reads return nil; otherwise the damage is
    ///   recorded for `trove fsck --repair` and reads keep failing until then),
    ///   `.missingSegment` when the segment holding it is missing (or, nothing recorded, when
    ///   the key was rewritten and its old blob reclaimed under this read eight times running),
    ///   `.io`, `.index` or `.closed`.
    public func entry(for key: CacheKey) throws(StoreError) -> Entry? {
        try read(key).map { Entry(data: $0.data, info: info($0.entry)) }
    }

    /// `key`'s row and verified bytes, for ``entry(for:)`` and ``data(for:)``.
    private func read(_ key: CacheKey) throws(StoreError) -> (entry: IndexedEntry, data: Data)? {
        // A read whose blob went with a newer write of the key (the compactor reclaimed it
        // between the lookup and the read) looks again.
        for _ in 0..<Self.supersededReadAttempts {
            guard let (found, read) = try locateReading(key) else { return nil }
            if let data = read { return (found, data) }
            if let data = try readBlob(of: found, key: key) { return (found, data) }
        }
        throw StoreError(
            code: .missingSegment,
            message: "\(key) was rewritten \(Self.supersededReadAttempts) times while it was being read; read it again",
            key: key)
    }

    /// How many times a get looks again when a newer write of its key took its blob away.
    static let supersededReadAttempts = 8

    /// The bytes stored under `key`, verified; nil when there are none. See ``entry(for:)``.
    public func data(for key: CacheKey) throws(StoreError) -> Data? {
        try read(key)?.data
    }

    /// What the store knows about `key`'s entry, without reading its bytes; nil when there is
    /// none. Does not count as a read for LRU order.
    public func info(for key: CacheKey) throws(StoreError) -> EntryInfo? {
        try locate(key, noteRead: false).map { info($0) }
    }

    /// Whether the store has an entry for `key`. Does not read the bytes.
    public func contains(_ key: CacheKey) throws(StoreError) -> Bool {
        try locate(key, noteRead: false) != nil
    }

    /// Every entry of `url` (the original and its variants), by variant.
    public func entries(url: String) throws(StoreError) -> [EntryInfo] {
        let pending = try commitForListing()
        var listed = try readIndex { try $0.entries(url: url) }
        if let pending { listed = Self.overlay(pending.filter { $0.key.url.hasSameUTF8(as: url) }, on: listed) }
        return listed.map { info($0) }
    }

    /// Calls `body` with every entry, in key order. Pending writes are committed first; the
    /// enumeration sees one consistent snapshot of the index.
    ///
    /// On a disk too full (or failing) for that commit, the entries are still listed: the
    /// index's with the writes it does not have yet laid over them from memory.
    ///
    /// - Throws: ``StoreError``, or the error `body` threw (which stops the enumeration).
    /// - Complexity: O(n) rows read from the index; bytes are not read.
    public func forEachEntry(_ body: (EntryInfo) throws -> Void) throws {
        if let pending = try commitForListing() {
            var listed: [IndexedEntry] = []
            try readIndex { index in
                try index.reading {
                    try index.forEachEntry {
                        listed.append($0); return true
                    }
                }
            }
            for entry in Self.overlay(pending, on: listed) { try body(info(entry)) }
            return
        }
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

    /// Commits pending writes (and read times) so that the index shows them. When the commit
    /// cannot be written — a full or failing disk, a failed sync — returns instead what the
    /// index is missing: the location map's entries and removals (and a replay opening could
    /// not write), for the caller to lay over what it reads from the index.
    func commitForListing() throws(StoreError) -> [CacheKey: LocationMap.Slot]? {
        do {
            try commitPending(flushReadTimes: true)
            return nil
        } catch  where error.code == .index || error.code == .io || error.code == .syncFailed {
            return shared.withLock { $0.map.pending }
        }
    }

    /// `listed` (index rows in key order) with `pending` laid over it, in the index's order
    /// (url, then variant, by their UTF-8 bytes).
    static func overlay(_ pending: [CacheKey: LocationMap.Slot], on listed: [IndexedEntry]) -> [IndexedEntry] {
        var merged: [CacheKey: IndexedEntry] = [:]
        for entry in listed { merged[entry.entry.key] = entry }
        for (key, slot) in pending {
            switch slot {
            case .present(let entry): merged[key] = entry
            case .removed: merged[key] = nil
            }
        }
        // Key order is byte order (`CacheKey`'s `<`), as the index lists.
        return merged.values.sorted { $0.entry.key < $1.entry.key }
    }

    /// Finds `key`'s entry: the location map first, the index on a miss. An entry past its
    /// expiry is not found (the compactor removes it later) unless `includingExpired`.
    ///
    /// A row taken from the index is checked against the link record it points at before it is
    /// trusted (and cached): the index is a cache of the packs, and a damaged row must never
    /// serve another key's bytes or an older value. `verifying: false` skips that (removal
    /// needs only to know the key exists).
    func locate(
        _ key: CacheKey, noteRead: Bool, includingExpired: Bool = false, verifying: Bool = true
    ) throws(StoreError) -> IndexedEntry? {
        try locate(key, noteRead: noteRead, includingExpired: includingExpired, verifying: verifying, readingBlob: false)?
            .entry
    }

    /// Finds `key`'s entry as ``locate(_:noteRead:includingExpired:verifying:)`` does for a get,
    /// and, when the row came from the index, its blob's bytes too when they can be read with
    /// the link in one `pread` (``readBlobWithLink(of:key:)``); nil bytes: read the blob.
    func locateReading(_ key: CacheKey) throws(StoreError) -> (entry: IndexedEntry, blob: Data?)? {
        try locate(key, noteRead: true, includingExpired: false, verifying: true, readingBlob: true)
    }

    private func locate(
        _ key: CacheKey, noteRead: Bool, includingExpired: Bool, verifying: Bool, readingBlob: Bool
    ) throws(StoreError) -> (entry: IndexedEntry, blob: Data?)? {
        // The returned entry's accessedAt is the last read *before* this one: a read time not
        // yet flushed is taken from memory, in the same lock hold that notes this read.
        let now = configuration.clock()
        let (slot, previousRead, generation, closed) = shared.withLock { state in
            let slot = state.map.slot(for: key)
            let previous: Int64?
            if noteRead, case .present(let found) = slot, !found.isExpired(at: now) {
                previous = state.readTimes.updateValue(now, forKey: key)
            } else {
                previous = state.readTimes[key]
            }
            return (slot, previous, state.map.generation, state.isClosed)
        }
        if closed { throw Self.closedError(directory) }
        switch slot {
        case .present(let found):
            return includingExpired || !found.isExpired(at: now) ? (found.readBefore(previousRead), nil) : nil
        case .removed: return nil
        case nil: break
        }
        if readingBlob && verifying && !includingExpired, let (found, blob) = readThroughPlace(key) {
            let expired = found.isExpired(at: now)
            shared.withLock { state in
                state.map.fill(found, for: key, readAt: generation)
                if noteRead && !expired { state.readTimes[key] = now }
                state.readsThroughPlaces += 1
            }
            return expired ? nil : (found.readBefore(previousRead), blob)
        }
        let lookedUp = try readIndex { try $0.entry(digest: key.digest) }
        guard var row = lookedUp, row.entry.key == key else { return nil }
        var blob: Data?
        if readingBlob && (includingExpired || !row.isExpired(at: now)) {
            blob = readBlobWithLink(of: row, key: key)
        }
        if verifying && blob == nil {
            do {
                try verifyLink(of: row, key: key)
            } catch  where error.code == .corruptRecord || error.code == .missingSegment {
                // The compactor may have moved the link (and deleted the old file) since the row
                // was read: look once more before calling it damage.
                let again = try readIndex { try $0.entry(digest: key.digest) }
                guard let fresh = again, fresh.entry.key == key else { return nil }
                do throws(StoreError) {
                    guard fresh.entry.linkSegment != row.entry.linkSegment || fresh.entry.linkOffset != row.entry.linkOffset
                    else { throw error }
                    try verifyLink(of: fresh, key: key)
                    row = fresh
                } catch {
                    let entry = fresh.entry
                    if error.code == .corruptRecord {
                        recordDamage(
                            .staleIndexRow, segment: entry.linkSegment, offset: entry.linkOffset,
                            end: entry.linkOffset + entry.linkLength, error.message)
                    }
                    throw error
                }
            }
        }
        let found = row
        let expired = found.isExpired(at: now)
        shared.withLock { state in
            state.map.fill(found, for: key, readAt: generation)
            if noteRead && !expired { state.readTimes[key] = now }
        }
        return includingExpired || !expired ? (found.readBefore(previousRead), blob) : nil
    }

    /// `key`'s entry and bytes read through its place in the entry digest table
    /// (``EntryPlace``), without SQLite: one `pread` of its blob and link records, both verified,
    /// the link naming `key`, the place's sequence and that blob (SegmentFile's
    /// `readPlacedEntry(at:span:identity:)`). The entry is built from the link record, the
    /// pack's own statement of the write, and the place. Nil — read through the index — when no
    /// candidate has a place or none checks out (a move, damage, a missing file): that path
    /// tells them apart and reports damage.
    ///
    /// A place is never older than its committed row (``EntryDigestTable``), and the link's
    /// identity ties the bytes to that write: what this serves is what the index would.
    private func readThroughPlace(_ key: CacheKey) -> (entry: IndexedEntry, blob: Data)? {
        let digest = key.digest
        for (_, place) in entryDigests.placedCandidates(digest) {
            guard let file = try? segmentFile(place.segment),
                let read = file.readPlacedEntry(
                    at: place.blobOffset, span: Int(place.span),
                    identity: RecordIdentity(type: .link, sequence: place.sequence, digest: digest), buffers: readBuffers)
            else { continue }
            let link = read.link
            // The digest matched; the key must too (digests can collide). And the row must
            // describe this link, as `verifyLink(of:key:)` holds a row read from SQLite to it.
            guard link.key == key,
                place.fingerprint
                    == EntryPlace.fingerprint(
                        url: link.url, variant: link.variant, etag: link.etag, lastModified: link.lastModified,
                        cachePolicy: link.cachePolicy, blobID: Int64(bitPattern: link.blobID),
                        blobHash: link.blobHash, blobLength: link.blobLength, linkLength: read.linkRecordBytes,
                        createdAt: link.createdAt, expiresAt: link.expiresAt)
            else { continue }
            let row = EntryRow(
                keyDigest: digest, url: link.url, variant: link.variant, blobID: Int64(bitPattern: link.blobID),
                linkSegment: place.segment, linkOffset: place.blobOffset + read.blobRecordBytes,
                linkLength: read.linkRecordBytes, sequence: link.sequence, etag: link.etag,
                lastModified: link.lastModified, expiresAt: link.expiresAt, createdAt: link.createdAt,
                accessedAt: place.accessedAt, cost: Int64(bitPattern: link.blobLength), cachePolicy: link.cachePolicy)
            let blob = BlobRow(
                id: Int64(bitPattern: link.blobID), hash: link.blobHash, length: link.blobLength, segment: place.segment,
                offset: place.blobOffset, recordBytes: read.blobRecordBytes, references: 1)
            return (IndexedEntry(entry: row, blob: blob), read.payload)
        }
        return nil
    }

    /// `found`'s blob, read with the link record right after it in one `pread` and both
    /// verified (SegmentFile's `readBlob(…thenLinkAt:identity:body:)`): a new blob's record and its
    /// link's are appended in one write, so most rows name neighbours. Nil when they are not
    /// neighbours, or when anything about them fails — a missing file, damage, a record moved
    /// by the compactor, an I/O error: the caller then checks the link and reads the blob
    /// separately, which tells a move from damage, records damage and throws the typed error.
    private func readBlobWithLink(of found: IndexedEntry, key: CacheKey) -> Data? {
        let row = found.entry
        let blob = found.blob
        // Where the blob record ends is the segment file's to say (from the payload length), not
        // the row's record-bytes count: a row naming another place for its link is checked apart.
        guard row.linkSegment == blob.segment, let file = try? segmentFile(blob.segment) else { return nil }
        let identity = RecordIdentity(type: .link, sequence: row.sequence, digest: key.digest)
        return try? file.readBlob(
            at: blob.offset, payloadLength: blob.length, hash: blob.hash, id: UInt64(bitPattern: blob.id),
            thenLinkAt: row.linkOffset, identity: identity, body: RecordCodec.linkBody(found.describedLink),
            buffers: readBuffers)
    }

    /// Checks that the link record `found` points at is intact and says what the row says: the
    /// key, the sequence, the blob and the metadata; throws `.corruptRecord` (or
    /// `.missingSegment`) otherwise.
    func verifyLink(of found: IndexedEntry, key: CacheKey) throws(StoreError) {
        let row = found.entry
        let failure: String
        do {
            let file = try segmentFile(row.linkSegment)
            // Version 2: the record's header (identity, and the checksum of the body the row
            // describes) settles it with one small read.
            let link = found.describedLink
            let identity = RecordIdentity(type: .link, sequence: row.sequence, digest: key.digest)
            switch try file.holdsLink(at: row.linkOffset, identity: identity, body: RecordCodec.linkBody(link)) {
            case true?: return
            case false?: throw StoreError(code: .corruptRecord, message: "the index row disagrees with its link record")
            case nil: break
            }
            let verified = try file.readRecord(at: row.linkOffset, limit: row.linkOffset + row.linkLength)
            guard case .link(let stored) = verified.record.content else {
                throw StoreError(code: .corruptRecord, message: "the record there is not a link")
            }
            if stored == link { return }
            failure = "the index row disagrees with its link record"
        } catch let error as StoreError {
            guard error.code == .corruptRecord else {
                var error = error
                error.key = key
                error.message = "\(key): \(error.message)"
                throw error
            }
            failure = error.message
        } catch let error as PackError where error.code == .io {
            throw StoreError(pack: error)
        } catch {
            failure = "\(error)"
        }
        let message =
            "\(key): \(failure) (segment \(row.linkSegment) offset \(row.linkOffset)); not served — run `trove fsck --repair`"
        throw StoreError(code: .corruptRecord, message: message, key: key)
    }

    /// Reads and verifies `found`'s blob.
    ///
    /// A record that is the one the index names (its header says so) but whose payload is
    /// damaged is dropped: tombstones remove every key that shares it, so no replay can serve
    /// an older value of them either. Any other failure — nothing verifiable where the index
    /// points, an intact record that is not the one named, a missing segment — may be the
    /// index's damage rather than the pack's: the read throws, the damage is recorded for
    /// `trove fsck --repair` to judge with everything in view, and nothing is dropped.
    ///
    /// Before calling a failed read damage, the key is looked up again: the compactor may have
    /// moved the blob (and deleted the old file) since `found` was read.
    ///
    /// - Returns: nil — nothing recorded — when the blob's segment is gone because `key` was
    ///   written or removed since `found` was looked up (the compactor reclaimed the blob that
    ///   write left dead): not damage; the caller looks the key up again.
    func readBlob(of found: IndexedEntry, key: CacheKey) throws(StoreError) -> Data? {
        let failure: StoreError
        switch readBlobOnce(found.blob) {
        case .success(let data): return data
        case .failure(let error): failure = error
        }
        guard failure.code == .corruptRecord || failure.code == .missingSegment else { throw failure }
        if let fresh = try? readIndex({ try $0.entry(digest: key.digest) }), fresh.entry.key == key,
            fresh.blob.id == found.blob.id,
            fresh.blob.segment != found.blob.segment || fresh.blob.offset != found.blob.offset,
            case .success(let data) = readBlobOnce(fresh.blob)
        {
            shared.withLock { $0.map.blobMoved(for: key, to: fresh.blob) }
            return data
        }
        if failure.code == .missingSegment, isSuperseded(found, key: key) { return nil }
        let blob = found.blob
        if (failure.underlying as? PackError)?.code == .damagedPayload {
            let dropped = (try? dropDamagedBlob(blob, reason: failure.message)) ?? []
            throw StoreError(
                code: .corruptRecord,
                message: "\(key): \(failure.message); dropped \(dropped.count) entr\(dropped.count == 1 ? "y" : "ies") "
                    + "that shared the record", key: key, underlying: failure.underlying)
        }
        let kind: FsckReport.Finding.Kind =
            failure.code == .missingSegment
            ? .missingSegment : (failure.underlying as? PackError)?.code == .recordMismatch ? .staleIndexRow : .corruptRecord
        recordDamage(
            kind, segment: blob.segment, offset: blob.offset, end: blob.offset + blob.recordBytes, "\(key): \(failure.message)")
        var error = failure
        error.key = key
        error.message = "\(key): \(failure.message)"
        throw error
    }

    /// Whether `key` was written or removed since `found` was looked up: its slot, else its
    /// index row, is no longer `found`'s write.
    private func isSuperseded(_ found: IndexedEntry, key: CacheKey) -> Bool {
        let current: IndexedEntry?
        switch shared.withLock({ $0.map.slot(for: key) }) {
        case .removed: return true
        case .present(let slot): current = slot
        case nil: current = try? readIndex { try $0.entry(digest: key.digest) }
        }
        guard let current, current.entry.key == key else { return true }
        return current.entry.sequence != found.entry.sequence
    }

    /// One read of `blob`'s record: its bytes, or the typed error.
    private func readBlobOnce(_ blob: BlobRow) -> Result<Data, StoreError> {
        let file: SegmentFile
        do {
            file = try segmentFile(blob.segment)
        } catch {
            return .failure(error)
        }
        do {
            return .success(
                try file.readBlob(
                    at: blob.offset, payloadLength: blob.length, hash: blob.hash, id: UInt64(bitPattern: blob.id),
                    buffers: readBuffers))
        } catch {
            return .failure(StoreError(pack: error))
        }
    }

    /// The public view of an index row. Read times not yet flushed are not looked up here:
    /// ``locate(_:noteRead:)`` overlays them, and enumerations flush them first.
    func info(_ indexed: IndexedEntry) -> EntryInfo {
        let row = indexed.entry
        return EntryInfo(
            key: row.key,
            metadata: EntryMetadata(
                etag: row.etag, lastModified: row.lastModified, expiresAt: row.expiresAt.map { date(milliseconds: $0) },
                cachePolicy: row.cachePolicy),
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
    /// The link record this row describes: a row is trusted only where the record it points at
    /// is exactly this (reads and the compactor both hold it to that).
    var describedLink: LinkRecord {
        LinkRecord(
            url: entry.url, variant: entry.variant, blobHash: blob.hash, blobLength: blob.length,
            blobID: UInt64(bitPattern: entry.blobID), sequence: entry.sequence, createdAt: entry.createdAt,
            expiresAt: entry.expiresAt, etag: entry.etag, lastModified: entry.lastModified, cachePolicy: entry.cachePolicy)
    }

    /// Whether the entry's expiry is at or before `now` (ms).
    func isExpired(at now: Int64) -> Bool {
        entry.expiresAt.map { $0 <= now } ?? false
    }

    /// This entry with `accessedAt` raised to `read`, a read time not yet flushed, if later.
    func readBefore(_ read: Int64?) -> IndexedEntry {
        guard let read, read > entry.accessedAt else { return self }
        var copy = self
        copy.entry.accessedAt = read
        return copy
    }
}
