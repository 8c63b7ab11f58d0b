public import TroveCore

/// What opening a store found and did: torn tails cut, records replayed into the index, files
/// put back under their names or set aside, damage found, entries dropped.
public struct RecoveryReport: Hashable, Sendable {
    /// A segment whose tail did not hold valid records and was truncated.
    public struct TruncatedTail: Hashable, Sendable {
        /// The segment id.
        public var segment: UInt32
        /// The offset where the segment now ends.
        public var validEnd: UInt64
        /// How many bytes were cut.
        public var bytesRemoved: UInt64
        /// Why the first cut byte was not a valid record.
        public var reason: String
    }

    /// A link record a rebuild did not restore.
    public struct UnrestoredLink: Hashable, Sendable {
        /// Its key.
        public var key: CacheKey
        /// Where it is.
        public var segment: UInt32
        /// Its offset in `segment`.
        public var offset: UInt64
    }

    /// A file in `packs/` renamed or set aside.
    public struct MovedFile: Hashable, Sendable {
        /// Its name before.
        public var from: String
        /// Its name now.
        public var to: String
        /// Why.
        public var reason: String
    }

    /// Tails cut from segments being written when the store last stopped: writes that never
    /// completed. Only garbage after the last intact record is ever cut — and, without a
    /// report, the hole the writer kept past its records (Docs/Architecture.md, "Pages ahead of
    /// the writes").
    public var truncatedTails: [TruncatedTail] = []
    /// Records replayed into the index (writes whose index commit was lost).
    public var replayedRecords = 0
    /// Segments the index names whose files are missing, unreadable or shorter than the index
    /// says. Their entries stay in the index (a restored file brings them back) but are not
    /// served: reads throw ``StoreError/Code/missingSegment`` or ``StoreError/Code/corruptRecord``
    /// until the file is restored or `trove fsck --repair` drops them.
    public var missingSegments: [UInt32] = []
    /// Entries dropped because their newest write cannot be read: a damaged record.
    public var droppedEntries: [CacheKey] = []
    /// Links a rebuild did not restore: older than what the replaced index committed, with no
    /// row of it for their key (a removal the packs no longer show, or a row the index lost).
    public var unrestoredLinks: [UnrestoredLink] = []
    /// Segment files renamed to the id their header names (they had been renamed or swapped).
    public var renamedFiles: [MovedFile] = []
    /// Files moved out of the segment namespace (kept, never deleted): copies of a segment
    /// another file holds, segments of another store, unreadable files the index does not use.
    public var setAsideFiles: [MovedFile] = []
    /// Damage found in the segments that were scanned (recorded in the index and reported by
    /// every command until `trove fsck --repair`).
    public var damage: [StoreDamage] = []
    /// Whether the index was missing and was rebuilt from the packs.
    public var rebuiltIndex = false

    /// Whether the store opened without finding anything to repair (replaying writes whose
    /// index commit was lost is normal work after a crash, not damage).
    public var isClean: Bool {
        truncatedTails.isEmpty && missingSegments.isEmpty && droppedEntries.isEmpty && renamedFiles.isEmpty
            && setAsideFiles.isEmpty && damage.isEmpty
    }
}

/// Damage the store knows of and has not repaired, as every command reports it.
public struct StoreDamage: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The kind of problem, as fsck names it (Docs/Operations.md).
    public var kind: FsckReport.Finding.Kind
    /// The segment involved, if any.
    public var segment: UInt32?
    /// Where the damage starts in the segment.
    public var offset: UInt64?
    /// What is wrong and what to do.
    public var message: String

    /// Makes a description of damage.
    public init(kind: FsckReport.Finding.Kind, segment: UInt32? = nil, offset: UInt64? = nil, message: String) {
        self.kind = kind
        self.segment = segment
        self.offset = offset
        self.message = message
    }

    public var description: String { "\(kind.rawValue): \(message)" }
}
