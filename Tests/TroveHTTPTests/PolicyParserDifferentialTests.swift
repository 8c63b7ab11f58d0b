import Foundation
import Testing
import TroveTestSupport

@testable import TroveHTTP

/// Differential fuzzing of `CachePolicy(encoded:)` (parsed in place since 533b220) against the
/// parser it replaced, copied here verbatim as `legacyPolicy(encoded:)`: both must accept
/// exactly the same strings and give equal policies.
@Suite struct PolicyParserDifferentialTests {
    /// SplitMix64: a seeded, reproducible generator.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// Values a field may be given: canonical and not, in range and not.
    static let values: [String] = [
        "", "0", "-0", "00", "01", "1", "-1", "9", "10", "!", "!!", "-", "+1", " 1", "1 ", "1.0", "0x1",
        "2147483648", "2147483649", "2147483647", "2147483648000", "2147483648001", "281474976710656",
        "-281474976710656", "281474976710657", "-281474976710657", "9999999999999999", "99999999999999999",
        "-9999999999999999", "1000000000000000", "10000000000000000", "253402300799000", "253402300800000",
        "-62167219200000", "-62167219201000", "-62167219200001", "1700000000000", "1700000000123", "é", "1é",
        "١", "\u{0}", "\u{FEFF}1", "=", "1=1", ";",
    ]

    static let keys: [String] = ["r", "t", "g", "a", "w", "e", "n", "m", "i", "x", "l", "v", "z", "R", "", "é", "rr"]

    /// One field: a key, maybe `=`, maybe a value.
    static func field(_ rng: inout Generator) -> String {
        let key = keys.randomElement(using: &rng)!
        switch Int.random(in: 0..<6, using: &rng) {
        case 0: return key
        case 1: return key + "="
        default: return key + "=" + values.randomElement(using: &rng)!
        }
    }

