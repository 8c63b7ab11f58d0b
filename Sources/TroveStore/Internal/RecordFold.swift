import TroveCore
import TroveIndex
import TrovePack

/// Where a record is.
struct RecordLocation: Hashable, Comparable, Sendable {
    var segment: UInt32
    var offset: UInt64
    var length: UInt64

    static func < (a: RecordLocation, b: RecordLocation) -> Bool {
        (a.segment, a.offset) < (b.segment, b.offset)
    }
}

/// The newest intact record of a key: a link or a tombstone.
struct KeyRecord: Sendable {
    enum Content: Sendable {
        case link(LinkRecord)
        case tombstone(TombstoneRecord)
    }

    var sequence: UInt64
    var location: RecordLocation
    var content: Content

    var key: CacheKey {
        switch content {
        case .link(let link): link.key
        case .tombstone(let tombstone): tombstone.key
        }
    }

    /// The one rule for "newer", wherever the records are: the higher sequence; at an equal
    /// sequence (the compactor's copies of one write) a tombstone over a link, then the later
    /// place. It does not depend on the order records are folded in.
    func isNewer(than other: KeyRecord) -> Bool {
        if sequence != other.sequence { return sequence > other.sequence }
        if case .tombstone = content, case .link = other.content { return true }
        if case .link = content, case .tombstone = other.content { return false }
        return location > other.location
    }
}

/// An intact copy of a blob record.
struct BlobCopy: Hashable, Sendable {
    var hash: ContentHash
    var payloadLength: UInt64
    var location: RecordLocation
}

/// What the index says about keys, as evidence for resolving them: never a source of content
/// (records are), only of which writes existed.
struct IndexEvidence: Sendable {
    /// What an index row says of a key: the sequence of its write, where its link record is and
    /// which blob it links (place and blob unknown for the claims opening a store makes).
    struct Claim: Sendable {
        var sequence: UInt64
        var location: (segment: UInt32, offset: UInt64)?
        var blob: UInt64?
    }

    /// Each key's write as the index knows it, by key digest. A row vouched for by the intact
    /// link record it points at counts under that record's key, whatever the row's own key
    /// columns say.
    var claims: [ContentHash: Claim] = [:]

    /// Records a row's claim (the highest, when two rows claim one key).
    mutating func claim(
        _ digest: ContentHash, sequence: UInt64, at location: (segment: UInt32, offset: UInt64)?, blob: UInt64? = nil
    ) {
        if let known = claims[digest], known.sequence >= sequence { return }
        claims[digest] = Claim(sequence: sequence, location: location, blob: blob)
    }
    /// Every write with a lower sequence was applied to this index; nil when there is no
    /// index, or it is damaged (then the absence of a row proves nothing).
    var committedSequence: UInt64?
    /// The highest copy of the committed sequence the index recorded (its meta table, not its
    /// rows); nil when unknown. A row claiming this number or more is damaged.
    var recordedSequence: UInt64?
    /// Whether the packs are known to hold every record they were given: no damage whose
    /// record cannot be named, no segment missing or cut short. Only then is a damaged row's
    /// claim of a newer write dismissed (no such write can be hidden anywhere).
    var packsAreWhole = false
    /// Read times the index kept, by key digest (a rebuild keeps LRU order with them).
    var accessTimes: [ContentHash: Int64] = [:]
    /// Rows whose key columns and digest disagree (damage to either): which key they speak for
    /// is known only once the packs are read — the key of the intact link record they point at,
    /// written with their sequence (``vouch(with:)``).
    var unkeyedRows: [(location: (segment: UInt32, offset: UInt64), sequence: UInt64, blob: UInt64, accessedAt: Int64)] = []

