import TroveCore
import TroveIndex
import TrovePack

/// Applies pack records to the index: the committer applies what the appender wrote, one
/// record at a time; recovery, rebuilds and fsck apply what ``RecordFold`` resolved, one key
/// at a time. Both are idempotent: applying what the index already reflects changes nothing.
struct IndexApplier {
    let index: IndexDatabase
    /// Read times to give rebuilt entries (from the index being replaced), by key digest.
    var accessTimes: [ContentHash: Int64] = [:]

    /// What applying a record did.
    enum Outcome { case applied, alreadyReflected, skipped }

    /// Applies `writes` in the order they were written (the commit path). A new blob's record
    /// followed by the link that names it — how a put of new bytes is written — is applied as one
    /// (``IndexDatabase/insertBlob(id:hash:length:segment:offset:recordBytes:linking:replacing:)``):
    /// the same rows as applying the two records one by one, which is what happens whenever the
    /// pair does not qualify. Consecutive such pairs for keys the index has no row for (a burst of
    /// new puts) go in groups (``IndexDatabase/insertNewPuts(_:)``), one statement a table for the
    /// group; again the same rows, as the pairs would have left one after another.
    func apply(_ writes: [PendingWrite]) throws {
        var group = NewPutGroup()
        var i = writes.startIndex
        while i < writes.endIndex {
            // The row `newPut` read for a pair it turned down (the key has one): `applyPair` takes
            // it rather than read it again — applying the group first cannot change it, as the
            // group holds only keys that had no row.
            var looked: EntryRow?? = nil
            if i + 1 < writes.endIndex, let put = try newPut(writes[i], writes[i + 1], found: &looked) {
                if group.holds(put.row.keyDigest) {
                    // Its key's row is in the group: apply the group, then this pair again.
                    try apply(&group, writes)
                    continue
                }
                group.puts.append(put)
                group.starts.append(i)
                if group.puts.count == IndexDatabase.newPutGroupSizes[0] { try apply(&group, writes) }
                i += 2
                continue
            }
            try apply(&group, writes)
            if i + 1 < writes.endIndex, try applyPair(writes[i], writes[i + 1], known: looked) {
                i += 2
            } else {
                try apply(writes[i].record, segment: writes[i].segment)
                i += 1
            }
        }
        try apply(&group, writes)
    }

    /// New puts collected for one group statement, in write order, with where each one's blob
    /// record is in the writes (its link record follows).
    private struct NewPutGroup {
        var puts: [IndexDatabase.NewPut] = []
        var starts: [Int] = []

        func holds(_ digest: ContentHash) -> Bool { puts.contains { $0.row.keyDigest == digest } }
    }

    /// Applies the collected new puts in write order and empties `group`: in groups of the
    /// sizes the index takes, the rest (and any group the index declines) pair by pair.
    private func apply(_ group: inout NewPutGroup, _ writes: [PendingWrite]) throws {
        var start = 0
        while start < group.puts.count {
            let left = group.puts.count - start
            let size = IndexDatabase.newPutGroupSizes.first { $0 <= left }
            if let size, try index.insertNewPuts(group.puts[start..<start + size]) {
                start += size
                continue
            }
            for at in group.starts[start..<start + (size ?? 1)] where try !applyPair(writes[at], writes[at + 1]) {
                try apply(writes[at].record, segment: writes[at].segment)
                try apply(writes[at + 1].record, segment: writes[at + 1].segment)
            }
            start += size ?? 1
        }
        group.puts.removeAll(keepingCapacity: true)
        group.starts.removeAll(keepingCapacity: true)
    }

    /// The new put that a new blob's record and the link after it make, when the link names the
    /// blob by id, hash and length and the index has no row for the key (nil otherwise).
    /// `found` receives the key's row as read (nil inside: none), once the pair qualifies that far.
    private func newPut(
        _ first: PendingWrite, _ second: PendingWrite, found: inout EntryRow??
    ) throws -> IndexDatabase.NewPut? {
        guard case .blob(let hash, let id, let length) = first.record.content,
            case .link(let link) = second.record.content,
            link.blobID == id, link.blobHash == hash, link.blobLength == length
        else { return nil }
        let digest = link.key.digest
        let current = try currentRow(digest)
        found = .some(current)
        guard current == nil else { return nil }
        let row = row(
            for: link, digest: digest,
            location: RecordLocation(segment: second.segment, offset: second.record.offset, length: second.record.length),
            accessedAt: link.createdAt)
        return IndexDatabase.NewPut(
            blobID: Int64(bitPattern: id), hash: hash, length: length, segment: first.segment,
            offset: first.record.offset, recordBytes: first.record.length, row: row)
    }

    /// Applies a new blob and the link that follows it together when that gives what applying them
    /// one by one would: the link names the blob by id, hash and length, and the key has no entry
    /// or an older one of the same key. Returns false, having changed nothing, otherwise. `known`:
    /// the key's row as the caller read it in this transaction, if it did.
    private func applyPair(_ first: PendingWrite, _ second: PendingWrite, known: EntryRow?? = nil) throws -> Bool {
        guard case .blob(let hash, let id, let length) = first.record.content,
            case .link(let link) = second.record.content,
            link.blobID == id, link.blobHash == hash, link.blobLength == length
        else { return false }
        let key = link.key
        let digest = key.digest
        let existing = try known ?? currentRow(digest)
        if let existing, existing.key != key || existing.sequence >= link.sequence { return false }
        let row = row(
            for: link, digest: digest,
            location: RecordLocation(segment: second.segment, offset: second.record.offset, length: second.record.length),
            accessedAt: link.createdAt)
        return try index.insertBlob(
            id: Int64(bitPattern: id), hash: hash, length: length, segment: first.segment, offset: first.record.offset,
            recordBytes: first.record.length, linking: row, replacing: existing)
    }

