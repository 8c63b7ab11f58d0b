public import TroveCore

/// A record read for copying into another segment: its identity and its version-2 body.
///
/// Version 2 binds a record's header to its position, so a copy gets a new header; the body
/// and its checksum go unchanged (a version-1 record is converted: its body re-encoded and
/// checksummed anew).
public struct MovableRecord: Sendable {
    /// The record's identity (type, sequence or blob id, key digest or content hash).
    public var identity: RecordIdentity
    /// The body in version 2's encoding.
    public var body: [UInt8]
    /// The body's version-2 checksum, and the secret it was made with; nil when it must be
    /// computed.
    var checksum: (value: UInt64, secret: PackSecret)?
}

extension MovableRecord {
    /// The movable form of a decoded link or tombstone (nil for a blob, whose payload must be
    /// read: ``SegmentFile/readMovable(at:limit:)``).
    public init?(_ record: ScannedRecord) {
        switch record.content {
        case .blob: return nil
        case .link(let link): self.init(identity: record.identity, body: RecordCodec.linkBody(link), checksum: nil)
        case .tombstone(let t): self.init(identity: record.identity, body: RecordCodec.tombstoneBody(t), checksum: nil)
        }
    }
}

extension SegmentFile {
    /// Reads and verifies the record at `offset` for copying it into another segment.
    public func readMovable(at offset: UInt64, limit: UInt64) throws -> MovableRecord {
        let verified = try readRecord(at: offset, limit: limit)
        if format.version == 2, let identity = verified.header.identity, let secret = format.secret {
            return MovableRecord(identity: identity, body: verified.body, checksum: (verified.header.bodyChecksum, secret))
        }
        let body: [UInt8]
        switch verified.record.content {
        case .blob: body = Array(verified.body[PackFormat.Version1.blobPrefixSize...])
        case .link(let link): body = RecordCodec.linkBody(link, version: 2)
        case .tombstone: body = verified.body
        }
        return MovableRecord(identity: verified.record.identity, body: body, checksum: nil)
    }
}

/// Appends records to the active segment, in the current format.
///
/// Not thread-safe: one owner (the store's appender) serializes every call. The end offset only
/// advances after a write succeeded, so a failed write is overwritten by the next one.
public final class PackWriter {
    /// The segment records are appended to.
    public private(set) var segment: SegmentFile
    /// The offset where the next record goes (the end of the last whole record).
    public private(set) var end: UInt64
    /// The size past which ``needsRotation(forAppending:)`` asks for a new segment.
    public let segmentSizeLimit: UInt64
    /// Zeros kept ahead of the writes (``ZeroFill``); nil: none.
    public var zeroFill: ZeroFillPolicy?
    /// Page-cache pages kept ahead of the writes (``WarmAheadPolicy``), when ``zeroFill`` is
    /// nil; nil: none.
    public var warmAhead: WarmAheadPolicy?
    /// At least the file's size: no record lies in the segment at or past ``end``, and from
    /// ``end`` to here the file holds zeros, a hole, or nothing.
    private var prepared: UInt64
    /// The fill claimed and not yet absorbed: no record goes past its start before it ends.
    private var filling: ZeroFill?
    /// A fill of this segment failed: no more are claimed in it.
    private var fillsStopped = false
    /// The bytes of a write, averaged over the last sixteen or so (exponentially): warming
    /// ahead is for small writes (``WarmAheadPolicy/largestAverageWrite``).
    private var averageWrite: UInt64 = 0
    /// The last range handed to ``warmAhead``'s thread.
    private var warming: WarmJob?
    /// Where a put's record headers and link body are encoded, kept from one append to the
    /// next: appending a record allocates nothing of its own.
    private var scratch: [UInt8] = []
    /// The largest scratch kept from one append to the next (bytes); a larger one, grown by a
    /// record with a long key or metadata, is freed at the next append.
    static let scratchKeptCapacity = 64 << 10
    /// The scratch's capacity (tests).
    var scratchCapacity: Int { scratch.capacity }

