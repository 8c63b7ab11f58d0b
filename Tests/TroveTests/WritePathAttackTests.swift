import Foundation
import Testing
import TroveCore
@testable import TroveIndex
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

@_spi(Testing) @testable import TroveStore

/// An outside attack (helper-2, 2026-11-28) on the write path of f288cac: the computed link
/// length, the byte writer without arrays, the key digest in a temporary buffer,
/// `LocationMap.stored`'s one lookup, and the appender's queue in batches — against a model,
/// with commit cycles made to fail, hostile keys, tiny segments, racing threads and SIGKILL.
/// (Its canonically-equivalent-keys finding is `KeyBytesTests`.)
@Suite(.serialized) struct WritePathAttackTests {
    // MARK: Hostile keys and metadata

    /// Keys whose URL and variant are odd strings of every storage kind the process can make.
    static func hostileKeys() -> [CacheKey] {
        var keys: [CacheKey] = []
        keys.append(CacheKey(url: ""))
        keys.append(CacheKey(url: "", variant: "v"))
        keys.append(CacheKey(url: "a"))  // small (inline) string
        keys.append(CacheKey(url: "ü", variant: "😀"))  // small, multi-byte
        keys.append(CacheKey(url: "https://ü.example/画像/😀.jpg", variant: "w256×h256"))
        // Long multi-byte URL: a link record longer than a tiny segment.
        keys.append(CacheKey(url: "https://long.example/" + String(repeating: "日本", count: 700)))
        keys.append(CacheKey(url: "https://long2.example/x", variant: String(repeating: "é", count: 1_500)))
        // Substring-derived.
        let base = "XXhttps://sub.example/ßüñ/" + String(repeating: "p", count: 40)
        keys.append(CacheKey(url: String(base.dropFirst(2)), variant: String(base.suffix(7))))
        // NSString-derived.
        keys.append(CacheKey(url: NSString(string: "https://ns.example/ø/Ω") as String))
        keys.append(CacheKey(url: String(NSString(format: "https://fmt.example/%d/%@", 42, "日本"))))
        let ns = NSMutableString(string: "https://mut.example/")
        ns.append("€‰")
        keys.append(CacheKey(url: ns as String, variant: ns.substring(from: 8)))
        // UTF-16-made, with a surrogate pair.
        let units: [UInt16] = Array("https://u16.example/".utf16) + [0xD83D, 0xDE00, 0x41]
        keys.append(CacheKey(url: String(utf16CodeUnits: units, count: units.count)))
        // Repaired invalid UTF-8 (U+FFFD replacements).
        keys.append(CacheKey(url: String(decoding: [0x68, 0xFF, 0xC3, 0x28, 0xED, 0xA0, 0x80, 0x7A], as: UTF8.self)))
        // Control characters (no NUL), spaces and percent-escapes.
        keys.append(CacheKey(url: "https://ctl.example/\r\n\t\u{1}\u{7F} %00%zz", variant: " "))
        // Flags and ZWJ sequences (grapheme clusters of many scalars).
        keys.append(CacheKey(url: "https://emoji.example/🇯🇵👨‍👩‍👧‍👦", variant: "🏳️‍🌈"))
        // Keys that share a URL, with variants (removeAll / keys(url:)).
        for v in ["", "w1", "w2-é"] { keys.append(CacheKey(url: "https://shared.example/img", variant: v)) }
        // Plain keys.
        for i in 0..<8 { keys.append(CacheKey(url: "https://plain.example/\(i).jpg")) }
        return keys
    }

    static let texts: [String?] = [
        nil, "", "W/\"é😀\"", "\"abc\"", String(repeating: "ü", count: 200), "Wed, 21 Oct 2015 07:28:00 GMT",
        NSString(string: "ns-ßß") as String, String(repeating: "x", count: 1_000),
    ]
    static let policies: [String?] = [
        nil, "", "v1;f=1", String(repeating: "é", count: 256), String(repeating: "p", count: 512), "日本",
    ]

    static func randomMetadata(_ g: inout SeededGenerator) -> EntryMetadata {
        EntryMetadata(
            etag: texts.randomElement(using: &g)!, lastModified: texts.randomElement(using: &g)!,
            cachePolicy: policies.randomElement(using: &g)!)
    }

