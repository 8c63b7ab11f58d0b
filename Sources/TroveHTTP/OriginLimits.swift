/// The limits of ``HTTPOrigin`` (and the size limit of ``FileOrigin``), with the defaults a
/// server fetching images for many clients would pick.
///
/// | limit | default |
/// | --- | --- |
/// | ``connectTimeout`` | 10 s |
/// | ``requestTimeout`` (the whole request) | 60 s |
/// | ``maximumBodySize`` | 64 MiB |
/// | ``maximumConcurrentRequestsPerHost`` | 8 |
/// | ``maximumConcurrentRequests`` | 64 |
/// | ``maximumRedirects`` | 5 |
/// | ``connectionRetries`` | 1 |
///
/// ```swift
/// var limits = OriginLimits()
/// limits.maximumBodySize = 16 << 20      // 16 MiB originals at most
/// limits.requestTimeout = .seconds(20)
/// let origin = HTTPOrigin(limits: limits)
/// ```
public struct OriginLimits: Hashable, Sendable {
    /// How long opening a connection (TCP and TLS) may take. Default 10 s.
    public var connectTimeout: Duration
    /// How long a whole fetch may take, from the call to the last body byte: waiting for a
    /// concurrency slot, connecting, every redirect and retry, the body. Default 60 s (64 MiB
    /// then needs about 1.1 MB/s).
    public var requestTimeout: Duration
    /// The largest body accepted, in bytes. A declared `Content-Length` above it fails before
    /// the body is read; a body that grows past it fails at that moment. Nothing past the
    /// limit is ever buffered. Default 64 MiB.
    public var maximumBodySize: Int
    /// How many requests may run at once to one origin (scheme, host and port); more wait in
    /// line. It also caps the connections kept per origin. Default 8.
    public var maximumConcurrentRequestsPerHost: Int
    /// How many requests may run at once in all; more wait in line, first come first served
    /// (a request whose origin is at its own limit lets others pass). Default 64.
    public var maximumConcurrentRequests: Int
    /// How many redirects a fetch follows (301, 302, 303, 307, 308); one more is
    /// ``OriginError/Code/tooManyRedirects``. 0 follows none. Default 5.
    public var maximumRedirects: Int
    /// How many times a request is sent again after a connection failure before any response
    /// arrived (refused, reset, closed — for instance a kept-alive connection the server had
    /// just closed). Never after a response head, and never for an HTTP status. Default 1.
    public var connectionRetries: Int
    /// The `User-Agent` sent unless the request names one. Default `Trove`.
    public var userAgent: String

    /// Makes limits; every argument has the default described on its property.
    public init(
        connectTimeout: Duration = .seconds(10), requestTimeout: Duration = .seconds(60),
        maximumBodySize: Int = 64 << 20, maximumConcurrentRequestsPerHost: Int = 8,
        maximumConcurrentRequests: Int = 64, maximumRedirects: Int = 5, connectionRetries: Int = 1,
        userAgent: String = "Trove"
    ) {
        self.connectTimeout = connectTimeout
        self.requestTimeout = requestTimeout
        self.maximumBodySize = maximumBodySize
        self.maximumConcurrentRequestsPerHost = maximumConcurrentRequestsPerHost
        self.maximumConcurrentRequests = maximumConcurrentRequests
        self.maximumRedirects = maximumRedirects
        self.connectionRetries = connectionRetries
        self.userAgent = userAgent
    }
}
