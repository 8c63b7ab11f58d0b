public import Foundation
public import TroveCore
import TroveIndex
import TrovePack

#if canImport(Glibc)
    import Glibc
#endif

extension Store {
    /// Stores `data` under `key`, replacing any entry for the key.
    ///
    /// The bytes are hashed; if a blob with the same hash and length exists and its bytes
    /// are equal, the key is linked to it and only a small link record is appended. Otherwise
    /// a blob record is appended to the active segment. The write is visible to every reader
    /// in this process when `put` returns, and durable as ``Configuration/durability`` says:
    /// `none` and `batched` return after the append (the index catches up in the background),
    /// `full` returns after the bytes are synced (the index catches up in the background, and
    /// recovery replays what it had not committed).
    ///
    /// - Parameters:
    ///   - data: the bytes, at most ``maximumValueLength``.
    ///   - key: the entry's key.
    ///   - metadata: ETag, Last-Modified and expiry to keep with the bytes.
    /// - Throws: ``StoreError`` — `.valueTooLarge`, `.keyCollision`, `.invalidArgument` (an
    ///   expiry date out of range), `.io`, `.index`, `.closed`. A put that throws has not been
    ///   acknowledged: it may have no effect, or — when its record reached the pack before the
    ///   failure (a full disk at the index commit) — take effect once the index catches up
    ///   (Docs/Architecture.md, "Failed writes"). Never a partial value.
    /// - Complexity: one XXH3-128 pass over `data`, at most two indexed lookups on a reader
    ///   connection (none for a new key with new bytes: the key filter and dedup hints answer),
    ///   one `pwritev` (the blob and link records together). No index write on the caller's
    ///   thread, and no fsync unless durability is `full`: then it waits for an fdatasync of
    ///   the pack, which it may run itself for the writers waiting with it; under
    ///   back-pressure it waits for a commit cycle, which it may lead (Docs/Architecture.md,
    ///   group commit, shared syncs).
    public func put(_ data: Data, for key: CacheKey, metadata: EntryMetadata = EntryMetadata()) throws(StoreError) {
        // `withUnsafeBytes` does not carry a typed error through: a Result does.
        try data.withUnsafeBytes { bytes in
            Result { () throws(StoreError) in _ = try put(bytes, for: key, metadata: metadata, mayWait: true) }
        }.get()
    }

    /// Stores `bytes` under `key`; see ``put(_:for:metadata:)-(Data,_,_)``.
    public func put(_ bytes: UnsafeRawBufferPointer, for key: CacheKey, metadata: EntryMetadata = EntryMetadata())
        throws(StoreError)
    {
        _ = try put(bytes, for: key, metadata: metadata, mayWait: true)
    }

    /// Stores `data` under `key` like ``put(_:for:metadata:)-(Data,_,_)`` if that does not
    /// have to wait; otherwise writes nothing and returns nil.
    ///
    /// A put waits under ``Durability/full`` durability (for the sync of its bytes), under
    /// back-pressure (when the queue of writes the index has not caught up with is full, the
    /// writer waits for a commit cycle, which it may lead), and right after opening while the
    /// dedup hints load (a pass over the blob rows, on a thread of the store's; a put that
    /// comes first runs it). This call refuses all three instead,
    /// so that a caller on a thread that must not block — one of Swift's cooperative threads —
    /// can write inline and hand the write to a thread that may block only when it has to. It
    /// still hashes the bytes, reads the index and appends them to the pack (page-cache writes).
    ///
    /// - Returns: The content hash of `data`, or nil when nothing was written because the put
    ///   would have waited.
    /// - Throws: as ``put(_:for:metadata:)-(Data,_,_)``.
    public func putWithoutWaiting(_ data: Data, for key: CacheKey, metadata: EntryMetadata = EntryMetadata())
        throws(StoreError) -> ContentHash?
    {
        try data.withUnsafeBytes { bytes in
            Result { () throws(StoreError) in try put(bytes, for: key, metadata: metadata, mayWait: false) }
        }.get()
    }

