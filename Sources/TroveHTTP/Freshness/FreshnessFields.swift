// Internal: the header fields freshness reads, gathered in one pass, and the millisecond
// arithmetic every rule shares.

import Foundation
import TroveCore

/// Instants and durations as whole milliseconds: the unit of the persisted form, so that what
/// the rules compute round-trips through it exactly.
enum Milliseconds {
    /// Instants are clamped to ±2^48 ms (about ±8 900 years around 1970): every HTTP date fits,
    /// sums of an instant and a few clamped durations cannot overflow, and a `Date` made from
    /// one converts back to the same millisecond.
    static let instantLimit: Int64 = 1 << 48
    /// 2^31 seconds, the bound of delta-seconds arithmetic (RFC 9111 §1.2.2).
    static let deltaLimit: Int64 = Int64(CacheControl.DeltaSeconds.maximum) * 1000

    static func instant(_ date: Date) -> Int64 {
        let value = (date.timeIntervalSince1970 * 1000).rounded()
        guard !value.isNaN else { return 0 }
        return Int64(min(max(value, -Double(instantLimit)), Double(instantLimit)))
    }

    static func clampInstant(_ value: Int64) -> Int64 { min(max(value, -instantLimit), instantLimit) }

    static func clampDelta(_ value: Int64) -> Int64 { min(max(value, 0), deltaLimit) }

    static func date(_ value: Int64) -> Date { Date(timeIntervalSince1970: Double(value) / 1000) }

    static func delta(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else { return 0 }
        guard seconds < Int64(CacheControl.DeltaSeconds.maximum) else { return deltaLimit }
        return clampDelta(seconds * 1000 + attoseconds / 1_000_000_000_000_000)
    }

    static func duration(_ value: Int64) -> Duration { .milliseconds(value) }
}

/// The result of reading a field that must occur once (RFC 9110 §5.3: a sender must not repeat
/// a singleton field).
enum SingletonField: Equatable {
    case absent
    case value(String)
    /// Several field lines that disagree (identical repeats are one value).
    case conflicting

    init(_ lines: [String]) {
        guard let first = lines.first else {
            self = .absent
            return
        }
        let value = HeaderFields.trimmed(first)
        for line in lines.dropFirst() where !HeaderFields.trimmed(line).hasSameUTF8(as: value) {
            self = .conflicting
            return
        }
        self = .value(value)
    }
}

/// `Expires` as a cache keeps it (RFC 9111 §5.3).
enum ExpiresField: Hashable {
    case absent
    case at(Int64)
    /// Invalid (including `0`) or given twice with different values: already expired.
    case invalid
}

/// The response fields freshness depends on, read from any sequence of name/value pairs.
struct HeaderFields {
    var cacheControl: [String] = []
    var expires: [String] = []
    var date: [String] = []
    var age: [String] = []
    var lastModified: [String] = []
    var entityTag: [String] = []
    var vary: [String] = []

    init(_ headers: some Sequence<(name: String, value: String)>) {
        for (name, value) in headers {
            // Field names are case-insensitive (RFC 9110 §5.1).
            switch name.utf8.count {
            case 13 where HTTPToken.equalsIgnoringCase(name.utf8, "cache-control"): cacheControl.append(value)
            case 13 where HTTPToken.equalsIgnoringCase(name.utf8, "last-modified"): lastModified.append(value)
            case 7 where HTTPToken.equalsIgnoringCase(name.utf8, "expires"): expires.append(value)
            case 4 where HTTPToken.equalsIgnoringCase(name.utf8, "date"): date.append(value)
            case 4 where HTTPToken.equalsIgnoringCase(name.utf8, "etag"): entityTag.append(value)
            case 4 where HTTPToken.equalsIgnoringCase(name.utf8, "vary"): vary.append(value)
            case 3 where HTTPToken.equalsIgnoringCase(name.utf8, "age"): age.append(value)
            default: break
            }
        }
    }

    /// The directives of every `Cache-Control` line; nil when there is none.
    var parsedCacheControl: CacheControl? { cacheControl.isEmpty ? nil : CacheControl(fieldValues: cacheControl) }

    /// `Expires` (RFC 9111 §5.3): an invalid date, `0` included, is a time in the past; so are
    /// several lines that disagree (§4.2.1: "considered stale").
    func parsedExpires(now: Date) -> ExpiresField {
        switch SingletonField(expires) {
        case .absent: .absent
        case .conflicting: .invalid
        case .value(let text):
            if let date = HTTPDate(text, now: now) { .at(date.secondsSince1970 * 1000) } else { .invalid }
        }
    }

    /// `Date` in milliseconds; nil when absent, invalid or repeated with different values
    /// (the receipt time then stands in for it, RFC 9110 §6.6.1).
    func parsedDate(now: Date) -> Int64? { Self.singleDate(date, now: now) }

    /// `Last-Modified` in milliseconds; nil when absent, invalid or repeated with different
    /// values (no heuristic freshness then).
    func parsedLastModified(now: Date) -> Int64? { Self.singleDate(lastModified, now: now) }

    /// `Age` in milliseconds (RFC 9111 §5.1): 0 when absent; 2^31 s when larger, invalid or
    /// repeated with different values (§1.2.2's value for an overflow, and §4.2.1's advice to
    /// treat invalid freshness information as stale).
    var parsedAge: Int64 {
        switch SingletonField(age) {
        case .absent: return 0
        case .conflicting: return Milliseconds.deltaLimit
        case .value(let text):
            guard !text.isEmpty else { return Milliseconds.deltaLimit }
            var seconds: Int64 = 0
            for byte in text.utf8 {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return Milliseconds.deltaLimit }
                seconds = min(seconds * 10 + Int64(byte - UInt8(ascii: "0")), Int64(CacheControl.DeltaSeconds.maximum))
            }
            return seconds * 1000
        }
    }

    /// Whether `Vary` lists `*` (RFC 9111 §4.1: such a response never matches a request).
    var varyListsAny: Bool {
        vary.contains { line in line.split(separator: ",").contains { trimmed($0) == "*" } }
    }

    /// The `ETag` and `Last-Modified` values, verbatim but trimmed; a field repeated with
    /// different values gives none.
    var validators: Validators {
        func single(_ lines: [String]) -> String? {
            if case .value(let value) = SingletonField(lines), !value.isEmpty { return value }
            return nil
        }
        return Validators(entityTag: single(entityTag), lastModified: single(lastModified))
    }

    private static func singleDate(_ lines: [String], now: Date) -> Int64? {
        guard case .value(let text) = SingletonField(lines), let date = HTTPDate(text, now: now) else { return nil }
        return date.secondsSince1970 * 1000
    }

    /// The value without leading and trailing spaces and tabs (RFC 9110 §5.5).
    static func trimmed(_ value: some StringProtocol) -> String {
        let bytes = Array(value.utf8)
        var start = 0
        var end = bytes.count
        while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
        while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }

    private func trimmed(_ value: some StringProtocol) -> String { Self.trimmed(value) }
}
