import Foundation

#if canImport(Glibc)
    import Glibc
#endif
import Testing
import TroveCore
import TroveTestSupport

@testable import TroveBench

/// Outside attack on b147eb7 (attack26): `readIntoPageCache` on folders holding what a
/// benchmark folder should not. A thrown error is acceptable here (benchmark only); a hang or a
/// crash is not. Each case runs on its own thread with a deadline.
@Suite struct ReadIntoPageCacheAttackTests {
    /// Runs `readIntoPageCache(folder)` off the pool; the outcome, or "hung" after `seconds`.
    static func outcome(_ folder: String, seconds: Double = 20) async throws -> String {
        try await offPool {
            let result = Locked<String?>(nil)
            let done = DispatchSemaphore(value: 0)
            Thread {
                do {
                    try readIntoPageCache(folder)
                    result.withLock { $0 = "ok" }
                } catch {
                    result.withLock { $0 = "threw: \(error)" }
                }
                done.signal()
            }.start()
            guard done.wait(timeout: .now() + seconds) == .success else { return "hung" }
            return result.withLock { $0 } ?? "?"
        }
    }

    /// Symbolic link loops (to the folder, to its parent, to each other, dangling), a FIFO
    /// with a writer waiting on it, a FIFO without one, a device node (root only), a unix
    /// socket, a file of mode 000, a deep chain of folders: no hang, no crash.
    @Test func hostileFolderEntries() async throws {
        try await withTemporaryDirectory { dir in
            let root = dir + "/r"
            try FileManager.default.createDirectory(atPath: root + "/a/b", withIntermediateDirectories: true)
            #expect(symlink(".", root + "/a/self") == 0)
            #expect(symlink("..", root + "/a/b/up") == 0)
            #expect(symlink("x2", root + "/x1") == 0)
            #expect(symlink("x1", root + "/x2") == 0)
            #expect(symlink("/nonexistent", root + "/dangling") == 0)
            #expect(mkfifo(root + "/fifo", 0o600) == 0)
            #expect(mkfifo(root + "/a/fifo-with-writer", 0o600) == 0)
            try Data(repeating: 7, count: 100_000).write(to: URL(fileURLWithPath: root + "/a/b/data"))
            try Data(repeating: 7, count: 10).write(to: URL(fileURLWithPath: root + "/closed"))
            chmod(root + "/closed", 0)
            // A deep chain (an explicit stack, not recursion, in the walk: cheap to check).
            var deep = root + "/d"
            for _ in 0..<200 { deep += "/d" }
            try FileManager.default.createDirectory(atPath: deep, withIntermediateDirectories: true)
            // A writer blocked opening the FIFO for writing: the read's open unblocks it.
            let writer = Thread {
                let fd = open(root + "/a/fifo-with-writer", O_WRONLY)
                if fd >= 0 { close(fd) }
            }
            writer.start()
            let outcome = try await Self.outcome(root)
            #expect(outcome == "ok", "\(outcome)")
            // Unblock the writer if the read never opened its FIFO.
            let fd = open(root + "/a/fifo-with-writer", O_RDONLY | O_NONBLOCK)
            if fd >= 0 { close(fd) }
        }
    }

    /// A unix socket in the folder: open(2) of a socket fails (ENXIO), so the walk threw where a
    /// FIFO was skipped; it now skips every entry that is neither a file nor a folder.
    @Test func aSocketInTheFolder() async throws {
        try await withTemporaryDirectory { dir in
            let root = dir + "/s"
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
            let s = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            #expect(s >= 0)
            defer { close(s) }
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let path = root + "/sock"
            withUnsafeMutableBytes(of: &address.sun_path) { buffer in
                let bytes = Array(path.utf8)
                buffer.copyBytes(from: bytes.prefix(buffer.count - 1))
            }
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            #expect(bound == 0)
            #expect(try await Self.outcome(root) == "ok")
        }
    }

    /// Files removed (and a folder swapped for a symbolic link) while the walk runs: no hang,
    /// no crash; a thrown ENOENT is acceptable.
    @Test func filesRemovedDuringTheWalk() async throws {
        try await withTemporaryDirectory { dir in
            let root = dir + "/m"
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
            for i in 0..<300 { try Data(repeating: 1, count: 4096).write(to: URL(fileURLWithPath: root + "/f\(i)")) }
            let stop = Locked(false)
            let churn = Thread {
                var i = 0
                while !stop.withLock({ $0 }) {
                    let path = root + "/f\(i % 300)"
                    unlink(path)
                    if i % 2 == 0 {
                        mkdir(path, 0o700)
                        rmdir(path)
                        _ = symlink(root, path)
                        unlink(path)
                    }
                    FileManager.default.createFile(atPath: path, contents: Data(repeating: 1, count: 4096))
                    i += 1
                }
            }
            churn.start()
            var outcomes: [String] = []
            for _ in 0..<20 { outcomes.append(try await Self.outcome(root)) }
            stop.withLock { $0 = true }
            #expect(!outcomes.contains("hung"))
            print("readIntoPageCache under churn: \(Set(outcomes.map { $0.prefix(40) }))")
        }
    }

    /// DiskReads never goes negative and reads a count here.
    @Test func diskReadsIsMonotone() {
        let before = DiskReads.kibibytes()
        #expect(before != nil)
        #expect((DiskReads.since(before) ?? -1) >= 0)
        #expect(DiskReads.since(nil) == nil)
        #expect(DiskReads.since(Int.max) == 0)
    }
}