    /// The put: nil, having written nothing, when `mayWait` is false and it would wait.
    private func put(_ bytes: UnsafeRawBufferPointer, for key: CacheKey, metadata: EntryMetadata, mayWait: Bool)
        throws(StoreError) -> ContentHash?
    {
        // Refuse what cannot be stored before spending a pass over it.
        try Self.checkText(of: key, metadata)
        guard bytes.count <= Self.maximumValueLength else {
            throw StoreError(
                code: .valueTooLarge,
                message: "\(key): \(bytes.count) bytes is over the limit of \(Self.maximumValueLength) bytes", key: key)
        }
        // Under `full` every put waits: refused before spending a pass over the bytes (a closed
        // or failed store says so first, as a put would).
        if !mayWait, configuration.durability == .full {
            try withAppender { _ in }
            return nil
        }
        let hash = configuration.contentHasher(bytes)
        let length = UInt64(bytes.count)
        let digest = key.digest
        // The committed index's view, read without any lock held.
        // Read before the lookup: a compaction that moves the candidate's blob after it shows.
        let relocations = shared.withLock { $0.map.relocations }
        guard case .candidate(let hinted) = try dedupCandidate(for: hash, mayWait: mayWait) else {
            // Refused while the hints load; a closed or failed store says so first, as a put would.
            try withAppender { _ in }
            return nil
        }
        // The key's row, for the collision check, unless the digest table says the index has no row
        // with this digest (a new key: the usual put); one reader for it and the hinted blob.
        let mayBeIndexed = keyMayBeIndexed(digest)
        let (existing, candidate) =
            mayBeIndexed || hinted != nil
            ? try readIndex { index in
                (
                    try mayBeIndexed ? index.entryRow(digest: digest) : nil,
                    try hinted.flatMap { try index.blob(id: $0) }
                )
            } : (nil, nil)
        if let existing, existing.key != key {
            throw StoreError(
                code: .keyCollision,
                message: "\(key) has the same 128-bit digest as the stored key \(existing.key); not stored", key: key)
        }
        // The hint is a candidate only: its row must hold this hash and length (nil when the blob
        // is gone, or not committed yet — the appender's pending blobs have it), then these bytes.
        var equal = candidate.flatMap { $0.hash == hash && $0.length == length && holds($0, bytes) ? $0 : nil }
        let now = configuration.clock()
        let expiresAt = try expiry(of: metadata, now: now)
        let appended = try withAppender { (state) throws(StoreError) -> (QueuedWrite, Int64?)? in
            // Two records at most join the queue: refused when they would start back-pressure.
            if !mayWait, configuration.durability == .full || state.queue.count + 2 >= backPressureQueueLength {
                return nil
            }
            // A hinted blob the reader did not know and the queue no longer holds was committed
            // in between (or is gone): asked again, here, so that the repeat is not stored twice
            // (a read under this lock, on this rare path only).
            let pendingKey = PendingBlobKey(hash: hash, length: length)
            if equal == nil, let hinted, candidate == nil, state.pendingBlobs(pendingKey).isEmpty {
                // Only a saving: a failed read stores the bytes again, as a missing hint would.
                let row = (try? readIndex { try $0.blob(id: hinted) }) ?? nil
                equal = row.flatMap { $0.hash == hash && $0.length == length && holds($0, bytes) ? $0 : nil }
            }
            // A candidate in a segment being rewritten, or found before a rewrite that has
            // finished since (its place may be gone), is not linked to: the bytes go in anew.
            if let found = equal,
                state.reclaiming.contains(found.segment) || shared.withLock({ $0.map.relocations }) != relocations
            {
                equal = nil
            }
            if equal == nil {
                equal = state.pendingBlobs(pendingKey).first { holds($0, bytes) }
            }
            var link = LinkRecord(
                url: key.url, variant: key.variant, blobHash: hash, blobLength: length, blobID: 0, sequence: 0,
                createdAt: now, expiresAt: expiresAt, etag: metadata.etag,
                lastModified: metadata.lastModified, cachePolicy: metadata.cachePolicy)
            let linkLength = PackWriter.linkRecordLength(link)
            let blobLength = PackWriter.blobRecordLength(payloadLength: bytes.count)
            if state.pack.needsRotation(forAppending: (equal == nil ? blobLength : 0) + linkLength) {
                try state.rotate(packs: packsDirectory, createdAt: now)
            }
            let blob: BlobRow
            let linkOffset: UInt64
            var appendedBlob: Int64?
            if let equal {
                blob = equal
                link.blobID = UInt64(bitPattern: blob.id)
                link.sequence = state.nextSequence
                linkOffset = try packCall { try state.pack.appendLink(link, digest: digest) }
                state.nextSequence += 1
            } else {
                // A new blob's id is the next sequence number: unique for the store's life. Its
                // record and the link's go to the pack in one write.
                let id = state.nextSequence
                link.blobID = id
                link.sequence = id + 1
                let offsets = try packCall {
                    try state.pack.appendBlob(hash: hash, id: id, payload: bytes, thenLink: link, digest: digest)
                }
                state.nextSequence += 2
                blob = BlobRow(
                    id: Int64(bitPattern: id), hash: hash, length: length, segment: state.pack.segment.id,
                    offset: offsets.blob, recordBytes: blobLength, references: 0)
                state.enqueueBlob(blob, offset: offsets.blob, length: blobLength)
                appendedBlob = blob.id
                linkOffset = offsets.link
            }
            state.enqueue(offset: linkOffset, length: linkLength, .link(link))
            let row = EntryRow(
                keyDigest: digest, url: key.url, variant: key.variant, blobID: blob.id, linkSegment: state.pack.segment.id,
                linkOffset: linkOffset, linkLength: linkLength, sequence: link.sequence, etag: metadata.etag,
                lastModified: metadata.lastModified, expiresAt: link.expiresAt, createdAt: now, accessedAt: now,
                cost: Int64(length), cachePolicy: metadata.cachePolicy)
            shared.withLock { $0.map.stored(IndexedEntry(entry: row, blob: blob), for: key) }
            return (state.queued(link.sequence), appendedBlob)
        }
        guard let (queued, newBlob) = appended else { return nil }
        if let newBlob { dedupHints.withLock { $0.add(hash, id: newBlob) } }
        try afterWrite(queued)
        return hash
    }

