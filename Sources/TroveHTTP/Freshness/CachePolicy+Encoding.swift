// CachePolicy+Encoding: the persisted form kept in EntryMetadata.cachePolicy. The grammar is
// specified in Docs/Freshness.md ("The persisted form"); keep the two in step.

extension CachePolicy {
    /// The longest persisted form the store accepts (`EntryMetadata.cachePolicy`), in UTF-8
    /// bytes. ``encoded`` never comes near it: every field is a bounded integer (at most about
    /// 140 bytes in all).
    public static let maximumEncodedLength = 512

    /// The policy as the store keeps it: compact ASCII, versioned, exact.
    ///
    /// `v1;r=…;t=…;g=…` and then the optional fields in a fixed order, for example
    /// `v1;r=1700000000123;t=600000;g=2000;a=600;w=30`. Every value is an integer (instants in
    /// milliseconds since 1970, durations in milliseconds or, for directives, seconds), so
    /// ``init(encoded:)`` gives back an equal policy. At most ``maximumEncodedLength`` bytes,
    /// never a NUL. The grammar is in Docs/Freshness.md.
    public var encoded: String {
        var text = "v1;r=\(responseTimeMilliseconds);t=\(lifetimeMilliseconds);g=\(initialAgeMilliseconds)"
        switch directives.maxAge {
        case .seconds(let seconds)?: text += ";a=\(seconds)"
        case .invalid?: text += ";a=!"
        case nil: break
        }
        if let seconds = directives.staleWhileRevalidate?.seconds { text += ";w=\(seconds)" }
        if let seconds = directives.staleIfError?.seconds { text += ";e=\(seconds)" }
        if directives.noCache { text += ";n" }
        if directives.mustRevalidate { text += ";m" }
        if directives.isImmutable { text += ";i" }
        switch expires {
        case .at(let instant): text += ";x=\(instant)"
        case .invalid: text += ";x=!"
        case .absent: break
        }
        if let lastModified = lastModifiedMilliseconds { text += ";l=\(lastModified)" }
        return text
    }

    /// Reads a persisted policy; nil for anything that ``encoded`` could not have written: an
    /// unknown version, a field out of order, repeated or unknown, a number out of its range or
    /// not in canonical form (no sign on zero, no leading zeros), or more than
    /// ``maximumEncodedLength`` bytes.
    ///
    /// A caller that gets nil treats the entry as stale, to be revalidated before use, and
    /// never served stale on error (``FreshnessDecision/StaleUse/mustRevalidate``).
    ///
    /// - Complexity: O(*n*) in the length of `encoded`.
    public init?(encoded: some StringProtocol) {
        // Parsed in place over the UTF-8 bytes: a hit on a stored entry decodes its policy,
        // so this allocates nothing.
        var text = String(encoded)
        guard let policy = text.withUTF8({ Self.parse($0) }) else { return nil }
        self = policy
    }

    /// The fields' fixed order: a field's place in `rtgawenmixl`, nil for an unknown key.
    private static func place(of key: UInt8) -> Int? {
        switch key {
        case UInt8(ascii: "r"): 0
        case UInt8(ascii: "t"): 1
        case UInt8(ascii: "g"): 2
        case UInt8(ascii: "a"): 3
        case UInt8(ascii: "w"): 4
        case UInt8(ascii: "e"): 5
        case UInt8(ascii: "n"): 6
        case UInt8(ascii: "m"): 7
        case UInt8(ascii: "i"): 8
        case UInt8(ascii: "x"): 9
        case UInt8(ascii: "l"): 10
        default: nil
        }
    }

