import Foundation

/// A small, fast, seeded random generator (SplitMix64), so test data is reproducible.
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// Makes a generator; the same seed gives the same sequence.
    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// `count` bytes derived from `seed` alone: the same seed and count give the same bytes.
public func testBytes(seed: UInt64, count: Int) -> [UInt8] {
    var generator = SeededGenerator(seed: seed)
    var bytes = [UInt8](repeating: 0, count: count)
    var i = 0
    while i < count {
        let word = generator.next()
        for shift in stride(from: 0, to: 64, by: 8) where i < count {
            bytes[i] = UInt8(truncatingIfNeeded: word >> UInt64(shift))
            i += 1
        }
    }
    return bytes
}

/// Whether this run is the ThreadSanitizer step of scripts/test.sh (`TROVE_TSAN=1`). Stress tests
/// scale their operation counts down with it: under TSan on two cores each operation costs
/// milliseconds, and a full-size run held CI's TSan step for 14 minutes. The races they look for
/// show up in the first thousands of operations; the full counts run in the normal step.
public let runningUnderThreadSanitizer = ProcessInfo.processInfo.environment["TROVE_TSAN"] == "1"