    /// Makes a writer that appends to `segment` (a segment of the current version) at `end`,
    /// where the file ends.
    public init(segment: SegmentFile, end: UInt64, segmentSizeLimit: UInt64) {
        self.segment = segment
        self.end = end
        self.segmentSizeLimit = segmentSizeLimit
        self.prepared = end
    }

    /// Whether appending `bytes` more would pass the size limit of a segment that already holds
    /// records (a record larger than the limit still goes into a segment of its own).
    public func needsRotation(forAppending bytes: UInt64) -> Bool {
        end > segment.headerSize && end + bytes > segmentSizeLimit
    }

    /// Continues in `segment`, a new, empty segment (after ``finishSegment()``).
    public func rotate(to segment: SegmentFile) {
        precondition(filling == nil, "finishSegment() comes before rotate(to:)")
        self.segment = segment
        self.end = segment.headerSize
        self.prepared = end
        self.fillsStopped = false
        self.warming = nil
    }

    /// Ends the filling of the segment and cuts what lies past its last record (zeros or a hole
    /// ahead of the writes, or what a failed write left), so that it ends with its last record:
    /// before a rotation seals it, and when the store closes. Waits for the zeros of a fill in
    /// flight (which would land past the cut), not for its sync.
    ///
    /// - Throws: ``PackError/Code/io`` when the cut fails (zeros stay, which the scanner reads
    ///   as the segment's end and opening cuts).
    public func finishSegment() throws {
        if let filling {
            _ = filling.waitUntilWritten()
            self.filling = nil
            fillsStopped = true
        }
        // The file's own size: a failed write may have left bytes past the end as well.
        if try segment.size() > end { try segment.truncate(to: end) }
        prepared = end
    }

    /// Absorbs the fill in flight once its zeros are written (waiting for them when `waiting`).
    private func absorbFill(waiting: Bool) {
        guard let filling, waiting || filling.isWritten else { return }
        if !filling.waitUntilWritten() { fillsStopped = true }
        // Zeros, or (after a failed write) part of them: the file ends inside the range at most.
        prepared = max(prepared, filling.range.upperBound)
        self.filling = nil
    }

    /// Claims the next fill when fewer than half a chunk of zeros is left ahead of ``end``, up
    /// to the segment's size limit. The first fill of a segment starts a quarter chunk past the
    /// end, so that the writes right after a rotation do not wait for it.
    private func claimFill() {
        guard let policy = zeroFill, !fillsStopped else { return }
        absorbFill(waiting: false)
        guard filling == nil, prepared < end + policy.chunk / 2 else { return }
        let lower = max(prepared, end + policy.chunk / 4)
        let upper = min(lower + policy.chunk, segmentSizeLimit)
        guard lower < upper else { return }
        let fill = ZeroFill(segment: segment, range: lower..<upper)
        filling = fill
        policy.start(fill)
    }

    /// The bytes of the file past ``end`` that are a hole the writer made to warm the page
    /// cache (``WarmAheadPolicy``): they take no disk space, and usage counts them as nothing.
    public var holeAhead: UInt64 {
        zeroFill == nil && warmAhead != nil ? prepared - end : 0
    }

    /// Extends the file to a chunk past ``end`` when fewer than half of one are left ahead of it
    /// (up to the segment's size limit) and hands the new range to the policy, which reads it into the
    /// page cache on another thread. The extension is a hole: no block is allocated and nothing
    /// is written, so a write never waits for it and a sync never writes it back. A failed
    /// extension stops the warming of this segment (the writes go on, paying for their pages).
    /// Only while the writes are small (``WarmAheadPolicy/largestAverageWrite``).
    /// Not while the last range handed over is still being read: its thread lags, and the
    /// extension would wait for that read (a size change waits for the page cache's reads).
    private func warm(_ policy: WarmAheadPolicy) {
        guard !fillsStopped, averageWrite <= policy.largestAverageWrite, prepared < end + policy.chunk / 2 else { return }
        if let warming, !warming.isDone { return }
        let lower = prepared
        let upper = min(end + policy.chunk, segmentSizeLimit)
        guard lower < upper else { return }
        do {
            try segment.truncate(to: upper)
        } catch {
            fillsStopped = true
            return
        }
        prepared = upper
        let job = WarmJob(segment: segment, range: lower..<upper)
        warming = job
        policy.start(job)
    }

