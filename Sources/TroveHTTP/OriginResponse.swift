public import Foundation
public import TroveCore

/// A complete answer from an origin: a `200 OK` with its whole body, or a `304 Not Modified`.
///
/// The two URLs differ after redirects: store the result under ``requestedURL`` (the key the
/// caller asked for) and keep ``finalURL`` for diagnostics. ``requestTime`` and
/// ``responseTime`` are the clock readings RFC 9111 §4.2.3 needs to compute the response's age
/// (pass them to ``ResponseFreshness``).
public struct OriginResponse: Sendable {
    /// 200 or 304.
    public var status: Int
    /// The response's header fields, as received (for `file:` URLs: the synthesized `ETag`,
    /// `Last-Modified`, `Content-Length` and `Content-Type`).
    public var headers: OriginHeaders
    /// The whole body of a 200; empty for a 304.
    public var body: Data
    /// The URL the request asked for.
    public var requestedURL: String
    /// The URL that answered, after following redirects (the requested one when there were none).
    public var finalURL: String
    /// How many redirects were followed to reach ``finalURL``.
    public var redirectCount: Int
    /// The body's format recognised from its first bytes; nil for a 304, or for a body that is no
    /// JPEG, PNG or WebP (possible only when the request did not require an image).
    public var format: ImageFormat?
    /// When the request that produced this response was sent (after any redirects and retry:
    /// the last one), RFC 9111's `request_time`.
    public var requestTime: Date
    /// When the response head arrived, RFC 9111's `response_time`.
    public var responseTime: Date
    /// The body bytes received (``body``'s count for a 200, 0 for a 304).
    public var bytesReceived: Int

    /// Makes a response (fetchers make them; tests and other ``OriginFetching`` types may too).
    public init(
        status: Int, headers: OriginHeaders, body: Data = Data(), requestedURL: String, finalURL: String? = nil,
        redirectCount: Int = 0, format: ImageFormat? = nil, requestTime: Date, responseTime: Date
    ) {
        self.status = status
        self.headers = headers
        self.body = body
        self.requestedURL = requestedURL
        self.finalURL = finalURL ?? requestedURL
        self.redirectCount = redirectCount
        self.format = format
        self.requestTime = requestTime
        self.responseTime = responseTime
        bytesReceived = body.count
    }

    /// Whether this is a `304 Not Modified`: the stored body is still current.
    public var isNotModified: Bool { status == 304 }

    /// The response's `ETag` and `Last-Modified`, verbatim, to store for the next revalidation.
    public var validators: Validators {
        Validators(entityTag: headers["ETag"], lastModified: headers["Last-Modified"])
    }
}
