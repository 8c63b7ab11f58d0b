public import Foundation
import TroveCore

#if canImport(Glibc)
    import Glibc
#endif

/// Per-operation latencies and the wall time of a timed loop.
struct Measurement {
    var latencies: [UInt64] = []  // nanoseconds
    var total: Duration = .zero
    /// The process's CPU time (user + system, every thread) over the run, when measured.
    var cpuSeconds: Double?
    /// The process's peak resident memory over the run, when measured.
    var peakResidentBytes: Int?
    /// What settling the file system before the loop waited for in its first synced write
    /// (``settle(_:)``), when the loop was settled and the probe could be written.
    var settleWait: Duration?
    /// What the machine read from disk while the loop ran, in KiB (``DiskReads``), when known.
    var diskReadKiB: Int?

    /// Adds one operation's latency to the latencies and the total.
    mutating func add(_ elapsed: Duration) {
        total += elapsed
        latencies.append(nanoseconds(elapsed))
    }

    var seconds: Double {
        Double(total.components.seconds) + Double(total.components.attoseconds) / 1e18
    }

    /// The `p`-th percentile latency in microseconds (nearest rank).
    func percentile(_ p: Double) -> Double {
        guard !latencies.isEmpty else { return 0 }
        let sorted = latencies.sorted()
        let rank = min(sorted.count - 1, max(0, Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1))
        return Double(sorted[rank]) / 1000
    }
}

/// Brings the file system holding `directory` to rest before a timed loop, so that whoever runs
/// next does not pay for what earlier workloads left behind, and the order of the workloads
/// does not decide the numbers:
/// - `sync()` writes back the page cache's dirty pages;
/// - a small file written and `fdatasync`ed there, twice, then removed (and the directory
///   synced, so the removal is not left to the next engine's first sync), takes on whatever
///   the file system still had to do before a sync could return. On this machine the first
///   such `fdatasync` after the engines' populations waited 296.7 ms right after a `sync()` (the
///   cause not identified: the journal's commit or checkpoint, or the virtual disk's flush);
///   otherwise that wait fell on the first engine of the row that syncs, Trove `batched`
///   (Docs/Benchmarks.md, "a settled file system before every row").
///
/// - Parameter directory: a directory on the engines' file system.
/// - Returns: how long the first `fdatasync` took — the work it absorbed — or nil when the
///   probe file could not be written and synced there (the loop then starts after `sync()` only).
@discardableResult
func settle(_ directory: String) -> Duration? {
    sync()
    let path = directory + "/" + settleFileName
    defer {
        _ = SystemCall.unlink(path)
        if let folder = try? SystemCall.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC) {
            try? SystemCall.fsync(folder, path: directory)
            SystemCall.close(folder)
        }
    }
    let block = [UInt8](repeating: 0, count: 4_096)
    var first: Duration?
    for _ in 0..<2 {
        guard let descriptor = try? SystemCall.open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0o600) else {
            return nil
        }
        defer { SystemCall.close(descriptor) }
        let clock = ContinuousClock()
        let start = clock.now
        do {
            try block.withUnsafeBytes { try SystemCall.pwriteAll(descriptor, $0, at: 0, path: path) }
            try SystemCall.fdatasync(descriptor, path: path)
        } catch {
            return nil
        }
        if first == nil { first = clock.now - start }
    }
    return first
}

