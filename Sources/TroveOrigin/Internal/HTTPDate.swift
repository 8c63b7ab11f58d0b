#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// IMF-fixdate (RFC 9110 §5.6.7), the one HTTP date format a server generates:
/// `Sun, 06 Nov 1994 08:49:37 GMT`.
///
/// The origin formats `Date` and `Last-Modified` and reads `If-Modified-Since`. It parses only
/// IMF-fixdate: a test origin that ignores the two obsolete formats just answers 200 where a
/// full server could answer 304, which RFC 9110 §13.1.3 allows ("a recipient MUST ignore" a
/// value it cannot parse). Clients' date rules live in TroveHTTP's freshness code, not here.
enum HTTPDate {
    private static let weekdays = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// The IMF-fixdate of `seconds` since the Unix epoch.
    static func format(secondsSinceEpoch seconds: Int) -> String {
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let year = Int(parts.tm_year) + 1900
        var yearText = String(year)
        while yearText.count < 4 { yearText = "0" + yearText }
        return "\(weekdays[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(yearText) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }

    /// The current time as an IMF-fixdate.
    static func now() -> String {
        format(secondsSinceEpoch: Int(time(nil)))
    }

    /// Seconds since the Unix epoch of an IMF-fixdate, or nil when `text` is not one.
    static func parse(_ text: String) -> Int? {
        // "Sun, 06 Nov 1994 08:49:37 GMT": 29 ASCII bytes at fixed positions.
        let bytes = Array(text.utf8)
        guard bytes.count == 29, bytes[3] == UInt8(ascii: ","), bytes[4] == UInt8(ascii: " "),
            bytes[7] == UInt8(ascii: " "), bytes[11] == UInt8(ascii: " "), bytes[16] == UInt8(ascii: " "),
            bytes[19] == UInt8(ascii: ":"), bytes[22] == UInt8(ascii: ":"), bytes[25] == UInt8(ascii: " "),
            String(decoding: bytes[26..<29], as: UTF8.self) == "GMT",
            weekdays.contains(String(decoding: bytes[0..<3], as: UTF8.self)),
            let month = months.firstIndex(of: String(decoding: bytes[8..<11], as: UTF8.self)),
            let day = number(bytes[5..<7]), let year = number(bytes[12..<16]), let hour = number(bytes[17..<19]),
            let minute = number(bytes[20..<22]), let second = number(bytes[23..<25]),
            (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        return Int(timegm(&parts))
    }

    private static func number(_ digits: ArraySlice<UInt8>) -> Int? {
        var value = 0
        for digit in digits {
            guard digit >= UInt8(ascii: "0"), digit <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(digit - UInt8(ascii: "0"))
        }
        return value
    }
}
