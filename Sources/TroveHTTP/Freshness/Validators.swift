// Validators: ETag and Last-Modified, and which stored response a 304 identifies
// (RFC 9111 §4.3.4). See Docs/Freshness.md.

public import Foundation
import TroveCore

/// The validators of a stored response (RFC 9110 §8.8): what a conditional request sends back
/// (`If-None-Match`, `If-Modified-Since`) and what a 304 is matched against.
///
/// Both are kept verbatim (quotes and `W/` included), as the origin sent them.
public struct Validators: Hashable, Sendable {
    /// The `ETag` field value (RFC 9110 §8.8.3), for `If-None-Match`.
    public var entityTag: String?
    /// The `Last-Modified` field value (RFC 9110 §8.8.2), for `If-Modified-Since`.
    public var lastModified: String?

    /// Makes validators; both default to none.
    public init(entityTag: String? = nil, lastModified: String? = nil) {
        self.entityTag = entityTag
        self.lastModified = lastModified
    }

    /// Whether both hold the same fields, octet for octet (RFC 9110 §8.8.3): `String`'s `==`
    /// would call canonically equivalent spellings the same. The hash stays the fields' own
    /// (byte-equal texts are equal strings).
    public static func == (a: Validators, b: Validators) -> Bool {
        a.entityTag.hasSameUTF8(as: b.entityTag) && a.lastModified.hasSameUTF8(as: b.lastModified)
    }

    /// Whether there is neither an entity tag nor a modification date.
    public var isEmpty: Bool { entityTag == nil && lastModified == nil }

    /// Whether a 304 response carrying `notModified` validators identifies the stored response
    /// that has these validators (RFC 9111 §4.3.4), so that it may freshen it.
    ///
    /// - A strong entity tag in the 304 identifies only a stored response with the same strong
    ///   tag (strong comparison, RFC 9110 §8.8.3.2).
    /// - Otherwise every weak validator the 304 carries must correspond: its weak entity tag
    ///   (weak comparison) and its `Last-Modified` (the same instant, or the same text when
    ///   either does not parse).
    /// - A 304 with no validator at all identifies the stored response. §4.3.4 grants that only
    ///   when the stored response has none either; Trove grants it also when it has some,
    ///   because Trove holds one response per key and the 304 answers the conditional request
    ///   it made from exactly these validators (RFC 9110 §15.4.5 obliges the server to repeat
    ///   an `ETag` it would have sent, so only a nonconforming server omits it).
    ///
    /// - Parameters:
    ///   - notModified: The validators of the 304 response.
    ///   - now: The time the 304 was received (for reading an obsolete two-digit year).
    public func areIdentified(byNotModified notModified: Validators, now: Date) -> Bool {
        // An unreadable validator (``isReadable(_:)``) on either side of a comparison
        // identifies nothing: two different tags can read the same.
        if let tag = notModified.entityTag, !Self.isWeak(tag) {
            guard let stored = entityTag, !Self.isWeak(stored), Self.isReadable(stored), Self.isReadable(tag) else {
                return false
            }
            return stored.hasSameUTF8(as: tag)
        }
        // Validators are compared octet by octet (RFC 9110 §8.8.3), not as Swift strings, which
        // would call canonically equivalent spellings the same tag and freshen other bytes.
        if let tag = notModified.entityTag {
            guard let stored = entityTag, Self.weaklyMatch(stored, tag) else { return false }
        }
        if let date = notModified.lastModified {
            guard let stored = lastModified, Self.isReadable(stored), Self.isReadable(date) else { return false }
            if let new = HTTPDate(date, now: now), let old = HTTPDate(stored, now: now) {
                guard new == old else { return false }
            } else {
                guard stored.hasSameUTF8(as: date) else { return false }
            }
        }
        return true
    }

    /// These validators with those a 304 carries put in their place (RFC 9111 §3.2: each field
    /// of the 304 replaces the stored field of that name).
    public func updated(byNotModified notModified: Validators) -> Validators {
        Validators(
            entityTag: notModified.entityTag ?? entityTag, lastModified: notModified.lastModified ?? lastModified)
    }

    /// The validators a conditional request may send: the readable ones (``isReadable(_:)``).
    /// An unreadable tag sent back is not the tag the origin sent, so it would never match.
    public var sendable: Validators {
        Validators(
            entityTag: entityTag.flatMap { Self.isReadable($0) ? $0 : nil },
            lastModified: lastModified.flatMap { Self.isReadable($0) ? $0 : nil })
    }

    /// Whether a validator's text is what the origin sent. HTTP field values are octets, and an
    /// entity tag may hold bytes that are not UTF-8 (RFC 9110 §8.8.3: `obs-text`); the HTTP
    /// client (SwiftNIO) decodes such bytes to U+FFFD, so `"\xE9"` and `"\xE8"` arrive as the same
    /// text. A validator holding U+FFFD is therefore not compared, and not sent: a 304 can then
    /// never freshen bytes another tag named (found by an outside attack).
    public static func isReadable(_ text: String) -> Bool {
        !text.unicodeScalars.contains("\u{FFFD}")
    }

    /// Weak comparison (RFC 9110 §8.8.3.2): the tags' opaque parts, `W/` aside, are the same
    /// octets; an unreadable tag (``isReadable(_:)``) matches none.
    static func weaklyMatch(_ a: String, _ b: String) -> Bool {
        isReadable(a) && isReadable(b) && opaqueTag(a).utf8.elementsEqual(opaqueTag(b).utf8)
    }

    /// Whether `tag` starts with the weak indicator `W/`, by bytes (a combining mark after the
    /// `/` would hide it from `String.hasPrefix`).
    private static func isWeak(_ tag: String) -> Bool { tag.utf8.starts(with: "W/".utf8) }

    private static func opaqueTag(_ tag: String) -> Substring {
        guard isWeak(tag) else { return tag[...] }
        return Substring(tag.utf8.dropFirst(2))
    }
}
