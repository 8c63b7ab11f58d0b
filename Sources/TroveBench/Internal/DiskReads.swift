import Foundation

/// What the machine has read from its block devices: Linux's `pgpgin` in `/proc/vmstat`, in
/// KiB, for every process (there is no per-process count of reads that missed the page cache).
/// A loop meant to read from memory that grew it by more than its own few files' metadata read
/// from disk, and its latencies measure the disk.
///
/// Why a row needs it: on the machine these benchmarks were measured on, the kernel's DAMON
/// pages out page-cache pages that no process maps once they have gone unused for about a
/// minute, so files written minutes (or even seconds) before a loop can be partly on disk
/// again when it reads them (Docs/Benchmarks.md, "pages the machine takes back").
enum DiskReads {
    /// `pgpgin` now, in KiB; nil where `/proc/vmstat` cannot be read.
    static func kibibytes() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/vmstat", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("pgpgin ") {
            return Int(line.dropFirst("pgpgin ".count))
        }
        return nil
    }

    /// What was read between `before` (a ``kibibytes()``) and now, in KiB.
    static func since(_ before: Int?) -> Int? {
        guard let before, let now = kibibytes() else { return nil }
        return max(0, now - before)
    }
}