    /// Whether the committed index may have an entry row with key digest `digest` (false: it has
    /// none, for certain; the committer adds a row's id to the table before it commits the row).
    private func keyMayBeIndexed(_ digest: ContentHash) -> Bool {
        entryDigests.mayContain(digest)
    }

    /// The blob id the dedup hints name for `hash`, if any. Loads the hints when they are not
    /// loaded yet, or waits for the loader thread's load of them (opening started it).
    /// - Returns: `.wouldWait` instead, having waited for nothing, when `mayWait` is false and
    ///   the hints are loading or not loaded.
    private func dedupCandidate(for hash: ContentHash, mayWait: Bool) throws(StoreError) -> DedupAnswer {
        guard mayWait else {
            // A load holds the hints' lock for its whole pass, and only while they are not
            // loaded; any other hold is a lookup or an add. (A repair that empties them between
            // the flag's read and the lock makes this one call wait for its reload.)
            guard dedupHintsLoaded.withLock({ $0 }) else { return .wouldWait }
            let found = dedupHints.withLock { $0.isLoaded ? $0.candidate(for: hash) : nil as Int64?? }
            guard let found else { return .wouldWait }
            return .candidate(found)
        }
        return try dedupHints.withLock { (hints) throws(StoreError) -> DedupAnswer in
            if !hints.isLoaded {
                try readIndex { try hints.load(from: $0) }
            }
            return .candidate(hints.candidate(for: hash))
        }
    }

    private enum DedupAnswer {
        /// The hinted blob id, if any.
        case candidate(Int64?)
        /// The hints are loading: asking would wait.
        case wouldWait
    }

