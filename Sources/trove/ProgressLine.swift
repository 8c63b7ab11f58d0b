import Foundation
import Trove
import TroveCore

#if canImport(Glibc)
    import Glibc
#endif

/// A progress line on stderr for long work: phase, bytes done, rate and ETA, redrawn in place
/// at most ten times a second — only when stderr is a terminal; nothing at all otherwise, so
/// logs and pipes get no control characters.
final class ProgressLine {
    private let enabled = isatty(STDERR_FILENO) != 0
    private let start = ContinuousClock.now
    private var lastDraw = ContinuousClock.now - .seconds(1)
    private var drawn = false

    func update(_ progress: WorkProgress) {
        guard enabled else { return }
        let now = ContinuousClock.now
        guard now - lastDraw >= .milliseconds(100) || progress.bytesDone == progress.bytesTotal else { return }
        lastDraw = now
        let elapsed = max(0.001, Double((now - start).components.seconds) + Double((now - start).components.attoseconds) / 1e18)
        let rate = Double(progress.bytesDone) / elapsed
        var line = "\(progress.phase): \(ByteCount(progress.bytesDone))"
        if let total = progress.bytesTotal, total > 0 {
            line += " of \(ByteCount(total))"
            if rate > 0 {
                let remaining = Int(Double(max(0, total - progress.bytesDone)) / rate)
                line += ", \(ByteCount(Int64(rate)))/s, ETA \(remaining / 60):\(String(format: "%02d", remaining % 60))"
            }
        }
        FileHandle.standardError.write(Data("\r\u{1B}[K\(line)".utf8))
        drawn = true
    }

    /// Ends the line, if one was drawn.
    func finish() {
        if drawn { FileHandle.standardError.write(Data("\n".utf8)) }
        drawn = false
    }
}
