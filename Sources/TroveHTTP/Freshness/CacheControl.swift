// CacheControl: the response directives of RFC 9111 §5.2.2 (and RFC 5861, RFC 8246) that a
// private cache acts on. See Docs/Freshness.md.

/// The `Cache-Control` directives of a response, as a private cache reads them.
///
/// Parsing follows RFC 9111 §5.2: the field is a comma-separated list (`#cache-directive`),
/// possibly spread over several field lines, which are read as one list (RFC 9110 §5.3); each
/// directive is `token [ "=" ( token / quoted-string ) ]`; names are case-insensitive; an
/// argument may be a token or a quoted string whatever the directive (`max-age="60"` is read as
/// `max-age=60`, as §5.2 asks recipients to do). Unknown directives are ignored (§5.2.3).
///
/// When in doubt, the parser restricts, never extends:
/// - A delta-seconds argument (RFC 9111 §1.2.2) must be one or more digits; anything else
///   (`-1`, `1.5`, `60s`, empty, missing) makes the directive ``DeltaSeconds/invalid``. An
///   invalid `max-age` makes the response stale (§4.2.1 encourages that); an invalid
///   `stale-while-revalidate` or `stale-if-error` grants no window.
/// - A value larger than 2^31 is taken as 2^31 (§1.2.2).
/// - A directive given twice with different arguments is ``DeltaSeconds/invalid`` (§4.2.1:
///   "either the first occurrence should be used or the response should be considered stale";
///   Trove takes the second, stricter choice). The same argument twice is no conflict.
/// - A malformed list member keeps the directive its leading token names when that directive
///   takes no argument (`no-store garbage` still forbids storing), and makes a delta-seconds
///   directive invalid (`max-age=60 garbage`).
/// - Whitespace around `=` is accepted (`max-age = 60`), a liberty the grammar does not grant
///   but whose meaning is unambiguous.
///
/// ```swift
/// let directives = CacheControl(fieldValues: ["max-age=600, stale-while-revalidate=30", "Must-Revalidate"])
/// directives.maxAge                 // .seconds(600)
/// directives.mustRevalidate         // true
/// ```
public struct CacheControl: Hashable, Sendable {
    /// The argument of a directive whose value is delta-seconds (RFC 9111 §1.2.2).
    public enum DeltaSeconds: Hashable, Sendable {
        /// A valid number of seconds, 0 through ``maximum``.
        case seconds(Int)
        /// Not one or more digits, absent where required, or given twice with different values.
        case invalid

        /// 2^31: every larger value is taken as this one (RFC 9111 §1.2.2).
        public static let maximum = 2_147_483_648

        /// The number of seconds, clamped to 0...``maximum``; nil when invalid.
        public var seconds: Int? {
            if case .seconds(let value) = self { return min(max(value, 0), Self.maximum) }
            return nil
        }
    }

    /// `max-age` (RFC 9111 §5.2.2.1): the response is fresh for this many seconds after it was
    /// generated. It takes precedence over `Expires` (§5.3). nil when absent.
    public var maxAge: DeltaSeconds?
    /// `s-maxage` (§5.2.2.10): parsed, and ignored: it applies to shared caches only.
    public var sharedMaxAge: DeltaSeconds?
    /// `stale-while-revalidate` (RFC 5861 §3): for this many seconds after it goes stale, the
    /// response may be served while a revalidation runs in the background. nil when absent.
    public var staleWhileRevalidate: DeltaSeconds?
    /// `stale-if-error` (RFC 5861 §4): for this many seconds after it goes stale, the response
    /// may be served when revalidating it fails. nil when absent.
    public var staleIfError: DeltaSeconds?
    /// `no-cache` (§5.2.2.4): the response may be stored but must be validated before every
    /// use. A qualified form (`no-cache="Set-Cookie"`) counts as unqualified here, which a cache
    /// may do (§5.2.2.4): Trove keeps no partial responses.
    public var noCache = false
    /// `no-store` (§5.2.2.5): the response must not be stored at all.
    public var noStore = false
    /// `must-revalidate` (§5.2.2.2): once stale, the response must not be used without
    /// successful validation, not even when the origin cannot be reached.
    public var mustRevalidate = false
    /// `proxy-revalidate` (§5.2.2.8): parsed, and ignored: it applies to shared caches only.
    public var proxyRevalidate = false
    /// `private` (§5.2.2.7), qualified or not: a private cache may store the response.
    public var isPrivate = false
    /// `public` (§5.2.2.9): allows storing responses that would otherwise not be stored; every
    /// response Trove stores is storable without it.
    public var isPublic = false
    /// `immutable` (RFC 8246): the response will not change while it is fresh. Trove never
    /// revalidates a fresh response, so this changes nothing in its decisions; it does not
    /// extend freshness.
    public var isImmutable = false

    /// Makes an empty set of directives.
    public init() {}

    /// Parses one `Cache-Control` field value.
    ///
    /// - Complexity: O(*n*) in the length of the value.
    public init(_ fieldValue: some StringProtocol) {
        self.init(fieldValues: CollectionOfOne(fieldValue))
    }

    /// Parses every `Cache-Control` field line of a message as one list (RFC 9110 §5.3).
    ///
    /// - Complexity: O(*n*) in the total length of the values.
    public init(fieldValues: some Sequence<some StringProtocol>) {
        for value in fieldValues {
            let parsedContiguously: Void? = value.utf8.withContiguousStorageIfAvailable { parse($0) }
            if parsedContiguously == nil { Array(value.utf8).withUnsafeBufferPointer { parse($0) } }
        }
    }

    // MARK: Parsing

    private enum Argument {
        case none
        case valid(ArraySlice<UInt8>)
        case malformed
    }

