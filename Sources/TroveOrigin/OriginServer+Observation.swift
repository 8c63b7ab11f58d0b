extension OriginServer {
    /// A request head as the server received it.
    public struct ReceivedRequest: Sendable {
        /// The method (`GET`, `HEAD`, …).
        public var method: String
        /// The request target as sent: the path and the query, if any.
        public var target: String
        /// The path: the target without its query, not percent-decoded.
        public var path: String
        /// The header fields in the order they came.
        public var headers: [(name: String, value: String)]
        /// Which connection it came on: connections are numbered 1, 2, … in the order they were
        /// accepted, so two requests with the same number shared a keep-alive connection.
        public var connection: Int

        /// The value of the first header field named `name` (case-insensitive), if any.
        public func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }
    }

    /// Counters of what the server has seen since it started (or since ``resetObservations()``).
    public struct Statistics: Sendable, Hashable {
        /// Connections accepted.
        public var connectionsAccepted = 0
        /// Connections that ended because the client closed or reset them.
        public var connectionsClosedByClient = 0
        /// Connections the server closed: a behaviour that closes, a `Connection: close` request,
        /// a malformed request, or ``OriginServer/shutdown()``.
        public var connectionsClosedByServer = 0
        /// Request heads received.
        public var requests = 0
        /// Requests received and not yet fully answered (a stalled response counts until its
        /// connection closes).
        public var inFlightRequests = 0
        /// The largest ``inFlightRequests`` seen.
        public var peakInFlightRequests = 0
        /// Body bytes handed to the network (not counting framing).
        public var bodyBytesSent = 0

        /// Connections accepted and not yet closed.
        public var openConnections: Int {
            connectionsAccepted - connectionsClosedByClient - connectionsClosedByServer
        }
    }
}
