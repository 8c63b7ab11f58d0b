import TroveCore
import TroveIndex
import TrovePack

extension Store {
    /// Counts and sizes of a store.
    public struct Statistics: Hashable, Sendable, Codable {
        /// Entries (keys).
        public var entries: Int
        /// Distinct blobs (stored contents).
        public var blobs: Int
        /// Sum of the entries' payload lengths: what a store without deduplication would hold.
        public var payloadBytes: Int64
        /// Sum of the distinct blobs' payload lengths: what is stored.
        public var storedPayloadBytes: Int64
        /// Bytes saved by deduplication (`payloadBytes - storedPayloadBytes`).
        public var dedupSavedBytes: Int64 { payloadBytes - storedPayloadBytes }
        /// Bytes of pack records that entries still reference.
        public var liveBytes: Int64
        /// Size of the pack segment files, less the hole the active one keeps ahead of its
        /// writes (``Configuration/warmAhead``), which takes no space.
        public var packBytes: Int64
        /// Size of the index files (`index.sqlite` and its `-wal` and `-shm`).
        public var indexBytes: Int64
        /// Disk usage: packs plus index.
        public var diskBytes: Int64 { packBytes + indexBytes }
        /// Pack segment files.
        public var segments: Int

        enum CodingKeys: String, CodingKey {
            case entries, blobs, payloadBytes, storedPayloadBytes, liveBytes, packBytes, indexBytes, segments
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: ExtendedKeys.self)
            try c.encode(entries, forKey: .entries)
            try c.encode(blobs, forKey: .blobs)
            try c.encode(payloadBytes, forKey: .payloadBytes)
            try c.encode(storedPayloadBytes, forKey: .storedPayloadBytes)
            try c.encode(dedupSavedBytes, forKey: .dedupSavedBytes)
            try c.encode(liveBytes, forKey: .liveBytes)
            try c.encode(packBytes, forKey: .packBytes)
            try c.encode(indexBytes, forKey: .indexBytes)
            try c.encode(diskBytes, forKey: .diskBytes)
            try c.encode(segments, forKey: .segments)
        }

        enum ExtendedKeys: String, CodingKey {
            case entries, blobs, payloadBytes, storedPayloadBytes, dedupSavedBytes, liveBytes, packBytes, indexBytes,
                diskBytes, segments
        }
    }

    /// Counts and sizes, after committing pending writes. On a disk too full for that commit,
    /// the counts are what the index has committed (writes still in memory are left out).
    ///
    /// - Complexity: O(entries) in SQLite's aggregate queries; O(segments) `stat` calls.
    public func statistics() throws(StoreError) -> Statistics {
        // On a disk too full for the commit, the totals are the index's: writes still in
        // memory are not counted until they are committed.
        _ = try commitForListing()
        let totals = try readIndex { try $0.totals() }
        let segmentIDs: [UInt32]
        do { segmentIDs = try PackDirectory.segmentIDs(in: packsDirectory) } catch { throw StoreError(pack: error) }
        let packBytes = packFileBytes()
        let indexBytes = indexFileBytes()
        return Statistics(
            entries: Int(totals.entries), blobs: Int(totals.blobs), payloadBytes: totals.entryPayloadBytes,
            storedPayloadBytes: totals.blobPayloadBytes, liveBytes: totals.liveBytes, packBytes: packBytes,
            indexBytes: indexBytes, segments: segmentIDs.count)
    }
}

extension Store {
    /// Cold gets this store served through the entry digest table's places, without SQLite
    /// (Docs/Architecture.md, "Places"): what the benchmark reports to show which path its
    /// first reads took.
    @_spi(Testing) public var readsThroughPlaces: Int { shared.withLock { $0.readsThroughPlaces } }
}