    private mutating func parse(_ text: UnsafeBufferPointer<UInt8>) {
        var index = 0
        while true {
            // Empty list members and whitespace between members are allowed (RFC 9110 §5.6.1).
            while index < text.count, text[index] == comma || isWhitespace(text[index]) { index += 1 }
            guard index < text.count else { return }
            let nameStart = index
            while index < text.count, HTTPToken.isTokenCharacter(text[index]) { index += 1 }
            let name = UnsafeBufferPointer(rebasing: text[nameStart..<index])
            guard !name.isEmpty else {
                // Not a directive at all: skip the member.
                skipMember(text, from: &index)
                continue
            }
            var argument = Argument.none
            skipWhitespace(text, from: &index)
            if index < text.count, text[index] == UInt8(ascii: "=") {
                index += 1
                skipWhitespace(text, from: &index)
                argument = parseArgument(text, from: &index)
                skipWhitespace(text, from: &index)
            }
            if index < text.count, text[index] != comma {
                argument = .malformed
                skipMember(text, from: &index)
            }
            apply(name: name, argument: argument)
        }
    }

    private func parseArgument(_ text: UnsafeBufferPointer<UInt8>, from index: inout Int) -> Argument {
        guard index < text.count else { return .malformed }
        if text[index] == quote {
            // quoted-string with quoted-pairs (RFC 9110 §5.6.4).
            var value: [UInt8] = []
            index += 1
            while index < text.count {
                let byte = text[index]
                if byte == quote {
                    index += 1
                    return .valid(value[...])
                }
                if byte == UInt8(ascii: "\\") {
                    index += 1
                    guard index < text.count else { break }
                }
                value.append(text[index])
                index += 1
            }
            return .malformed  // unterminated
        }
        let start = index
        while index < text.count, HTTPToken.isTokenCharacter(text[index]) { index += 1 }
        guard index > start else { return .malformed }
        return .valid(ArraySlice(text[start..<index]))
    }

    /// Moves past the rest of a list member, to the next comma outside a quoted string.
    private func skipMember(_ text: UnsafeBufferPointer<UInt8>, from index: inout Int) {
        var quoted = false
        while index < text.count {
            let byte = text[index]
            if quoted {
                if byte == UInt8(ascii: "\\") {
                    index += 1
                } else if byte == quote {
                    quoted = false
                }
            } else if byte == quote {
                quoted = true
            } else if byte == comma {
                return
            }
            index += 1
        }
    }

    private func skipWhitespace(_ text: UnsafeBufferPointer<UInt8>, from index: inout Int) {
        while index < text.count, isWhitespace(text[index]) { index += 1 }
    }

    private mutating func apply(name: UnsafeBufferPointer<UInt8>, argument: Argument) {
        if HTTPToken.equalsIgnoringCase(name, "max-age") {
            Self.merge(Self.deltaSeconds(argument), into: &maxAge)
        } else if HTTPToken.equalsIgnoringCase(name, "s-maxage") {
            Self.merge(Self.deltaSeconds(argument), into: &sharedMaxAge)
        } else if HTTPToken.equalsIgnoringCase(name, "stale-while-revalidate") {
            Self.merge(Self.deltaSeconds(argument), into: &staleWhileRevalidate)
        } else if HTTPToken.equalsIgnoringCase(name, "stale-if-error") {
            Self.merge(Self.deltaSeconds(argument), into: &staleIfError)
        } else if HTTPToken.equalsIgnoringCase(name, "no-cache") {
            noCache = true
        } else if HTTPToken.equalsIgnoringCase(name, "no-store") {
            noStore = true
        } else if HTTPToken.equalsIgnoringCase(name, "must-revalidate") {
            mustRevalidate = true
        } else if HTTPToken.equalsIgnoringCase(name, "proxy-revalidate") {
            proxyRevalidate = true
        } else if HTTPToken.equalsIgnoringCase(name, "private") {
            isPrivate = true
        } else if HTTPToken.equalsIgnoringCase(name, "public") {
            isPublic = true
        } else if HTTPToken.equalsIgnoringCase(name, "immutable") {
            isImmutable = true
        }
    }

    /// delta-seconds = 1*DIGIT, clamped to 2^31 (RFC 9111 §1.2.2).
    private static func deltaSeconds(_ argument: Argument) -> DeltaSeconds {
        guard case .valid(let bytes) = argument, !bytes.isEmpty else { return .invalid }
        var value = 0
        for byte in bytes {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return .invalid }
            value = min(value * 10 + Int(byte - UInt8(ascii: "0")), DeltaSeconds.maximum)
        }
        return .seconds(value)
    }

    /// A second occurrence that disagrees with the first makes the directive invalid (§4.2.1).
    private static func merge(_ value: DeltaSeconds, into slot: inout DeltaSeconds?) {
        if let existing = slot, existing != value {
            slot = .invalid
        } else {
            slot = value
        }
    }
}

private let comma = UInt8(ascii: ",")
private let quote = UInt8(ascii: "\"")

private func isWhitespace(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }

/// Token rules of RFC 9110 §5.6.2, shared by the freshness parsers.
enum HTTPToken {
    /// tchar: `!#$%&'*+-.^_`|~`, digits and letters.
    static func isTokenCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
            UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."),
            UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            true
        default:
            false
        }
    }

    /// Whether `bytes` spell `lowercaseName` in any ASCII case.
    static func equalsIgnoringCase(_ bytes: some Collection<UInt8>, _ lowercaseName: StaticString) -> Bool {
        lowercaseName.withUTF8Buffer { expected in
            guard bytes.count == expected.count else { return false }
            for (byte, wanted) in zip(bytes, expected) {
                let lowered = byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
                guard lowered == wanted else { return false }
            }
            return true
        }
    }
}
