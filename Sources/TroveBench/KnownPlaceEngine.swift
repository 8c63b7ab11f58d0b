public import Foundation
import TroveCore
import TrovePack
import TroveStore

/// The floor of a read or a write, as an engine: every value appended to one file, and every key's
/// place (offset, length, and the XXH3-64 of the value) held in a dictionary that opening loads
/// whole from a side file. A get is one dictionary lookup and one `pread` of exactly the value
/// into a buffer — the least any engine that copies values out of the page cache can do —
/// and, with ``verifies``, the XXH3-64 of the bytes compared with the stored one, the check
/// Trove makes of every record it reads. It keeps its read buffers as a store does by default
/// (``ReadBuffers``, `Store.Configuration.readBufferRetention`), so that it stays the floor of
/// Trove's reads.
///
/// A put is the mirror image: one `pwrite` appending the value, its XXH3-64 and a dictionary
/// insert — what is left of a write once the index and durability cost nothing.
///
/// Not a cache anyone would ship (the places reach the disk only at ``close()``, nothing is
/// ever reclaimed, nothing is synced): it shows what is left of a read or a write once the index
/// costs nothing, so that Trove's rows can be read against their floor.
///
/// With ``syncsLikeBatched`` it is also the floor of Trove's `batched` rows: an engine that
/// promises what `batched` promises — a put is on disk within about 10 ms, and never more than
/// eight batches are waiting for a sync — and does nothing else: its values file is `fdatasync`ed
/// on a thread of its own every 10 ms or 128 puts, whichever comes first, and a put that finds
/// 8 × 128 puts not yet synced waits for a sync. (Trove counts records: a put of new bytes writes
/// two, a blob and its link, so its batch of 256 and bound of 8 × 256 are 128 and 1 024 puts.) No index, no records, no checksums
/// on disk: what is left of a `batched` put once everything but its sync is free.
///
/// With ``deduplicates`` it is the floor of the dedup-heavy row: a put finds a repeat by the
/// XXH3-128 of its bytes in a dictionary, reads the stored value and compares it byte for byte (as
/// Trove does before it links a key to a blob), and on a match writes nothing — the key takes the
/// stored value's place. What is left of a deduplicating put once finding repeats costs one
/// dictionary lookup.
///
/// `@unchecked Sendable`: used from one thread at a time (the workloads that run it are
/// single-threaded); its syncer's counters are kept under the syncer's own lock.
public final class KnownPlaceEngine: BlobStoring, @unchecked Sendable {
    public let directory: String
    /// Compare each value's XXH3-64 with the one stored at its put.
    public let verifies: Bool
    private let descriptor: Int32
    private var places: [String: Place] = [:]
    /// Read buffers kept for the next gets, as a store's default configuration keeps them.
    private let buffers = ReadBuffers(budget: Store.Configuration().readBufferRetention)
    private var end: UInt64
    private var syncer: BatchSyncer?
    /// The place of each value put since ``deduplicates`` was turned on, by its XXH3-128.
    private var byContent: [ContentHash: Place] = [:]
    /// Puts that found their bytes stored and wrote nothing (with ``deduplicates``).
    public private(set) var deduplicatedPuts = 0

    /// Store a value put again once (above): the values put from now on are the candidates.
    /// Change it only between workloads.
    public var deduplicates = false {
        didSet {
            byContent = [:]
            deduplicatedPuts = 0
        }
    }

    /// Sync like Trove's `batched` (above). Change it only between workloads.
    public var syncsLikeBatched: Bool {
        get { syncer != nil }
        set {
            guard newValue != syncsLikeBatched else { return }
            if newValue {
                syncer = BatchSyncer(descriptor: descriptor, path: valuesPath)
            } else {
                syncer?.stop()
                syncer = nil
            }
        }
    }

    /// Puts not yet synced (with ``syncsLikeBatched``; tests check the bound).
    public var unsyncedPuts: Int { syncer?.unsynced ?? 0 }

    struct Place {
        var offset: UInt64
        var length: Int
        var checksum: UInt64
    }

    public var name: String { (verifies ? "Floor+XXH3" : "Floor") + (syncsLikeBatched ? " batched" : "") }

    private var valuesPath: String { directory + "/values" }
    private var placesPath: String { directory + "/places" }

    /// Opens (creating) the engine in `directory`, loading every key's place.
    public init(directory: String, verifies: Bool) throws {
        self.directory = directory
        self.verifies = verifies
        try SystemCall.makeDirectory(directory)
        descriptor = try SystemCall.open(directory + "/values", O_RDWR | O_CREAT)
        end = UInt64(try SystemCall.fileSize(descriptor, path: directory + "/values"))
        if let saved = FileManager.default.contents(atPath: placesPath) {
            places = try Self.decode(saved)
        }
    }

    deinit {
        syncer?.stop()
        SystemCall.close(descriptor)
    }

    public func put(_ data: Data, key: String, etag: String) throws {
        let stored = try data.withUnsafeBytes { bytes in
            let content = deduplicates ? XXH3.hash128(bytes) : nil
            if let content, let place = byContent[content], try holds(place, bytes) {
                places[key] = place
                return true
            }
            try SystemCall.pwriteAll(descriptor, bytes, at: end, path: valuesPath)
            let place = Place(offset: end, length: bytes.count, checksum: XXH3.hash64(bytes))
            places[key] = place
            if let content { byContent[content] = place }
            return false
        }
        if stored {
            deduplicatedPuts += 1
            return
        }
        end += UInt64(data.count)
        try syncer?.wrote()
    }

