import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import TroveCore

/// Fetches originals over HTTP and HTTPS with AsyncHTTPClient, within ``OriginLimits``.
///
/// - **Conditional requests**: the request's validators go out verbatim as `If-None-Match` and
///   `If-Modified-Since`; a `304 Not Modified` comes back as a response without a body.
/// - **Limits**: a whole-request timeout (queueing, connecting, redirects and the body), a
///   connect timeout, a body size limit enforced while streaming — a declared
///   `Content-Length` over it fails before the body is read, a body that grows past it fails
///   at that moment, and nothing past it is buffered — and concurrency limits per origin and in
///   all, waited for without blocking a thread.
/// - **Redirects** (301, 302, 303, 307, 308, to `http` or `https`) are followed up to
///   ``OriginLimits/maximumRedirects``; the response names both the requested and the final
///   URL. Credentials (`Authorization`, `Cookie`, `Proxy-Authorization`) are not sent on to
///   another origin.
/// - **Retries**: a request whose connection fails before any response head arrived
///   (refused, reset, closed) is sent once more (``OriginLimits/connectionRetries``). Never
///   after a response head, never for an HTTP status.
/// - **Integrity**: only a complete 200 is returned: a body shorter than its declared length,
///   cut by a connection failure, or longer than declared throws; so does one that is not an
///   image when the request requires one (checked on its first 12 bytes). `Accept-Encoding:
///   identity` is sent, so the body is the image's own bytes.
/// - **Cancellation**: cancelling the calling task ends the fetch at once with
///   ``OriginError/Code/cancelled``; the request is cancelled and its connection closed.
///
/// ```swift
/// let origin = HTTPOrigin()
/// defer { Task { try await origin.shutdown() } }   // or shut down where the app stops
/// let response = try await origin.fetch(OriginRequest(url: "https://images.example.com/1.jpg"))
/// ```
///
/// An `HTTPOrigin` owns its `HTTPClient` (on the shared NIO event loops) and its connection
/// pool: make one per process, share it between all tasks, and call ``shutdown()`` before
/// releasing it (AsyncHTTPClient checks this in debug builds).
public final class HTTPOrigin: OriginFetching {
    /// The limits it enforces.
    public let limits: OriginLimits

    private let client: HTTPClient
    private let limiter: ConcurrencyLimiter

    /// Fields never sent on to another origin after a redirect.
    private static let credentialFields = ["Authorization", "Cookie", "Proxy-Authorization"]
    /// How much of a redirect's or an error's body is read so its connection can be reused;
    /// a longer one is dropped, which closes the connection.
    private static let discardedBodyLimit = 64 * 1024

