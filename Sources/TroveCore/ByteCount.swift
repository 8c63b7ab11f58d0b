/// A number of bytes, with a human-readable description in binary units.
public struct ByteCount: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The count.
    public var value: Int64

    /// Makes a count of `value` bytes.
    public init(_ value: Int64) { self.value = value }

    /// Makes a count of `value` bytes.
    public init(_ value: Int) { self.value = Int64(value) }

    /// `"512 B"`, `"1.5 KiB"`, `"12.0 MiB"`, `"3.25 GiB"`.
    public var description: String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
        var v = Double(value)
        var i = 0
        while abs(v) >= 1024 && i < units.count - 1 {
            v /= 1024
            i += 1
        }
        if i == 0 { return "\(value) B" }
        let digits = abs(v) < 10 ? 2 : (abs(v) < 100 ? 1 : 0)
        return formatFixed(v, digits: digits) + " " + units[i]
    }

    /// Parses `"1048576"`, `"64K"`, `"64KiB"`, `"1.5M"`, `"2GiB"`, `"10GB"` (units are binary).
    public init?(parsing text: String) {
        let t = text.trimmingWhitespace()
        guard let split = t.firstIndex(where: { !($0.isNumber || $0 == ".") }) else {
            guard let v = Int64(t) else { return nil }
            self.value = v
            return
        }
        guard let number = Double(t[..<split]), number >= 0 else { return nil }
        let unit = String(t[split...]).trimmingWhitespace().uppercased()
        let scale: Double
        switch unit {
        case "B": scale = 1
        case "K", "KB", "KIB": scale = 1024
        case "M", "MB", "MIB": scale = 1024 * 1024
        case "G", "GB", "GIB": scale = 1024 * 1024 * 1024
        case "T", "TB", "TIB": scale = 1024 * 1024 * 1024 * 1024
        default: return nil
        }
        let bytes = number * scale
        guard bytes < 9.0e18 else { return nil }
        self.value = Int64(bytes.rounded())
    }

    public static func < (a: ByteCount, b: ByteCount) -> Bool { a.value < b.value }
}

/// Formats `v` with exactly `digits` fractional digits, without Foundation.
func formatFixed(_ v: Double, digits: Int) -> String {
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let scaled = (abs(v) * scale).rounded()
    let whole = Int64(scaled / scale)
    let frac = Int64(scaled) - whole * Int64(scale)
    var s = (v < 0 ? "-" : "") + String(whole)
    if digits > 0 {
        let f = String(frac)
        s += "." + String(repeating: "0", count: digits - f.count) + f
    }
    return s
}

extension String {
    func trimmingWhitespace() -> Substring {
        var s = Substring(self)
        while let f = s.first, f.isWhitespace { s.removeFirst() }
        while let l = s.last, l.isWhitespace { s.removeLast() }
        return s
    }
}
