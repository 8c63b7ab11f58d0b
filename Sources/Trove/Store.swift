public import Foundation
public import TroveCore
import TroveIndex
import TrovePack

/// A content-addressed store of byte blobs under ``CacheKey``s, in one directory.
///
/// Bytes go into append-only pack segments under `<directory>/packs/`, addressed by their
/// XXH3-128 hash: identical bytes stored under different keys are kept once, after a byte
/// comparison. An SQLite index (`<directory>/index.sqlite`) maps keys to blobs and keeps
/// each entry's metadata. See Docs/Architecture.md.
///
/// ```swift
/// let store = try Store(directory: "/var/cache/myapp/trove")
/// try store.put(jpegBytes, for: CacheKey(url: "https://example.com/a.jpg"),
///               metadata: EntryMetadata(etag: "\"v1\""))
/// if let entry = try store.entry(for: CacheKey(url: "https://example.com/a.jpg")) {
///     print(entry.data.count, entry.etag ?? "-")
/// }
/// try store.close()
/// ```
///
/// A store is safe to use from any number of threads and tasks at once. Writes are
/// serialized; reads run in parallel and never wait for an index write. A process holds the
/// directory exclusively: a second `Store` on it (in any process) fails with
/// ``StoreError/Code/locked``.
///
/// All methods throw ``StoreError``.
public final class Store: Sendable {
    /// The store directory.
    public let directory: String
    /// The configuration the store was opened with.
    public let configuration: Configuration
    /// What opening the store found and repaired.
    public let recoveryReport: RecoveryReport

    let packsDirectory: String
    /// The writer: the index's write connection and the active segment. Holding this lock
    /// *is* the write queue, so it is held across the pack append and the index statements of
    /// one write (never across an await). Lock order: `writer` before `shared`.
    let writer: Locked<Writer?>
    /// State shared by every operation; held for dictionary operations only, never across I/O.
    let shared = Locked(SharedState())
    let readers: ReaderPool
    private let processLock: Locked<ProcessLock?>
    private let flusher = Locked<Task<Void, Never>?>(nil)

    /// The largest value a store accepts: 1 GiB less the 16 bytes of the blob record's hash.
    public static let maximumValueLength = Int(PackFormat.maximumBodyLength) - PackFormat.blobPrefixSize

    /// The default store directory: `$XDG_CACHE_HOME/trove`, else `~/.cache/trove`.
    public static var defaultDirectory: String {
        let environment = ProcessInfo.processInfo.environment
        if let cache = environment["XDG_CACHE_HOME"], cache.hasPrefix("/") {
            return cache + "/trove"
        }
        let home = environment["HOME"] ?? NSHomeDirectory()
        return home + "/.cache/trove"
    }

    /// Opens the store in `directory`, creating it when needed, and recovers from any crash.
    ///
    /// Opening reads the index, never the sealed segments: its cost does not grow with the
    /// number of entries beyond SQLite's own. It replays the records of the active segment
    /// that the index had not committed yet, cuts a torn tail, and drops index rows whose
    /// records are gone; ``recoveryReport`` says what it did.
    ///
    /// - Parameters:
    ///   - directory: the store directory; created with its parents if missing.
    ///   - configuration: settings; see ``Configuration``.
    /// - Throws: ``StoreError`` — `.locked` when another process (or another `Store` in this
    ///   one) has the directory open, `.indexCorrupt` when the index is unreadable,
    ///   `.invalidDirectory` or `.io` when the directory cannot be used.
    public init(directory: String = Store.defaultDirectory, configuration: Configuration = Configuration()) throws {
        self.directory = directory
        self.configuration = configuration
        self.packsDirectory = directory + "/packs"
        try SystemCall.makeDirectories(directory)
        let lock = try ProcessLock(path: directory + "/LOCK")
        let (writer, report) = try Self.openWriter(
            directory: directory, packsDirectory: packsDirectory, configuration: configuration)
        self.recoveryReport = report
        self.shared.withLock { $0.segmentFiles[writer.pack.segment.id] = writer.pack.segment }
        self.writer = Locked(writer)
        self.readers = ReaderPool(path: directory + "/index.sqlite", capacity: configuration.readerConnections)
        self.processLock = Locked(lock)
        startFlusher()
    }

    deinit {
        try? close()
    }

    // MARK: Writing

    /// Stores `data` under `key`, replacing any entry for the key.
    ///
    /// The bytes are hashed; if a blob with the same hash and length exists and its bytes
    /// are equal, the key is linked to it and nothing is appended. Otherwise a blob record is
    /// appended to the active segment. The write is visible to every reader in this process
    /// when `put` returns; it is durable as ``Configuration/durability`` says.
    ///
    /// - Parameters:
    ///   - data: the bytes, up to 1 GiB.
    ///   - key: the entry's key.
    ///   - metadata: ETag, Last-Modified and expiry to keep with the bytes.
    /// - Throws: ``StoreError`` — `.valueTooLarge`, `.keyCollision`, `.io`, `.index`, `.closed`.
    /// - Complexity: one XXH3-128 pass over `data`, one or two appends, a few indexed
    ///   statements in the current group-commit transaction.
    public func put(_ data: Data, for key: CacheKey, metadata: EntryMetadata = EntryMetadata()) throws {
        try data.withUnsafeBytes { bytes in
            try put(bytes, for: key, metadata: metadata)
        }
    }