    /// Contents: a few shared ones (dedup), else fresh.
    static func content(_ seed: UInt64) -> Data {
        Data(testBytes(seed: seed, count: Int(seed % 7 == 0 ? 0 : (seed * 37) % 2_500)))
    }

    struct Model {
        var data: Data
        var metadata: EntryMetadata
    }

    /// Makes every commit cycle on the committer's connection fail (a temporary trigger that
    /// aborts any change of a segment row, which every cycle that commits anything makes), or
    /// lets them succeed again.
    static func setFull(_ store: Store, _ full: Bool) throws {
        try store.committer.withLock { state in
            let index = try #require(state).index
            if full {
                try index.connection.execute(
                    "CREATE TEMP TRIGGER IF NOT EXISTS attack_fail BEFORE UPDATE ON main.segments BEGIN SELECT RAISE(ABORT, 'attack: index refuses'); END"
                )
                try index.connection.execute(
                    "CREATE TEMP TRIGGER IF NOT EXISTS attack_fail2 BEFORE INSERT ON main.entries BEGIN SELECT RAISE(ABORT, 'attack: index refuses'); END"
                )
            } else {
                try index.connection.execute("DROP TRIGGER IF EXISTS temp.attack_fail")
                try index.connection.execute("DROP TRIGGER IF EXISTS temp.attack_fail2")
            }
        }
    }

    static func check(_ store: Store, _ model: [CacheKey: Model], _ keys: [CacheKey], _ note: String) throws {
        for key in keys {
            let entry = try store.entry(for: key)
            if let expected = model[key] {
                guard let entry else {
                    Issue.record("\(note): \(key.description.prefix(60)) missing")
                    continue
                }
                #expect(entry.data == expected.data, "\(note): \(key.description.prefix(60)) wrong bytes")
                #expect(entry.etag == expected.metadata.etag, "\(note): \(key.description.prefix(60)) etag")
                #expect(entry.lastModified == expected.metadata.lastModified, "\(note): \(key.description.prefix(60)) lm")
                #expect(entry.cachePolicy == expected.metadata.cachePolicy, "\(note): \(key.description.prefix(60)) policy")
            } else {
                #expect(entry == nil, "\(note): \(key.description.prefix(60)) resurrected")
            }
        }
    }

