import NIOCore

/// A resource as the server keeps it: the public value (without its body array) and its body in
/// a `ByteBuffer` made once at `set`, so answering a request slices that buffer and copies no
/// body bytes.
struct StoredResource: Sendable {
    var resource: OriginResource
    var body: ByteBuffer

    init(_ resource: OriginResource) {
        body = ByteBuffer(bytes: resource.body)
        // The buffer is the one copy kept; the array would double a benchmark's memory.
        var kept = resource
        kept.body = []
        self.resource = kept
    }

    /// A resource whose body is already in a buffer (a served file); `resource.body` is unused.
    init(resource: OriginResource, body: ByteBuffer) {
        self.resource = resource
        self.body = body
    }

    /// The body length of a correct response.
    var contentLength: Int { body.readableBytes * resource.repetitions }
}

/// What a request path names.
enum ResourceLookup: Sendable {
    case resource(StoredResource)
    /// A file to load from the served directory (static directory mode).
    case file(StaticDirectory)
    case notFound
}

/// A request path as a dictionary key: equal only to the same UTF-8 bytes. (`String`'s `==`
/// calls canonically equivalent spellings equal, and the server would then answer one path
/// with a resource set under another — a cache test would see bytes it never asked for.)
struct RequestPath: Hashable, Sendable {
    let path: String
    init(_ path: String) { self.path = path }
    static func == (a: RequestPath, b: RequestPath) -> Bool { a.path.utf8.elementsEqual(b.path.utf8) }
    // Byte-equal paths are equal strings, so `String`'s hash agrees with `==`.
    func hash(into hasher: inout Hasher) { hasher.combine(path) }
}

/// Everything the server's connections share, behind one lock: the resources, the observations
/// and the open connections. The lock is held for these state changes only, never across I/O.
final class OriginState: Sendable {
    /// Requests kept in the log; past this the oldest half is dropped (benchmarks send many).
    static let requestLogLimit = 10_000

    private struct State {
        var resources: [RequestPath: StoredResource] = [:]
        var statistics = OriginServer.Statistics()
        var requestCounts: [RequestPath: Int] = [:]
        var requestLog: [OriginServer.ReceivedRequest] = []
        var openChannels: [Int: any Channel] = [:]
        var nextConnection = 1
        var isShutDown = false
    }

    let directory: StaticDirectory?
    private let state = Lock(State())

    init(directory: StaticDirectory?) {
        self.directory = directory
    }

    // MARK: Resources

    func set(_ path: String, _ resource: OriginResource) {
        let stored = StoredResource(resource)
        state.withLock { $0.resources[RequestPath(path)] = stored }
    }

    func remove(_ path: String) {
        state.withLock { _ = $0.resources.removeValue(forKey: RequestPath(path)) }
    }

    /// Resources set by path win; then the served directory, if any.
    func lookup(_ path: String) -> ResourceLookup {
        if let stored = state.withLock({ $0.resources[RequestPath(path)] }) { return .resource(stored) }
        if let directory { return .file(directory) }
        return .notFound
    }

    // MARK: Connections and requests

    /// Registers an accepted connection and returns its number; nil once the server is shut
    /// down (the caller closes it).
    func connectionOpened(_ channel: any Channel) -> Int? {
        state.withLock { state in
            guard !state.isShutDown else { return nil }
            let number = state.nextConnection
            state.nextConnection += 1
            state.openChannels[number] = channel
            state.statistics.connectionsAccepted += 1
            return number
        }
    }

    func connectionClosed(_ number: Int, byServer: Bool, unfinishedRequest: Bool) {
        state.withLock { state in
            guard state.openChannels.removeValue(forKey: number) != nil else { return }
            if byServer || state.isShutDown {
                state.statistics.connectionsClosedByServer += 1
            } else {
                state.statistics.connectionsClosedByClient += 1
            }
            if unfinishedRequest { state.statistics.inFlightRequests -= 1 }
        }
    }

    func requestReceived(_ request: OriginServer.ReceivedRequest) {
        state.withLock { state in
            state.statistics.requests += 1
            state.statistics.inFlightRequests += 1
            state.statistics.peakInFlightRequests = max(
                state.statistics.peakInFlightRequests, state.statistics.inFlightRequests)
            state.requestCounts[RequestPath(request.path), default: 0] += 1
            if state.requestLog.count >= Self.requestLogLimit {
                state.requestLog.removeFirst(Self.requestLogLimit / 2)
            }
            state.requestLog.append(request)
        }
    }

    func requestFinished() {
        state.withLock { $0.statistics.inFlightRequests -= 1 }
    }

    func bodyBytesSent(_ count: Int) {
        state.withLock { $0.statistics.bodyBytesSent += count }
    }

    // MARK: Observation

    var statistics: OriginServer.Statistics { state.withLock { $0.statistics } }

    var requests: [OriginServer.ReceivedRequest] { state.withLock { $0.requestLog } }

    func requestCount(for path: String) -> Int {
        state.withLock { $0.requestCounts[RequestPath(path), default: 0] }
    }

    func resetObservations() {
        state.withLock { state in
            let open = state.statistics.openConnections
            let inFlight = state.statistics.inFlightRequests
            state.statistics = OriginServer.Statistics()
            // Connections still open stay accounted for, so their closing later keeps the
            // counters consistent (openConnections never goes negative).
            state.statistics.connectionsAccepted = open
            state.statistics.inFlightRequests = inFlight
            state.statistics.peakInFlightRequests = inFlight
            state.requestCounts = [:]
            state.requestLog = []
        }
    }

    /// Marks the server shut down and returns the connections still open.
    func shutDown() -> [any Channel] {
        state.withLock { state in
            state.isShutDown = true
            return Array(state.openChannels.values)
        }
    }
}
