/// What to fetch from an origin, and how.
///
/// ```swift
/// // A first fetch:
/// let request = OriginRequest(url: "https://images.example.com/1.jpg")
/// // A revalidation, with the validators stored with the entry:
/// let revalidation = OriginRequest(
///     url: "https://images.example.com/1.jpg",
///     validators: Validators(entityTag: "\"abc\"", lastModified: "Wed, 21 Oct 2015 07:28:00 GMT"))
/// ```
public struct OriginRequest: Sendable {
    /// The URL: `http`, `https` or `file`.
    public var url: String
    /// The stored response's validators. An entity tag is sent as `If-None-Match`, a
    /// modification date as `If-Modified-Since`, both verbatim (RFC 9111 §4.3.1); the origin
    /// may then answer `304 Not Modified`. Empty by default: an unconditional request.
    public var validators: Validators
    /// Extra request header fields (for example `Authorization`). They replace the ones the
    /// fetcher would send itself (`Accept`, `User-Agent`, the conditional fields) when named
    /// the same. Over HTTP, `Authorization`, `Cookie` and `Proxy-Authorization` are not sent
    /// on after a redirect to another origin (scheme, host or port).
    public var headers: OriginHeaders
    /// Whether the body must be a whole image Trove can decode: JPEG, PNG or WebP, recognised
    /// from its first bytes by `ImageFormat.sniff`, and reaching the end its format marks (the
    /// JPEG end-of-image marker, the PNG IEND chunk, the RIFF length of WebP). When true, a 200
    /// whose body is anything else throws ``OriginError/Code/notAnImage`` — as soon as its first
    /// 12 bytes show it, without downloading the rest — and one that stops short throws
    /// ``OriginError/Code/truncated`` (HTTP framing cannot reveal every cut: a length that
    /// understates the body, a close-delimited body whose connection was cut). True by default;
    /// set it to false to fetch other content, which is then checked against its framing only.
    public var requiresImage: Bool

    /// Makes a request.
    ///
    /// - Parameters:
    ///   - url: The URL to fetch.
    ///   - validators: The stored response's validators; none by default.
    ///   - headers: Extra request header fields; none by default.
    ///   - requiresImage: Whether a body that is not JPEG, PNG or WebP is an error; true by default.
    public init(
        url: String, validators: Validators = Validators(), headers: OriginHeaders = [], requiresImage: Bool = true
    ) {
        self.url = url
        self.validators = validators
        self.headers = headers
        self.requiresImage = requiresImage
    }
}
