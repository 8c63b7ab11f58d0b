/// Sends each request to the fetcher of its URL's scheme: `http` and `https` to one (usually
/// an ``HTTPOrigin``), `file` to another (usually a ``FileOrigin``).
///
/// A scheme without a fetcher — any other scheme, or `file` when no file fetcher is given — is
/// ``OriginError/Code/invalidURL``. Leave `file` out wherever URLs come from untrusted clients:
/// it would let them read local files.
///
/// ```swift
/// let http = HTTPOrigin()
/// let origin = OriginRouter(http: http, file: FileOrigin(root: "/srv/originals"))
/// ```
public struct OriginRouter: OriginFetching {
    /// The fetcher of `http` and `https` URLs, if any.
    public var http: (any OriginFetching)?
    /// The fetcher of `file` URLs, if any.
    public var file: (any OriginFetching)?

    /// Makes a router.
    ///
    /// - Parameters:
    ///   - http: The fetcher of `http` and `https` URLs.
    ///   - file: The fetcher of `file` URLs; none by default.
    public init(http: (any OriginFetching)?, file: (any OriginFetching)? = nil) {
        self.http = http
        self.file = file
    }

    /// Fetches `request` with the fetcher of its scheme.
    public func fetch(_ request: OriginRequest) async throws(OriginError) -> OriginResponse {
        let scheme = Self.scheme(of: request.url)
        let fetcher: (any OriginFetching)?
        switch scheme {
        case "http", "https": fetcher = http
        case "file": fetcher = file
        default: fetcher = nil
        }
        guard let fetcher else {
            throw OriginError(
                code: .invalidURL,
                message: scheme.map { "no fetcher handles \($0) URLs such as \(request.url)" }
                    ?? "\(request.url) is not an absolute URL",
                url: request.url)
        }
        return try await fetcher.fetch(request)
    }

    /// The lowercased scheme of `url` (RFC 3986 §3.1), or nil when it has none.
    static func scheme(of url: String) -> String? {
        guard let colon = url.firstIndex(of: ":") else { return nil }
        let scheme = url[..<colon]
        guard let first = scheme.first, first.isASCII, first.isLetter,
            scheme.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+-.".contains($0)) })
        else { return nil }
        return scheme.lowercased()
    }
}