    /// Stores `bytes` under `key`; see ``put(_:for:metadata:)-(Data,_,_)``.
    public func put(_ bytes: UnsafeRawBufferPointer, for key: CacheKey, metadata: EntryMetadata = EntryMetadata()) throws {
        // Refuse what cannot be stored before spending a pass over it.
        guard bytes.count <= Self.maximumValueLength else {
            throw StoreError(
                code: .valueTooLarge,
                message: "\(key): \(bytes.count) bytes is over the limit of \(Self.maximumValueLength) bytes", key: key)
        }
        let hash = configuration.contentHasher(bytes)
        try withWriter { w throws(StoreError) in
            try w.put(bytes, hash: hash, key: key, metadata: metadata, store: self)
        }
    }

    /// Removes the entry for `key`.
    ///
    /// - Returns: whether there was one.
    @discardableResult
    public func remove(_ key: CacheKey) throws -> Bool {
        try withWriter { w throws(StoreError) in try w.remove([key], store: self) } == 1
    }

    /// Removes every entry of `url`: the original and all its variants.
    ///
    /// - Returns: how many entries were removed.
    @discardableResult
    public func removeAll(url: String) throws -> Int {
        try withWriter { w throws(StoreError) in
            let keys = try w.indexCall { try w.index.entries(url: url).map(\.entry.key) }
            return try w.remove(keys, store: self)
        }
    }

    /// Commits pending writes to the index now (and syncs them, unless durability is `none`).
    public func flush() throws {
        try withWriter { w throws(StoreError) in try w.commit(store: self, flushReadTimes: true) }
    }

    /// Flushes pending writes and read times, then releases the directory.
    ///
    /// Every call after `close` throws ``StoreError/Code/closed``. Closing twice is allowed.
    public func close() throws {
        flusher.withLock { task in
            task?.cancel()
            task = nil
        }
        var failure: (any Error)?
        writer.withLock { slot in
            guard let w = slot else { return }
            do { try w.commit(store: self, flushReadTimes: true) } catch { failure = error }
            try? w.index.checkpoint()
            slot = nil
        }
        shared.withLock { state in
            state.isClosed = true
            state.slots.removeAll()
            state.segmentFiles.removeAll()
        }
        readers.closeAll()
        processLock.withLock { $0 = nil }
        if let failure { throw failure }
    }

    /// The first error of background work (the group-commit timer), if any. It stays set
    /// until the store is closed; the writes it concerns are retried at the next commit.
    public var backgroundError: StoreError? {
        shared.withLock { $0.backgroundError }
    }

    // MARK: Internals

    /// Runs `body` with the writer, or throws `.closed`.
    func withWriter<T>(_ body: (Writer) throws(StoreError) -> T) throws(StoreError) -> T {
        try writer.withLock { (slot) throws(StoreError) -> T in
            guard let w = slot else { throw Self.closedError(directory) }
            return try body(w)
        }
    }

    static func closedError(_ directory: String) -> StoreError {
        StoreError(code: .closed, message: "the store at \(directory) is closed")
    }

    /// The segment file `id`, opened read-only on first use.
    func segmentFile(_ id: UInt32) throws(StoreError) -> SegmentFile {
        if let file = shared.withLock({ $0.segmentFiles[id] }) { return file }
        let file: SegmentFile
        do {
            file = try SegmentFile.open(id: id, in: packsDirectory, writable: false)
        } catch let error as PackError {
            throw StoreError(
                code: error.code == .notASegment ? .corruptRecord : .io,
                message: "cannot read segment \(id): \(error.message)", underlying: error)
        } catch {
            throw StoreError(pack: error)
        }
        return shared.withLock { state in
            if let existing = state.segmentFiles[id] { return existing }
            state.segmentFiles[id] = file
            return file
        }
    }

    private func startFlusher() {
        let interval = min(configuration.batchInterval, configuration.accessTimeFlushInterval)
        let task = Task.detached(priority: .utility) { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                guard let self else { return }
                self.flushInBackground()
            }
        }
        flusher.withLock { $0 = task }
    }

    private func flushInBackground() {
        do {
            try writer.withLock { (slot) throws(StoreError) in
                guard let w = slot else { return }
                try w.commitIfDue(store: self, now: .now)
            }
        } catch {
            shared.withLock { state in
                if state.backgroundError == nil { state.backgroundError = error }
            }
        }
    }
}

/// Milliseconds since 1970 from the system clock.
func wallClockMilliseconds() -> Int64 {
    Int64((Date().timeIntervalSince1970 * 1000).rounded())
}