    /// Claims each of ``unkeyedRows`` for the key of the intact link record at its place, when
    /// that record has the row's sequence (the rule fsck applies to such rows); a row that
    /// points at anything else stays unclaimed.
    mutating func vouch(with fold: RecordFold) {
        for row in unkeyedRows {
            guard let (_, identity) = fold.record(atSegment: row.location.segment, offset: row.location.offset),
                identity.type == .link, identity.sequence == row.sequence
            else { continue }
            claim(identity.digest, sequence: row.sequence, at: row.location, blob: row.blob)
            accessTimes[identity.digest] = max(accessTimes[identity.digest] ?? 0, row.accessedAt)
        }
    }
}

/// What a key should be, by the packs and the evidence.
enum KeyResolution: Sendable {
    /// Serve this link and blob.
    case entry(LinkRecord, link: RecordLocation, blob: BlobCopy)
    /// No entry: the newest write is a removal (of this key), or there is no intact record at all.
    case absent(CacheKey?)
    /// No entry: a newer write than any intact record existed (a damaged record, or the
    /// index's claim), or the newest link's blob is gone. `older` is the newest intact link,
    /// which must never be served again (a tombstone over it makes that durable).
    case lost(older: LinkRecord?, reason: String)
    /// No entry: the newest intact record is a link older than what the index committed, and
    /// the index has no entry for it — the key was removed or replaced and that record lost, or
    /// the index lost the row. Never restored; a tombstone over it makes that durable.
    case unreflected(LinkRecord, RecordLocation)

    /// The link whose resurrection a tombstone must prevent.
    var supersededLink: LinkRecord? {
        switch self {
        case .lost(let older, _): older
        case .unreflected(let link, _): link
        case .entry, .absent: nil
        }
    }
}

/// The one replay of pack records. Opening a store (the tail the index has not committed),
/// rebuilding the index, and fsck fold records into this and resolve keys with
/// ``resolve(_:evidence:)``: the same records and evidence give the same result in all three,
/// whatever order the records came in.
struct RecordFold: Sendable {
    /// The newest intact link or tombstone of each key, by key digest.
    private(set) var newest: [ContentHash: KeyRecord] = [:]
    /// The highest sequence of a damaged record of each key whose identity survived, by key
    /// digest: a write that happened but cannot be read.
    private(set) var damagedWrites: [ContentHash: UInt64] = [:]
    /// Intact blob records by id; of several copies (a compaction interrupted after copying),
    /// the one at the later place.
    private(set) var blobs: [UInt64: BlobCopy] = [:]
    /// Every intact copy of each blob, by id (usually one).
    private(set) var blobCopies: [UInt64: Set<RecordLocation>] = [:]
    /// Ids of blobs with a damaged record and no intact one.
    var damagedBlobs: Set<UInt64> { damagedBlobIDs.subtracting(blobs.keys) }
    private var damagedBlobIDs: Set<UInt64> = []
    /// Every damaged range, by segment.
    private(set) var damage: [(segment: UInt32, range: DamagedRange)] = []
    /// Intact records by place, for checking what an index row points at.
    private(set) var recordsByLocation: [RecordLocation: RecordIdentity] = [:]
    private var locationsByPlace: [PlaceKey: RecordLocation] = [:]
    /// One more than the highest sequence or blob id of any record seen, intact or damaged.
    private(set) var nextSequence: UInt64 = 0

    private struct PlaceKey: Hashable {
        var segment: UInt32
        var offset: UInt64
    }

    /// Damaged ranges whose record could not be named: a write there is unknown.
    var unattributedDamage: [(segment: UInt32, range: DamagedRange)] {
        damage.filter { $0.range.identity == nil }
    }

