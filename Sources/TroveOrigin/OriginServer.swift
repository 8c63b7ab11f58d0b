import NIOCore
import NIOHTTP1
import NIOPosix

/// A small HTTP/1.1 origin on loopback, built on SwiftNIO: the origin of TroveHTTP's and the
/// pipeline's tests, of the benchmarks, and of the README's offline demo.
///
/// It serves ``OriginResource`` values set by path — with validators and conditional requests,
/// keep-alive, and on request the ways real origins misbehave (stalls, truncation, lying
/// lengths, dropped connections, redirects, errors) — or the files of a directory. It records
/// what it saw, so a test can assert which validators a client sent, how many requests reached
/// the origin, and who closed a connection.
///
/// ```swift
/// let origin = try await OriginServer.start()
/// origin.set("/a.jpg", OriginResource(body: jpeg, etag: "\"1\"", cacheControl: "max-age=60"))
/// // … fetch origin.url("/a.jpg") …
/// #expect(origin.requestCount(for: "/a.jpg") == 1)
/// #expect(origin.requests(for: "/a.jpg").last?.header("If-None-Match") == "\"1\"")
/// try await origin.shutdown()
/// ```
///
/// Connections run on the shared `MultiThreadedEventLoopGroup.singleton`; bodies are served
/// from one buffer per resource without copies, so the server keeps up with a benchmark client.
/// All methods may be called from any thread or task.
public final class OriginServer: Sendable {
    /// The address it listens on (`127.0.0.1` unless started otherwise).
    public let host: String
    /// The port it listens on (an ephemeral port unless one was asked for).
    public let port: Int

    private let listener: any Channel
    private let state: OriginState

    private init(host: String, port: Int, listener: any Channel, state: OriginState) {
        self.host = host
        self.port = port
        self.listener = listener
        self.state = state
    }

    /// Starts an origin that serves the resources you ``set(_:_:)``; any other path is a 404.
    ///
    /// - Parameters:
    ///   - host: The address to listen on; `127.0.0.1` by default.
    ///   - port: The port; 0 (the default) picks a free ephemeral port, read it from ``port``.
    /// - Throws: ``OriginServerError`` with code `bindFailed` when it cannot listen there.
    public static func start(host: String = "127.0.0.1", port: Int = 0) async throws(OriginServerError)
        -> OriginServer
    {
        try await start(host: host, port: port, state: OriginState(directory: nil))
    }

    /// Starts an origin that serves the regular files under `directory` (and the resources you
    /// ``set(_:_:)``, which take precedence).
    ///
    /// A request path names a file relative to the directory, percent-decoded. Paths with `.`,
    /// `..` or empty segments, and symbolic links that resolve outside the directory, are 404s;
    /// so is anything but a regular file (directories are not listed). Each file is sent with
    /// `ETag: "<size>-<mtime in ns>"` (hexadecimal), `Last-Modified` from its modification time,
    /// a `Content-Type` from its extension and, when given, `Cache-Control`; conditional
    /// requests work as for resources. Files are read when requested, so a changed file is
    /// served changed, with new validators.
    ///
    /// - Parameters:
    ///   - directory: The directory to serve.
    ///   - cacheControl: A `Cache-Control` value sent with every file, such as `"max-age=60"`.
    ///   - host: The address to listen on; `127.0.0.1` by default.
    ///   - port: The port; 0 (the default) picks a free ephemeral port.
    /// - Throws: ``OriginServerError`` with code `invalidDirectory` or `bindFailed`.
    public static func start(
        serving directory: String, cacheControl: String? = nil, host: String = "127.0.0.1", port: Int = 0
    ) async throws(OriginServerError) -> OriginServer {
        let served = try StaticDirectory(path: directory, cacheControl: cacheControl)
        return try await start(host: host, port: port, state: OriginState(directory: served))
    }

    private static func start(host: String, port: Int, state: OriginState) async throws(OriginServerError)
        -> OriginServer
    {
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelOption(.maxMessagesPerRead, value: 16)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(OriginConnectionHandler(state: state))
                }
            }
        let listener: any Channel
        do {
            listener = try await bootstrap.bind(host: host, port: port).get()
        } catch {
            throw OriginServerError(
                code: .bindFailed, message: "cannot listen on \(host):\(port): \(error); pick another port or host",
                underlying: error)
        }
        guard let boundPort = listener.localAddress?.port else {
            try? await listener.close()
            throw OriginServerError(code: .bindFailed, message: "listening on \(host):\(port) gave no local port")
        }
        return OriginServer(host: host, port: boundPort, listener: listener, state: state)
    }

    /// Stops listening and closes every open connection (counted as closed by the server).
    /// Calling it again does nothing.
    public func shutdown() async throws {
        let open = state.shutDown()
        try? await listener.close()
        for channel in open {
            try? await channel.close()
        }
    }

    // MARK: URLs

    /// `http://host:port`, without a trailing slash.
    public var baseURL: String { "http://\(host):\(port)" }

    /// The absolute URL of `path` on this server (`path` starts with `/`).
    public func url(_ path: String) -> String { baseURL + path }

    // MARK: Resources

    /// Serves `resource` at `path` (the request target without its query, e.g. `/a/b.jpg`).
    /// Setting a path again changes what it serves from the next request on.
    public func set(_ path: String, _ resource: OriginResource) {
        precondition(path.utf8.first == UInt8(ascii: "/"), "a resource path starts with /")
        state.set(path, resource)
    }

    /// Stops serving `path` (it becomes a 404, or a file in directory mode).
    public func remove(_ path: String) {
        state.remove(path)
    }

    // MARK: Observation

    /// The counters of connections, requests and bytes.
    public var statistics: Statistics { state.statistics }

    /// The request heads received, oldest first (the most recent 5 000 to 10 000 are kept).
    public var requests: [ReceivedRequest] { state.requests }

    /// The request heads received for `path` (the same UTF-8 bytes), oldest first.
    public func requests(for path: String) -> [ReceivedRequest] {
        state.requests.filter { $0.path.utf8.elementsEqual(path.utf8) }
    }

    /// How many requests for `path` arrived (every one is counted, however many there are).
    public func requestCount(for path: String) -> Int {
        state.requestCount(for: path)
    }

    /// Clears the request log and counts and the statistics (connections still open stay
    /// counted as accepted, so their closing later adds up).
    public func resetObservations() {
        state.resetObservations()
    }

    /// Waits until `condition` holds for the statistics, checking every few milliseconds.
    ///
    /// - Parameters:
    ///   - timeout: How long to wait; 5 s by default.
    ///   - condition: The condition to wait for.
    /// - Returns: Whether it held before the timeout (false also when the task is cancelled).
    public func wait(
        upTo timeout: Duration = .seconds(5), until condition: (Statistics) -> Bool
    ) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while true {
            if condition(statistics) { return true }
            guard ContinuousClock.now < deadline, !Task.isCancelled else { return false }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }
}
