import Foundation
import TroveCore
import TrovePack

/// The segment files of a packs directory, put under the names their headers give.
///
/// A segment's header names its id, and a version-2 record only verifies in the segment whose
/// id it was written under, so the header — not the file name — says which segment a file is.
/// Files renamed by hand (two segments swapped, a restore under the wrong name) are renamed
/// back; a second file claiming an id that another file holds (a copy) is set aside, never
/// deleted. Renames go through a temporary `.misplaced` name, so a crash in the middle leaves
/// files that the next open places again.
struct SegmentPlacement {
    /// The header of every segment file, by id, after placing.
    var headers: [UInt32: SegmentHeader] = [:]
    /// Names with a segment's name whose header cannot be read (damaged, not a regular file),
    /// by the id in the name.
    var unreadable: [UInt32: String] = [:]
    /// Files renamed to match their headers: (old name, new name).
    var renamed: [(from: String, to: String)] = []
    /// Files moved out of the segment namespace: (old name, new name, why).
    var setAside: [(from: String, to: String, reason: String)] = []

    static let misplacedSuffix = ".misplaced"

    /// Places the files of `packs`.
    ///
    /// - Parameter indexedMax: the highest segment id the index names.
    static func place(_ packs: String, indexedMax: UInt32, faults: FaultInjector?) throws -> SegmentPlacement {
        var placement = SegmentPlacement()
        var misplaced: [(name: String, header: SegmentHeader)] = []
        let names = try PackDirectory.names(in: packs)
        let newest = names.compactMap { PackFormat.segmentID(fromFileName: $0) }.max() ?? 0
        for name in names {
            let stem = name.hasSuffix(misplacedSuffix) ? String(name.dropLast(misplacedSuffix.count)) : name
            guard let nameID = PackFormat.segmentID(fromFileName: stem) else { continue }
            let kind = PackDirectory.kind(of: name, in: packs)
            let isFile = kind == "file"
            if isFile, stem == name, nameID == newest, nameID > indexedMax,
                let size = PackDirectory.size(of: name, in: packs), size < UInt64(PackFormat.segmentHeaderSize),
                SegmentFile.header(atPath: packs + "/" + name) == nil,
                let head = FileManager.default.contents(atPath: packs + "/" + name),
                Array(head.prefix(8)) == Array(PackFormat.segmentMagic.prefix(min(8, head.count)))
            {
                // The one file a crash can leave this way: the next segment, whose creation was
                // interrupted before its header was whole. It cannot hold a record. Any other
                // short file is set aside like other unreadable ones, never deleted.
                try PackDirectory.remove(name, in: packs, faults: faults)
                continue
            }
            // A header that could not be read (an I/O error, which may pass) decides nothing:
            // taken for none, it would get a whole segment set aside, or taken for missing.
            // (A failed `lstat` says nothing either: the open below says why.)
            var header: SegmentHeader?
            if isFile || kind == nil {
                do { header = try SegmentFile.readHeader(atPath: packs + "/" + name, faults: faults) } catch {
                    throw Recovery.unreadable(name, error)
                }
            }
            guard let header else {
                if stem == name {
                    placement.unreadable[nameID] = isFile ? "no valid header" : "not a regular file"
                } else {
                    let to = try PackDirectory.quarantine(name, suffix: "damaged", in: packs, faults: faults)
                    placement.setAside.append((name, to, "an unreadable file left by an interrupted rename"))
                }
                continue
            }
            if stem == name && header.id == nameID {
                placement.headers[nameID] = header
            } else {
                misplaced.append((name, header))
            }
        }
        // Step 1: every misplaced file to a temporary name of its own id; step 2: to its name.
        var pending: [(name: String, header: SegmentHeader)] = []
        for (name, header) in misplaced {
            let temporary = PackFormat.fileName(forSegment: header.id) + misplacedSuffix
            if name == temporary || placement.headers[header.id] != nil
                || pending.contains(where: { $0.name == temporary })
            {
                pending.append((name, header))
                continue
            }
            if PackDirectory.kind(of: temporary, in: packs) != nil {
                pending.append((name, header))
                continue
            }
            try PackDirectory.rename(name, to: temporary, in: packs, faults: faults)
            pending.append((temporary, header))
        }
        for (name, header) in pending {
            let target = PackFormat.fileName(forSegment: header.id)
            if placement.headers[header.id] == nil, placement.unreadable[header.id] != nil,
                PackDirectory.kind(of: target, in: packs) != nil
            {
                // The name is held by a file with no valid header: the file whose header names
                // that id is the segment. The other is set aside.
                let to = try PackDirectory.quarantine(target, suffix: "damaged", in: packs, faults: faults)
                placement.setAside.append((target, to, "it has no valid header, and another file is segment \(header.id)"))
                placement.unreadable[header.id] = nil
            }
            if placement.headers[header.id] == nil, PackDirectory.kind(of: target, in: packs) == nil {
                try PackDirectory.rename(name, to: target, in: packs, faults: faults)
                placement.headers[header.id] = header
                placement.unreadable[header.id] = nil
                placement.renamed.append((name, target))
            } else {
                let to = try PackDirectory.quarantine(name, suffix: "duplicate", in: packs, faults: faults)
                placement.setAside.append((name, to, "its header names segment \(header.id), which another file holds"))
            }
        }
        return placement
    }

    /// The secret of the store, by what the segments say: the one most of the segments the
    /// index names carry (segments copied in from another store are not among them, and one
    /// damaged copy in the index's meta table cannot outvote them); with the index lost, the
    /// one most segments carry. The index's copy decides a tie, and stands alone only when no
    /// segment has a secret yet.
    func secret(fromIndex stored: PackSecret?, indexed: Set<UInt32>) -> PackSecret? {
        func majority(_ ids: [UInt32]) -> PackSecret? {
            var votes: [PackSecret: Int] = [:]
            for id in ids {
                if let secret = headers[id]?.format.secret { votes[secret, default: 0] += 1 }
            }
            guard let most = votes.values.max() else { return nil }
            let leaders = votes.filter { $0.value == most }.map(\.key)
            if let stored, leaders.contains(stored) { return stored }
            // A tie without the index's word: the newest segment's among the leaders.
            return ids.sorted(by: >).compactMap { headers[$0]?.format.secret }.first { leaders.contains($0) }
        }
        return majority(headers.keys.filter(indexed.contains)) ?? majority(Array(headers.keys)) ?? stored
    }

    /// Sets aside the version-2 segments written under another secret (copied in from another
    /// store): their records would never verify here.
    mutating func setAsideForeign(secret: PackSecret, in packs: String, faults: FaultInjector?) throws {
        for (id, header) in headers.sorted(by: { $0.key < $1.key }) {
            guard let other = header.format.secret, other != secret else { continue }
            let name = PackFormat.fileName(forSegment: id)
            let to = try PackDirectory.quarantine(name, suffix: "foreign", in: packs, faults: faults)
            setAside.append((name, to, "it belongs to another store (\(other), this store has \(secret))"))
            headers[id] = nil
        }
    }
}