    /// Replaces the ETag, Last-Modified and expiry of `key`'s entry, keeping its bytes: one
    /// link record to the blob the entry already has is appended — no hashing, no read and no
    /// write of the bytes. Made for revalidation (an HTTP 304 carries new validators and a new
    /// freshness lifetime, not a body).
    ///
    /// The entry counts as written now: its creation time becomes now (what `compact(timeToLive:)`
    /// measures) and, without an expiry in `metadata`, ``Configuration/defaultTimeToLive`` runs
    /// from now. Visible and durable like a put.
    ///
    /// - Parameter contentHash: When given, the update is made only if the entry's bytes have
    ///   this content hash — checked under the same lock as the write, so a put of other bytes
    ///   that lands meanwhile is never given these validators (a revalidation read the entry,
    ///   asked the origin, and updates what it asked about).
    /// - Returns: whether `key` had an entry (an expired one counts) with the expected content;
    ///   without one, nothing is written.
    /// - Throws: ``StoreError`` — `.invalidArgument` (an expiry date out of range), `.io`,
    ///   `.index`, `.closed`, and a read's errors when the entry's bytes had to be copied (its
    ///   segment was being compacted at that instant).
    @discardableResult
    public func updateMetadata(
        _ metadata: EntryMetadata, for key: CacheKey, ifContentHash contentHash: ContentHash? = nil
    ) throws(StoreError) -> Bool {
        let now = configuration.clock()
        let expiresAt = try expiry(of: metadata, now: now)
        try Self.checkText(of: key, metadata)
        let digest = key.digest
        let relocations = shared.withLock { $0.map.relocations }
        guard let found = try locate(key, noteRead: false, includingExpired: true) else { return false }
        if let contentHash, found.blob.hash != contentHash { return false }
        enum Outcome { case written(QueuedWrite), gone, blobMoving }
        let outcome = try withAppender { (state) throws(StoreError) -> Outcome in
            // The entry must still be the one found: a write or removal since wins.
            switch shared.withLock({ $0.map.slot(for: key) }) {
            case .removed: return .gone
            case .present(let current): if current.entry.sequence != found.entry.sequence { return .gone }
            case nil:
                let committed = try readIndex { try $0.entry(digest: digest) }
                guard let committed, committed.entry.key == key, committed.entry.sequence == found.entry.sequence else {
                    return .gone
                }
            }
            // A blob in a segment the compactor is judging cannot gain a link unseen by it; one
            // the compactor moved since `found` was read is looked up again.
            if state.reclaiming.contains(found.blob.segment) { return .blobMoving }
            if shared.withLock({ $0.map.relocations }) != relocations { return .gone }
            var link = LinkRecord(
                url: key.url, variant: key.variant, blobHash: found.blob.hash, blobLength: found.blob.length,
                blobID: UInt64(bitPattern: found.blob.id), sequence: 0, createdAt: now, expiresAt: expiresAt,
                etag: metadata.etag, lastModified: metadata.lastModified, cachePolicy: metadata.cachePolicy)
            let linkLength = PackWriter.linkRecordLength(link)
            if state.pack.needsRotation(forAppending: linkLength) {
                try state.rotate(packs: packsDirectory, createdAt: now)
            }
            link.sequence = state.nextSequence
            let linkOffset = try packCall { try state.pack.appendLink(link, digest: digest) }
            state.enqueue(offset: linkOffset, length: linkLength, .link(link))
            state.nextSequence += 1
            let row = EntryRow(
                keyDigest: digest, url: key.url, variant: key.variant, blobID: found.blob.id,
                linkSegment: state.pack.segment.id, linkOffset: linkOffset, linkLength: linkLength, sequence: link.sequence,
                etag: metadata.etag, lastModified: metadata.lastModified, expiresAt: link.expiresAt, createdAt: now,
                accessedAt: found.entry.accessedAt, cost: found.entry.cost, cachePolicy: metadata.cachePolicy)
            shared.withLock { $0.map.stored(IndexedEntry(entry: row, blob: found.blob), for: key) }
            return .written(state.queued(link.sequence))
        }
        switch outcome {
        case .written(let queued):
            try afterWrite(queued)
            return true
        case .gone:
            // Written or removed meanwhile: the newer write stands; look again.
            return try updateMetadata(metadata, for: key, ifContentHash: contentHash)
        case .blobMoving:
            // Rare: copy the bytes with a put, which handles a reclaimed segment.
            guard let current = try locate(key, noteRead: false, includingExpired: true) else { return false }
            if let contentHash, current.blob.hash != contentHash { return false }
            guard let bytes = try readBlob(of: current, key: key) else {
                // Written or removed since the lookup: as for `.gone`, look again.
                return try updateMetadata(metadata, for: key, ifContentHash: contentHash)
            }
            try put(bytes, for: key, metadata: metadata)
            return true
        }
    }

    /// The expiry a write made at `now` with `metadata` gets: the metadata's, else the default
    /// time to live from now, else none.
    private func expiry(of metadata: EntryMetadata, now: Int64) throws(StoreError) -> Int64? {
        if let date = metadata.expiresAt { return try milliseconds(date) }
        return configuration.defaultTimeToLive.map { saturatingSum(now, milliseconds($0)) }
    }