    /// A string close to a valid persisted form: the required fields, some optional ones in
    /// order, then random damage.
    static func nearValid(_ rng: inout Generator) -> String {
        var fields = ["v1"]
        let order = Array("rtgawenmixl")
        for (index, key) in order.enumerated() {
            let required = index < 3
            guard required || Bool.random(using: &rng) else { continue }
            switch key {
            case "n", "m", "i": fields.append(String(key))
            default:
                let value = Int.random(in: 0..<10, using: &rng) < 8 ? valid(key, &rng) : values.randomElement(using: &rng)!
                fields.append("\(key)=\(value)")
            }
        }
        var text = fields.joined(separator: ";")
        switch Int.random(in: 0..<10, using: &rng) {
        case 0: text += ";"
        case 1: text = ";" + text
        case 2: text = text.replacingOccurrences(of: ";", with: ";;")
        case 3:
            // Swap two fields.
            var parts = text.split(separator: ";", omittingEmptySubsequences: false).map(String.init)
            if parts.count > 2 {
                let i = Int.random(in: 1..<parts.count, using: &rng)
                let j = Int.random(in: 1..<parts.count, using: &rng)
                parts.swapAt(i, j)
            }
            text = parts.joined(separator: ";")
        case 4:
            // A byte-level mutation (kept valid UTF-8 by going through scalars).
            var scalars = Array(text.unicodeScalars)
            let alphabet = Array("v1;=-!0123456789rtgawenmixlé\u{0} ".unicodeScalars)
            for _ in 0..<Int.random(in: 1...3, using: &rng) where !scalars.isEmpty {
                let at = Int.random(in: 0..<scalars.count, using: &rng)
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: scalars.remove(at: at)
                case 1: scalars.insert(alphabet.randomElement(using: &rng)!, at: at)
                default: scalars[at] = alphabet.randomElement(using: &rng)!
                }
            }
            var rebuilt = String.UnicodeScalarView()
            rebuilt.append(contentsOf: scalars)
            text = String(rebuilt)
        case 5: text += ";" + field(&rng)
        default: break
        }
        return text
    }

    /// A value `encoded` could write for `key`.
    static func valid(_ key: Character, _ rng: inout Generator) -> String {
        switch key {
        case "r": String(Int64.random(in: -(1 << 48)...(1 << 48), using: &rng))
        case "t", "g": String(Int64.random(in: 0...2_147_483_648_000, using: &rng))
        case "a": Bool.random(using: &rng) ? "!" : String(Int.random(in: 0...2_147_483_648, using: &rng))
        case "w", "e": String(Int.random(in: 1...2_147_483_648, using: &rng))
        default:
            key == "x" && Bool.random(using: &rng)
                ? "!" : String(Int64.random(in: -62_167_219_200...253_402_300_799, using: &rng) * 1000)
        }
    }

    /// Random fields, random count.
    static func random(_ rng: inout Generator) -> String {
        var parts: [String] = [["v1", "v1", "v1", "v", "", "v1 ", "v2"].randomElement(using: &rng)!]
        for _ in 0..<Int.random(in: 0...8, using: &rng) { parts.append(field(&rng)) }
        return parts.joined(separator: ";")
    }

    func check(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let new = CachePolicy(encoded: text)
        let old = Self.legacyPolicy(encoded: text)
        #expect(new == old, "\(text.debugDescription)", sourceLocation: sourceLocation)
        // The same text as a Substring inside a longer string, with multi-byte neighbours.
        let padded = "é;x\(text)ü;"
        let start = padded.index(padded.startIndex, offsetBy: 3)
        let end = padded.index(start, offsetBy: text.count)
        let slice = padded[start..<end]
        #expect(slice == Substring(text))
        #expect(CachePolicy(encoded: slice) == old, "substring \(text.debugDescription)", sourceLocation: sourceLocation)
    }

    @Test func agreesOnNearValidForms() {
        var rng = Generator(state: 0x5EED_0001)
        var accepted = 0
        for _ in 0..<4_000 {
            let text = Self.nearValid(&rng)
            if Self.legacyPolicy(encoded: text) != nil { accepted += 1 }
            check(text)
        }
        // The corpus reaches both outcomes.
        #expect(accepted > 100)
    }

    @Test func agreesOnRandomFieldSequences() {
        var rng = Generator(state: 0x5EED_0002)
        for _ in 0..<4_000 { check(Self.random(&rng)) }
    }

    @Test func agreesOnRandomBytes() {
        var rng = Generator(state: 0x5EED_0003)
        let alphabet = Array("v1;=-!0rtgnx9".unicodeScalars)
        for _ in 0..<4_000 {
            var view = String.UnicodeScalarView()
            if Bool.random(using: &rng) { view.append(contentsOf: "v1;".unicodeScalars) }
            for _ in 0..<Int.random(in: 0...24, using: &rng) { view.append(alphabet.randomElement(using: &rng)!) }
            check(String(view))
        }
    }

    @Test func agreesOnRoundTripsOfRealPolicies() {
        var rng = Generator(state: 0x5EED_0004)
        for _ in 0..<1_000 {
            var directives = CacheControl()
            if Bool.random(using: &rng) { directives.maxAge = .seconds(Int.random(in: 0...2_147_483_648, using: &rng)) }
            if Bool.random(using: &rng) { directives.maxAge = .invalid }
            if Bool.random(using: &rng) {
                directives.staleWhileRevalidate = .seconds(Int.random(in: 1...2_147_483_648, using: &rng))
            }
            if Bool.random(using: &rng) { directives.staleIfError = .seconds(Int.random(in: 1...2_147_483_648, using: &rng)) }
            directives.noCache = Bool.random(using: &rng)
            directives.mustRevalidate = Bool.random(using: &rng)
            directives.isImmutable = Bool.random(using: &rng)
            let expires: ExpiresField = [
                .absent, .invalid, .at(Int64.random(in: -62_167_219_200...253_402_300_799, using: &rng) * 1000),
            ].randomElement(using: &rng)!
            let policy = CachePolicy(
                responseTime: Int64.random(in: -(1 << 48)...(1 << 48), using: &rng),
                lifetime: Int64.random(in: 0...2_147_483_648_000, using: &rng),
                initialAge: Int64.random(in: 0...2_147_483_648_000, using: &rng), directives: directives, expires: expires,
                lastModified: Bool.random(using: &rng)
                    ? Int64.random(in: -62_167_219_200...253_402_300_799, using: &rng) * 1000 : nil)
            let encoded = policy.encoded
            #expect(CachePolicy(encoded: encoded) == policy, "\(encoded)")
            check(encoded)
        }
    }

    @Test func agreesAtTheLengthLimit() {
        let base = "v1;r=0;t=0;g=0"
        for length in [510, 511, 512, 513, 514, 1024] {
            // Padded with a field that makes it invalid either way, and with a value that is
            // too long: both must refuse; the limit itself is counted in UTF-8 bytes.
            let pad = String(repeating: "0", count: max(0, length - base.utf8.count - 3))
            check(base + ";l=" + pad)
            check(base + ";" + String(repeating: "é", count: (length - base.utf8.count - 1) / 2))
        }
        check(String(repeating: "v1;", count: 200))
        check(String(repeating: ";", count: 600))
        check("")
    }

    @Test(arguments: [
        "v1;r=0;t=0;g=0", "v1;r=-0;t=0;g=0", "v1;r=0;t=0;g=0;", "v1;r=0;t=0;g=0;;", "v1;;r=0;t=0;g=0", "v1;r=0;t=0;g=00",
        "v1;r=0;t=0;g=01", "v1;r=;t=0;g=0", "v1;r;t=0;g=0", "v1;r=0;t=0;g=0;n=", "v1;r=0;t=0;g=0;n=1",
        "v1;r=0;t=0;g=0;a=!", "v1;r=0;t=0;g=0;a=!!", "v1;r=0;t=0;g=0;w=0", "v1;r=0;t=0;g=0;x=1000", "v1;r=0;t=0;g=0;x=1",
        "v1;r=0;t=0;g=0;x=!", "v1;r=0;t=0;g=0;l=!", "v1;r=0;t=0;g=0;i;i", "v1;r=0;t=0;g=0;i;n", "v1;r=0;t=0;g=0;é",
        "v1;r=0;t=0;g=0é", "v1;r=0é;t=0;g=0", "v1;r=9999999999999999;t=0;g=0", "v1;r=-9999999999999999;t=0;g=0",
        "v1;r=281474976710656;t=0;g=0", "v1;r=0;t=2147483648000;g=0", "v1;r=0;t=2147483648001;g=0", "v1\u{0};r=0;t=0;g=0",
        "v1;r=0;t=0;g=0\u{0}", "v1", "v1;", "v;r=0;t=0;g=0", "1;r=0;t=0;g=0", "v1r=0;t=0;g=0",
    ])
    func agreesOnHandPickedCases(_ text: String) {
        check(text)
    }

    // MARK: The parser before 533b220, verbatim but for its name

    static func legacyPolicy(encoded: some StringProtocol) -> CachePolicy? {
        let bytes = Array(encoded.utf8)
        guard bytes.count <= CachePolicy.maximumEncodedLength else { return nil }
        let parts = bytes.split(separator: UInt8(ascii: ";"), omittingEmptySubsequences: false)
        guard parts.count >= 4, Array(parts[0]) == Array("v1".utf8) else { return nil }

        var responseTime: Int64?
        var lifetime: Int64?
        var initialAge: Int64?
        var directives = CacheControl()
        var expires = ExpiresField.absent
        var lastModified: Int64?
        let order: [UInt8] = Array("rtgawenmixl".utf8)
        var position = -1
        let deltaLimit = Milliseconds.deltaLimit
        let secondsLimit = Int64(CacheControl.DeltaSeconds.maximum)
        let dateRange = (HTTPDate.secondsRange.lowerBound * 1000)...(HTTPDate.secondsRange.upperBound * 1000)

        for part in parts.dropFirst() {
            guard let key = part.first, let place = order.firstIndex(of: key), place > position else { return nil }
            position = place
            let flag = part.count == 1
            let value = part.dropFirst(2)
            guard flag || part[part.startIndex + 1] == UInt8(ascii: "=") else { return nil }
            switch key {
            case UInt8(ascii: "r"):
                guard !flag, let number = legacyInteger(value, in: -Milliseconds.instantLimit...Milliseconds.instantLimit)
                else { return nil }
                responseTime = number
            case UInt8(ascii: "t"):
                guard !flag, let number = legacyInteger(value, in: 0...deltaLimit) else { return nil }
                lifetime = number
            case UInt8(ascii: "g"):
                guard !flag, let number = legacyInteger(value, in: 0...deltaLimit) else { return nil }
                initialAge = number
            case UInt8(ascii: "a"):
                guard !flag else { return nil }
                if value.elementsEqual("!".utf8) {
                    directives.maxAge = .invalid
                } else {
                    guard let number = legacyInteger(value, in: 0...secondsLimit) else { return nil }
                    directives.maxAge = .seconds(Int(number))
                }
            case UInt8(ascii: "w"):
                guard !flag, let number = legacyInteger(value, in: 1...secondsLimit) else { return nil }
                directives.staleWhileRevalidate = .seconds(Int(number))
            case UInt8(ascii: "e"):
                guard !flag, let number = legacyInteger(value, in: 1...secondsLimit) else { return nil }
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
                    guard let number = legacyInteger(value, in: dateRange), number % 1000 == 0 else { return nil }
                    expires = .at(number)
                }
            default:  // "l"
                guard !flag, let number = legacyInteger(value, in: dateRange), number % 1000 == 0 else { return nil }
                lastModified = number
            }
        }
        guard let responseTime, let lifetime, let initialAge else { return nil }
        return CachePolicy(
            responseTime: responseTime, lifetime: lifetime, initialAge: initialAge, directives: directives,
            expires: expires, lastModified: lastModified)
    }

    static func legacyInteger(_ text: ArraySlice<UInt8>, in range: ClosedRange<Int64>) -> Int64? {
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
