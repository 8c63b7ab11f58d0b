/// What ``Store/fsck(repair:progress:)`` found and, with repair, fixed.
public struct FsckReport: Hashable, Sendable, Codable {
    /// One problem.
    public struct Finding: Hashable, Sendable, Codable {
        /// The kind of a finding (Docs/Operations.md says what each means and what to do).
        public enum Kind: String, Hashable, Sendable, Codable, CaseIterable {
            /// SQLite's `integrity_check` reported damage in the index file.
            case indexIntegrity
            /// A record failed verification (checksum, header, body) or bytes between records
            /// are unreadable.
            case corruptRecord
            /// An index row points at a record that is missing, of the wrong kind, or not the one
            /// the row describes.
            case staleIndexRow
            /// An intact record in the packs that the index should reflect but does not (a write
            /// whose index commit was lost).
            case orphanRecord
            /// An intact link older than what the index has committed, for a key the index has
            /// no entry for: the key was removed or replaced and that record was lost, or the
            /// index lost the row. Never restored (it may be a removed or older value).
            case unreflectedRecord
            /// A key whose newest write is known (a damaged record, or the index's entry) but
            /// cannot be read: its entry is dropped, and its older values are never served.
            case lostWrite
            /// A blob's stored reference count differs from the entries linked to it.
            case wrongReferenceCount
            /// A segment's stored live bytes differ from what its rows add up to.
            case wrongLiveBytes
            /// The store's sequence counter is behind a sequence found in the packs: new writes
            /// could reuse a number and be taken for older ones.
            case wrongSequence
            /// The index names a segment whose file is missing.
            case missingSegment
            /// A segment file the index does not name.
            case orphanSegment
            /// A segment file is shorter than the index says.
            case truncatedSegment
            /// A file moved out of the segment namespace of `packs/`: a copy of a segment that
            /// another file holds, a segment of another store, or an unreadable file (kept for
            /// inspection, never deleted).
            case setAsideFile
            /// A segment file renamed back to the id its header names.
            case renamedSegment
            /// The index was rebuilt from the packs with no sound index to check them against
            /// (it was missing or damaged): a write whose records were lost as well — a deleted
            /// or damaged segment — cannot be known, and its key may show its previous value.
            case rebuiltIndex
        }

        /// The kind.
        public var kind: Kind
        /// What is wrong, naming the segment, offset and key when there are some.
        public var message: String
        /// The segment involved.
        public var segment: UInt32?
        /// The offset in the segment.
        public var offset: UInt64?
        /// Whether `--repair` fixed it.
        public var repaired = false
    }

    /// Everything found, in the order found.
    public var findings: [Finding] = []
    /// Segment files checked.
    public var segmentsChecked = 0
    /// Records whose checksum was verified.
    public var recordsVerified = 0
    /// Bytes read and verified.
    public var bytesVerified: Int64 = 0
    /// Entries lost because their bytes were damaged (dropped by repair).
    public var entriesLost = 0

    /// Whether nothing was found.
    public var isClean: Bool { findings.isEmpty }
    /// Whether something was found and all of it repaired.
    public var isRepaired: Bool { !findings.isEmpty && findings.allSatisfy(\.repaired) }
}

/// Progress of long work (fsck, compaction, rebuild): what is being done and how far it is.
public struct WorkProgress: Sendable, Hashable {
    /// The phase, e.g. "verifying records".
    public var phase: String
    /// Bytes done in this phase.
    public var bytesDone: Int64
    /// Bytes this phase will do in all, when known.
    public var bytesTotal: Int64?
}
