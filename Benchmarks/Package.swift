// swift-tools-version: 6.1
//
// Trove's benchmarks on ordo-one/benchmark: the workloads of TroveBench, per engine, for
// tracking over time and comparing baselines (`swift package benchmark`). The same-run ratio
// table against the baselines is `trove bench`; see Docs/Benchmarks.md.

import PackageDescription

let package = Package(
    name: "TroveBenchmarks",
    dependencies: [
        .package(name: "Trove", path: ".."),
        // Builds without jemalloc only with the MallocInterposer trait (PLATFORM.md).
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "StoreBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "TroveBench", package: "Trove"),
                .product(name: "Trove", package: "Trove"),
                .product(name: "TroveCodec", package: "Trove"),
            ],
            path: "Benchmarks/StoreBenchmarks",
            swiftSettings: [.swiftLanguageMode(.v6)],
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        )
    ]
)