/// Reads every regular file under `folder` (its subfolders too) once, untimed, so that their
/// pages, and the folders' own blocks, are in the page cache, and recently used, when a timed
/// loop starts (``DiskReads`` says why that can matter). Anything else (symbolic links, FIFOs,
/// sockets, devices) is skipped.
///
/// Each file is opened and closed here, and closing any descriptor of a file drops the POSIX
/// locks this process holds on it: never use it on a folder holding an SQLite database that
/// this process has open (a store's `index.sqlite`); a store's `packs` folder is safe.
func readIntoPageCache(_ folder: String) throws {
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    defer { buffer.deallocate() }
    var folders = [folder]
    while let current = folders.popLast() {
        for name in try FileManager.default.contentsOfDirectory(atPath: current) {
            let path = current + "/" + name
            var entry = stat()
            guard lstat(path, &entry) == 0 else { throw SystemCall.fail("lstat", path) }
            guard entry.st_mode & S_IFMT == S_IFDIR || entry.st_mode & S_IFMT == S_IFREG else { continue }
            // Not following links and not waiting on a FIFO, should the entry be swapped for
            // one after the lstat.
            let descriptor = try SystemCall.open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
            defer { SystemCall.close(descriptor) }
            var status = stat()
            guard fstat(descriptor, &status) == 0 else { throw SystemCall.fail("fstat", path) }
            switch status.st_mode & S_IFMT {
            case S_IFDIR: folders.append(path)
            case S_IFREG:
                var offset: UInt64 = 0
                while case let count = try SystemCall.preadAll(descriptor, into: buffer, at: offset, path: path), count > 0 {
                    offset += UInt64(count)
                }
            default: continue
            }
        }
    }
}

/// The probe file ``settle(_:)`` writes and removes (a run killed meanwhile leaves it; the next
/// run's settle removes it).
let settleFileName = ".trove-bench-settle"

/// Times `count` calls of `body`, each on its own, then passes each result to `check` outside
/// the timed region and drops it at once (a caller of a cache uses the bytes and lets them go;
/// keeping every result alive would measure page faults of a growing heap instead).
///
/// The total is the sum of the timed calls plus `finish` (so work an engine defers, such as a
/// group commit, is paid for inside the measurement); checks are not counted.
///
/// - Parameter directory: a directory on the engines' file system: the loop starts once that
///   file system is at rest (``settle(_:)``); nil starts it as things are (a loop that is one
///   slice of a longer measurement).
func measure<T>(
    _ count: Int, settling directory: String?, finish: () throws -> Void = {}, _ body: (Int) throws -> T,
    check: (Int, T) throws -> Void = { _, _ in }
) throws -> Measurement {
    var m = Measurement()
    m.latencies.reserveCapacity(count)
    if let directory { m.settleWait = settle(directory) }
    ResidentMemory.resetPeak()
    let diskReads = DiskReads.kibibytes()
    let clock = ContinuousClock()
    for i in 0..<count {
        let t0 = clock.now
        let result = try body(i)
        m.add(clock.now - t0)
        try check(i, result)
    }
    let t0 = clock.now
    try finish()
    m.total += clock.now - t0
    m.peakResidentBytes = ResidentMemory.peakBytes()
    m.diskReadKiB = DiskReads.since(diskReads)
    return m
}

/// Runs `body(i)` for every `i` in `0..<count` on `threads` threads at once (thread `t` takes
/// `t`, `t + threads`, …), once the file system holding `directory` is at rest (``settle(_:)``). Each
/// call's latency is kept; the total is the wall time from the start until every thread is done
/// and `finish` has returned. The first error any thread throws is rethrown (the other threads
/// stop at their next item).
func measureConcurrently(
    _ count: Int, threads: Int, settling directory: String, finish: () throws -> Void = {},
    _ body: @escaping @Sendable (Int) throws -> Void
) throws -> Measurement {
    let settleWait = settle(directory)
    ResidentMemory.resetPeak()
    let diskReads = DiskReads.kibibytes()
    let failure = Locked<(any Error)?>(nil)
    let latencies = Locked([[UInt64]](repeating: [], count: threads))
    let done = DispatchGroup()
    let clock = ContinuousClock()
    let start = clock.now
    for t in 0..<threads {
        done.enter()
        let thread = Thread {
            defer { done.leave() }
            var mine: [UInt64] = []
            mine.reserveCapacity(count / threads + 1)
            var i = t
            while i < count, failure.withLock({ $0 == nil }) {
                let t0 = clock.now
                do {
                    try body(i)
                } catch {
                    failure.withLock { if $0 == nil { $0 = error } }
                    break
                }
                mine.append(nanoseconds(clock.now - t0))
                i += threads
            }
            latencies.withLock { $0[t] = mine }
        }
        thread.stackSize = 1 << 20
        thread.start()
    }
    done.wait()
    if let error = failure.withLock({ $0 }) { throw error }
    try finish()
    var m = Measurement()
    m.total = clock.now - start
    m.latencies = latencies.withLock { $0.flatMap { $0 } }
    m.peakResidentBytes = ResidentMemory.peakBytes()
    m.settleWait = settleWait
    m.diskReadKiB = DiskReads.since(diskReads)
    return m
}

