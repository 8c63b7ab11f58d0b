import TroveCore
import TroveIndex
import TrovePack

/// Applies pack records to the index. The committer applies what the appender wrote; recovery
/// replays what the index had not committed. Both use this one function, and it is
/// idempotent: a blob already indexed under its id, or a link or tombstone whose key has an
/// entry with the same or a newer sequence, changes nothing.
struct IndexApplier {
    let index: IndexDatabase

    /// What applying a record did.
    enum Outcome { case applied, alreadyReflected, skipped }

    /// Applies `record`, found at `record.offset` of `segment`.
    @discardableResult
    func apply(_ record: ScannedRecord, segment: UInt32) throws -> Outcome {
        switch record.content {
        case .blob(let hash, let id, let length):
            // A second copy of a blob (the compactor moved it) keeps the first location found.
            if try index.blob(id: Int64(bitPattern: id)) != nil { return .alreadyReflected }
            try index.insertBlob(
                id: Int64(bitPattern: id), hash: hash, length: length, segment: segment, offset: record.offset,
                recordBytes: record.length)
            return .applied
        case .link(let link):
            let key = CacheKey(url: link.url, variant: link.variant)
            let digest = key.digest
            if let existing = try index.entry(digest: digest) {
                // Another key with this digest keeps its entry; a newer write already won.
                if existing.entry.key != key { return .skipped }
                if existing.entry.sequence >= link.sequence { return .alreadyReflected }
            }
            // Only the blob the link names by id is known to hold its bytes: never another
            // blob that merely has the same hash.
            guard let blob = try index.blob(id: Int64(bitPattern: link.blobID)), blob.hash == link.blobHash,
                blob.length == link.blobLength
            else { return .skipped }
            try index.link(
                EntryRow(
                    keyDigest: digest, url: link.url, variant: link.variant, blobID: blob.id, linkSegment: segment,
                    linkOffset: record.offset, linkLength: record.length, sequence: link.sequence, etag: link.etag,
                    lastModified: link.lastModified, expiresAt: link.expiresAt, createdAt: link.createdAt,
                    accessedAt: link.createdAt, cost: Int64(link.blobLength)))
            return .applied
        case .tombstone(let tombstone):
            let key = CacheKey(url: tombstone.url, variant: tombstone.variant)
            guard let existing = try index.entry(digest: key.digest), existing.entry.key == key,
                existing.entry.sequence < tombstone.sequence
            else { return .alreadyReflected }
            try index.removeEntry(digest: key.digest)
            return .applied
        }
    }
}