    /// Adds an intact record found at `record.offset` of `segment`.
    mutating func add(_ record: ScannedRecord, segment: UInt32) {
        let location = RecordLocation(segment: segment, offset: record.offset, length: record.length)
        let identity = record.identity
        recordsByLocation[location] = identity
        locationsByPlace[PlaceKey(segment: segment, offset: record.offset)] = location
        nextSequence = max(nextSequence, identity.sequence &+ 1)
        switch record.content {
        case .blob(let hash, let id, let length):
            let copy = BlobCopy(hash: hash, payloadLength: length, location: location)
            blobCopies[id, default: []].insert(location)
            if let known = blobs[id], known.location > location { return }
            blobs[id] = copy
        case .link(let link):
            keep(KeyRecord(sequence: link.sequence, location: location, content: .link(link)), digest: identity.digest)
        case .tombstone(let tombstone):
            keep(
                KeyRecord(sequence: tombstone.sequence, location: location, content: .tombstone(tombstone)),
                digest: identity.digest)
        }
    }

    private mutating func keep(_ record: KeyRecord, digest: ContentHash) {
        if let known = newest[digest], !record.isNewer(than: known) { return }
        newest[digest] = record
    }

    /// Adds what an index row says as if its link record had been read: recovery trusts the
    /// index for the records outside the tails it replays.
    mutating func seed(_ indexed: IndexedEntry) {
        let row = indexed.entry
        let blobID = UInt64(bitPattern: row.blobID)
        let link = LinkRecord(
            url: row.url, variant: row.variant, blobHash: indexed.blob.hash, blobLength: indexed.blob.length,
            blobID: blobID, sequence: row.sequence, createdAt: row.createdAt, expiresAt: row.expiresAt, etag: row.etag,
            lastModified: row.lastModified, cachePolicy: row.cachePolicy)
        let location = RecordLocation(segment: row.linkSegment, offset: row.linkOffset, length: row.linkLength)
        keep(KeyRecord(sequence: row.sequence, location: location, content: .link(link)), digest: row.keyDigest)
        if blobs[blobID] == nil {
            blobs[blobID] = BlobCopy(
                hash: indexed.blob.hash, payloadLength: indexed.blob.length,
                location: RecordLocation(
                    segment: indexed.blob.segment, offset: indexed.blob.offset, length: indexed.blob.recordBytes))
        }
    }

    /// Adds blob `row` as the index has it, unless the fold knows the blob (recovery trusts the
    /// index for the blobs outside the tails: a put may link to a blob stored long before).
    mutating func seed(_ row: BlobRow) {
        let id = UInt64(bitPattern: row.id)
        guard blobs[id] == nil else { return }
        blobs[id] = BlobCopy(
            hash: row.hash, payloadLength: row.length,
            location: RecordLocation(segment: row.segment, offset: row.offset, length: row.recordBytes))
    }

    /// Whether an intact link of key `digest` with `sequence` is at `segment`/`offset`: one of the
    /// copies of the key's newest write (a compaction interrupted after copying leaves two).
    func isCopy(ofLink digest: ContentHash, sequence: UInt64, atSegment segment: UInt32, offset: UInt64) -> Bool {
        guard let (_, identity) = record(atSegment: segment, offset: offset) else { return false }
        return identity.type == .link && identity.digest == digest && identity.sequence == sequence
    }

    /// Adds a damaged range of `segment`. A salvaged record was also added with ``add(_:segment:)``.
    mutating func add(_ range: DamagedRange, segment: UInt32) {
        damage.append((segment, range))
        guard let identity = range.identity, !range.salvaged else { return }
        nextSequence = max(nextSequence, identity.sequence &+ 1)
        switch identity.type {
        case .blob: damagedBlobIDs.insert(identity.sequence)
        case .link, .tombstone: damagedWrites[identity.digest] = max(damagedWrites[identity.digest] ?? 0, identity.sequence)
        }
    }

    /// Scans `file` from `offset` (past damage, for version 2) and folds what it finds.
    ///
    /// - Parameter excludingTornTail: leave out a torn tail (the caller cuts it: a write that
    ///   never completed is not evidence of anything).
    @discardableResult
    mutating func fold(
        _ file: SegmentFile, from offset: UInt64? = nil, upTo end: UInt64? = nil, excludingTornTail: Bool = false
    ) throws -> ScanReport {
        let report = try SegmentScanner.scan(file, from: offset, upTo: end) { add($0, segment: file.id) }
        let tail = excludingTornTail ? report.tornTail : nil
        for range in report.damage where range != tail { add(range, segment: file.id) }
        return report
    }

