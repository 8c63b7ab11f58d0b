// Named workloads of TroveBench against Trove, one file per entry and SQLite as a blob store.
//
// Each engine is populated with the same entries (EngineFixture: deterministic content), once
// per benchmark process; each benchmark then runs one workload on one engine. Values are
// checked against what was written, so a benchmark that returned wrong bytes fails.

import Benchmark
import Foundation
import TroveBench

/// The populated engines of this process. ordo-one runs the benchmarks of a process one at a
/// time, so the engines are never used concurrently.
final class Shared: @unchecked Sendable {
    static let instance = Shared()
    let population = Int(ProcessInfo.processInfo.environment["TROVE_BENCH_POPULATION"] ?? "") ?? 20_000
    private var fixture: EngineFixture?
    private var written: [String: Int] = [:]

    func engines() throws -> EngineFixture {
        if let fixture { return fixture }
        let directory = FileManager.default.temporaryDirectory.path + "/trove-ordo-\(getpid())"
        let made = try EngineFixture(directory: directory, population: population)
        fixture = made
        return made
    }

    /// A key not used before in this process, for puts.
    func nextKey(_ prefix: String) -> String {
        written[prefix, default: 0] += 1
        return "\(prefix)-\(written[prefix]!)"
    }

    deinit {
        fixture?.close()
        if let fixture { try? FileManager.default.removeItem(atPath: fixture.directory) }
    }
}

func engine(_ name: String) throws -> any BlobStoring {
    let fixture = try Shared.instance.engines()
    switch name {
    case "Trove": return fixture.trove
    case "FilePerEntry": return fixture.files
    default: return fixture.sqlite
    }
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .cpuTotal, .syscalls],
        maxDuration: .seconds(3),
        maxIterations: 20_000
    )

    for name in ["Trove", "FilePerEntry", "SQLiteBlob"] {
        for size in [4 << 10, 64 << 10] {
            let label = "\(size >> 10)KiB"
            Benchmark("put \(label) / \(name)") { benchmark in
                let store = try engine(name)
                let pool = try Shared.instance.engines().pool
                for i in benchmark.scaledIterations {
                    let value = pool.value(id: UInt64(size + i), size: size)
                    let key = Shared.instance.nextKey("put-\(label)")
                    benchmark.startMeasurement()
                    try store.put(value, key: key, etag: "e")
                    benchmark.stopMeasurement()
                }
                try store.flush()
            }
        }

        Benchmark("warm get 4KiB / \(name)") { benchmark in
            let store = try engine(name)
            let pool = try Shared.instance.engines().pool
            let population = Shared.instance.population
            for i in benchmark.scaledIterations {
                let n = (i &* 7919) % population
                benchmark.startMeasurement()
                let data = try store.get(EngineFixture.populationKey(n))
                benchmark.stopMeasurement()
                guard data == EngineFixture.populationValue(pool, n) else {
                    fatalError("\(name) returned wrong bytes for \(EngineFixture.populationKey(n))")
                }
            }
        }
    }
}