    /// Refuses a NUL character in a key's URL or variant, or in an ETag, Last-Modified or cache
    /// policy: no URL or HTTP header holds one, and SQLite's text would end there while the pack
    /// record keeps the whole string (the entry would then never match its record again). Refuses
    /// a cache policy longer than ``EntryMetadata/maximumCachePolicyLength``.
    static func checkText(of key: CacheKey, _ metadata: EntryMetadata) throws(StoreError) {
        if let policy = metadata.cachePolicy, policy.utf8.count > EntryMetadata.maximumCachePolicyLength {
            throw StoreError(
                code: .invalidArgument,
                message: "\(key): the cache policy is \(policy.utf8.count) bytes, over the limit of "
                    + "\(EntryMetadata.maximumCachePolicyLength); not stored", key: key)
        }
        // Checked one by one, not through an array of the fields: this runs on every put.
        func refuseNUL(_ text: String?, _ name: String) throws(StoreError) {
            guard let text, text.utf8.contains(0) else { return }
            throw StoreError(
                code: .invalidArgument, message: "\(key): the \(name) contains a NUL character; not stored", key: key)
        }
        try refuseNUL(key.url, "URL")
        try refuseNUL(key.variant, "variant")
        try refuseNUL(metadata.etag, "ETag")
        try refuseNUL(metadata.lastModified, "Last-Modified")
        try refuseNUL(metadata.cachePolicy, "cache policy")
    }

    /// Removes the entry for `key`. Durable as ``Configuration/durability`` says, like a put;
    /// under `full`, also when it finds no entry because another writer's removal (not yet
    /// synced) took it: it returns once that removal is durable.
    ///
    /// - Returns: whether there was one.
    @discardableResult
    public func remove(_ key: CacheKey) throws(StoreError) -> Bool {
        try remove([key]) == 1
    }

    /// Removes every entry of `url`: the original and all its variants.
    ///
    /// - Returns: how many entries were removed.
    @discardableResult
    public func removeAll(url: String) throws(StoreError) -> Int {
        try remove(candidateKeys(url: url).sorted())
    }

    /// The keys of `url` that have an entry (expired ones included), by variant, without
    /// committing pending writes first (unlike ``entries(url:)``): it never waits for a sync,
    /// so a caller on a thread that must not block may ask.
    public func keys(url: String) throws(StoreError) -> [CacheKey] {
        var keys: [CacheKey] = []
        for key in try candidateKeys(url: url).sorted()
        where try locate(key, noteRead: false, includingExpired: true, verifying: false) != nil {
            keys.append(key)
        }
        return keys
    }

    /// Every key of `url` the queue or the index names; some may have been removed since.
    private func candidateKeys(url: String) throws(StoreError) -> Set<CacheKey> {
        // The queue first, then the index: a write the queue no longer holds has been committed
        // before it left the queue, so the index read that follows sees it. (The other order
        // misses a write committed between the two reads.)
        var keys = Set<CacheKey>()
        // A read of the queue: not `withAppender`, which refuses once a sync failed.
        try appender.withLock { (state) throws(StoreError) in
            guard !state.isClosed else { throw Self.closedError(directory) }
            for write in state.queue {
                if case .link(let link) = write.record.content, link.url.hasSameUTF8(as: url) {
                    keys.insert(CacheKey(url: link.url, variant: link.variant))
                }
            }
        }
        keys.formUnion(try readIndex { try $0.entries(url: url) }.map(\.entry.key))
        return keys
    }

    /// Appends a tombstone for each of `keys` that has an entry. Returns how many had one.
    func remove(_ keys: [CacheKey]) throws(StoreError) -> Int {
        var removed = 0
        var last: QueuedWrite?
        for key in keys {
            guard try locate(key, noteRead: false, includingExpired: true, verifying: false) != nil else { continue }
            last = try withAppender { (state) throws(StoreError) -> QueuedWrite in
                state.queued(try appendTombstone(for: key, to: state))
            }
            removed += 1
        }
        if let last {
            try afterWrite(last)
        } else if configuration.durability == .full, !keys.isEmpty {
            // No entry to remove — perhaps because another writer's tombstone, appended but not
            // yet synced, removed it: under `full` the absence this returns must be durable too,
            // so it waits for the bytes appended so far (at once when a sync covered them).
            let end = try withAppender { PackPosition(segment: $0.pack.segment.id, offset: $0.pack.end) }
            try makeDurable(through: end)
        }
        return removed
    }

    /// Appends and queues a tombstone for `key` and marks it removed in the location map.
    /// Held: the appender lock (`state`). Returns the tombstone's sequence number.
    func appendTombstone(for key: CacheKey, to state: AppendState) throws(StoreError) -> UInt64 {
        let tombstone = TombstoneRecord(
            url: key.url, variant: key.variant, sequence: state.nextSequence, removedAt: configuration.clock())
        let length = PackWriter.tombstoneRecordLength(tombstone)
        if state.pack.needsRotation(forAppending: length) {
            try state.rotate(packs: packsDirectory, createdAt: tombstone.removedAt)
        }
        let offset = try packCall { try state.pack.appendTombstone(tombstone) }
        state.enqueue(offset: offset, length: length, .tombstone(tombstone))
        state.nextSequence += 1
        shared.withLock { shared in
            shared.map.removed(key, sequence: tombstone.sequence)
            shared.readTimes[key] = nil
        }
        return tombstone.sequence
    }