    /// Applies `record`, found at `record.offset` of `segment` (the commit path: records in
    /// the order they were written).
    @discardableResult
    func apply(_ record: ScannedRecord, segment: UInt32) throws -> Outcome {
        switch record.content {
        case .blob(let hash, let id, let length):
            // A second copy of a blob (the compactor moved it) keeps the first location found.
            let added = try index.insertBlob(
                id: Int64(bitPattern: id), hash: hash, length: length, segment: segment, offset: record.offset,
                recordBytes: record.length)
            return added ? .applied : .alreadyReflected
        case .link(let link):
            let key = link.key
            let digest = key.digest
            let existing = try currentRow(digest)
            if let existing {
                // Another key with this digest keeps its entry; a newer write already won.
                if existing.key != key { return .skipped }
                if existing.sequence >= link.sequence { return .alreadyReflected }
            }
            // Only the blob the link names by id is known to hold its bytes: never another
            // blob that merely has the same hash.
            guard let blob = try index.blob(id: Int64(bitPattern: link.blobID)), blob.hash == link.blobHash,
                blob.length == link.blobLength
            else { return .skipped }
            try index.link(
                row(
                    for: link, digest: digest,
                    location: RecordLocation(segment: segment, offset: record.offset, length: record.length),
                    accessedAt: link.createdAt),
                replacing: existing)
            return .applied
        case .tombstone(let tombstone):
            let key = tombstone.key
            guard let existing = try currentRow(key.digest), existing.key == key,
                existing.sequence < tombstone.sequence
            else { return .alreadyReflected }
            try index.removeEntry(digest: key.digest)
            return .applied
        }
    }

    /// The entry row of `digest`, or nil (a new key: no SQL at all, the digest table has no
    /// candidate).
    private func currentRow(_ digest: ContentHash) throws -> EntryRow? {
        try index.entryRow(digest: digest)
    }

    /// What applying a resolution did.
    enum ResolutionOutcome: Equatable {
        /// The index changed to match it, as `change` says.
        case applied(KeyChange)
        /// An entry that was (or would have been) served is gone: its newest write is lost.
        case dropped(CacheKey)
        /// The index already matched it.
        case unchanged

        /// What changed for the key, for the location map's observer.
        var change: KeyChange? {
            switch self {
            case .applied(let change): change
            case .dropped(let key): KeyChange(key: key, kind: .removed)
            case .unchanged: nil
            }
        }
    }

    /// Makes key `digest`'s row what `resolution` says: the resolved link's row, or none.
    func apply(_ resolution: KeyResolution, digest: ContentHash) throws -> ResolutionOutcome {
        let existing = try index.entryRow(digest: digest)
        switch resolution {
        case .entry(let link, let location, let blob):
            let wanted = row(
                for: link, digest: digest, location: location,
                accessedAt: existing?.accessedAt ?? accessTimes[digest] ?? link.createdAt)
            if let existing, existing == wanted, try index.blob(id: Int64(bitPattern: link.blobID)) != nil {
                return .unchanged
            }
            _ = try insertBlob(id: link.blobID, blob)
            try index.link(wanted)
            return .applied(KeyChange(key: link.key, kind: .stored))
        case .absent, .unreflected:
            guard let existing else { return .unchanged }
            try index.removeEntry(digest: digest)
            return .applied(KeyChange(key: existing.key, kind: .removed))
        case .lost(let older, _):
            if let existing {
                try index.removeEntry(digest: digest)
                return .dropped(existing.key)
            }
            return older.map { .dropped($0.key) } ?? .unchanged
        }
    }

    /// Adds blob `id` at `copy`'s place unless the index has it. Returns whether it was added.
    func insertBlob(id: UInt64, _ copy: BlobCopy) throws -> Bool {
        guard try index.blob(id: Int64(bitPattern: id)) == nil else { return false }
        try index.insertBlob(
            id: Int64(bitPattern: id), hash: copy.hash, length: copy.payloadLength, segment: copy.location.segment,
            offset: copy.location.offset, recordBytes: copy.location.length)
        return true
    }

    /// The entry row of `link`, whose record is at `location`.
    func row(for link: LinkRecord, digest: ContentHash, location: RecordLocation, accessedAt: Int64) -> EntryRow {
        Self.row(for: link, digest: digest, location: location, accessedAt: accessedAt)
    }

    /// The entry row of `link`, whose record is at `location`.
    static func row(for link: LinkRecord, digest: ContentHash, location: RecordLocation, accessedAt: Int64) -> EntryRow {
        EntryRow(
            keyDigest: digest, url: link.url, variant: link.variant, blobID: Int64(bitPattern: link.blobID),
            linkSegment: location.segment, linkOffset: location.offset, linkLength: location.length,
            sequence: link.sequence, etag: link.etag, lastModified: link.lastModified, expiresAt: link.expiresAt,
            createdAt: link.createdAt, accessedAt: accessedAt, cost: Int64(bitPattern: link.blobLength),
            cachePolicy: link.cachePolicy)
    }
}
