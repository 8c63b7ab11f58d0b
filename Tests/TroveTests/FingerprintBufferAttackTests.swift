import Foundation
import Testing
import TroveCore
import TrovePack
import TroveStoreTestSupport
import TroveTestSupport

#if canImport(Glibc)
    import Glibc
#endif

@testable import TroveIndex
@_spi(Testing) @testable import TroveStore

/// Outside attack on the fingerprint builder's temporary buffer (e153a34) and on the writer's
/// scratch (6a2e172), end to end: places computed at commit, loaded from SQLite and recomputed
/// by readers must agree for every text; damaged rows must never trap the loader; and values
/// always read back byte-exact.
@Suite(.serialized) struct FingerprintBufferAttackTests {
    /// The fingerprint as the code before e153a34 computed it (an array, field by field).
    static func referenceFingerprint(
        url: String, variant: String, etag: String?, lastModified: String?, cachePolicy: String?, blobID: Int64,
        blobHash: ContentHash, blobLength: UInt64, linkLength: UInt64, createdAt: Int64, expiresAt: Int64?
    ) -> UInt64 {
        var bytes: [UInt8] = []
        func integer(_ v: Int64) { withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) } }
        for field in [url, variant, etag, lastModified, cachePolicy] {
            guard let field else {
                bytes.append(0)
                continue
            }
            bytes.append(1)
            integer(Int64(field.utf8.count))
            bytes.append(contentsOf: field.utf8)
        }
        integer(blobID)
        integer(Int64(bitPattern: blobHash.high))
        integer(Int64(bitPattern: blobHash.low))
        integer(Int64(bitPattern: blobLength))
        integer(Int64(bitPattern: linkLength))
        integer(createdAt)
        if let expiresAt {
            bytes.append(1)
            integer(expiresAt)
        } else {
            bytes.append(0)
        }
        return bytes.withUnsafeBytes { XXH3.hash64($0) }
    }

    static let texts: [String] = [
        "", "a", "é", "e\u{301}", "日本語", "🙂🧑‍🧑‍🧒", "\u{FEFF}", "\u{10FFFF}", "\u{7F}\u{80}\u{7FF}\u{800}\u{FFFF}",
        String(repeating: "x", count: 109), String(repeating: "é", count: 55), String(repeating: "🙂", count: 28),
        String(repeating: "ü", count: 40_000), String(repeating: "🙂", count: 300_000),  // 1.2 MB
        NSString(string: "https://foundation.example/ß/ø").description,
        String(format: "%@/%d/%@", "https://fmt.example", 42, "ñ"),
        String(data: "utf16 → text ✓".data(using: .utf16)!, encoding: .utf16)!,
        String(data: Data([0x68, 0xC3, 0xA9, 0xF0, 0x9F, 0x99, 0x82]), encoding: .utf8)!,
        ("https://sub.example/" as NSString).appendingPathComponent("ü🙂"),
        String(String(repeating: "abc🙂", count: 50).dropFirst(3)),  // from a Substring
        String(decoding: [0xFF, 0xFE, 0x41], as: UTF8.self),  // repaired: U+FFFD twice
    ]

    /// The builder against the code it replaced, for every text in every field (absent too),
    /// with extreme integers: a capacity too small would trap, a wrong byte would differ.
    @Test func fingerprintsAreThoseOfTheArrayBuiltCode() {
        var g = SeededGenerator(seed: 42)
        func text() -> String { Self.texts[Int(g.next() % UInt64(Self.texts.count))] }
        func optional() -> String? { g.next() % 4 == 0 ? nil : text() }
        for i in 0..<600 {
            let (url, variant, etag, lastModified, policy) = (text(), text(), optional(), optional(), optional())
            let blobID = [Int64.min, -1, 0, Int64.max, Int64(bitPattern: g.next())][i % 5]
            let hash = ContentHash(high: g.next(), low: i % 3 == 0 ? .max : g.next())
            let blobLength = [0, UInt64.max, g.next()][i % 3]
            let linkLength = [0, UInt64.max, UInt64(1) << 63, g.next()][i % 4]
            let createdAt = [Int64.min, Int64.max, Int64(bitPattern: g.next())][i % 3]
            let expiresAt: Int64? = [nil, 0, Int64.min, Int64(bitPattern: g.next())][i % 4]
            let got = EntryPlace.fingerprint(
                url: url, variant: variant, etag: etag, lastModified: lastModified, cachePolicy: policy, blobID: blobID,
                blobHash: hash, blobLength: blobLength, linkLength: linkLength, createdAt: createdAt, expiresAt: expiresAt)
            let want = Self.referenceFingerprint(
                url: url, variant: variant, etag: etag, lastModified: lastModified, cachePolicy: policy, blobID: blobID,
                blobHash: hash, blobLength: blobLength, linkLength: linkLength, createdAt: createdAt, expiresAt: expiresAt)
            #expect(got == want, "case \(i)")
        }
    }

    static func metadata(_ i: Int) -> EntryMetadata {
        let policies: [String?] = [
            nil, "", "max-age=60", String(repeating: "é", count: 256), String(repeating: "🙂", count: 128),
            String(repeating: "p", count: 512),
        ]
        let etags: [String?] = [
            nil, "", "\"e\"", "W/\"日本\"", String(repeating: "🙂", count: 25_000), String(repeating: "t", count: 100_003),
        ]
        let dates: [String?] = [nil, "", "Tue, 15 Nov 1994 08:12:31 GMT", "Ünïcödé", String(repeating: "d", count: 70_000)]
        return EntryMetadata(
            etag: etags[i % etags.count], lastModified: dates[(i / 2) % dates.count],
            expiresAt: i % 4 == 1 ? Date(timeIntervalSince1970: 4_000_000_000 + Double(i)) : nil,
            cachePolicy: policies[(i / 3) % policies.count])
    }

    static func unusualKey(_ i: Int) -> CacheKey {
        let urls = [
            "https://ü.example/\(i)", "https://e.example/\(i)/" + String(repeating: "🙂", count: 20_000), "u\(i)",
            "https://e/\(i)e\u{301}", "https://e/\(i)" + String(repeating: "x", count: 200_000),
        ]
        let variants = ["", "w=320", "日本", String(repeating: "v", count: 3_000)]
        return CacheKey(url: urls[i % urls.count], variant: variants[(i / 5) % variants.count])
    }

    /// Places set at commit and places loaded from SQLite agree for rows with every kind of
    /// text (multi-byte, empty, absent, long, at the policy limit); after a reopen every cold
    /// get is served through its place, byte-exact, with the metadata put.
    @Test func loadedPlacesAreTheCommittedOnesForUnusualTexts() async throws {
        try await withTemporaryDirectory { dir in
            let count = 40
            var committed: [CacheKey: EntryPlace] = [:]
            do {
                let store = try openStore(dir) { $0.compactionInterval = nil }
                for i in 0..<count {
                    try store.put(value(i, size: i * 37), for: Self.unusualKey(i), metadata: Self.metadata(i))
                }
                try store.flush()
                for i in 0..<count {
                    let k = Self.unusualKey(i)
                    committed[k] = try #require(store.entryDigests.placedCandidates(k.digest).first?.place, "key \(i)")
                }
                try store.close()
            }
            let store = try openStore(dir) {
                $0.compactionInterval = nil
                $0.locationCacheLimit = 0
            }
            defer { try? store.close() }
            store.waitForLoads()
            for i in 0..<count {
                let k = Self.unusualKey(i)
                let loaded = store.entryDigests.placedCandidates(k.digest).first?.place
                #expect(loaded == committed[k], "key \(i): loaded place differs from the committed one")
                let before = store.readsThroughPlaces
                let entry = try store.entry(for: k)
                #expect(entry?.data == value(i, size: i * 37), "key \(i)")
                #expect(entry?.info.metadata == Self.metadata(i), "key \(i)")
                #expect(store.readsThroughPlaces == before + 1, "key \(i) was not served through its place")
            }
        }
    }

    /// Rows damaged to hold BLOBs (of the same bytes, empty, invalid UTF-8, 3 MB), NULLs, REALs
    /// and INTEGERs in their text columns: loading places never traps; a get serves the put's
    /// bytes or throws a StoreError; the intact rows are served; fsck runs.
    @Test(arguments: [
        "url = CAST(url AS BLOB)", "variant = CAST(variant AS BLOB)", "etag = CAST(etag AS BLOB)",
        "etag = x''", "etag = zeroblob(0)", "etag = x'C3'", "etag = randomblob(3000000)",
        "last_modified = zeroblob(2000000)", "cache_policy = x'FFFE00'", "cache_policy = NULL", "etag = NULL",
        "etag = 1.5", "etag = 42", "last_modified = -9223372036854775808", "cache_policy = 1e308",
        "url = CAST(url AS BLOB), variant = CAST(variant AS BLOB), etag = CAST(etag AS BLOB), last_modified = CAST(last_modified AS BLOB), cache_policy = CAST(cache_policy AS BLOB)",
        "etag = CAST(x'61006200' AS TEXT)",
        "created_at = 'text'", "expires_at = x'00'", "blob = 'seven'", "link_length = 1.0e0",
    ])
    func damagedTextColumnsNeverTrapTheLoader(edit: String) async throws {
        try await withTemporaryDirectory { dir in
            let victim = CacheKey(url: "https://damage.example/ü", variant: "w=1")
            let victimMetadata = EntryMetadata(etag: "\"abc\"", lastModified: "Mon", cachePolicy: "max-age=9")
            do {
                let store = try openStore(dir)
                for i in 0..<3 { try store.put(value(i), for: key(i)) }
                try store.put(value(9), for: victim, metadata: victimMetadata)
                try store.close()
            }
            try Self.edit(dir, "UPDATE entries SET \(edit) WHERE url_hash = \(victim.urlDigest)")
            try Self.checkDamaged(dir, victim: victim, value: value(9))
        }
    }

    /// The same with values SQLite's TEXT affinity would otherwise turn into text: the schema is
    /// edited so the columns take INTEGER, REAL and BLOB values as they are (a file damaged or
    /// written by another program).
    @Test(arguments: ["etag = 42", "url = 7", "variant = 1.25", "cache_policy = -1", "last_modified = 0"])
    func integerValuesInTextColumnsNeverTrapTheLoader(edit: String) async throws {
        try await withTemporaryDirectory { dir in
            let victim = CacheKey(url: "7", variant: "1.25")
            do {
                let store = try openStore(dir)
                for i in 0..<3 { try store.put(value(i), for: key(i)) }
                try store.put(
                    value(9), for: victim,
                    metadata: EntryMetadata(etag: "42", lastModified: "0", cachePolicy: "-1"))
                try store.close()
            }
            let index = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
            try index.connection.execute("PRAGMA writable_schema = ON")
            try index.connection.execute(
                """
                UPDATE sqlite_schema SET sql = replace(replace(replace(replace(replace(sql,
                    'url TEXT NOT NULL', 'url NOT NULL'), 'variant TEXT NOT NULL', 'variant NOT NULL'),
                    'etag TEXT', 'etag'), 'last_modified TEXT', 'last_modified'), 'cache_policy TEXT', 'cache_policy')
                WHERE name = 'entries'
                """)
            try index.connection.execute("PRAGMA writable_schema = OFF")
            let edited = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false)
            try edited.connection.execute("UPDATE entries SET \(edit) WHERE url_hash = \(victim.urlDigest)")
            let types = try edited.connection.statement(
                "SELECT typeof(url), typeof(variant), typeof(etag) FROM entries WHERE url_hash = \(victim.urlDigest)"
            )
            .first { "\($0.text(0)) \($0.text(1)) \($0.text(2))" }
            print("column types after '\(edit)': \(types ?? "none")")
            try Self.checkDamaged(dir, victim: victim, value: value(9))
        }
    }

    static func edit(_ dir: String, _ sql: String) throws {
        try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false).connection.execute(sql)
    }

    static func checkDamaged(_ dir: String, victim: CacheKey, value victimValue: Data) throws {
        // The loader on its own, as the store runs it.
        let digests = EntryDigestTable()
        _ = try IndexDatabase(path: dir + "/store/index.sqlite", readOnly: false, digests: digests)
        try EntryDigestTableTests.loadPlaces(into: digests, from: dir + "/store/index.sqlite")
        let store: Store
        do {
            store = try openStore(dir) {
                $0.locationCacheLimit = 0
                $0.compactionInterval = nil
            }
        } catch {
            // A typed refusal of the index is fine.
            _ = error  // a StoreError: the throws clause is typed
            return
        }
        defer { try? store.close() }
        store.waitForLoads()
        do {
            let served = try store.data(for: victim)
            #expect(served == nil || served == victimValue, "wrong bytes served for the damaged row")
        } catch {
            _ = error  // a StoreError: the throws clause is typed
        }
        for i in 0..<3 { #expect(try store.data(for: key(i)) == value(i)) }
        _ = try store.fsck()
    }

    /// End to end through the public API: unusual keys and metadata, segments of 48 KiB (many
    /// rotations), overwrites with shorter and longer metadata, removals, metadata updates, a
    /// compaction, reopen, fsck: every value byte-exact, every entry's metadata as put.
    @Test func everyValueReadsBackByteExactAcrossRotationsCompactionAndReopen() async throws {
        try await withTemporaryDirectory { dir in
            var model: [CacheKey: (Data, EntryMetadata)] = [:]
            var g = SeededGenerator(seed: 7)
            func check(_ store: Store, _ when: String) throws {
                for (k, (data, metadata)) in model {
                    let entry = try store.entry(for: k)
                    #expect(entry?.data == data, "\(when): \(k.url.prefix(40))")
                    #expect(entry?.info.metadata == metadata, "\(when): \(k.url.prefix(40))")
                }
            }
            do {
                let store = try openStore(dir, segmentSize: 48 << 10) { $0.compactionInterval = nil }
                for round in 0..<6 {
                    for j in 0..<30 {
                        let i = Int(g.next() % 60)
                        let k = Self.unusualKey(i)
                        switch g.next() % 8 {
                        case 0:
                            _ = try store.remove(k)
                            model[k] = nil
                        case 1:
                            let metadata = Self.metadata(Int(g.next() % 97))
                            if try store.updateMetadata(metadata, for: k) { model[k]!.1 = metadata }
                        default:
                            let data = value(round * 100 + j, size: Int(g.next() % 20_000))
                            let metadata = Self.metadata(Int(g.next() % 97))
                            try store.put(data, for: k, metadata: metadata)
                            model[k] = (data, metadata)
                        }
                    }
                    try check(store, "round \(round)")
                    if round == 3 { try store.compact() }
                }
                try store.close()
            }
            let store = try openStore(dir, segmentSize: 48 << 10) {
                $0.compactionInterval = nil
                $0.locationCacheLimit = 0
            }
            defer { try? store.close() }
            store.waitForLoads()
            try check(store, "reopened")
            let report = try store.fsck()
            #expect(report.isClean, "\(report.findings)")
            #expect(store.readsThroughPlaces > 0)
        }
    }

    /// Puts with injected write failures (errors and short writes) between good ones, under
    /// segments small enough to rotate: each failed put throws a StoreError, and after the
    /// faults clear every key reads back one of the values it was given (the last acknowledged
    /// one, or a failed newer one), never other bytes; fsck finds nothing after a reopen.
    @Test(arguments: [31, 32, 33] as [UInt64])
    func failedPutsNeverLeaveWrongBytes(seed: UInt64) async throws {
        try await withTemporaryDirectory { dir in
            let faulting = Locked((g: SeededGenerator(seed: seed), on: false))
            let faults = FaultInjector { operation, _ in
                guard operation == .write else { return nil }
                return faulting.withLock { s -> FaultInjector.Fault? in
                    guard s.on else { return nil }
                    switch s.g.next() % 6 {
                    case 0: return .error(ENOSPC)
                    case 1: return .shortWrite(Int(s.g.next() % 300), EIO)
                    default: return nil
                    }
                }
            }
            var acknowledged: [CacheKey: Data] = [:]
            var attempted: [CacheKey: [Data]] = [:]
            var g = SeededGenerator(seed: seed &+ 100)
            var failures = 0
            do {
                let store = try openStore(dir, segmentSize: 64 << 10) {
                    $0.compactionInterval = nil
                    $0.faultInjector = faults
                }
                faulting.withLock { $0.on = true }
                for j in 0..<150 {
                    let k = Self.unusualKey(Int(g.next() % 30))
                    let data = value(j, size: Int(g.next() % 9_000))
                    attempted[k, default: []].append(data)
                    do {
                        try store.put(data, for: k, metadata: Self.metadata(Int(g.next() % 97)))
                        acknowledged[k] = data
                        attempted[k] = [data]
                    } catch {
                        _ = error  // a StoreError: the throws clause is typed
                        failures += 1
                    }
                }
                faulting.withLock { $0.on = false }
                for (k, candidates) in attempted {
                    do {
                        let served = try store.data(for: k)
                        if let served {
                            #expect(candidates.contains(served), "wrong bytes for \(k.url.prefix(40))")
                        } else {
                            #expect(acknowledged[k] == nil, "an acknowledged put is lost")
                        }
                    } catch {
                        _ = error  // a StoreError: the throws clause is typed
                    }
                }
                try? store.close()
            }
            #expect(failures > 10)
            let store = try openStore(dir, segmentSize: 64 << 10) {
                $0.compactionInterval = nil
                $0.locationCacheLimit = 0
            }
            defer { try? store.close() }
            store.waitForLoads()
            for (k, candidates) in attempted {
                let served = try store.data(for: k)
                if let served {
                    #expect(candidates.contains(served), "reopened: wrong bytes for \(k.url.prefix(40))")
                } else {
                    #expect(acknowledged[k] == nil, "reopened: an acknowledged put is lost")
                }
            }
            let report = try store.fsck()
            print("fsck after faults: \(report.findings.map(\.message))")
        }
    }

    /// The cache policy limit counts UTF-8 bytes: 512 of them in two-byte characters are taken
    /// (and served through the place), 513 are refused with a typed error.
    @Test func thePolicyLimitIsInBytes() async throws {
        try await withTemporaryDirectory { dir in
            let store = try openStore(dir) { $0.locationCacheLimit = 0 }
            defer { try? store.close() }
            let k = CacheKey(url: "https://limit.example/ü")
            let policy = String(repeating: "é", count: 256)
            try store.put(value(1), for: k, metadata: EntryMetadata(cachePolicy: policy))
            let refused = #expect(throws: StoreError.self) {
                try store.put(value(2), for: k, metadata: EntryMetadata(cachePolicy: policy + "x"))
            }
            #expect(refused?.code == .invalidArgument)
            try store.flush()
            #expect(try store.entry(for: k)?.info.metadata.cachePolicy == policy)
            #expect(try store.data(for: k) == value(1))
        }
    }
}
