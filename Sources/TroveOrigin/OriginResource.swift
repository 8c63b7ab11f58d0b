/// What an ``OriginServer`` answers for one path: a status, header fields, a body, and how to
/// put them on the wire — correctly, or in one of the ways real origins misbehave.
///
/// The server adds the framing itself: `Content-Length` (or chunked encoding) from the body and
/// the ``Behaviour``, and a `Date` field unless the resource names one. Validators
/// (`ETag`, `Last-Modified`) drive conditional requests: when a GET or HEAD carries an
/// `If-None-Match` that matches the ETag, or (without `If-None-Match`) an `If-Modified-Since`
/// no earlier than `Last-Modified`, a resource with a 2xx status is answered with
/// `304 Not Modified` (RFC 9110 §13.1.1–13.1.3, §13.2.2).
///
/// ```swift
/// let origin = try await OriginServer.start()
/// origin.set("/cat.jpg", OriginResource(body: jpegBytes, etag: "\"v1\"", cacheControl: "max-age=60"))
/// origin.set("/slow.jpg", OriginResource(body: jpegBytes, behaviour: .stall(afterBytes: 1024)))
/// origin.set("/old.jpg", .redirect(to: "/cat.jpg", status: 301))
/// ```
///
/// Changing a resource is setting it again; requests already being answered keep the value they
/// started with.
public struct OriginResource: Sendable {
    /// How the server puts a response on the wire.
    public enum Behaviour: Sendable, Hashable {
        /// A correct response: `Content-Length` and the whole body; the connection stays open
        /// (keep-alive) unless the request asked to close it.
        case normal
        /// A correct response with `Transfer-Encoding: chunked` and no `Content-Length`, written
        /// in chunks of `chunkSize` bytes.
        case chunked(chunkSize: Int)
        /// Declares the whole length, sends the head and the first `afterBytes` bytes of the body,
        /// then sends nothing more and keeps the connection open until the client closes it.
        case stall(afterBytes: Int)
        /// Declares the whole length, sends the first `afterBytes` bytes, then closes the connection.
        case truncate(afterBytes: Int)
        /// Declares `Content-Length: declared` and sends the whole body, then closes the
        /// connection unless the declared length was the truth. More than the body: the client
        /// sees the connection close early. Fewer: the bytes past the declared length are garbage
        /// where the next response should start.
        case declareLength(Int)
        /// Closes the connection as soon as the request has arrived, without a response.
        case closeWithoutResponse
        /// An HTTP/1.0-style response: no `Content-Length`, no chunked encoding, the body ends
        /// where the server closes the connection — after `afterBytes` bytes (the whole body
        /// when it has no more), so the client cannot tell a cut from the end.
        case closeDelimited(afterBytes: Int)
    }

    /// The status code (200 by default).
    public var status: Int
    /// Header fields in order; a name may repeat. `Content-Length` and `Transfer-Encoding` are
    /// ignored here: the server derives them from the body and the behaviour.
    public var headers: [(name: String, value: String)]
    /// The body, sent ``repetitions`` times in a row.
    public var body: [UInt8]
    /// How many copies of ``body`` make the response body (1 by default). A large body costs
    /// the server only one copy: `OriginResource(body: oneMiB, repetitions: 1024)` is 1 GiB on
    /// the wire.
    public var repetitions: Int
    /// How the response is put on the wire.
    public var behaviour: Behaviour
    /// How long the server waits after the request before it sends anything (zero by default).
    public var headDelay: Duration

    /// Makes a resource.
    ///
    /// - Parameters:
    ///   - body: The body bytes.
    ///   - status: The status code; 200 by default.
    ///   - etag: An `ETag` field value, quotes included (`"\"v1\""`, `"W/\"v1\""`).
    ///   - lastModified: A `Last-Modified` field value, an HTTP date.
    ///   - cacheControl: A `Cache-Control` field value.
    ///   - contentType: A `Content-Type` field value.
    ///   - headers: More header fields, sent after the named ones.
    ///   - repetitions: How many copies of `body` make the response body.
    ///   - behaviour: How the response is put on the wire; `.normal` by default.
    ///   - headDelay: How long to wait before answering.
    public init(
        body: some Sequence<UInt8> = [], status: Int = 200, etag: String? = nil, lastModified: String? = nil,
        cacheControl: String? = nil, contentType: String? = nil, headers: [(name: String, value: String)] = [],
        repetitions: Int = 1, behaviour: Behaviour = .normal, headDelay: Duration = .zero
    ) {
        precondition(repetitions >= 0, "repetitions must not be negative")
        self.status = status
        self.body = Array(body)
        self.repetitions = repetitions
        self.behaviour = behaviour
        self.headDelay = headDelay
        var fields: [(name: String, value: String)] = []
        if let etag { fields.append(("ETag", etag)) }
        if let lastModified { fields.append(("Last-Modified", lastModified)) }
        if let cacheControl { fields.append(("Cache-Control", cacheControl)) }
        if let contentType { fields.append(("Content-Type", contentType)) }
        self.headers = fields + headers
    }

    /// A redirect to `location` (a path on this server or an absolute URL).
    ///
    /// - Parameters:
    ///   - location: The `Location` field value.
    ///   - status: 301, 302, 303, 307 or 308; 302 by default.
    public static func redirect(to location: String, status: Int = 302) -> OriginResource {
        OriginResource(
            body: Array("redirecting to \(location)\n".utf8), status: status, contentType: "text/plain",
            headers: [("Location", location)])
    }

    /// An error response: `status` with a short text body.
    public static func failure(status: Int, message: String = "failure requested by the test") -> OriginResource {
        OriginResource(body: Array("\(message)\n".utf8), status: status, contentType: "text/plain")
    }

    /// The value of the first header field named `name` (case-insensitive), if any.
    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    /// The number of body bytes a correct response carries: `body.count × repetitions`.
    public var contentLength: Int { body.count * repetitions }
}