    /// After a write is queued: under `full` it waits until its record is durable — one
    /// fdatasync shared with every writer waiting at the same moment (``makeDurable(through:)``),
    /// not for an index commit: the index catches up as under `batched`, and recovery replays
    /// what it has not committed. Then a full batch wakes the committer, and a queue at its
    /// bound makes the writer wait until the queue's oldest writes are committed
    /// (back-pressure, bounded memory and un-synced window): the cycle in flight, or one the
    /// writer leads when none is — not a cycle that covers its own write, which would wait for
    /// two cycles (the one in flight, then its own) where one is enough. Woken with the queue
    /// still at its bound (other writers refilled it), it waits for the new oldest writes, so
    /// puts never take the queue past its bound by more than the two records each writer may
    /// add before it sees the bound (a batch removal adds its tombstones at once). Once its own
    /// write is committed, a later cycle's error is not thrown to it.
    private func afterWrite(_ write: QueuedWrite) throws(StoreError) {
        if configuration.durability == .full {
            try makeDurable(through: write.end)
        }
        guard write.queueLength >= backPressureQueueLength else {
            if write.queueLength >= configuration.batchSize { background.wake() }
            return
        }
        var oldest = write.oldestQueued
        while true {
            do {
                try waitForCommit(of: oldest)
            } catch {
                // Once this put's own write is committed, a later cycle's failure (a failed
                // sync, a close) is not its failure: it returns, having waited enough.
                if appender.withLock({ $0.releasedSequence }) > write.sequence { return }
                throw error
            }
            // Read past `withAppender`'s checks, for the same reason.
            let next = appender.withLock { state in
                state.queue.count >= backPressureQueueLength ? state.releasedSequence : nil
            }
            // Released past `oldest` by the wait; the comparison only guards the loop.
            guard let next, next > oldest else { return }
            oldest = next
        }
    }

    /// Waits until the write with sequence number `sequence` is committed, leading a cycle
    /// when none runs (group commit).
    private func waitForCommit(of sequence: UInt64) throws(StoreError) {
        try groupCommit.wait(for: sequence + 1) { () throws(StoreError) in
            try commitPending(through: sequence)
        }
    }

    /// The queue length at which writers run a commit cycle themselves (back-pressure).
    private var backPressureQueueLength: Int { configuration.batchSize * 8 }

    /// Whether the stored blob `candidate` holds exactly `bytes`. A blob that cannot be read
    /// holds nothing.
    private func holds(_ candidate: BlobRow, _ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let file = try? segmentFile(candidate.segment),
            let stored = try? file.readBlob(
                at: candidate.offset, payloadLength: candidate.length, hash: candidate.hash, id: UInt64(bitPattern: candidate.id),
                buffers: readBuffers)
        else { return false }
        return stored.withUnsafeBytes { s in
            s.count == bytes.count && (s.count == 0 || memcmp(s.baseAddress!, bytes.baseAddress!, s.count) == 0)
        }
    }

    /// Runs `body` with the committer (its lock held: commit cycles wait), or throws `.closed`.
    func withCommitter<T>(_ body: (CommitState) throws(StoreError) -> T) throws(StoreError) -> T {
        try committer.withLock { (slot) throws(StoreError) -> T in
            guard let state = slot, !state.isClosed else { throw Self.closedError(directory) }
            return try body(state)
        }
    }

    /// Runs `body` with the appender, or throws `.closed`, or `.syncFailed` once a sync of a
    /// segment holding queued writes has failed (every append goes through here).
    func withAppender<T>(_ body: (AppendState) throws(StoreError) -> T) throws(StoreError) -> T {
        try appender.withLock { (state) throws(StoreError) -> T in
            guard !state.isClosed else { throw Self.closedError(directory) }
            if let failure = state.syncFailure { throw StoreError(pack: failure) }
            return try body(state)
        }
    }

    /// Runs a pack-layer call, mapping its error to a StoreError.
    func packCall<T>(_ body: () throws -> T) throws(StoreError) -> T {
        do { return try body() } catch { throw StoreError(pack: error) }
    }
}
