#if canImport(Glibc)
    import Glibc
#endif

/// An error of the pack layer: I/O on a segment file, or a record that is not what it should be.
///
/// `code` says what kind of failure it is; `message` names the segment file and offset and
/// says what to do; `errno` is set when a system call failed.
public struct PackError: Error, Sendable, CustomStringConvertible {
    /// The kind of a pack error. Extensible: new codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// A system call on a segment file failed.
        public static let io = Code(name: "io")
        /// No intact record is where one was expected: bad header, checksum mismatch or
        /// malformed body.
        public static let corruptRecord = Code(name: "corruptRecord")
        /// The record is the one expected — its header, which has a checksum of its own, says
        /// so — but its body is damaged.
        public static let damagedPayload = Code(name: "damagedPayload")
        /// An intact record is where one was expected, but not the one expected: whoever pointed
        /// here (an index row) is wrong, not the pack.
        public static let recordMismatch = Code(name: "recordMismatch")
        /// A record runs past the end of its segment file.
        public static let truncatedRecord = Code(name: "truncatedRecord")
        /// A file in packs/ is not a Trove segment of a supported version.
        public static let notASegment = Code(name: "notASegment")
        /// A payload is larger than a record can hold.
        public static let recordTooLarge = Code(name: "recordTooLarge")
        /// An `fdatasync` of this segment file failed earlier. The bytes written to it since its
        /// last successful sync may not be on disk, and Linux reports a failed writeback only
        /// once: a later sync can return success without writing them again. So the file
        /// refuses every later sync with this error, which keeps the first failure's `errno`;
        /// only a new opening of the file (reopening the store) syncs it again.
        public static let syncFailed = Code(name: "syncFailed")
        public var description: String { name }
    }

    /// What kind of failure this is.
    public var code: Code
    /// What failed, naming the file and offset, and what to do.
    public var message: String
    /// The path of the segment file involved.
    public var path: String
    /// The offset in the file, when the failure concerns one record.
    public var offset: UInt64?
    /// The system error number, for ``Code/io``.
    public var errno: Int32?

    /// Makes an error.
    public init(code: Code, message: String, path: String, offset: UInt64? = nil, errno: Int32? = nil) {
        self.code = code
        self.message = message
        self.path = path
        self.offset = offset
        self.errno = errno
    }

    public var description: String { "\(code): \(message)" }

    /// Whether a system call failed on a file that is there (``Code/io``, any `errno` but
    /// `ENOENT`): the failure says nothing about what the file holds, and may pass — no verdict
    /// on the file (missing, not a segment, damaged) may rest on it.
    public var isFailedAccess: Bool { code == .io && errno != ENOENT }
}