    /// Every index row's link length is the length of the record at its offset.
    static func checkLinkLengths(_ store: Store) throws {
        let rows = try store.committer.withLock { state in try #require(state).index.entryRows() }
        for row in rows {
            let file = try store.segmentFile(row.linkSegment)
            let verified = try file.readRecord(at: row.linkOffset, limit: row.linkOffset + row.linkLength)
            #expect(verified.header.recordLength == row.linkLength, "\(row.url.prefix(40)): \(row.linkLength)")
        }
    }

    // MARK: 1. Model with failed cycles, hostile keys, tiny segments

    @Test(arguments: [UInt64(1), 2, 3, 4, 5, 6, 7, 8])
    func modelWithFailedCyclesAndHostileKeys(seed: UInt64) async throws {
        try await withTemporaryDirectory { dir in
            let keys = Self.hostileKeys()
            #expect(Set(keys).count == keys.count)
            var g = SeededGenerator(seed: seed)
            func open() throws -> Store {
                try openStore(dir, segmentSize: seed % 3 == 0 ? 1_024 : 4_096) {
                    $0.compactionInterval = nil
                    if seed % 2 == 0 { $0.locationCacheLimit = 4 }
                    $0.batchInterval = .seconds(3600)
                    $0.batchSize = 100_000
                }
            }
            var store = try open()
            var model: [CacheKey: Model] = [:]
            var full = false
            var contentSeed: UInt64 = 100
            var failedFlushes = 0
            for step in 0..<1_200 {
                let key = keys.randomElement(using: &g)!
                let roll = Int.random(in: 0..<100, using: &g)
                switch roll {
                case 0..<45:
                    let seed: UInt64 =
                        Int.random(in: 0..<4, using: &g) == 0
                        ? UInt64.random(in: 1...4, using: &g)
                        : {
                            contentSeed += 1; return contentSeed
                        }()
                    let data = Self.content(seed)
                    let metadata = Self.randomMetadata(&g)
                    try store.put(data, for: key, metadata: metadata)
                    model[key] = Model(data: data, metadata: metadata)
                case 45..<60:
                    let had = try store.remove(key)
                    #expect(had == (model[key] != nil), "step \(step): remove \(key.description.prefix(40))")
                    model[key] = nil
                case 60..<72:
                    let metadata = Self.randomMetadata(&g)
                    let had = try store.updateMetadata(metadata, for: key)
                    #expect(had == (model[key] != nil), "step \(step): update \(key.description.prefix(40))")
                    if had { model[key]!.metadata = metadata }
                case 72..<78:
                    let url = "https://shared.example/img"
                    let n = try store.removeAll(url: url)
                    let expected = model.keys.filter { $0.url == url }.count
                    #expect(n == expected, "step \(step): removeAll")
                    for k in model.keys where k.url == url { model[k] = nil }
                case 78..<86:
                    full.toggle()
                    try Self.setFull(store, full)
                case 86..<92:
                    do { try store.flush() } catch { failedFlushes += 1 }
                case 92..<95:
                    _ = try? store.compact()
                case 95..<97:
                    if !full {
                        let report = try store.fsck()
                        #expect(report.isClean, "step \(step): \(report.findings)")
                    } else {
                        _ = try? store.fsck()
                    }
                default:
                    _ = try? store.close()
                    store = try open()
                    full = false
                }
                if step % 10 == 0 { try Self.check(store, model, keys, "seed \(seed) step \(step)") }
            }
            print("seed \(seed): \(failedFlushes) failed flushes, \(model.count) keys")
            #expect(failedFlushes > 0)
            try Self.setFull(store, false)
            try store.flush()
            try Self.check(store, model, keys, "seed \(seed) end")
            try store.appender.withLock { state in
                #expect(state.queue.isEmpty)
                #expect(!state.queue.holdsBlobs)
            }
            let report = try store.fsck()
            #expect(report.isClean, "\(report.findings)")
            try Self.checkLinkLengths(store)
            _ = try store.compact()
            try Self.check(store, model, keys, "seed \(seed) compacted")
            try store.close()
            let again = try open()
            try Self.check(again, model, keys, "seed \(seed) reopened")
            #expect(try again.fsck().isClean)
            try Self.checkLinkLengths(again)
            try again.close()
        }
    }

    // MARK: 2. Concurrent writers and readers while cycles fail

    @Test(arguments: [false, true])
    func concurrentWritersReadersWithFailingCycles(smallMap: Bool) async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir, segmentSize: 65_536) {
                $0.compactionInterval = nil
                if smallMap { $0.locationCacheLimit = 8 }
                $0.batchInterval = .milliseconds(5)
                $0.batchSize = 100_000
            }
            let hostile = Self.hostileKeys()
            let writers = 3
            // Each writer owns its keys: a hostile key with the writer's number in the variant.
            @Sendable func keys(of w: Int) -> [CacheKey] {
                hostile.map { CacheKey(url: $0.url, variant: $0.variant + "#\(w)") }
            }
            @Sendable func payload(_ key: CacheKey, _ version: Int) -> Data {
                var d = Data(key.digest.bytes)
                d.append(contentsOf: withUnsafeBytes(of: version) { Array($0) })
                d.append(Data(testBytes(seed: UInt64(version), count: version % 5 == 0 ? 0 : 300 + version % 900)))
                return d
            }
            let stop = Locked(false)
            let finals = Locked([CacheKey: Int?]())
            let failures = Locked([String]())
            @Sendable func fail(_ s: String) { failures.withLock { if $0.count < 20 { $0.append(s) } } }
            var threads: [Thread] = []
            let done = DispatchGroup()
            for w in 0..<writers {
                done.enter()
                let t = Thread {
                    defer { done.leave() }
                    var g = SeededGenerator(seed: UInt64(w + 10))
                    let mine = keys(of: w)
                    var last: [CacheKey: Int?] = [:]
                    var version = 0
                    while !stop.withLock({ $0 }) {
                        let key = mine.randomElement(using: &g)!
                        version += 1
                        do {
                            if Int.random(in: 0..<5, using: &g) == 0 {
                                try store.remove(key)
                                last[key] = .some(nil)
                            } else if Int.random(in: 0..<5, using: &g) == 0, case .some(.some(let v)) = last[key] {
                                let ok = try store.updateMetadata(
                                    EntryMetadata(etag: "\(v)", lastModified: "upd-\(version)-é", cachePolicy: "p"), for: key)
                                if !ok { fail("update of \(key) returned false") }
                            } else {
                                try store.put(payload(key, version), for: key, metadata: EntryMetadata(etag: "\(version)"))
                                last[key] = .some(version)
                            }
                        } catch {
                            fail("writer \(w): \(error)")
                            continue
                        }
                        // Read your write.
                        do {
                            let entry = try store.entry(for: key)
                            switch last[key] {
                            case .some(.some(let v)):
                                if entry?.data != payload(key, v) || entry?.etag != "\(v)" {
                                    fail("RYW \(key.description.prefix(50)) v\(v): got etag \(entry?.etag ?? "nil")")
                                }
                            case .some(.none):
                                if entry != nil { fail("RYW \(key.description.prefix(50)) removed, got \(entry!.etag ?? "")") }
                            case .none: break
                            }
                        } catch { fail("read \(error)") }
                    }
                    finals.withLock { for (k, v) in last { $0[k] = v } }
                }
                threads.append(t)
            }
            for r in 0..<2 {
                done.enter()
                threads.append(
                    Thread {
                        defer { done.leave() }
                        var g = SeededGenerator(seed: UInt64(r + 99))
                        var seen: [CacheKey: Int] = [:]
                        while !stop.withLock({ $0 }) {
                            let key = keys(of: Int.random(in: 0..<writers, using: &g)).randomElement(using: &g)!
                            do {
                                guard let entry = try store.entry(for: key) else { continue }
                                guard let v = Int(entry.etag ?? "") else { fail("etag \(entry.etag ?? "nil")"); continue }
                                if entry.data != payload(key, v) {
                                    fail("reader: wrong bytes for \(key.description.prefix(50)) v\(v)")
                                }
                                if let s = seen[key], s > v {
                                    fail("reader: \(key.description.prefix(50)) went back from v\(s) to v\(v)")
                                }
                                seen[key] = v
                            } catch { fail("reader \(error)") }
                        }
                    })
            }
            for t in threads { t.start() }
            // The disturber: full index on and off, flushes, compactions, fsck.
            var g = SeededGenerator(seed: 7)
            let deadline = Date().addingTimeInterval(5)
            var full = false
            var failedFlushes = 0
            while Date() < deadline {
                switch Int.random(in: 0..<10, using: &g) {
                case 0..<4:
                    full.toggle()
                    try Self.setFull(store, full)
                case 4..<6: do { try store.flush() } catch { failedFlushes += 1 }
                case 6..<8: _ = try? store.compact()
                case 8: _ = try? store.fsck()
                default: if !full { _ = try? store.fsck(repair: true) }
                }
                usleep(UInt32.random(in: 1_000...40_000, using: &g))
            }
            try Self.setFull(store, false)
            stop.withLock { $0 = true }
            print("concurrent: \(failedFlushes) failed flushes")
            #expect(failedFlushes > 0)
            done.wait()
            for f in failures.withLock({ $0 }) { Issue.record(Comment(rawValue: f)) }
            try store.flush()
            let expected = finals.withLock { $0 }
            func verify(_ s: Store, _ note: String) throws {
                for (key, v) in expected {
                    let entry = try s.entry(for: key)
                    if let v {
                        #expect(entry?.data == payload(key, v), "\(note) \(key.description.prefix(50)) v\(v)")
                        #expect(entry?.etag == "\(v)", "\(note) \(key.description.prefix(50)) v\(v)")
                    } else {
                        #expect(entry == nil, "\(note) \(key.description.prefix(50)) resurrected")
                    }
                }
            }
            try verify(store, "live")
            let report = try store.fsck()
            #expect(report.isClean, "\(report.findings)")
            try Self.checkLinkLengths(store)
            try store.close()
            let again = try openStore(dir, segmentSize: 65_536) { $0.compactionInterval = nil }
            try verify(again, "reopened")
            #expect(try again.fsck().isClean)
            try again.close()
        }
    }

    // MARK: 4. SIGKILL mid-burst with segments so small that the link length decides rotation

    @Test(arguments: [false, true])
    func sigkillWithTinySegments(compacting: Bool) async throws {
        try await withTemporaryDirectory { dir in
            try await offPool { try CrashTests().runKillRounds(dir, rounds: 12, segmentSize: 4_096, compacting: compacting) }
        }
    }

    // MARK: 5. Encodings against a reference written here (the pre-f288cac way: arrays)

    static func referenceLinkBody(_ link: LinkRecord, version: UInt8) -> [UInt8] {
        var out: [UInt8] = []
        func le(_ v: UInt64, _ width: Int) { for i in 0..<width { out.append(UInt8(truncatingIfNeeded: v >> (8 * UInt64(i)))) } }
        func string(_ s: String) {
            let u = Array(s.utf8)
            le(UInt64(u.count), 4)
            out += u
        }
        var flags: UInt64 = 0
        if link.expiresAt != nil { flags |= 1 }
        if link.etag != nil { flags |= 2 }
        if link.lastModified != nil { flags |= 4 }
        if link.cachePolicy != nil && version >= 2 { flags |= 8 }
        if version == 1 {
            out += link.blobHash.bytes
            le(link.blobLength, 8); le(flags, 4); le(0, 4); le(link.blobID, 8); le(link.sequence, 8)
        } else {
            le(link.blobID, 8); out += link.blobHash.bytes; le(link.blobLength, 8); le(flags, 4); le(link.sequence, 8)
        }
        le(UInt64(bitPattern: link.createdAt), 8)
        le(UInt64(bitPattern: link.expiresAt ?? 0), 8)
        string(link.url); string(link.variant); string(link.etag ?? ""); string(link.lastModified ?? "")
        if flags & 8 != 0 { string(link.cachePolicy ?? "") }
        return out
    }

    @Test func encodingsMatchTheReferenceForHostileStrings() {
        var g = SeededGenerator(seed: 5)
        let keys = Self.hostileKeys()
        let strings: [String?] = Self.texts + Self.policies + keys.map(\.url) + keys.map(\.variant)
        for key in keys {
            let joined = Array(key.url.utf8) + [0] + Array(key.variant.utf8)
            #expect(key.digest == ContentHash(hashing: joined), "\(key.description.prefix(40))")
            #expect(key.urlDigest == Int64(bitPattern: Array(key.url.utf8).withUnsafeBytes { XXH3.hash64($0) }))
        }
        for _ in 0..<3_000 {
            let key = keys.randomElement(using: &g)!
            let link = LinkRecord(
                url: key.url, variant: key.variant, blobHash: ContentHash(high: g.next(), low: g.next()),
                blobLength: g.next(), blobID: g.next(), sequence: g.next(), createdAt: Int64(bitPattern: g.next()),
                expiresAt: Bool.random(using: &g) ? Int64(bitPattern: g.next()) : nil,
                etag: strings.randomElement(using: &g)!, lastModified: strings.randomElement(using: &g)!,
                cachePolicy: strings.randomElement(using: &g)!)
            for version in [UInt8(1), 2] {
                let body = RecordCodec.linkBody(link, version: version)
                #expect(body == Self.referenceLinkBody(link, version: version), "v\(version) \(key.description.prefix(40))")
                #expect(RecordCodec.linkBodyLength(link, version: version) == body.count)
                var expected = link
                if version == 1 { expected.cachePolicy = nil }
                #expect(body.withUnsafeBytes { RecordCodec.link($0, version: version) } == expected)
            }
            #expect(PackWriter.linkRecordLength(link) == UInt64(PackFormat.recordHeaderSize + RecordCodec.linkBody(link).count))
            let t = TombstoneRecord(
                url: key.url, variant: key.variant, sequence: g.next(), removedAt: Int64(bitPattern: g.next()))
            var ref: [UInt8] = []
            for v in [t.sequence, UInt64(bitPattern: t.removedAt)] {
                for i in 0..<8 { ref.append(UInt8(truncatingIfNeeded: v >> (8 * UInt64(i)))) }
            }
            for s in [t.url, t.variant] {
                let u = Array(s.utf8)
                for i in 0..<4 { ref.append(UInt8(truncatingIfNeeded: u.count >> (8 * i))) }
                ref += u
            }
            #expect(RecordCodec.tombstoneBody(t) == ref)
        }
    }

}
