import Foundation

/// The process's resident memory, from Linux's `/proc/self/status`.
enum ResidentMemory {
    /// Resets the peak (`VmHWM`) to the current resident size, so that the next
    /// ``peakBytes()`` is the peak of what ran in between (Linux ≥ 4.0: `clear_refs` value 5).
    /// Does nothing where that file cannot be written.
    static func resetPeak() {
        guard let handle = FileHandle(forWritingAtPath: "/proc/self/clear_refs") else { return }
        try? handle.write(contentsOf: Data("5".utf8))
        try? handle.close()
    }

    /// The peak resident size since the process started or the last ``resetPeak()``, in bytes.
    static func peakBytes() -> Int? { field("VmHWM:") }

    /// The resident size now, in bytes.
    static func currentBytes() -> Int? { field("VmRSS:") }

    private static func field(_ name: String) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix(name) {
            // "VmHWM:	   41234 kB"
            let digits = line.dropFirst(name.count).filter(\.isNumber)
            return Int(digits).map { $0 * 1024 }
        }
        return nil
    }
}
