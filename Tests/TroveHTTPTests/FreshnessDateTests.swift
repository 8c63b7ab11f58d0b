import Foundation
import Testing
import TroveHTTP
import TroveTestSupport

/// HTTP dates: RFC 9110 §5.6.7 (three forms, strict grammar) and the formatting of IMF-fixdate.
@Suite struct FreshnessDateTests {
    /// 2023-11-14T22:13:20Z, the clock of these tests.
    static let now = Date(timeIntervalSince1970: 1_700_000_000)

    static func parse(_ text: String, now: Date = FreshnessDateTests.now) -> Int64? {
        HTTPDate(text, now: now)?.secondsSince1970
    }

    @Test(
        "RFC 9110 §5.6.7: IMF-fixdate, RFC 850 and asctime name the same instant",
        arguments: [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun Nov 06 08:49:37 1994",
            "  Sun, 06 Nov 1994 08:49:37 GMT\t",  // §5.5: whitespace around a field value is not part of it
        ])
    func threeForms(text: String) {
        #expect(Self.parse(text) == 784_111_777)
    }

    @Test(
        "RFC 9110 §5.6.7: every form of every month and weekday",
        arguments: zip(
            ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"],
            ["Mon", "Thu", "Fri", "Mon", "Wed", "Sat", "Mon", "Thu", "Sun", "Tue", "Fri", "Sun"]))
    func monthsAndDays(month: String, day: String) throws {
        // The first of each month of 2024, in all three forms.
        let long = [
            "Mon": "Monday", "Tue": "Tuesday", "Wed": "Wednesday", "Thu": "Thursday", "Fri": "Friday",
            "Sat": "Saturday", "Sun": "Sunday",
        ]
        let fixdate = try #require(HTTPDate("\(day), 01 \(month) 2024 00:00:00 GMT", now: Self.now))
        #expect(fixdate.description == "\(day), 01 \(month) 2024 00:00:00 GMT")
        #expect(HTTPDate("\(long[day]!), 01-\(month)-24 00:00:00 GMT", now: Self.now) == fixdate)
        #expect(HTTPDate("\(day) \(month)  1 00:00:00 2024", now: Self.now) == fixdate)
    }

    @Test(
        "RFC 9110 §5.6.7: anything outside the grammar is invalid",
        arguments: [
            "", "0", "-1", "1700000000", "now",
            "sun, 06 Nov 1994 08:49:37 GMT",  // names are case-sensitive
            "Sun, 06 nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 gmt",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Nov 1994 08:49:37 +0000",
            "Sun, 6 Nov 1994 08:49:37 GMT",  // two-digit day
            "Sun, 06 Nov 94 08:49:37 GMT",  // four-digit year
            "Sun, 06 Nov 1994 8:49:37 GMT",
            "Sun,  06 Nov 1994 08:49:37 GMT",
            "Sun 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT extra",
            "Sun, 06 Nov 1994 08:49:37",
            "Snd, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Noe 1994 08:49:37 GMT",
            "Sun, 00 Nov 1994 08:49:37 GMT",  // no day 0
            "Sun, 31 Nov 1994 08:49:37 GMT",  // November has 30 days
            "Thu, 29 Feb 1900 00:00:00 GMT",  // 1900 is not a leap year
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 23:60:00 GMT",
            "Sun, 06 Nov 1994 23:59:61 GMT",
            "Sun, 06 Nov 1994 08:49:3a GMT",
            "Sun, 06 Nov 199４ 08:49:37 GMT",  // a non-ASCII digit
            "Sun, 06 Nov 1994 08:49:37 GMT\u{0}",
            "Sunday, 06-Nov-1994 08:49:37 GMT",  // RFC 850 has a two-digit year
            "Sunday, 06 Nov 94 08:49:37 GMT",
            "Sun, 06-Nov-94 08:49:37 GMT",  // RFC 850 spells the day out
            "Sunday,06-Nov-94 08:49:37 GMT",
            "Sun Nov 6 08:49:37 1994",  // asctime pads the day with a space
            "Sun Nov  6 08:49:37 94",
            "Sun Nov  6 08:49:37 1994 GMT",
            "Sun Nov _6 08:49:37 1994",
        ])
    func invalid(text: String) {
        #expect(Self.parse(text) == nil)
    }