/// Reproducible pseudo-random numbers (SplitMix64).
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Makes values: slices of a pool of random bytes, each stamped with its id in its first
/// eight bytes, so distinct ids give distinct contents (and incompressible ones, like images).
public struct ContentPool: Sendable {
    private let pool: [UInt8]

    /// Makes a pool of `size` random bytes (the same bytes every time).
    public init(size: Int = 8 << 20) {
        var generator = SplitMix(state: 42)
        var bytes = [UInt8](repeating: 0, count: size)
        bytes.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            for i in 0..<words.count { words[i] = generator.next() }
        }
        pool = bytes
    }

    /// `size` bytes for `id`: the same id and size give the same bytes.
    public func value(id: UInt64, size: Int) -> Data {
        precondition(size <= pool.count)
        let start = Int(id &* 7919 % UInt64(pool.count - size + 1))
        var data = Data(pool[start..<start + size])
        withUnsafeBytes(of: id.littleEndian) { stamp in
            for i in 0..<min(8, size) { data[i] = stamp[i] }
        }
        return data
    }

    /// The id stamped into `data`.
    public static func id(of data: Data) -> UInt64? {
        guard data.count >= 8 else { return nil }
        return data.prefix(8).withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
    }
}

/// Draws ranks 0..<n with probability ∝ 1/(rank+1)^s.
struct ZipfSampler {
    private var cdf: [Double] = []

    init(count: Int, exponent s: Double = 1.0) {
        var total = 0.0
        cdf.reserveCapacity(count)
        for k in 1...count {
            total += 1 / pow(Double(k), s)
            cdf.append(total)
        }
        cdf = cdf.map { $0 / total }
    }

    func next(using generator: inout some RandomNumberGenerator) -> Int {
        let u = Double.random(in: 0..<1, using: &generator)
        var low = 0
        var high = cdf.count - 1
        while low < high {
            let mid = (low + high) / 2
            if cdf[mid] < u { low = mid + 1 } else { high = mid }
        }
        return low
    }
}

/// `count` sizes shaped like an image cache's entries: 80 % 5–50 KB, 17 % 100–500 KB,
/// 3 % 1–4 MB (the mixed workload's catalog and the first-read workload's).
func imageSizes(count: Int, using generator: inout SplitMix) -> [Int] {
    (0..<count).map { _ in
        let roll = Int.random(in: 0..<100, using: &generator)
        return roll < 80
            ? Int.random(in: 5_000...50_000, using: &generator)
            : roll < 97
                ? Int.random(in: 100_000...500_000, using: &generator)
                : Int.random(in: 1_000_000...4_000_000, using: &generator)
    }
}

/// `duration` in whole nanoseconds (a latency as the measurements keep it).
func nanoseconds(_ duration: Duration) -> UInt64 {
    UInt64(duration.components.seconds) * 1_000_000_000 + UInt64(duration.components.attoseconds / 1_000_000_000)
}

/// The CPU time the process has used so far (user + system, all threads), in seconds.
func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    let seconds = usage.ru_utime.tv_sec + usage.ru_stime.tv_sec
    let micros = usage.ru_utime.tv_usec + usage.ru_stime.tv_usec
    return Double(seconds) + Double(micros) / 1e6
}