    /// The total length of a blob record holding `payloadLength` bytes.
    public static func blobRecordLength(payloadLength: Int) -> UInt64 {
        UInt64(PackFormat.recordHeaderSize + payloadLength)
    }

    /// The length of the link record for `link`.
    public static func linkRecordLength(_ link: LinkRecord) -> UInt64 {
        UInt64(PackFormat.recordHeaderSize + RecordCodec.linkBodyLength(link))
    }

    /// The length of the tombstone record for `tombstone`.
    public static func tombstoneRecordLength(_ tombstone: TombstoneRecord) -> UInt64 {
        UInt64(PackFormat.recordHeaderSize + RecordCodec.tombstoneBody(tombstone).count)
    }

    /// Appends a blob record for blob `id` and returns its offset.
    ///
    /// - Throws: ``PackError/Code/recordTooLarge`` for payloads over the format's limit.
    public func appendBlob(hash: ContentHash, id: UInt64, payload: UnsafeRawBufferPointer) throws -> UInt64 {
        try checkBlobLength(payload.count)
        let checksum = XXH3.hash64(payload, seed: segment.format.bodySeed(.blob))
        let header = RecordCodec.header(
            identity: RecordIdentity(type: .blob, sequence: id, digest: hash), bodyLength: payload.count,
            bodyChecksum: checksum, format: segment.format, segment: segment.id, offset: end)
        return try header.withUnsafeBytes { h throws in try append([h, payload]) }
    }

    /// Appends a blob record for blob `id` and then `link` (which names it), in one write;
    /// returns both offsets. The same records as ``appendBlob(hash:id:payload:)`` followed by
    /// ``appendLink(_:digest:)``, in one system call instead of two.
    ///
    /// - Throws: ``PackError/Code/recordTooLarge`` for payloads over the format's limit.
    public func appendBlob(
        hash: ContentHash, id: UInt64, payload: UnsafeRawBufferPointer, thenLink link: LinkRecord, digest: ContentHash
    ) throws -> (blob: UInt64, link: UInt64) {
        try checkBlobLength(payload.count)
        let blobOffset = end
        let linkOffset = blobOffset + Self.blobRecordLength(payloadLength: payload.count)
        let headerSize = PackFormat.Version2.recordHeaderSize
        let blobChecksum = XXH3.hash64(payload, seed: segment.format.bodySeed(.blob))
        // The scratch holds the blob's header, then the link's header and body: two parts
        // around the payload.
        encodeInScratch(headers: 2, link: link)
        return try scratch.withUnsafeMutableBytes { s throws in
            let body = UnsafeRawBufferPointer(rebasing: s[(2 * headerSize)...])
            RecordCodec.writeHeader(
                into: UnsafeMutableRawBufferPointer(rebasing: s[..<headerSize]),
                identity: RecordIdentity(type: .blob, sequence: id, digest: hash), bodyLength: payload.count,
                bodyChecksum: blobChecksum, format: segment.format, segment: segment.id, offset: blobOffset)
            writeLinkHeader(
                into: UnsafeMutableRawBufferPointer(rebasing: s[headerSize..<(2 * headerSize)]),
                identity: RecordIdentity(type: .link, sequence: link.sequence, digest: digest), body: body,
                offset: linkOffset)
            let offset = try append([
                UnsafeRawBufferPointer(rebasing: s[..<headerSize]), payload,
                UnsafeRawBufferPointer(rebasing: s[headerSize...]),
            ])
            assert(offset == blobOffset)
            return (blobOffset, linkOffset)
        }
    }

    /// Writes the header of a link record with `body` at `offset` of the segment into `raw`.
    private func writeLinkHeader(
        into raw: UnsafeMutableRawBufferPointer, identity: RecordIdentity, body: UnsafeRawBufferPointer, offset: UInt64
    ) {
        RecordCodec.writeHeader(
            into: raw, identity: identity, bodyLength: body.count,
            bodyChecksum: XXH3.hash64(body, seed: segment.format.bodySeed(.link)), format: segment.format,
            segment: segment.id, offset: offset)
    }

