public import TroveCore

/// What opening a store found and repaired: torn tails cut off, records replayed into the
/// index, and entries dropped because their bytes were gone.
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

    /// Tails cut from unsealed segments.
    public var truncatedTails: [TruncatedTail] = []
    /// Records of unsealed segments replayed into the index (writes whose index commit was lost).
    public var replayedRecords = 0
    /// Segments the index named whose files are missing or unreadable.
    public var missingSegments: [UInt32] = []
    /// Entries dropped because their records were gone.
    public var droppedEntries: [CacheKey] = []

    /// Whether the store opened without finding anything to repair (replaying writes whose
    /// index commit was lost is normal work, not damage).
    public var isClean: Bool {
        truncatedTails.isEmpty && missingSegments.isEmpty && droppedEntries.isEmpty
    }
}
