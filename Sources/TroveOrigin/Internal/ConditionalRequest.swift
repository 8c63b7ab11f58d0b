/// The origin's evaluation of `If-None-Match` and `If-Modified-Since` for a GET or HEAD whose
/// answer would otherwise be 2xx (RFC 9110 §13.1.1–13.1.3, order of §13.2.2).
enum ConditionalRequest {
    /// Whether the request's preconditions say the client's copy is current, so the answer is 304.
    ///
    /// - `If-None-Match` present: it alone decides (§13.2.2 step 3). `*` matches any current
    ///   representation; otherwise a listed entity tag must match the resource's ETag by weak
    ///   comparison (`W/"a"` matches `"a"`). A malformed list matches nothing.
    /// - Else `If-Modified-Since`: 304 when the resource has a `Last-Modified` and it is not
    ///   later than the date sent. A date that is not an IMF-fixdate is ignored.
    static func isNotModified(ifNoneMatch: [String], ifModifiedSince: String?, etag: String?, lastModified: String?)
        -> Bool
    {
        if !ifNoneMatch.isEmpty {
            let tags = ifNoneMatch.flatMap { entityTags(in: $0) ?? [] }
            if tags.contains("*") { return true }
            guard let etag, let current = opaqueTag(etag) else { return false }
            // Octet by octet (RFC 9110 §8.8.3), not as Swift strings (canonical equivalence).
            return tags.contains { opaqueTag($0).map { $0.utf8.elementsEqual(current.utf8) } ?? false }
        }
        guard let ifModifiedSince, let since = HTTPDate.parse(ifModifiedSince), let lastModified,
            let modified = HTTPDate.parse(lastModified)
        else { return false }
        return modified <= since
    }

    /// The entity tags in an `If-None-Match` value (`*`, or a comma-separated list of
    /// `[W/]"…"`), or nil when it is malformed. Commas inside the quotes belong to the tag.
    static func entityTags(in value: String) -> [String]? {
        let trimmed = value.trimmingWhitespace()
        if trimmed == "*" { return ["*"] }
        var tags: [String] = []
        var rest = Substring(trimmed)
        while true {
            rest = rest.drop { $0 == " " || $0 == "\t" || $0 == "," }
            if rest.isEmpty { return tags }
            var tag = ""
            if rest.hasPrefix("W/") {
                tag = "W/"
                rest = rest.dropFirst(2)
            }
            guard rest.first == "\"", let close = rest.dropFirst().firstIndex(of: "\"") else { return nil }
            tag += rest[rest.startIndex...close]
            tags.append(tag)
            rest = rest[rest.index(after: close)...]
            let separator = rest.drop { $0 == " " || $0 == "\t" }
            guard separator.isEmpty || separator.first == "," else { return nil }
            rest = separator
        }
    }

    /// The quoted part of an entity tag with any `W/` removed: what weak comparison compares.
    static func opaqueTag(_ tag: String) -> Substring? {
        var text = Substring(tag.trimmingWhitespace())
        if text.hasPrefix("W/") { text = text.dropFirst(2) }
        guard text.count >= 2, text.first == "\"", text.last == "\"" else { return nil }
        return text
    }
}

extension String {
    /// The string without leading and trailing spaces and tabs (HTTP's optional whitespace).
    func trimmingWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        return String(drop(while: isSpace).reversed().drop(while: isSpace).reversed())
    }
}
