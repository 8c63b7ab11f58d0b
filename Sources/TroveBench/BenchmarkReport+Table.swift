import Foundation

extension BenchmarkReport {
    /// One table: per workload and engine, ops/s, p50 and p99, and Trove's ratio to each
    /// baseline; then the targets.
    public func table() -> String {
        // A left-aligned text as long as its column still gets one space after it.
        func pad(_ s: String, _ n: Int, right: Bool = false) -> String {
            s.count >= n
                ? (right ? s : s + " ")
                : right ? String(repeating: " ", count: n - s.count) + s : s + String(repeating: " ", count: n - s.count)
        }
        func number(_ v: Double, _ digits: Int = 1) -> String { String(format: "%.\(digits)f", v) }
        var lines: [String] = []
        lines.append(
            pad("workload", 24) + pad("engine", 20) + pad("ops/s", 11, right: true) + pad("p50 µs", 10, right: true)
                + pad("p99 µs", 10, right: true) + "  Trove ratio / metric")
        lines.append(String(repeating: "-", count: 100))
        var previous = ""
        for r in results {
            if r.workload != previous && !previous.isEmpty { lines.append("") }
            previous = r.workload
            var tail = ""
            if let metric = r.metric, let name = r.metricName { tail = "\(name) \(number(metric, 3))" }
            if r.engine.hasPrefix("Floor") {
                // A floor (KnownPlaceEngine) is no baseline: how far past one file per entry any
                // engine could go, and how much of the floor Trove reaches.
                var parts: [String] = []
                if let files = results.first(where: { $0.workload == r.workload && $0.engine == "FilePerEntry" }) {
                    parts.append("floor ÷ FilePerEntry \(number(r.opsPerSecond / files.opsPerSecond, 2))×")
                }
                // The plain floor never syncs: a put row compares it with `none` alone; the floor
                // that syncs like `batched`, with `batched` alone.
                let peers =
                    r.engine.hasSuffix(" batched")
                    ? ["Trove"] : r.workload.hasPrefix("put") ? ["Trove none"] : ["Trove", "Trove none"]
                for peer in peers {
                    guard let t = results.first(where: { $0.workload == r.workload && $0.engine == peer }) else { continue }
                    let share = t.opsPerSecond / r.opsPerSecond
                    parts.append("\(peer) ÷ floor \(number(share, 2))×\(share > 1 ? " (above the floor)" : "")")
                }
                tail = parts.joined(separator: "  ") + (tail.isEmpty ? "" : "  " + tail)
            } else if !r.engine.hasPrefix("Trove") {
                // Trove's ops/s over this baseline's, for each Trove level of like durability.
                let durable = r.engine.hasSuffix("fsync") || r.engine.hasSuffix("FULL")
                var peers = durable ? ["Trove full"] : ["Trove", "Trove none"]
                // A workload without a store row (the memory tier's): every Trove row of it.
                if !results.contains(where: { $0.workload == r.workload && peers.contains($0.engine) }) {
                    peers = results.filter { $0.workload == r.workload && $0.engine.hasPrefix("Trove") }.map(\.engine)
                }
                let ratios = peers.compactMap { peer in
                    results.first { $0.workload == r.workload && $0.engine == peer }.map {
                        "\(peer == "Trove" ? "batched" : peer.dropFirst(6)) \(number($0.opsPerSecond / r.opsPerSecond, 2))×"
                    }
                }
                tail = ratios.joined(separator: "  ") + (tail.isEmpty ? "" : "  " + tail)
            }
            // The median of several processes: give their spread.
            if let processes = r.processesPerSecond, processes.count > 1, let low = processes.min(),
                let high = processes.max()
            {
                tail +=
                    (tail.isEmpty ? "" : "  ")
                    + "median of \(processes.count) processes (\(number(low, 0))–\(number(high, 0))/s)"
            }
            // A loop that read its bytes from disk measured the disk (DiskReads): say so.
            if let kibibytes = r.diskReadKiB, kibibytes >= 1_024 {
                tail += (tail.isEmpty ? "" : "  ") + "read \(number(Double(kibibytes) / 1_024)) MiB from disk"
            }
            lines.append(
                pad(r.workload, 24) + pad(r.engine, 20) + pad(number(r.opsPerSecond, 0), 11, right: true)
                    + pad(number(r.p50Microseconds), 10, right: true) + pad(number(r.p99Microseconds), 10, right: true)
                    + "  " + tail)
        }
        lines.append("")
        lines.append("Targets (DESIGN.md), measured in this run:")
        for t in targets {
            lines.append("  [\(t.met ? "met" : "NOT met")] \(t.target): \(number(t.measured, 3)) (\(t.required))")
        }
        return lines.joined(separator: "\n")
    }
}
