public import TroveCore
import TroveIndex
import TrovePack

/// An error of a ``Store``.
///
/// `code` says what kind of failure it is; `message` names the store, key, segment or file and
/// says what to do; `underlying` keeps the pack- or index-layer error that caused it.
public struct StoreError: Error, Sendable, CustomStringConvertible {
    /// The kind of a store error. Extensible: new codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// Another process (or another `Store` in this one) owns the store directory.
        public static let locked = Code(name: "locked")
        /// The store was closed.
        public static let closed = Code(name: "closed")
        /// The store directory cannot be created or used.
        public static let invalidDirectory = Code(name: "invalidDirectory")
        /// A file operation failed (disk full, permissions, I/O error).
        public static let io = Code(name: "io")
        /// A stored record failed verification; the entry was dropped and is not served.
        public static let corruptRecord = Code(name: "corruptRecord")
        /// The index is damaged or unreadable; `trove fsck --rebuild-index` rebuilds it.
        public static let indexCorrupt = Code(name: "indexCorrupt")
        /// The index failed (SQLite error).
        public static let index = Code(name: "index")
        /// The index was written by a newer Trove.
        public static let schemaTooNew = Code(name: "schemaTooNew")
        /// Two different keys share a 128-bit key digest; the put was refused.
        public static let keyCollision = Code(name: "keyCollision")
        /// The value is larger than a pack record can hold.
        public static let valueTooLarge = Code(name: "valueTooLarge")
        /// A segment file that the index relies on is missing or unreadable; its entries are
        /// not served until it is restored or `trove fsck --repair` drops them.
        public static let missingSegment = Code(name: "missingSegment")
        /// An argument is out of range (an expiry date past what a store can record, …).
        public static let invalidArgument = Code(name: "invalidArgument")
        /// The directory holds no store, and the configuration says not to create one.
        public static let notAStore = Code(name: "notAStore")
        /// The disk failed to make written pack bytes durable (an `fdatasync` failed, or an
        /// opening could not write the writes it replays again and sync them). A retried sync
        /// could report success for bytes the disk lost, so the store refuses every write (and
        /// every commit of writes already queued) until it is closed and opened again; reads go
        /// on. Opening writes what it replays again and syncs it before indexing it
        /// (Docs/Architecture.md, "Durability"). Nothing acknowledged as durable before the
        /// failure is affected.
        public static let syncFailed = Code(name: "syncFailed")
        public var description: String { name }
    }

    /// What kind of failure this is.
    public var code: Code
    /// What failed and what to do.
    public var message: String
    /// The key involved, if any.
    public var key: CacheKey?
    /// The lower-level error, if any.
    public var underlying: (any Error & Sendable)?

    /// Makes an error.
    public init(code: Code, message: String, key: CacheKey? = nil, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.key = key
        self.underlying = underlying
    }

    public var description: String { message }
}

// Mapping the lower layers' errors to StoreError codes.
extension StoreError {
    init(index anyError: any Error) {
        guard let error = anyError as? IndexError else {
            self.init(pack: anyError)
            return
        }
        switch error.code {
        case .corrupt:
            self.init(
                code: .indexCorrupt,
                message: "the index is damaged: \(error.message); run `trove fsck --rebuild-index`",
                underlying: error)
        case .schemaTooNew:
            self.init(code: .schemaTooNew, message: error.message, underlying: error)
        default:
            self.init(code: .index, message: "index error: \(error)", underlying: error)
        }
    }

    init(pack anyError: any Error) {
        // A StoreError passed up through an untyped call (a sync job's) stays as it is.
        if let error = anyError as? StoreError {
            self = error
            return
        }
        guard let error = anyError as? PackError else {
            self.init(code: .io, message: "\(anyError)")
            return
        }
        switch error.code {
        case .recordTooLarge: self.init(code: .valueTooLarge, message: error.message, underlying: error)
        case .syncFailed:
            self.init(
                code: .syncFailed,
                message: "\(error.message). Writes are refused until the store is closed and opened again (opening "
                    + "replays what the packs hold); the kernel log (dmesg) says why the disk failed",
                underlying: error)
        case .corruptRecord, .truncatedRecord, .notASegment, .damagedPayload, .recordMismatch:
            self.init(code: .corruptRecord, message: error.message, underlying: error)
        default: self.init(code: .io, message: error.message, underlying: error)
        }
    }
}
