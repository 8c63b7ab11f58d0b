import ArgumentParser
import Foundation
import TroveBench

extension TroveCommand {
    struct Bench: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Benchmark Trove against one-file-per-entry and SQLite-as-blob-store, in one run.",
            discussion: """
                Runs every workload against the three engines on the same generated data in a \
                temporary directory, then prints ops/s, p50 and p99 per engine with Trove's ratio \
                to each baseline, and checks the targets of DESIGN.md. A few minutes; --quick \
                takes seconds. Progress goes to stderr. On ext4 without a journal, leave six \
                minutes after removing many files (or after an earlier run) before a run whose \
                ratios you judge: creating files, as one file per entry does, is slower until \
                then (Docs/Benchmarks.md, "recently deleted inodes").
                """)

        @Flag(help: "A smoke run: small population and few operations (seconds).")
        var quick = false

        @Flag(help: "Print the report as JSON.")
        var json = false

        @Option(help: "Entries each engine holds before the workloads (default 100000; 5000 with --quick).")
        var population: Int?

        @Option(help: "Entries of the large store in the scaling workload (default 100000; 20000 with --quick).")
        var scaleEntries: Int?

        @Option(help: "Directory for the engines' files (default: a new temporary directory, removed afterwards).")
        var directory: String?

        @Option(
            name: .customLong("only"), parsing: .upToNextOption,
            help: "Run only these groups of workloads: engines, first-reads, memory, pipeline (default: all).")
        var sections: [String] = []

        @Flag(help: "Instead: 256 px WebP thumbnails of large JPEGs and PNGs against vipsthumbnail and Pillow.")
        var thumbnails = false

        func validate() throws {
            if let population, population < 100 { throw ValidationError("--population must be at least 100") }
            if let scaleEntries, scaleEntries < 10_000 { throw ValidationError("--scale-entries must be at least 10000") }
            for name in sections where BenchmarkSection(rawValue: name) == nil {
                throw ValidationError(
                    "--only \(name): not a group of workloads; choose from "
                        + BenchmarkSection.allCases.map(\.rawValue).joined(separator: ", "))
            }
        }

        func run() throws {
            if thumbnails {
                let dir = directory ?? FileManager.default.temporaryDirectory.path + "/trove-thumbnails-\(getpid())"
                defer { if directory == nil { try? FileManager.default.removeItem(atPath: dir) } }
                do {
                    let rows = try ThumbnailBenchmark.run(directory: dir) { line in
                        FileHandle.standardError.write(Data("bench: \(line)\n".utf8))
                    }
                    if json { try printJSON(rows) } else { printOut(ThumbnailBenchmark.table(rows)) }
                } catch {
                    try fail("thumbnail benchmark failed: \(error)")
                }
                return
            }
            var plan = quick ? BenchmarkPlan.quick : BenchmarkPlan.standard
            if let population { plan.population = population }
            if let scaleEntries { plan.scaleEntries = scaleEntries }
            plan.directory = directory
            if !sections.isEmpty { plan.sections = sections.compactMap(BenchmarkSection.init(rawValue:)) }
            plan.workerExecutable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
            let report: BenchmarkReport
            do {
                let suite = try BenchmarkSuite(plan: plan) { line in
                    FileHandle.standardError.write(Data("bench: \(line)\n".utf8))
                }
                report = try suite.run()
            } catch {
                try fail("benchmark failed: \(error)")
            }
            if json {
                try printJSON(report)
            } else {
                printOut(report.table())
            }
        }
    }

    /// The child process of `trove bench`'s fresh-process workloads; not for people.
    struct BenchWorker: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "bench-worker", abstract: "Internal: one engine's fresh-process run for trove bench.",
            shouldDisplay: false)

        @Argument var arguments: [String] = []

        func run() throws {
            do {
                let report = try FirstReadBenchmark.worker(arguments: arguments)
                FileHandle.standardOutput.write(try JSONEncoder().encode(report))
            } catch {
                try fail("bench-worker failed: \(error)")
            }
        }
    }
}