    private static func parse(_ bytes: UnsafeBufferPointer<UInt8>) -> CachePolicy? {
        guard bytes.count <= Self.maximumEncodedLength else { return nil }
        let separator = UInt8(ascii: ";")
        // The version, then at least the three required fields.
        guard bytes.count >= 3, bytes[0] == UInt8(ascii: "v"), bytes[1] == UInt8(ascii: "1"), bytes[2] == separator
        else { return nil }

        var responseTime: Int64?
        var lifetime: Int64?
        var initialAge: Int64?
        var directives = CacheControl()
        var expires = ExpiresField.absent
        var lastModified: Int64?
        var position = -1
        let deltaLimit = Milliseconds.deltaLimit
        let secondsLimit = Int64(CacheControl.DeltaSeconds.maximum)
        let dateRange = (HTTPDate.secondsRange.lowerBound * 1000)...(HTTPDate.secondsRange.upperBound * 1000)

        var start = 3
        while start <= bytes.count {
            var end = start
            while end < bytes.count, bytes[end] != separator { end += 1 }
            let part = bytes[start..<end]
            start = end + 1
            guard let key = part.first, let place = place(of: key), place > position else { return nil }
            position = place
            let flag = part.count == 1
            let value = part.dropFirst(2)
            guard flag || part[part.startIndex + 1] == UInt8(ascii: "=") else { return nil }
            switch key {
            case UInt8(ascii: "r"):
                guard !flag, let number = Self.integer(value, in: -Milliseconds.instantLimit...Milliseconds.instantLimit)
                else { return nil }
                responseTime = number
            case UInt8(ascii: "t"):
                guard !flag, let number = Self.integer(value, in: 0...deltaLimit) else { return nil }
                lifetime = number
            case UInt8(ascii: "g"):
                guard !flag, let number = Self.integer(value, in: 0...deltaLimit) else { return nil }
                initialAge = number
            case UInt8(ascii: "a"):
                guard !flag else { return nil }
                if value.elementsEqual("!".utf8) {
                    directives.maxAge = .invalid
                } else {
                    guard let number = Self.integer(value, in: 0...secondsLimit) else { return nil }
                    directives.maxAge = .seconds(Int(number))
                }
            case UInt8(ascii: "w"):
                guard !flag, let number = Self.integer(value, in: 1...secondsLimit) else { return nil }
                directives.staleWhileRevalidate = .seconds(Int(number))
            case UInt8(ascii: "e"):
                guard !flag, let number = Self.integer(value, in: 1...secondsLimit) else { return nil }
                directives.staleIfError = .seconds(Int(number))
            case UInt8(ascii: "n"):
                guard flag else { return nil }
                directives.noCache = true
            case UInt8(ascii: "m"):
                guard flag else { return nil }
                directives.mustRevalidate = true
            case UInt8(ascii: "i"):
                guard flag else { return nil }
                directives.isImmutable = true
            case UInt8(ascii: "x"):
                guard !flag else { return nil }
                if value.elementsEqual("!".utf8) {
                    expires = .invalid
                } else {
                    guard let number = Self.integer(value, in: dateRange), number % 1000 == 0 else { return nil }
                    expires = .at(number)
                }
            default:  // "l"
                guard !flag, let number = Self.integer(value, in: dateRange), number % 1000 == 0 else { return nil }
                lastModified = number
            }
        }
        guard let responseTime, let lifetime, let initialAge else { return nil }
        return CachePolicy(
            responseTime: responseTime, lifetime: lifetime, initialAge: initialAge, directives: directives,
            expires: expires, lastModified: lastModified)
    }

    /// A canonical decimal integer within `range`: an optional `-` (never before 0), then `0` or
    /// a digit 1–9 followed by at most 15 more digits.
    private static func integer(_ text: Slice<UnsafeBufferPointer<UInt8>>, in range: ClosedRange<Int64>) -> Int64? {
        var digits = text[...]
        let negative = digits.first == UInt8(ascii: "-")
        if negative { digits = digits.dropFirst() }
        guard let first = digits.first, digits.count <= 16 else { return nil }
        guard first != UInt8(ascii: "0") || (digits.count == 1 && !negative) else { return nil }
        var value: Int64 = 0
        for byte in digits {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int64(byte - UInt8(ascii: "0"))
        }
        if negative { value = -value }
        return range.contains(value) ? value : nil
    }
}
