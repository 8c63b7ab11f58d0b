import ArgumentParser
import Foundation
import Trove
import TroveCore

extension TroveCommand {
    struct Compact: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run a compaction pass: expire, evict to a capacity, rewrite sparse segments.",
            discussion: """
                Prints what was expired, evicted and reclaimed (entries and bytes) and the disk \
                usage before and after. With --capacity, least recently read entries are evicted \
                until usage is under 85 % of it. With --ttl, entries created longer ago than the \
                duration are removed (30s, 90m, 12h, 7d, 2w; a bare number is seconds).
                """)

        @OptionGroup var store: StoreOptions

        @Option(help: ArgumentHelp("Disk usage to keep the store within (bytes; K, M, G suffixes).", valueName: "bytes"))
        var capacity: String?

        @Option(help: ArgumentHelp("Remove entries created longer ago than this.", valueName: "duration"))
        var ttl: String?

        @Flag(help: "Print the report as JSON.")
        var json = false

        func validate() throws {
            if let capacity, ByteCount(parsing: capacity) == nil || ByteCount(parsing: capacity)!.value <= 0 {
                throw ValidationError("--capacity must be a positive size such as 500M or 2G, not \(capacity)")
            }
            if let ttl, parseDuration(ttl) == nil {
                throw ValidationError("--ttl must be a duration such as 90m, 12h or 7d, not \(ttl)")
            }
        }

        func run() throws {
            let capacity = capacity.flatMap { ByteCount(parsing: $0)?.value }
            let ttl = ttl.flatMap(parseDuration)
            let line = ProgressLine()
            let report = try store.withStore(configure: {
                $0.capacity = capacity; $0.compactionInterval = nil
            }) { store in
                try store.compact(timeToLive: ttl) { line.update($0) }
            }
            line.finish()
            if json {
                try printJSON(report)
                return
            }
            func bytes(_ v: Int64) -> String { ByteCount(v).description }
            printOut("expired    \(report.expiredEntries) entries (\(bytes(report.expiredBytes)))")
            printOut("evicted    \(report.evictedEntries) entries (\(bytes(report.evictedBytes)))")
            printOut(
                "segments   \(report.segmentsRewritten) rewritten, \(report.segmentsDeleted) deleted, "
                    + "\(bytes(report.bytesCopied)) copied forward")
            printOut(
                "disk       \(bytes(report.diskBytesBefore)) → \(bytes(report.diskBytesAfter)) "
                    + "(reclaimed \(bytes(report.reclaimedBytes)))")
        }
    }
}

/// Seconds in "45", "45s", "90m", "12h", "7d" or "2w"; nil when it is none of these.
func parseDuration(_ text: String) -> Duration? {
    let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800]
    var digits = Substring(text)
    var scale: Int64 = 1
    if let last = text.last, let unit = units[last] {
        digits = digits.dropLast()
        scale = unit
    }
    guard let value = Int64(digits), value >= 0, value <= Int64.max / scale / 1000 else { return nil }
    return .seconds(value * scale)
}