    /// Empties the scratch but for room for `headers` record headers, then encodes `link`'s
    /// body after them. A buffer grown past ``scratchKeptCapacity`` by a long key or metadata is
    /// let go of first: the writer keeps one that fits the usual record.
    private func encodeInScratch(headers: Int, link: LinkRecord) {
        if scratch.capacity > Self.scratchKeptCapacity { scratch = [] }
        var w = ByteWriter(reusing: &scratch)
        w.appendZeros(headers * PackFormat.Version2.recordHeaderSize)
        RecordCodec.appendLinkBody(link, version: PackFormat.currentVersion, to: &w)
        scratch = w.bytes
    }

    /// Throws ``PackError/Code/recordTooLarge`` for a payload over the format's limit.
    private func checkBlobLength(_ count: Int) throws(PackError) {
        guard UInt64(count) <= PackFormat.maximumBodyLength else {
            throw PackError(
                code: .recordTooLarge,
                message: "a blob of \(count) bytes is over the pack format's limit of \(PackFormat.maximumBodyLength) bytes",
                path: segment.path)
        }
    }

    /// Appends a link record and returns its offset.
    ///
    /// - Parameter digest: the link's key digest, when the caller has it already.
    public func appendLink(_ link: LinkRecord, digest: ContentHash? = nil) throws -> UInt64 {
        let identity = RecordIdentity(type: .link, sequence: link.sequence, digest: digest ?? link.key.digest)
        let headerSize = PackFormat.Version2.recordHeaderSize
        encodeInScratch(headers: 1, link: link)
        return try scratch.withUnsafeMutableBytes { s throws in
            let body = UnsafeRawBufferPointer(rebasing: s[headerSize...])
            writeLinkHeader(into: s, identity: identity, body: body, offset: end)
            return try append([UnsafeRawBufferPointer(s)])
        }
    }

    /// Appends a tombstone and returns its offset.
    public func appendTombstone(_ tombstone: TombstoneRecord) throws -> UInt64 {
        let identity = RecordIdentity(type: .tombstone, sequence: tombstone.sequence, digest: tombstone.key.digest)
        return try append(identity: identity, body: RecordCodec.tombstoneBody(tombstone), checksum: nil)
    }

    /// Appends a copy of a record read from another segment (the compactor moves live records
    /// forward) with a header for its new place; returns its offset.
    public func append(_ record: MovableRecord) throws -> UInt64 {
        let reusable = record.checksum.flatMap { $0.secret == segment.format.secret ? $0.value : nil }
        return try append(identity: record.identity, body: record.body, checksum: reusable)
    }

    private func append(identity: RecordIdentity, body: [UInt8], checksum: UInt64?) throws -> UInt64 {
        try body.withUnsafeBytes { b throws in
            let bodyChecksum = checksum ?? XXH3.hash64(b, seed: segment.format.bodySeed(identity.type))
            let header = RecordCodec.header(
                identity: identity, bodyLength: b.count, bodyChecksum: bodyChecksum, format: segment.format,
                segment: segment.id, offset: end)
            return try header.withUnsafeBytes { h throws in try append([h, b]) }
        }
    }

    private func append(_ parts: [UnsafeRawBufferPointer]) throws -> UInt64 {
        let offset = end
        let newEnd = offset + UInt64(parts.reduce(0) { $0 + $1.count })
        // Records never go where a fill in flight writes zeros.
        if let filling, newEnd > filling.range.lowerBound { absorbFill(waiting: true) }
        try segment.write(parts, at: offset)
        averageWrite = averageWrite - averageWrite / 16 + (newEnd - offset) / 16
        end = newEnd
        prepared = max(prepared, end)
        if zeroFill != nil {
            claimFill()
        } else if let warmAhead {
            warm(warmAhead)
        }
        return offset
    }
}