    /// Makes an origin fetcher with its own HTTP client and connection pool.
    ///
    /// - Parameter limits: The limits; the defaults of ``OriginLimits`` when omitted.
    public init(limits: OriginLimits = OriginLimits()) {
        precondition(limits.maximumBodySize >= 0, "maximumBodySize must not be negative")
        precondition(limits.maximumRedirects >= 0 && limits.connectionRetries >= 0, "counts must not be negative")
        self.limits = limits
        limiter = ConcurrencyLimiter(
            total: limits.maximumConcurrentRequests, perKey: limits.maximumConcurrentRequestsPerHost)
        var pool = HTTPClient.Configuration.ConnectionPool()
        pool.concurrentHTTP1ConnectionsPerHostSoftLimit = limits.maximumConcurrentRequestsPerHost
        // A failed connection attempt fails the request at once, so that the one retry here
        // applies (AsyncHTTPClient would otherwise keep reconnecting until the deadline).
        pool.retryConnectionEstablishment = false
        let configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow, timeout: .init(connect: TimeAmount(limits.connectTimeout)),
            connectionPool: pool, decompression: .disabled)
        client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }

    /// Closes the connections and stops the client. Fetches after it fail with
    /// ``OriginError/Code/transport``.
    public func shutdown() async throws {
        try await client.shutdown()
    }

    /// Fetches `request.url` over HTTP or HTTPS; see ``HTTPOrigin`` for the rules.
    ///
    /// - Returns: A 200 with its whole body, or a 304 to a conditional request.
    /// - Throws: ``OriginError``.
    public func fetch(_ request: OriginRequest) async throws(OriginError) -> OriginResponse {
        guard let target = HTTPTarget(request.url) else {
            throw OriginError(
                code: .invalidURL,
                message: "\(request.url) is not an http or https URL with a host; HTTPOrigin fetches only those",
                url: request.url)
        }
        let deadline = ContinuousClock.now + limits.requestTimeout
        let result = await RequestDeadline.run(
            until: deadline, url: request.url, timeout: limits.requestTimeout, on: client.eventLoopGroup.any()
        ) {
            do throws(OriginError) {
                return .success(try await self.follow(request, from: target, deadline: deadline))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    // MARK: Redirects

    private func follow(_ request: OriginRequest, from first: HTTPTarget, deadline: ContinuousClock.Instant)
        async throws(OriginError) -> OriginResponse
    {
        var target = first
        var headers = requestHeaders(for: request)
        var redirects = 0
        while true {
            switch try await fetchOnce(request, target: target, headers: headers, deadline: deadline) {
            case .response(var response):
                response.requestedURL = request.url
                response.redirectCount = redirects
                return response
            case .redirect(let location, let status):
                redirects += 1
                guard redirects <= limits.maximumRedirects else {
                    throw OriginError(
                        code: .tooManyRedirects,
                        message: "\(request.url) redirected more than \(limits.maximumRedirects) times "
                            + "(last \(status) from \(target.url) to \(location)); a redirect loop, or raise "
                            + "OriginLimits.maximumRedirects",
                        url: request.url)
                }
                guard let next = HTTPTarget(location, relativeTo: target) else {
                    throw OriginError(
                        code: .invalidRedirect,
                        message: "\(target.url) redirected (\(status)) to \(location), which is not an http or https "
                            + "URL; the origin is misconfigured",
                        url: request.url)
                }
                if next.originKey != target.originKey {
                    for name in Self.credentialFields { headers.remove(name: name) }
                }
                target = next
            }
        }
    }

    private enum Hop {
        case response(OriginResponse)
        case redirect(location: String, status: Int)
    }

    private func requestHeaders(for request: OriginRequest) -> HTTPHeaders {
        var headers = HTTPHeaders()
        headers.add(name: "User-Agent", value: limits.userAgent)
        if request.requiresImage { headers.add(name: "Accept", value: "image/webp,image/png,image/jpeg,*/*;q=0.8") }
        headers.add(name: "Accept-Encoding", value: "identity")
        // Only validators read as the origin sent them (`Validators.isReadable`).
        let validators = request.validators.sendable
        if let entityTag = validators.entityTag { headers.add(name: "If-None-Match", value: entityTag) }
        if let lastModified = validators.lastModified {
            headers.add(name: "If-Modified-Since", value: lastModified)
        }
        for name in Set(request.headers.map { $0.name.lowercased() }) { headers.remove(name: name) }
        for (name, value) in request.headers { headers.add(name: name, value: value) }
        return headers
    }

    // MARK: One request

    /// One request to one URL: a concurrency slot, the request (sent again once after a
    /// connection failure before any response head), and the response.
    private func fetchOnce(
        _ request: OriginRequest, target: HTTPTarget, headers: HTTPHeaders, deadline: ContinuousClock.Instant
    ) async throws(OriginError) -> Hop {
        guard await limiter.acquire(target.originKey) else { throw .cancelled(request.url) }
        defer { limiter.release(target.originKey) }

        var outgoing = HTTPClientRequest(url: target.url)
        outgoing.method = .GET
        outgoing.headers = headers
        var attempts = 1
        while true {
            let requestTime = Date()
            let outcome: Result<HTTPClientResponse, any Error>
            do {
                let remaining = max(deadline - ContinuousClock.now, .zero)
                outcome = .success(try await client.execute(outgoing, deadline: .now() + TimeAmount(remaining)))
            } catch {
                outcome = .failure(error)
            }
            switch outcome {
            case .success(let response):
                return try await receive(
                    response, for: request, target: target, requestTime: requestTime, attempts: attempts)
            case .failure(let error):
                if Task.isCancelled { throw .cancelled(request.url) }
                if attempts <= limits.connectionRetries, TransportFailure.isRetryable(error),
                    ContinuousClock.now < deadline
                {
                    attempts += 1
                    continue
                }
                throw TransportFailure.originError(error, url: request.url, target: target.url, attempts: attempts)
            }
        }
    }

    private func receive(
        _ response: HTTPClientResponse, for request: OriginRequest, target: HTTPTarget, requestTime: Date, attempts: Int
    ) async throws(OriginError) -> Hop {
        let responseTime = Date()
        let status = Int(response.status.code)
        let headers = OriginHeaders(response.headers.map { (name: $0.name, value: $0.value) })
        switch status {
        case 200:
            let (body, format) = try await BodyReader(
                url: request.url, limit: limits.maximumBodySize, requiresImage: request.requiresImage
            ).read(response.body, headers: headers)
            return .response(
                OriginResponse(
                    status: 200, headers: headers, body: body, requestedURL: request.url, finalURL: target.url,
                    format: format, requestTime: requestTime, responseTime: responseTime))
        case 304 where !request.validators.isEmpty:
            await discard(response.body)
            return .response(
                OriginResponse(
                    status: 304, headers: headers, requestedURL: request.url, finalURL: target.url,
                    requestTime: requestTime, responseTime: responseTime))
        case 301, 302, 303, 307, 308:
            await discard(response.body)
            guard let location = headers["Location"] else {
                throw OriginError(
                    code: .invalidRedirect,
                    message: "\(target.url) answered \(status) without a Location; the origin is misconfigured",
                    url: request.url, status: status, attempts: attempts)
            }
            return .redirect(location: location, status: status)
        default:
            await discard(response.body)
            throw OriginError(
                code: .status,
                message: "\(target.url) answered \(status) \(response.status.reasonPhrase)"
                    + (status == 304 ? " to a request without validators" : "")
                    + "; only 200 (or 304 to a conditional request) is accepted",
                url: request.url, status: status, attempts: attempts)
        }
    }

    /// Reads and drops a short body so its connection can serve the next request; a longer one
    /// is dropped unread, which closes the connection instead.
    private func discard(_ body: HTTPClientResponse.Body) async {
        var remaining = Self.discardedBodyLimit
        do {
            for try await chunk in body {
                remaining -= chunk.readableBytes
                if remaining < 0 { return }
            }
        } catch {
            // The connection failed; nothing is kept from it anyway.
        }
    }
}

/// An `http` or `https` URL, and the origin (scheme, host, port) its limits are counted by.
struct HTTPTarget {
    let url: String
    let originKey: String

    init?(_ text: String, relativeTo base: HTTPTarget? = nil) {
        let parsed: URL?
        if let base {
            parsed = URL(string: text, relativeTo: URL(string: base.url))?.absoluteURL
        } else {
            parsed = URL(string: text)
        }
        guard let parsed, let scheme = parsed.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = parsed.host, !host.isEmpty
        else { return nil }
        url = parsed.absoluteString
        originKey = "\(scheme)://\(host.lowercased()):\(parsed.port ?? (scheme == "https" ? 443 : 80))"
    }
}
