import Foundation

/// Runs `body` with a new, empty directory that is removed afterwards.
///
/// Each test gets its own directory under the system temporary directory, named after the
/// test so that a failure's leftovers (kept when `TROVE_KEEP_TEST_FILES` is set) are easy to find.
public func withTemporaryDirectory<T>(
    _ name: String = #function, _ body: (String) async throws -> T
) async rethrows -> T {
    let base = FileManager.default.temporaryDirectory.path
    let safe = name.filter { $0.isLetter || $0.isNumber }.prefix(40)
    let path = "\(base)/trove-test-\(safe)-\(UUID().uuidString.prefix(8))"
    try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer {
        if ProcessInfo.processInfo.environment["TROVE_KEEP_TEST_FILES"] == nil {
            try? FileManager.default.removeItem(atPath: path)
        }
    }
    return try await body(path)
}

/// The directory holding the built products (the test bundle, `trove`, `CrashWriter`).
public var productsDirectory: String {
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    var url = URL(fileURLWithPath: exe).deletingLastPathComponent()
    // On Linux the test bundle is an executable in the products directory; on other systems
    // it sits inside a .xctest bundle.
    while url.path.contains(".xctest") { url = url.deletingLastPathComponent() }
    return url.path
}
