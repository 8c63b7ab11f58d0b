// The constants of Trove's pack format. The byte-by-byte specification, with a worked
// example and the tradeoffs, is Docs/PackFormat.md: change both together.

/// Constants of the pack segment format.
///
/// Version 2 is written; version 1 (segments written before records were bound to their
/// store and position) is still read. A segment holds records of its header's version only.
public enum PackFormat {
    /// The version new segments are written in.
    public static let currentVersion: UInt8 = 2

    /// The first 8 bytes of every segment file: "TROVPACK".
    public static let segmentMagic: [UInt8] = Array("TROVPACK".utf8)
    /// The magic of every record: the bytes "TRVR" (0x52565254 little-endian).
    public static let recordMagic: UInt32 = 0x5256_5254
    /// The record magic as bytes, for searching a buffer (derived: the magic is written once).
    public static let recordMagicBytes: [UInt8] = withUnsafeBytes(of: recordMagic.littleEndian) { Array($0) }

    /// The size of a segment header in the current version.
    public static let segmentHeaderSize = Version2.segmentHeaderSize
    /// The size of a record header in the current version.
    public static let recordHeaderSize = Version2.recordHeaderSize

    /// The largest record body the format accepts (1 GiB): a bound that a corrupt length field
    /// cannot push a reader past.
    public static let maximumBodyLength: UInt64 = 1 << 30

    /// Version 2: records bound to their store (a secret in every segment header) and to their
    /// position (segment id and offset in the header checksum's seed), with the record's
    /// identity in a header that has its own checksum.
    public enum Version2 {
        /// magic (8) + version (4) + segment id (4) + created (8) + store secret (16) + checksum (8).
        public static let segmentHeaderSize = 48
        /// magic (4) + type (1) + version (1) + flags (2) + body length (4) + sequence (8)
        /// + identity (16) + body checksum (8) + header checksum (8).
        public static let recordHeaderSize = 52
        /// Bytes of the record header that its checksum covers (all before the checksum).
        public static let checksummedHeaderPrefix = 44
        /// Offset of the body checksum in the record header.
        public static let bodyChecksumOffset = 36
        /// Fixed part of a link body, before its four length-prefixed strings.
        public static let linkFixedSize = 60
        /// Fixed part of a tombstone body, before its two length-prefixed strings.
        public static let tombstoneFixedSize = 16
    }

    /// Version 1: records checksummed but not bound to their store or position (Docs/PackFormat.md
    /// says what that exposes).
    public enum Version1 {
        /// magic (8) + version (4) + segment id (4) + created (8) + checksum (8).
        public static let segmentHeaderSize = 32
        /// magic (4) + type (1) + version (1) + flags (2) + body length (8) + checksum (8).
        public static let recordHeaderSize = 24
        /// Bytes of the record header that the checksum's seed covers.
        public static let checksummedHeaderPrefix = 16
        /// A blob body starts with the 16-byte content hash and the 8-byte blob id.
        public static let blobPrefixSize = 24
        /// Fixed part of a link body, before its four length-prefixed strings.
        public static let linkFixedSize = 64
        /// Fixed part of a tombstone body, before its two length-prefixed strings.
        public static let tombstoneFixedSize = 16
    }

    /// The file name of segment `id`: eight decimal digits and `.pack`.
    public static func fileName(forSegment id: UInt32) -> String {
        let digits = String(id)
        return String(repeating: "0", count: max(0, 8 - digits.count)) + digits + ".pack"
    }

    /// The segment id named by `fileName`, or nil when it is not a segment file name.
    public static func segmentID(fromFileName fileName: String) -> UInt32? {
        guard fileName.hasSuffix(".pack") else { return nil }
        let stem = fileName.dropLast(5)
        guard stem.count == 8, stem.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        guard let id = UInt32(stem), id > 0 else { return nil }
        return id
    }
}

/// The kind of a pack record.
public enum RecordType: UInt8, Sendable, CaseIterable {
    /// Content: a hash and the bytes it addresses.
    case blob = 1
    /// A key linked to a blob, with the entry's metadata.
    case link = 2
    /// A key removed.
    case tombstone = 3
}