    /// The intact record that starts at `offset` of `segment`, if the fold saw one.
    func record(atSegment segment: UInt32, offset: UInt64) -> (RecordLocation, RecordIdentity)? {
        guard let location = locationsByPlace[PlaceKey(segment: segment, offset: offset)],
            let identity = recordsByLocation[location]
        else { return nil }
        return (location, identity)
    }

    /// Every key digest the fold or the evidence knows.
    func keys(evidence: IndexEvidence) -> Set<ContentHash> {
        Set(newest.keys).union(damagedWrites.keys).union(evidence.claims.keys)
    }

    /// What key `digest` should be: its newest intact link with an intact blob, unless a newer
    /// write is known (a damaged record, or the index's claim) or the index committed past it
    /// without an entry for it.
    func resolve(_ digest: ContentHash, evidence: IndexEvidence) -> KeyResolution {
        // A row that points at an intact link of its key speaks for that link, whatever its own
        // sequence column says (a damaged column must not make a lost write out of an intact one).
        // Any other row claiming a sequence the index never committed is damaged: when the
        // packs are whole it shows the key had an entry, not that a newer write existed; when
        // they are not, a newer write may be what was lost, and the claim stands.
        var vouched = false
        let claim = evidence.claims[digest].map { claim -> UInt64 in
            if let at = claim.location, let (_, identity) = record(atSegment: at.segment, offset: at.offset),
                identity.type == .link, identity.digest == digest
            {
                vouched = true
                return identity.sequence
            }
            if evidence.packsAreWhole, let recorded = evidence.recordedSequence, claim.sequence >= recorded { return 0 }
            return claim.sequence
        }
        let damaged = damagedWrites[digest]
        guard let newest = newest[digest] else {
            return claim != nil || damaged != nil ? .lost(older: nil, reason: "no intact record of it is left") : .absent(nil)
        }
        guard case .link(let link) = newest.content else { return .absent(newest.key) }
        if let damaged, damaged >= newest.sequence {
            return .lost(older: link, reason: "its newest record (sequence \(damaged)) is damaged")
        }
        if let claim, claim > newest.sequence {
            return .lost(older: link, reason: "the index knows a newer write (sequence \(claim)) whose record is gone")
        }
        // A row that names a place which holds no link of its key disagrees with the packs. When
        // the packs may have lost a record, the row may be a newer write whose sequence column
        // was damaged: it must not let the older link be served. Two such disagreements show:
        // the row claims the newest link's sequence but another blob (one sequence is one
        // write), or it claims less than a link the index committed (that link would be its row).
        if let claim, !vouched, let row = evidence.claims[digest], row.location != nil, !evidence.packsAreWhole {
            if claim == newest.sequence, let blob = row.blob, blob != link.blobID {
                return .lost(older: link, reason: "the index row names another write with the same sequence (\(claim))")
            }
            if claim < newest.sequence, let recorded = evidence.recordedSequence, newest.sequence < recorded {
                return .lost(
                    older: link,
                    reason: "the index row disagrees with its newest link (sequence \(newest.sequence)), which it committed")
            }
        }
        if claim == nil, let committed = evidence.committedSequence, newest.sequence < committed {
            return .unreflected(link, newest.location)
        }
        guard let blob = blobs[link.blobID], blob.hash == link.blobHash, blob.payloadLength == link.blobLength else {
            let why =
                damagedBlobIDs.contains(link.blobID) ? "its blob \(link.blobID) is damaged" : "its blob \(link.blobID) is gone"
            return .lost(older: link, reason: why)
        }
        return .entry(link, link: newest.location, blob: blob)
    }
}