    /// Whether the value at `place` is `bytes`, byte for byte (one `pread` into a fresh buffer).
    private func holds(_ place: Place, _ bytes: UnsafeRawBufferPointer) throws -> Bool {
        guard place.length == bytes.count else { return false }
        guard place.length > 0 else { return true }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: place.length, alignment: 16)
        defer { buffer.deallocate() }
        let n = try SystemCall.preadAll(descriptor, into: buffer, at: place.offset, path: valuesPath)
        return n == place.length && memcmp(buffer.baseAddress!, bytes.baseAddress!, n) == 0
    }

    public func get(_ key: String) throws -> Data? {
        guard let place = places[key] else { return nil }
        // Into an uninitialized buffer, as Trove and FilePerEntry read (`Data(count:)` would
        // zero it first), kept for the next read as Trove keeps its own.
        let (base, capacity) = buffers.take(byteCount: place.length)
        do {
            let buffer = UnsafeMutableRawBufferPointer(start: base, count: place.length)
            let n = try SystemCall.preadAll(descriptor, into: buffer, at: place.offset, path: valuesPath)
            guard n == place.length else { throw BenchmarkError("\(valuesPath) is cut short at \(place.offset)") }
            if verifies, XXH3.hash64(UnsafeRawBufferPointer(buffer)) != place.checksum {
                throw BenchmarkError("\(key): the value at \(valuesPath):\(place.offset) fails its checksum")
            }
        } catch {
            buffers.giveBack(base, capacity: capacity)
            throw error
        }
        return buffers.data(base, capacity: capacity, offset: 0, count: place.length)
    }

    /// Nothing: every put is visible at once, and the floor promises no durability — but with
    /// ``syncsLikeBatched``, a sync of every put so far, as Trove's `flush()` commits and syncs.
    public func flush() throws { try syncer?.flush() }

    /// Writes the places to their side file (the values are already in the page cache).
    public func close() throws {
        var out = Data()
        for (key, place) in places {
            let utf8 = Array(key.utf8)
            for word in [UInt64(utf8.count), place.offset, UInt64(place.length), place.checksum] {
                withUnsafeBytes(of: word.littleEndian) { out.append(contentsOf: $0) }
            }
            out.append(contentsOf: utf8)
        }
        guard FileManager.default.createFile(atPath: placesPath, contents: out) else {
            throw BenchmarkError("cannot write \(placesPath)")
        }
    }

    private static func decode(_ saved: Data) throws -> [String: Place] {
        let bytes = [UInt8](saved)
        var places: [String: Place] = [:]
        var at = 0
        func word() throws -> UInt64 {
            guard at + 8 <= bytes.count else { throw BenchmarkError("the places file is cut short") }
            defer { at += 8 }
            return bytes[at..<at + 8].reversed().reduce(0) { $0 << 8 | UInt64($1) }
        }
        while at < bytes.count {
            let count = Int(try word())
            let place = Place(offset: try word(), length: Int(try word()), checksum: try word())
            guard count <= bytes.count - at else { throw BenchmarkError("the places file is cut short") }
            places[String(decoding: bytes[at..<at + count], as: UTF8.self)] = place
            at += count
        }
        return places
    }
}

/// The `fdatasync` thread of ``KnownPlaceEngine/syncsLikeBatched``: a sync every 10 ms, or at once
/// when 128 puts are waiting; a put that finds 8 × 128 waiting waits for a sync to end.
private final class BatchSyncer: @unchecked Sendable {
    // `@unchecked Sendable`: every var is read and written with `condition` locked.
    private let condition = NSCondition()
    private var written = 0
    private var synced = 0
    private var stopping = false
    /// A flush waits: sync now.
    private var urgent = false
    private var failure: (any Error)?
    private let exited = DispatchSemaphore(value: 0)
    static let batch = 128
    static let bound = 8 * 128

    init(descriptor: Int32, path: String) {
        Thread.detachNewThread { [self] in
            condition.lock()
            while true {
                // A cycle: until 10 ms have passed, 128 puts wait, or a flush or stop asks.
                let deadline = Date(timeIntervalSinceNow: 0.01)
                while !stopping && !urgent && written - synced < Self.batch && condition.wait(until: deadline) {}
                urgent = false
                let target = written
                if target > synced {
                    condition.unlock()
                    let result = Result { try SystemCall.fdatasync(descriptor, path: path) }
                    condition.lock()
                    if case .failure(let error) = result, failure == nil { failure = error }
                    synced = target
                    condition.broadcast()
                } else if stopping {
                    break
                }
            }
            condition.unlock()
            exited.signal()
        }
    }

    var unsynced: Int {
        condition.lock()
        defer { condition.unlock() }
        return written - synced
    }

    /// A put was written: wakes the thread at a full batch, waits while the bound is passed.
    func wrote() throws {
        condition.lock()
        defer { condition.unlock() }
        written += 1
        if written - synced >= Self.batch { condition.broadcast() }
        while written - synced > Self.bound && failure == nil { condition.wait() }
        if let failure { throw failure }
    }

    /// Waits until every put so far is synced.
    func flush() throws {
        condition.lock()
        defer { condition.unlock() }
        let target = written
        while synced < target && failure == nil {
            urgent = true
            condition.broadcast()
            condition.wait()
        }
        if let failure { throw failure }
    }

    /// Syncs what is left and ends the thread.
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
        exited.wait()
    }
}
