import Foundation
import TroveCore
import TroveIndex
import TrovePack

#if canImport(Glibc)
    import Glibc
#endif

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
    /// The appender: active segment and queued writes. Held for one write's appends only.
    /// Lock order: `committer`, then `appender`, then `shared`.
    let appender: Locked<AppendState>
    /// The committer: the index's write connection. Held for a whole commit cycle (fdatasync
    /// and SQLite commit), which puts never wait for unless durability is `full`.
    let committer: Locked<CommitState?>
    /// State shared by every operation; held for dictionary operations only, never across I/O.
    let shared: Locked<SharedState>
    let readers: ReaderPool
    /// Dedup candidates by content hash. Never held around another store lock; taken under
    /// `committer` by compaction and repair passes only (see ``DedupHints``).
    let dedupHints: Locked<DedupHints>
    /// Whether the dedup hints are loaded, readable while a load holds their lock (their own
    /// flag: ``DedupHints/loaded``).
    let dedupHintsLoaded: Locked<Bool>
    /// The committer's entry row ids by key digest (``EntryDigestTable``), shared with the
    /// reader connections: a lookup by key reads its row by id, and a put of a key no row has
    /// skips the lookup of its collision check. Its lock is held for table operations only.
    let entryDigests: EntryDigestTable
    /// Large read buffers kept for the next get (``Configuration/readBufferRetention``); its
    /// lock is a leaf, taken by whichever thread releases a value's `Data`.
    let readBuffers: ReadBuffers
    let background = BackgroundCommitter()
    /// Checkpoints the index's log off the committer thread, when a commit cycle asks.
    let checkpointer: BackgroundCheckpointer
    /// Runs each commit cycle's wait for the pack's durability beside its index apply (used
    /// under `committer`).
    let syncer = BackgroundSyncer()
    /// Frees what the location map lets go of at its limit, off the commit cycle.
    let reclaimer = Reclaimer()
    /// Writes the zeros the active segment keeps ahead of its writes (``ZeroFill``,
    /// ``Configuration/zeroFill``), or reads the hole it keeps ahead of them into the page cache
    /// (``Configuration/warmAhead``); its jobs hold the segment, not the store.
    let preparer = WorkerThread(name: "trove-preparer")
    /// How writes that wait for their commit (back-pressure) share cycles: the committed
    /// sequence. Taken with no store lock held; its leader takes `committer` after releasing it.
    let groupCommit = GroupWait<UInt64>(reached: 0)
    /// How the pack's syncs are shared (``syncPack()``): how far the pack is durable. Every
    /// fdatasync of the active segment and of the segments sealed since (and the packs
    /// directory's after a rotation) goes through it — a `full` write's and a commit cycle's
    /// alike — so a write that waits for its bytes never waits for an index commit, and a
    /// cycle whose bytes a writer's sync covered syncs nothing. Taken with no store lock held;
    /// its leader takes `appender` briefly, before and after the syncs.
    let groupSync = GroupWait<PackPosition>(reached: .start)
    /// Loads what opening leaves to the background, so that opening costs the entry ids alone:
    /// the dedup hints (``loadDedupHints(_:path:stopped:)``; a put arriving first loads them or
    /// waits for this load), then the entry digest table's places
    /// (``loadPlaces(committer:digests:path:stopped:)``; gets never wait: they ask SQLite); the
    /// hints again after a repair reset them. Its jobs hold no reference to the store.
    let loader = WorkerThread(name: "trove-loader")
    /// Set by close(): loads stop at their next batch (a stopped hints load leaves them unloaded).
    let loadsStopped = Locked(false)
    private let processLock: Locked<ProcessLock?>

    /// The largest value a store accepts: 1 GiB less 24 bytes (what a version-1 blob record,
    /// which a store may still hold, can carry).
    public static let maximumValueLength = Int(PackFormat.maximumBodyLength) - PackFormat.Version1.blobPrefixSize

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
    /// number of entries beyond SQLite's own. It puts segment files back under the names their
    /// headers give, replays the records that the index had not committed yet, and cuts a torn
    /// tail (a write that never completed) — nothing else. A lost index is rebuilt from the
    /// packs. Damage it finds is recorded and reported by ``unrepairedDamage()`` until
    /// `trove fsck --repair`; ``recoveryReport`` says what it did.
    ///
    /// - Parameters:
    ///   - directory: the store directory; created with its parents if missing (unless
    ///     ``Configuration/createsMissingStore`` is false).
    ///   - configuration: settings; see ``Configuration``.
    /// - Throws: ``StoreError`` — `.locked` when another process (or another `Store` in this
    ///   one) has the directory open, `.indexCorrupt` when the index is unreadable,
    ///   `.notAStore` when there is no store and none may be created, `.invalidDirectory` or
    ///   `.io` when the directory cannot be used.
    public convenience init(directory: String = Store.defaultDirectory, configuration: Configuration = Configuration())
        throws(StoreError)
    {
        try self.init(directory: directory, configuration: configuration, rebuilding: nil, lock: nil, progress: { _ in })
    }

    /// Opens the store; with `evidence`, first rebuilds its (new, empty) index from the packs,
    /// using `evidence` from the index it replaces. `lock` is the directory's lock when the
    /// caller holds it already.
    init(
        directory: String, configuration: Configuration, rebuilding evidence: IndexEvidence?, lock held: ProcessLock?,
        progress: (WorkProgress) -> Void
    ) throws(StoreError) {
        self.directory = directory
        self.configuration = configuration
        self.shared = Locked(SharedState(map: LocationMap(observer: configuration.keyChanges)))
        let hints = DedupHints()
        self.dedupHintsLoaded = hints.loaded
        self.dedupHints = Locked(hints)
        self.packsDirectory = directory + "/packs"
        if !configuration.createsMissingStore && SystemCall.fileKind(directory + "/index.sqlite") == nil
            && SystemCall.fileKind(packsDirectory) == nil
        {
            throw StoreError(
                code: .notAStore,
                message: "there is no Trove store at \(directory) (no index.sqlite and no packs/); check the path")
        }
        try SystemCall.makeDirectories(directory)
        let lock: ProcessLock
        if let held { lock = held } else { lock = try ProcessLock(path: directory + "/LOCK") }
        let opened = try Self.recover(
            directory: directory, packsDirectory: packsDirectory, configuration: configuration, rebuilding: evidence,
            progress: progress)
        self.recoveryReport = opened.report
        self.shared.withLock { $0.segmentFiles[opened.pack.segment.id] = opened.pack.segment }
        self.appender = Locked(
            AppendState(
                pack: opened.pack, nextSequence: opened.nextSequence, format: opened.pack.segment.format,
                syncs: configuration.durability != .none, faults: configuration.faultInjector))
        appender.withLock { $0.unsyncedTails = opened.unsyncedTails }
        // Seen at once, not only after the first refused cycle.
        if let unsynced = opened.unsyncedTails { shared.withLock { $0.backgroundError = StoreError(pack: unsynced) } }
        // Checkpoints are the checkpointer's from here on, not a side effect of a commit.
        opened.index.takeOverCheckpoints()
        self.entryDigests = opened.digests
        self.readBuffers = ReadBuffers(budget: configuration.readBufferRetention)
        self.checkpointer = BackgroundCheckpointer(path: directory + "/index.sqlite")
        // Opening synced what the active segment holds (or it is the committed part).
        let commitState = CommitState(
            index: opened.index, committedSequence: opened.nextSequence,
            committedEnd: (opened.pack.segment.id, opened.pack.end))
        commitState.deferredReplay = opened.deferred
        self.committer = Locked(commitState)
        shared.withLock { state in
            if let deferred = opened.deferred { state.map.pin(deferred.slots()) }
            state.map.indexChanged(opened.changes, keeping: [])
        }
        self.readers = ReaderPool(
            path: directory + "/index.sqlite", digests: entryDigests, capacity: configuration.readerConnections)
        self.processLock = Locked(lock)
        background.store = self
        // Older links whose newer write is lost must never be replayed again: tombstones over
        // them make that part of the packs.
        if !opened.supersede.isEmpty {
            // Best effort (a full disk refuses it): fsck finds the damage again and writes them.
            do { try supersede(opened.supersede) } catch { shared.withLock { $0.backgroundError = error } }
        }
        background.start(interval: min(configuration.batchInterval, configuration.accessTimeFlushInterval))
        startZeroFills()
        // The jobs hold what they use, not the store: a store released during a load must not
        // be closed on the loader's own thread (close() waits for that thread). The hints first:
        // a put that misses one stores a second copy for good, a get without a place only asks
        // SQLite.
        loadDedupHints()
        let (committer, digests, path, stopped) = (committer, entryDigests, directory + "/index.sqlite", loadsStopped)
        loader.enqueue { Self.loadPlaces(committer: committer, digests: digests, path: path, stopped: stopped) }
    }

    /// Keeps zeros ahead of the active segment's writes (``Configuration/zeroFill``): the
    /// writer claims each fill (``PackWriter``), the preparer's thread writes and syncs it.
    /// The jobs hold the segment, not the store.
    /// Without zeros, keeps the page cache warm ahead of the writes (``Configuration/warmAhead``):
    /// the writer extends the file, the preparer's thread reads the hole in.
    private func startZeroFills() {
        let preparer = preparer
        let chunk = configuration.zeroFill
        guard chunk > 0 else {
            guard configuration.warmAhead > 0 else { return }
            let policy = WarmAheadPolicy(chunk: UInt64(configuration.warmAhead)) { job in
                // Dropped when the thread is gone: the writes then pay for their own pages.
                if !preparer.enqueue({ job.run() }) { job.cancel() }
            }
            appender.withLock { $0.pack.warmAhead = policy }
            return
        }
        let policy = ZeroFillPolicy(chunk: UInt64(chunk)) { fill in
            if !preparer.enqueue({ fill.run() }) { fill.cancel() }
        }
        appender.withLock { $0.pack.zeroFill = policy }
    }

    /// Loads the dedup hints on the loader's thread, unless a put loaded them first.
    func loadDedupHints() {
        let (hints, path, stopped) = (dedupHints, directory + "/index.sqlite", loadsStopped)
        loader.enqueue { Self.loadDedupHints(hints, path: path, stopped: stopped) }
    }

    /// Empties the dedup hints, which then load again in the background (a repair or rebuild
    /// deleted and rewrote blob rows).
    func forgetDedupHints() {
        dedupHints.withLock { $0.reset() }
        loadDedupHints()
    }

    /// Reads the blob rows of the index at `path` into the dedup hints, on the loader's thread,
    /// under the hints' lock (a put that asks meanwhile waits for it: Docs/Architecture.md,
    /// "Deduplication"). Best effort: after a failure the next put tries the load itself.
    static func loadDedupHints(_ hints: Locked<DedupHints>, path: String, stopped: Locked<Bool>) {
        guard !stopped.withLock({ $0 }), !hints.withLock({ $0.isLoaded }) else { return }
        guard let index = try? IndexDatabase(path: path, readOnly: true) else { return }
        hints.withLock { hints in
            if !hints.isLoaded { try? hints.load(from: index, stopped: { stopped.withLock { $0 } }) }
        }
    }

    /// Fills the entry digest table's places from the index at `path` (Docs/Architecture.md,
    /// "Places"), on the loader's thread: until a row's place is there, its cold gets ask SQLite. The load
    /// starts under the committer lock, where no write transaction is open, so every change its
    /// snapshot misses is one the table hears of after the start, and the load leaves those rows
    /// alone. Best effort: a failure leaves rows without places (read through SQLite).
    static func loadPlaces(
        committer: Locked<CommitState?>, digests: EntryDigestTable, path: String, stopped: Locked<Bool>
    ) {
        let started = committer.withLock { slot -> Bool in
            guard slot != nil, !stopped.withLock({ $0 }) else { return false }
            digests.beginPlaceLoad()
            return true
        }
        guard started else { return }
        defer { digests.endPlaceLoad() }
        do {
            // Short snapshots, one a batch: a long one would keep a TRUNCATE checkpoint (which a
            // compaction pass runs under the committer lock) waiting for it.
            let index = try IndexDatabase(path: path, readOnly: true)
            var after: Int64 = .min
            while !stopped.withLock({ $0 }) {
                let (batch, last) = try index.places(after: after, limit: 1_024)
                guard let last else { break }
                digests.fillLoadedPlaces(batch)
                after = last
            }
        } catch {
            // Nothing is wrong with a store whose places did not load; its gets use the index.
        }
    }

    /// Waits until the loads queued so far — the dedup hints and places opening started, hints
    /// a reset asked for — have finished (or stopped).
    @_spi(Testing) public func waitForLoads() {
        let done = DispatchSemaphore(value: 0)
        if loader.enqueue({ done.signal() }) { done.wait() }
    }

    /// Appends and commits a tombstone over each of `links` (whose key has no entry now).
    func supersede(_ links: [LinkRecord]) throws(StoreError) {
        var last: UInt64 = 0
        for link in links {
            last = try withAppender { (state) throws(StoreError) -> UInt64 in try appendTombstone(for: link.key, to: state) }
        }
        try commitPending(through: last)
    }

    deinit {
        try? close()
    }

    /// Commits queued writes to the index now, and syncs them unless durability is `none`;
    /// also writes pending read times.
    public func flush() throws(StoreError) {
        try commitPending(flushReadTimes: true)
    }

    /// Commits queued writes and read times, then releases the directory.
    ///
    /// Every call after `close` throws ``StoreError/Code/closed``. Closing twice is allowed.
    public func close() throws(StoreError) {
        loadsStopped.withLock { $0 = true }
        loader.stop()
        background.stop()
        // No write is accepted from here on; the last cycle commits what was queued.
        let wasOpen = appender.withLock { state in
            defer { state.isClosed = true }
            return !state.isClosed
        }
        var failure: StoreError?
        if wasOpen {
            do {
                try commitPending(flushReadTimes: true)
            } catch {
                // Only the writes this process acknowledged make a failed last commit an error
                // of close: read times are advisory, and a replay opening deferred is found in
                // the packs again at the next open.
                let queued = appender.withLock { !$0.queue.isEmpty }
                if queued { failure = error }
            }
        }
        // The active segment ends with its last record again (best effort: opening cuts zeros
        // left ahead of writes too).
        appender.withLock { try? $0.pack.finishSegment() }
        preparer.stop()
        checkpointer.stop()
        syncer.stop()
        reclaimer.stop()
        committer.withLock { slot in
            if let state = slot {
                state.isClosed = true
                try? state.index.checkpoint()
            }
            slot = nil
        }
        shared.withLock { state in
            state.isClosed = true
            state.map.removeAll()
            state.segmentFiles.removeAll()
        }
        readers.closeAll()
        processLock.withLock { $0 = nil }
        if let failure { throw failure }
    }

    /// The first error of background work (commit cycles and compaction passes), if any — or
    /// ``StoreError/Code/syncFailed`` once a sync failed, whatever came before. It
    /// stays set until the store is closed; queued writes stay queued and are retried at the
    /// next cycle (except after ``StoreError/Code/syncFailed``: then only reopening commits
    /// them), and the next pass tries compaction again.
    public var backgroundError: StoreError? {
        shared.withLock { $0.backgroundError }
    }

    // MARK: Internals

    static func closedError(_ directory: String) -> StoreError {
        StoreError(code: .closed, message: "the store at \(directory) is closed")
    }

    /// The segment file `id`, opened read-only on first use.
    ///
    /// - Throws: ``StoreError/Code/missingSegment`` when the file is missing or is not a
    ///   readable segment, `.io` when it cannot be opened.
    func segmentFile(_ id: UInt32) throws(StoreError) -> SegmentFile {
        if let file = shared.withLock({ $0.segmentFiles[id] }) { return file }
        let file: SegmentFile
        do {
            file = try SegmentFile.open(id: id, in: packsDirectory, writable: false, faults: configuration.faultInjector)
        } catch let error as PackError where !error.isFailedAccess {
            throw StoreError(
                code: .missingSegment,
                message: "segment \(id) (\(PackDirectory.segmentPath(id, in: packsDirectory))) is "
                    + "\(error.errno == ENOENT ? "missing" : "unreadable"): restore it, or run `trove fsck --repair` "
                    + "to drop its entries", underlying: error)
        } catch {
            throw StoreError(pack: error)
        }
        return shared.withLock { state in
            if let existing = state.segmentFiles[id] { return existing }
            // A read racing close() uses the file and lets it go: a closed store keeps none open.
            if !state.isClosed { state.segmentFiles[id] = file }
            return file
        }
    }

    /// The damage this store knows of and has not repaired: found by reads, compaction passes,
    /// recovery or rebuilds. Every `trove` command prints it; `trove fsck --repair` deals with it.
    public func unrepairedDamage() throws(StoreError) -> [StoreDamage] {
        try withIndex { try $0.damage() }.map { row in
            StoreDamage(
                kind: FsckReport.Finding.Kind(rawValue: row.kind) ?? .corruptRecord,
                segment: row.segment == 0 ? nil : row.segment, offset: row.start, message: row.message)
        }
    }

    /// Records damage that every command reports until `trove fsck --repair`.
    ///
    /// Takes the committer lock; a caller that holds it already passes its `index`.
    func recordDamage(
        _ kind: FsckReport.Finding.Kind, segment: UInt32, offset: UInt64, end: UInt64, _ message: String,
        in held: IndexDatabase? = nil
    ) {
        let row = DamageRow(
            segment: segment, start: offset, end: end, kind: kind.rawValue, message: message, foundAt: configuration.clock())
        if let held {
            try? held.recordDamage(row)
        } else {
            _ = try? withIndex { try $0.recordDamage(row) }
        }
    }
}

/// Milliseconds since 1970 from the system clock.
func wallClockMilliseconds() -> Int64 {
    Int64((Date().timeIntervalSince1970 * 1000).rounded())
}
