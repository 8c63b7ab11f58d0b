// HTTPDate: the timestamps of HTTP fields (RFC 9110 §5.6.7), parsed by hand and formatted as
// IMF-fixdate. See Docs/Freshness.md.

public import Foundation

/// A timestamp as HTTP fields carry it (`Date`, `Expires`, `Last-Modified`): whole seconds of
/// UTC between the years 0000 and 9999.
///
/// RFC 9110 §5.6.7 defines one preferred form and two obsolete ones, and a recipient must accept
/// all three:
///
/// | form | example |
/// | --- | --- |
/// | IMF-fixdate | `Sun, 06 Nov 1994 08:49:37 GMT` |
/// | obsolete RFC 850 | `Sunday, 06-Nov-94 08:49:37 GMT` |
/// | obsolete asctime | `Sun Nov  6 08:49:37 1994` |
///
/// Parsing follows the grammar strictly: names of days and months are case-sensitive (the
/// grammar spells them with `%s"…"`), every field has its exact width, the day must exist in
/// its month (29 February only in leap years) and the time must lie between `00:00:00` and
/// `23:59:60` (a leap second counts as the first second of the next minute). Whitespace around
/// the whole value is ignored (it is not part of a field value, RFC 9110 §5.5). Two liberties
/// are taken, both harmless: the day name is not checked against the date (the grammar does not
/// relate them and a wrong day name says nothing about the instant), and a four-digit year may
/// be any year from 0000 to 9999. Anything else is invalid and the initializer returns nil; a
/// cache then follows the field's own rule for invalid dates (an invalid `Expires` means
/// "already expired", RFC 9111 §5.3).
///
/// The parser reads the UTF-8 bytes once and allocates nothing; no `DateFormatter` is involved.
///
/// ```swift
/// let now = Date()
/// let date = HTTPDate("Sun, 06 Nov 1994 08:49:37 GMT", now: now)   // 784111777 s
/// date?.description                                                 // the same text
/// ```
public struct HTTPDate: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// Seconds since 1970-01-01T00:00:00Z, within ``HTTPDate/secondsRange``.
    public let secondsSince1970: Int64

    /// The instants an HTTP date can name: 0000-01-01T00:00:00Z through 9999-12-31T23:59:59Z,
    /// in seconds since 1970 (the years that IMF-fixdate's four-digit year can write).
    public static let secondsRange: ClosedRange<Int64> = -62_167_219_200...253_402_300_799

    /// Makes a date from seconds since 1970, clamped into ``secondsRange``.
    public init(secondsSince1970: Int64) {
        self.secondsSince1970 = min(max(secondsSince1970, Self.secondsRange.lowerBound), Self.secondsRange.upperBound)
    }

    /// Makes the HTTP date of an instant: its whole second (rounded down, HTTP dates carry no
    /// fraction), clamped into ``secondsRange``; 1970-01-01T00:00:00Z for a NaN instant.
    public init(_ date: Date) {
        let seconds = date.timeIntervalSince1970.rounded(.down)
        guard !seconds.isNaN else {
            self.init(secondsSince1970: 0)
            return
        }
        let clamped = min(
            max(seconds, Double(Self.secondsRange.lowerBound)), Double(Self.secondsRange.upperBound))
        self.init(secondsSince1970: Int64(clamped))
    }

    /// Parses an HTTP date in any of the three forms of RFC 9110 §5.6.7; nil when the text is
    /// none of them.
    ///
    /// - Parameters:
    ///   - text: A field value such as `Sun, 06 Nov 1994 08:49:37 GMT`.
    ///   - now: The recipient's current time. Only the obsolete RFC 850 form needs it: its year
    ///     has two digits, and RFC 9110 §5.6.7 requires a year that would lie more than 50 years
    ///     in the future to be read as the most recent past year with the same last two digits.
    ///     The year chosen is the one with those digits within (now − 50 years, now + 50 years].
    ///     Pass the time the message was received.
    /// - Complexity: O(*n*) in the length of `text`, with no allocation for native strings.
    public init?(_ text: some StringProtocol, now: Date) {
        let reference = HTTPDate(now)
        let parsed: Int64? =
            text.utf8.withContiguousStorageIfAvailable { HTTPDateParser.parse($0, reference: reference) }
            ?? Array(text.utf8).withUnsafeBufferPointer { HTTPDateParser.parse($0, reference: reference) }
        guard let parsed else { return nil }
        self.init(secondsSince1970: parsed)
    }

    /// The date as a Foundation `Date`.
    public var date: Date { Date(timeIntervalSince1970: TimeInterval(secondsSince1970)) }

    /// The date in IMF-fixdate, the form HTTP senders must generate (RFC 9110 §5.6.7), for
    /// example `Sun, 06 Nov 1994 08:49:37 GMT`.
    public var description: String {
        let civil = self.civil
        var bytes: [UInt8] = []
        bytes.reserveCapacity(29)
        bytes.append(contentsOf: HTTPDateParser.shortDayNames[civil.weekday])
        bytes.append(contentsOf: ", ".utf8)
        Self.appendDigits(civil.day, count: 2, to: &bytes)
        bytes.append(UInt8(ascii: " "))
        bytes.append(contentsOf: HTTPDateParser.monthNames[civil.month - 1])
        bytes.append(UInt8(ascii: " "))
        Self.appendDigits(civil.year, count: 4, to: &bytes)
        bytes.append(UInt8(ascii: " "))
        Self.appendDigits(civil.secondOfDay / 3600, count: 2, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        Self.appendDigits(civil.secondOfDay / 60 % 60, count: 2, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        Self.appendDigits(civil.secondOfDay % 60, count: 2, to: &bytes)
        bytes.append(contentsOf: " GMT".utf8)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Orders dates by instant.
    public static func < (lhs: HTTPDate, rhs: HTTPDate) -> Bool { lhs.secondsSince1970 < rhs.secondsSince1970 }

    private static func appendDigits(_ value: Int, count: Int, to bytes: inout [UInt8]) {
        var divisor = 1
        for _ in 1..<count { divisor *= 10 }
        while divisor > 0 {
            bytes.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
            divisor /= 10
        }
    }

    /// The calendar fields of the date (proleptic Gregorian, UTC).
    fileprivate var civil: (year: Int, month: Int, day: Int, weekday: Int, secondOfDay: Int) {
        let seconds = secondsSince1970
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = Int(seconds - days * 86_400)
        // 1970-01-01 was a Thursday; index 0 of the day names is Monday.
        let weekday = Int(((days + 3) % 7 + 7) % 7)
        let dayNumber = days + CivilCalendar.daysFromYearZeroTo1970
        // Estimate the year, then correct it by at most a step or two.
        var year = dayNumber * 400 / 146_097
        while CivilCalendar.daysBefore(year: year + 1) <= dayNumber { year += 1 }
        while CivilCalendar.daysBefore(year: year) > dayNumber { year -= 1 }
        var dayOfYear = Int(dayNumber - CivilCalendar.daysBefore(year: year))
        var month = 1
        while true {
            let length = CivilCalendar.daysIn(month: month, year: year)
            if dayOfYear < length { break }
            dayOfYear -= length
            month += 1
        }
        return (Int(year), month, dayOfYear + 1, weekday, secondOfDay)
    }
}

/// Day counts of the proleptic Gregorian calendar for years 0 and later.
enum CivilCalendar {
    /// Days from 0000-01-01 to 1970-01-01.
    static let daysFromYearZeroTo1970: Int64 = 719_528

    /// Days from 0000-01-01 to the first of January of `year` (≥ 0). Year 0 is a leap year.
    static func daysBefore(year: Int64) -> Int64 {
        // Leap years in [0, year): multiples of 4, less multiples of 100, plus multiples of 400.
        365 * year + (year + 3) / 4 - (year + 99) / 100 + (year + 399) / 400
    }

    static func isLeap(_ year: Int64) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

    static func daysIn(month: Int, year: Int64) -> Int {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days before the first of `month` (1...12) in a year.
    static func daysBefore(month: Int, year: Int64) -> Int {
        let cumulative = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334]
        return cumulative[month - 1] + (month > 2 && isLeap(year) ? 1 : 0)
    }

    /// Seconds since 1970 of a validated calendar date and time of day.
    static func seconds(year: Int64, month: Int, day: Int, secondOfDay: Int) -> Int64 {
        let days = daysBefore(year: year) + Int64(daysBefore(month: month, year: year) + day - 1) - daysFromYearZeroTo1970
        return days * 86_400 + Int64(secondOfDay)
    }
}

/// The hand parser behind ``HTTPDate/init(_:now:)``: fixed positions, byte comparisons.
enum HTTPDateParser {
    static let shortDayNames: [[UInt8]] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"].map { Array($0.utf8) }
    static let longDayNames: [[UInt8]] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
        .map { Array($0.utf8) }
    static let monthNames: [[UInt8]] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        .map { Array($0.utf8) }

    private static let space = UInt8(ascii: " ")
    private static let tab = UInt8(ascii: "\t")

    /// Seconds since 1970 of the date in `raw`, or nil.
    static func parse(_ raw: UnsafeBufferPointer<UInt8>, reference: HTTPDate) -> Int64? {
        // Field values carry no leading or trailing whitespace (RFC 9110 §5.5); callers may
        // pass them untrimmed.
        var start = 0
        var end = raw.count
        while start < end, raw[start] == space || raw[start] == tab { start += 1 }
        while end > start, raw[end - 1] == space || raw[end - 1] == tab { end -= 1 }
        let text = UnsafeBufferPointer(rebasing: raw[start..<end])
        guard text.count >= 24, text.count <= 33 else { return nil }
        switch text[3] {
        case UInt8(ascii: ","): return parseIMFFixdate(text)
        case space: return parseASCTime(text)
        default: return parseRFC850(text, reference: reference)
        }
    }

    /// `Sun, 06 Nov 1994 08:49:37 GMT`
    private static func parseIMFFixdate(_ text: UnsafeBufferPointer<UInt8>) -> Int64? {
        guard text.count == 29, matches(text, at: 0, anyOf: shortDayNames) != nil,
            text[3] == UInt8(ascii: ","), text[4] == space, text[7] == space, text[11] == space, text[16] == space,
            text[25] == space, matches(text, at: 26, literal: "GMT"),
            let day = digits(text, at: 5, count: 2), let month = matches(text, at: 8, anyOf: monthNames),
            let year = digits(text, at: 12, count: 4), let time = timeOfDay(text, at: 17)
        else { return nil }
        return validated(year: Int64(year), month: month + 1, day: day, secondOfDay: time)
    }

    /// `Sunday, 06-Nov-94 08:49:37 GMT`
    private static func parseRFC850(_ text: UnsafeBufferPointer<UInt8>, reference: HTTPDate) -> Int64? {
        guard let dayName = matches(text, at: 0, anyOf: longDayNames) else { return nil }
        let base = longDayNames[dayName].count
        // ", " + "06-Nov-94 08:49:37 GMT"
        guard text.count == base + 24, text[base] == UInt8(ascii: ","), text[base + 1] == space,
            let day = digits(text, at: base + 2, count: 2), text[base + 4] == UInt8(ascii: "-"),
            let month = matches(text, at: base + 5, anyOf: monthNames), text[base + 8] == UInt8(ascii: "-"),
            let shortYear = digits(text, at: base + 9, count: 2), text[base + 11] == space,
            let time = timeOfDay(text, at: base + 12), text[base + 20] == space,
            matches(text, at: base + 21, literal: "GMT")
        else { return nil }
        // RFC 9110 §5.6.7: never more than 50 years ahead; otherwise the latest past year with
        // these two digits. The window (reference − 50, reference + 50] holds exactly one.
        let referenceYear = reference.civil.year
        var year = referenceYear - referenceYear % 100 + shortYear
        if year > referenceYear + 50 { year -= 100 }
        if year <= referenceYear - 50 { year += 100 }
        guard year >= 0, year <= 9999 else { return nil }
        return validated(year: Int64(year), month: month + 1, day: day, secondOfDay: time)
    }

    /// `Sun Nov  6 08:49:37 1994` (the day is two digits or a space and one digit)
    private static func parseASCTime(_ text: UnsafeBufferPointer<UInt8>) -> Int64? {
        guard text.count == 24, matches(text, at: 0, anyOf: shortDayNames) != nil, text[3] == space,
            let month = matches(text, at: 4, anyOf: monthNames), text[7] == space, text[10] == space,
            let time = timeOfDay(text, at: 11), text[19] == space, let year = digits(text, at: 20, count: 4)
        else { return nil }
        let day: Int
        if text[8] == space {
            guard let units = digits(text, at: 9, count: 1) else { return nil }
            day = units
        } else {
            guard let both = digits(text, at: 8, count: 2) else { return nil }
            day = both
        }
        return validated(year: Int64(year), month: month + 1, day: day, secondOfDay: time)
    }

    private static func validated(year: Int64, month: Int, day: Int, secondOfDay: Int) -> Int64? {
        guard day >= 1, day <= CivilCalendar.daysIn(month: month, year: year) else { return nil }
        let seconds = CivilCalendar.seconds(year: year, month: month, day: day, secondOfDay: secondOfDay)
        // 9999-12-31T23:59:60 is one second past the last writable instant.
        return min(seconds, HTTPDate.secondsRange.upperBound)
    }

    /// `HH:MM:SS`, 00:00:00 through 23:59:60, as seconds of the day.
    private static func timeOfDay(_ text: UnsafeBufferPointer<UInt8>, at offset: Int) -> Int? {
        guard let hour = digits(text, at: offset, count: 2), text[offset + 2] == UInt8(ascii: ":"),
            let minute = digits(text, at: offset + 3, count: 2), text[offset + 5] == UInt8(ascii: ":"),
            let second = digits(text, at: offset + 6, count: 2), hour <= 23, minute <= 59, second <= 60
        else { return nil }
        return hour * 3600 + minute * 60 + second
    }

    private static func digits(_ text: UnsafeBufferPointer<UInt8>, at offset: Int, count: Int) -> Int? {
        guard offset + count <= text.count else { return nil }
        var value = 0
        for index in offset..<offset + count {
            let byte = text[index]
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return value
    }

    /// The index of the name in `names` that `text` holds at `offset`; for the long day names the
    /// comma after the name ends it (no name is a prefix of another within one table).
    private static func matches(_ text: UnsafeBufferPointer<UInt8>, at offset: Int, anyOf names: [[UInt8]]) -> Int? {
        for (index, name) in names.enumerated() where matches(text, at: offset, bytes: name) { return index }
        return nil
    }

    private static func matches(_ text: UnsafeBufferPointer<UInt8>, at offset: Int, literal: StaticString) -> Bool {
        literal.withUTF8Buffer { matches(text, at: offset, bytes: $0) }
    }

    private static func matches(_ text: UnsafeBufferPointer<UInt8>, at offset: Int, bytes: some Collection<UInt8>) -> Bool {
        guard offset + bytes.count <= text.count else { return false }
        var index = offset
        for byte in bytes {
            guard text[index] == byte else { return false }
            index += 1
        }
        return true
    }
}
