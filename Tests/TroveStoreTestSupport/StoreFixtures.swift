// Fixtures for tests of stores, shared by every test target that opens one.
public import Foundation
public import TroveCore
public import TroveStore
import TroveTestSupport

/// Opens a store in `dir` + "/store" with the given durability and segment size, and whatever
/// else `configure` sets.
public func openStore(
    _ dir: String, durability: Durability = .batched, segmentSize: Int64 = 64 << 20,
    _ configure: (inout Store.Configuration) -> Void = { _ in }
) throws -> Store {
    var configuration = Store.Configuration(durability: durability)
    configuration.segmentSize = segmentSize
    configure(&configuration)
    return try Store(directory: dir + "/store", configuration: configuration)
}

/// The `i`th test key.
public func key(_ i: Int, variant: String = "") -> CacheKey {
    CacheKey(url: "https://img.example/\(i).jpg", variant: variant)
}

/// The `i`th test value: `size + i` deterministic bytes.
public func value(_ i: Int, size: Int = 3000) -> Data { Data(testBytes(seed: UInt64(i), count: size + i)) }

/// Fills a new store in `dir` with `value(i)` under `key(i)` for `0..<count`, and closes it.
public func populate(_ dir: String, count: Int, segmentSize: Int64 = 64 << 20) throws {
    let store = try openStore(dir, segmentSize: segmentSize)
    for i in 0..<count { try store.put(value(i), for: key(i)) }
    try store.close()
}

/// A clock (milliseconds since 1970) that tests move by hand; `now` goes into
/// `Configuration.clock`.
public final class TestClock: Sendable {
    private let value: Locked<Int64>
    public init(start: Int64) { value = Locked(start) }
    public var now: @Sendable () -> Int64 { { self.value.withLock { $0 } } }
    public func advance(by milliseconds: Int64) { value.withLock { $0 += milliseconds } }
}
