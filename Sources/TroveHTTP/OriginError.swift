import TroveCore

/// An error of an origin fetch (``OriginFetching``).
///
/// `code` says what kind of failure it is; `message` names the URL, says what happened and what
/// to do; `status` is the HTTP status for ``Code/status``; `underlying` keeps the transport's
/// or the file system's error. Nothing was returned: a fetch that throws never hands out a
/// partial body.
///
/// ```swift
/// do {
///     let response = try await origin.fetch(OriginRequest(url: url))
/// } catch {
///     switch error.code {
///     case .status where error.status == 404: removeFromCache(url)
///     case .cancelled: break
///     default: log(error.message)
///     }
/// }
/// ```
public struct OriginError: Error, Sendable, CustomStringConvertible {
    /// The kind of an origin error. Extensible: new codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// The origin answered with a status other than 200 or 304 (``OriginError/status``
        /// holds it); for `file:` URLs, 404 (no such file) or 403 (not allowed). Never retried.
        public static let status = Code(name: "status")
        /// The request did not complete within ``OriginLimits/requestTimeout`` (the whole
        /// request: queueing, connecting, redirects, the body), or connecting took longer than
        /// ``OriginLimits/connectTimeout``.
        public static let timeout = Code(name: "timeout")
        /// The body is larger than the limit: declared so (refused before any of it was read) or
        /// found so while streaming (refused the moment it passed the limit).
        public static let tooLarge = Code(name: "tooLarge")
        /// The body ended before its declared length, the connection failed mid-body, or (when an
        /// image is required) the image ends before the end its format marks.
        public static let truncated = Code(name: "truncated")
        /// The body was longer than its declared length, or a file changed while it was read.
        public static let lengthMismatch = Code(name: "lengthMismatch")
        /// The body is not JPEG, PNG or WebP, and the request required an image.
        public static let notAnImage = Code(name: "notAnImage")
        /// The calling task was cancelled; the request was cancelled with it.
        public static let cancelled = Code(name: "cancelled")
        /// The connection failed before a response arrived (refused, reset, closed, TLS), after
        /// the retry; ``OriginError/underlying`` holds the transport's error.
        public static let transport = Code(name: "transport")
        /// More redirects than ``OriginLimits/maximumRedirects`` (a redirect loop included).
        public static let tooManyRedirects = Code(name: "tooManyRedirects")
        /// A redirect without a usable `Location`, or to a scheme other than `http` and `https`.
        public static let invalidRedirect = Code(name: "invalidRedirect")
        /// The URL cannot be fetched: malformed, or a scheme no fetcher here handles.
        public static let invalidURL = Code(name: "invalidURL")
        /// A local file cannot be read: not a regular file, or an I/O error.
        public static let io = Code(name: "io")
        public var description: String { name }
    }

    /// What kind of failure this is.
    public var code: Code
    /// What failed and what to do.
    public var message: String
    /// The URL that was requested.
    public var url: String
    /// The HTTP status, for ``Code/status``.
    public var status: Int?
    /// How many times the request was sent: 2 when a connection failure was retried.
    public var attempts: Int
    /// The lower-level error, if any.
    public var underlying: (any Error & Sendable)?

    /// Makes an error.
    public init(
        code: Code, message: String, url: String, status: Int? = nil, attempts: Int = 1,
        underlying: (any Error & Sendable)? = nil
    ) {
        self.code = code
        self.message = message
        self.url = url
        self.status = status
        self.attempts = attempts
        self.underlying = underlying
    }

    public var description: String { message }
}

extension OriginError {
    static func cancelled(_ url: String) -> OriginError {
        OriginError(code: .cancelled, message: "fetching \(url) was cancelled", url: url)
    }

    static func incompleteImage(_ url: String, format: ImageFormat, received: Int) -> OriginError {
        OriginError(
            code: .truncated,
            message: "the \(format.rawValue.uppercased()) image from \(url) ends before its format says it does "
                + "(\(received) bytes received): it was cut, or its length was understated; nothing was kept, try again",
            url: url)
    }

    static func notAnImage(_ url: String) -> OriginError {
        OriginError(
            code: .notAnImage,
            message: "\(url) is not a JPEG, PNG or WebP image (its first bytes say otherwise); check the URL",
            url: url)
    }
}