    @Test("RFC 9110 §5.6.7: leap years, and the leap second 23:59:60 as the next minute's first second")
    func calendarEdges() {
        #expect(Self.parse("Tue, 29 Feb 2000 00:00:00 GMT") == 951_782_400)
        #expect(Self.parse("Thu, 29 Feb 2024 12:00:00 GMT") == 1_709_208_000)
        #expect(Self.parse("Mon, 29 Feb 2100 00:00:00 GMT") == nil)
        #expect(Self.parse("Sat, 31 Dec 2016 23:59:60 GMT") == Self.parse("Sun, 01 Jan 2017 00:00:00 GMT"))
        #expect(Self.parse("Thu, 01 Jan 1970 00:00:00 GMT") == 0)
        #expect(Self.parse("Wed, 31 Dec 1969 23:59:59 GMT") == -1)
        #expect(Self.parse("Sat, 01 Jan 0000 00:00:00 GMT") == HTTPDate.secondsRange.lowerBound)
        #expect(Self.parse("Fri, 31 Dec 9999 23:59:59 GMT") == HTTPDate.secondsRange.upperBound)
        #expect(Self.parse("Fri, 31 Dec 9999 23:59:60 GMT") == HTTPDate.secondsRange.upperBound)
    }

    @Test("The day name is not checked against the date (the grammar does not relate them)")
    func dayNameNotChecked() {
        #expect(Self.parse("Mon, 06 Nov 1994 08:49:37 GMT") == 784_111_777)
    }

    @Test(
        "RFC 9110 §5.6.7: an RFC 850 year more than 50 years ahead is the latest past year with those digits",
        arguments: [
            (2023, "94", 1994), (2023, "73", 2073), (2023, "74", 1974), (2023, "00", 2000), (2023, "23", 2023),
            (2080, "10", 2110), (2080, "31", 2131 - 100), (2080, "30", 2130), (1999, "49", 2049), (1999, "50", 1950),
        ])
    func twoDigitYears(referenceYear: Int, digits: String, year: Int) throws {
        let reference = try #require(HTTPDate("Sat, 01 Jul \(referenceYear) 00:00:00 GMT", now: Self.now))
        let parsed = try #require(HTTPDate("Monday, 01-Jan-\(digits) 00:00:00 GMT", now: reference.date))
        #expect(parsed.description.hasSuffix(" \(year) 00:00:00 GMT"))
    }

    @Test("IMF-fixdate formatting round-trips through the parser, and agrees with Foundation's calendar")
    func formatting() throws {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        var generator = SeededGenerator(seed: 9111)
        var samples: [Int64] = [
            0, -1, 1, 784_111_777, 951_782_400, HTTPDate.secondsRange.lowerBound, HTTPDate.secondsRange.upperBound,
        ]
        for _ in 0..<2_000 {
            samples.append(Int64(generator.next() % UInt64(HTTPDate.secondsRange.count)) + HTTPDate.secondsRange.lowerBound)
        }
        for seconds in samples {
            let date = HTTPDate(secondsSince1970: seconds)
            let text = date.description
            #expect(text.utf8.count == 29)
            #expect(HTTPDate(text, now: Self.now) == date, "\(text)")
            // Foundation's Gregorian calendar is Julian before October 1582: compare after 1600.
            guard seconds > -11_676_096_000 else { continue }
            let components = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second, .weekday], from: date.date)
            let expected = String(
                format: "%@, %02d %@ %04d %02d:%02d:%02d GMT",
                ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"][components.weekday! - 1], components.day!,
                ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"][components.month! - 1],
                components.year!, components.hour!, components.minute!, components.second!)
            #expect(text == expected)
        }
    }

    @Test("An instant becomes an HTTP date by its whole second, clamped to the years 0000–9999")
    func fromDate() {
        #expect(HTTPDate(Date(timeIntervalSince1970: 1.999)).secondsSince1970 == 1)
        #expect(HTTPDate(Date(timeIntervalSince1970: -0.5)).secondsSince1970 == -1)
        #expect(HTTPDate(Date(timeIntervalSince1970: 1e15)).secondsSince1970 == HTTPDate.secondsRange.upperBound)
        #expect(HTTPDate(Date.distantFuture).description == "Mon, 01 Jan 4001 00:00:00 GMT")
        #expect(HTTPDate(Date(timeIntervalSince1970: -1e15)).secondsSince1970 == HTTPDate.secondsRange.lowerBound)
        #expect(HTTPDate(secondsSince1970: .max) == HTTPDate(secondsSince1970: HTTPDate.secondsRange.upperBound))
        #expect(HTTPDate(secondsSince1970: 1) < HTTPDate(secondsSince1970: 2))
        #expect(HTTPDate(Self.now).description == "Tue, 14 Nov 2023 22:13:20 GMT")
    }
}
