#if canImport(Glibc)
    import Glibc
#endif
import TroveCore
import TroveIndex
import TrovePack

/// Applies pack records to the index. The committer applies what the appender wrote; recovery
/// replays what the index had not committed. Both use this one function, and it is
/// idempotent: a blob already indexed at its location, or a link or tombstone whose key has an
/// entry with the same or a newer sequence, changes nothing.
struct IndexApplier {
    let index: IndexDatabase
    let packs: String
    /// Opens segment files for the rare check of a blob the index no longer has.
    let segmentFile: (UInt32) throws -> SegmentFile

    /// What applying a record did.
    enum Outcome { case applied, alreadyReflected, skipped }

    /// Applies `record`, found at `record.offset` of `segment`.
    @discardableResult
    func apply(_ record: ScannedRecord, segment: UInt32) throws -> Outcome {
        switch record.content {
        case .blob(let hash, let length):
            if try index.blob(segment: segment, offset: record.offset) != nil { return .alreadyReflected }
            _ = try index.insertBlob(hash: hash, length: length, segment: segment, offset: record.offset, recordBytes: record.length)
            return .applied
        case .link(let link):
            let key = CacheKey(url: link.url, variant: link.variant)
            let digest = key.digest
            if let existing = try index.entry(digest: digest) {
                // Another key with this digest keeps its entry; a newer write already won.
                if existing.entry.key != key { return .skipped }
                if existing.entry.sequence >= link.sequence { return .alreadyReflected }
            }
            guard let blob = try linkedBlob(link) else { return .skipped }
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

    /// The blob a link names, at its recorded location.
    ///
    /// When the index no longer has it (its last other key went in the same batch, so its row
    /// was deleted), the record is checked on disk — header, type, length and content hash —
    /// and indexed again. Never another blob with the same hash: only the recorded location is
    /// known to hold the linked bytes.
    private func linkedBlob(_ link: LinkRecord) throws -> BlobRow? {
        if let blob = try index.blob(segment: link.blobSegment, offset: link.blobOffset) {
            return blob.hash == link.blobHash && blob.length == link.blobLength ? blob : nil
        }
        guard let file = try? segmentFile(link.blobSegment) else { return nil }
        let prefix = PackFormat.recordHeaderSize + PackFormat.blobPrefixSize
        var raw = [UInt8](repeating: 0, count: prefix)
        let n = try raw.withUnsafeMutableBytes { try file.read(into: $0, at: link.blobOffset) }
        let valid = n == prefix && raw.withUnsafeBytes { bytes -> Bool in
            guard case .success(let header) = RecordDecoder.header(UnsafeRawBufferPointer(rebasing: bytes[0..<PackFormat.recordHeaderSize]))
            else { return false }
            return header.type == .blob && header.bodyLength == link.blobLength + UInt64(PackFormat.blobPrefixSize)
                && RecordDecoder.blobHash(UnsafeRawBufferPointer(rebasing: bytes[PackFormat.recordHeaderSize...])) == link.blobHash
        }
        guard valid else { return nil }
        let recordBytes = PackWriter.blobRecordLength(payloadLength: Int(link.blobLength))
        let id = try index.insertBlob(
            hash: link.blobHash, length: link.blobLength, segment: link.blobSegment, offset: link.blobOffset,
            recordBytes: recordBytes)
        return BlobRow(
            id: id, hash: link.blobHash, length: link.blobLength, segment: link.blobSegment, offset: link.blobOffset,
            recordBytes: recordBytes, references: 0)
    }
}
