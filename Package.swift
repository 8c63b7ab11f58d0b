// swift-tools-version: 6.1
//
// Trove: a content-addressed cache storage engine for images.
// Module layout and the one-way dependency rule are described in Docs/Architecture.md.

import PackageDescription

let package = Package(
    name: "Trove",
    products: [
        .library(name: "Trove", targets: ["Trove"]),
        .library(name: "TroveStore", targets: ["TroveStore"]),
        .library(name: "TroveBench", targets: ["TroveBench"]),
        .library(name: "TroveCodec", targets: ["TroveCodec"]),
        .executable(name: "trove", targets: ["trove"]),
    ],
    dependencies: [
        // The CLI's argument parsing (about 11 s of build on 2 cores).
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // TroveHTTP's client: HTTP/1.1 and 2, TLS, streaming bodies, connection pooling. The
        // largest build cost (several minutes on 2 cores); TroveStore does not link it.
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        // The loopback origin of the tests and of the README's demo (already in the graph
        // through AsyncHTTPClient; named here because Trove uses its products directly).
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        // The pipeline's counters, for whatever metrics backend the application bootstraps.
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
    ],
    targets: [
        // C libraries, each imported by exactly one Swift module.
        .systemLibrary(
            name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        // XXH3 compiled from libxxhash-dev's header: a baseline and an AVX2 build, picked at run
        // time (Debian's libxxhash.so is SSE2 only, and SwiftPM has no per-file -mavx2).
        .target(name: "CXXHash"),
        .systemLibrary(
            name: "CTurboJPEG", pkgConfig: "libturbojpeg", providers: [.apt(["libturbojpeg0-dev"])]),
        .systemLibrary(name: "CSPNG", pkgConfig: "spng", providers: [.apt(["libspng-dev"])]),
        .systemLibrary(name: "CWebP", pkgConfig: "libwebp", providers: [.apt(["libwebp-dev"])]),

        // Shared value types: ContentHash (XXH3-128), checksums, CacheKey, ByteCount.
        .target(name: "TroveCore", dependencies: ["CXXHash"]),
        // Pack segments: record encoding, append, positional reads, verification, scanning.
        .target(name: "TrovePack", dependencies: ["TroveCore"]),
        // Image codecs: decode with shrink-on-load, EXIF orientation, resample, encode WebP.
        // Knows nothing of the store.
        .target(name: "TroveCodec", dependencies: ["TroveCore", "CTurboJPEG", "CSPNG", "CWebP"]),
        // SQLite C-API wrapper and Trove's versioned index schema.
        .target(name: "TroveIndex", dependencies: ["TroveCore", "CSQLite"]),
        // The engine: Store composes the pack layer and the index. Links SQLite and xxHash only.
        .target(name: "TroveStore", dependencies: ["TroveCore", "TrovePack", "TroveIndex"]),
        // Origin fetching: conditional requests, Cache-Control freshness, limits, typed errors.
        // Knows nothing of storage.
        .target(
            name: "TroveHTTP",
            dependencies: [
                "TroveCore", .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOHTTP1", package: "swift-nio"),
            ]),
        // Images on the engine: MemoryCache (front tier), ImageCache (variants), ImagePipeline
        // (memory → disk → origin). Re-exports TroveStore.
        .target(
            name: "Trove",
            dependencies: [
                "TroveStore", "TroveCore", "TroveCodec", "TroveHTTP", .product(name: "Metrics", package: "swift-metrics"),
            ]),
        // A small HTTP/1.1 origin on loopback (SwiftNIO): serves files or generated bodies with
        // validators, and can misbehave on request. The tests' origin and `trove origin` (the
        // README's offline demo).
        .target(
            name: "TroveOrigin",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]),
        // Benchmark engines (Trove, one file per entry, SQLite as a blob store) and workloads,
        // shared by `trove bench` and the Benchmarks/ package. It talks to SQLite directly, not
        // through TroveIndex: the baseline is what a user would write.
        // The memory-tier and pipeline rows use Trove, the loopback origin and bare AsyncHTTPClient.
        .target(
            name: "TroveBench",
            dependencies: [
                "Trove", "TroveStore", "TrovePack", "TroveCore", "TroveCodec", "TroveHTTP", "TroveOrigin", "CSQLite",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOHTTP1", package: "swift-nio"),
            ]),
        // The command-line tool.
        .executableTarget(
            name: "trove",
            dependencies: [
                "Trove", "TroveBench", "TroveCodec", "TroveHTTP", "TroveOrigin",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]),

        // Tests.
        .target(name: "TroveTestSupport", path: "Tests/TroveTestSupport"),
        // Store fixtures (openStore, key, value, populate, TestClock) for every suite that opens one.
        .target(
            name: "TroveStoreTestSupport", dependencies: ["TroveStore", "TroveCore", "TroveTestSupport"],
            path: "Tests/TroveStoreTestSupport"),
        // A child process for the crash suite: writes to a store until it is SIGKILLed.
        // It links TroveStore alone: CI checks it needs no image library (scripts/test.sh).
        .executableTarget(name: "CrashWriter", dependencies: ["TroveStore", "TroveTestSupport"], path: "Tests/CrashWriter"),
        .testTarget(name: "TroveCoreTests", dependencies: ["TroveCore", "TroveTestSupport"]),
        .testTarget(name: "TrovePackTests", dependencies: ["TrovePack", "TroveTestSupport"]),
        .testTarget(name: "TroveIndexTests", dependencies: ["TroveIndex", "TroveTestSupport"]),
        .testTarget(name: "TroveCodecTests", dependencies: ["TroveCodec", "TroveTestSupport"]),
        .testTarget(
            name: "TroveTests",
            dependencies: [
                "Trove", "TroveStore", "TrovePack", "TroveIndex", "TroveCodec", "TroveTestSupport", "TroveStoreTestSupport",
                "CrashWriter",
            ],
            exclude: ["Fixtures"]),
        .testTarget(
            name: "TroveHTTPTests",
            dependencies: [
                "TroveHTTP", "TroveCore", "TroveOrigin", "TroveTestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOHTTP1", package: "swift-nio"),
            ]),
        .testTarget(
            name: "TrovePipelineTests",
            dependencies: [
                "Trove", "TroveHTTP", "TroveOrigin", "TroveCodec", "TrovePack", "TroveTestSupport", "TroveStoreTestSupport",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ]),
        .testTarget(name: "TroveBenchTests", dependencies: ["TroveBench", "TroveTestSupport"]),
        .testTarget(name: "TroveCLITests", dependencies: ["Trove", "TroveCodec", "TroveOrigin", "TroveTestSupport", "trove"]),
    ]
)

// Strict Swift 6 for every Swift target, set once.
let cTargets: Set = ["CXXHash"]
for target in package.targets where target.type != .system && !cTargets.contains(target.name) {
    var settings = target.swiftSettings ?? []
    settings.append(.swiftLanguageMode(.v6))
    settings.append(.enableUpcomingFeature("ExistentialAny"))
    settings.append(.enableUpcomingFeature("InternalImportsByDefault"))
    settings.append(.enableUpcomingFeature("MemberImportVisibility"))
    target.swiftSettings = settings
}
