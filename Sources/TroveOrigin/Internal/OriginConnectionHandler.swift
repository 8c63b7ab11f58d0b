import NIOCore
import NIOHTTP1
import NIOPosix

/// Answers the requests of one connection, after NIO's HTTP/1.1 server handlers (which parse,
/// keep pipelined requests in order, and answer malformed ones with 400).
///
/// Runs on the connection's event loop only. A body goes out as slices of the resource's one
/// buffer (no copies), as fast as the socket takes them: the writer stops while the channel is
/// not writable and resumes when it is again, so a 1 GiB body costs no memory.
final class OriginConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    /// Header fields a 304 carries over from the 200 it stands for (RFC 9110 §15.4.5: those a
    /// cache uses to update its stored response; Last-Modified too, as a validator).
    private static let notModifiedFields: Set<String> = [
        "etag", "last-modified", "cache-control", "expires", "date", "age", "vary", "content-location",
    ]

    /// What the server does once a body has been written.
    private enum Ending {
        /// Sends the end of the response; closes the connection when `keepAlive` is false.
        case complete(keepAlive: Bool)
        /// Sends nothing more and waits for the client to close.
        case stall
        /// Closes the connection (after the bytes written so far have gone out).
        case close
    }

    /// The body being written: `limit` bytes of `repetitions` copies of `buffer`.
    private struct BodyWriter {
        var buffer: ByteBuffer
        var sliceSize: Int
        var sent = 0
        var limit: Int
        var ending: Ending
    }

    private let state: OriginState
    private var connection: Int?
    private var requestHead: HTTPRequestHead?
    /// A request was received and its answer is not complete (stalled answers stay open).
    private var requestOpen = false
    private var closingByServer = false
    private var delayedAnswer: Scheduled<Void>?
    private var writer: BodyWriter?
    /// The last write handed to the channel: a close waits for it so sent bytes are not dropped.
    private var lastWrite: EventLoopFuture<Void>?

    init(state: OriginState) {
        self.state = state
    }

    // MARK: Connection events

    func channelActive(context: ChannelHandlerContext) {
        connection = state.connectionOpened(context.channel)
        if connection == nil { closeByServer(context) }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        delayedAnswer?.cancel()
        delayedAnswer = nil
        writer = nil
        if let connection {
            state.connectionClosed(connection, byServer: closingByServer, unfinishedRequest: requestOpen)
        }
        requestOpen = false
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A malformed request was answered with 400 by NIO's error handler; anything else
        // (a reset) is the client's doing.
        if error is HTTPParserError { closingByServer = true }
        context.close(promise: nil)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, writer != nil { writeBody(context) }
        context.fireChannelWritabilityChanged()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            requestHead = head
            requestOpen = true
            state.requestReceived(
                OriginServer.ReceivedRequest(
                    method: head.method.rawValue, target: head.uri, path: Self.path(of: head.uri),
                    headers: head.headers.map { (name: $0.name, value: $0.value) }, connection: connection ?? 0))
        case .body:
            break
        case .end:
            guard let head = requestHead else { return }
            requestHead = nil
            answer(head, context: context)
        }
    }

    /// The request target without its query: up to the first `?` byte (by characters, a
    /// combining mark after the `?` would hide it).
    static func path(of target: String) -> String {
        guard let question = target.utf8.firstIndex(of: UInt8(ascii: "?")) else { return target }
        return String(Substring(target.utf8[..<question]))
    }

    // MARK: Answering

    private func answer(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        let path = Self.path(of: head.uri)
        switch state.lookup(path) {
        case .resource(let stored):
            answer(head, with: stored, context: context)
        case .notFound:
            answer(head, with: StoredResource(.failure(status: 404, message: "no resource at \(path)")), context: context)
        case .file(let directory):
            let loaded = NIOThreadPool.singleton.runIfActive(eventLoop: context.eventLoop) { directory.load(path) }
            loaded.assumeIsolated().whenComplete { result in
                guard context.channel.isActive else { return }
                let stored: StoredResource
                if case .success(let file?) = result {
                    stored = file
                } else {
                    stored = StoredResource(.failure(status: 404, message: "no file at \(path)"))
                }
                self.answer(head, with: stored, context: context)
            }
        }
    }

    private func answer(_ head: HTTPRequestHead, with stored: StoredResource, context: ChannelHandlerContext) {
        let delay = stored.resource.headDelay
        guard delay > .zero else {
            send(head, stored, context: context)
            return
        }
        let nanoseconds = delay.components.seconds * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000
        delayedAnswer = context.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(nanoseconds)) {
            self.delayedAnswer = nil
            self.send(head, stored, context: context)
        }
    }

    private func send(_ request: HTTPRequestHead, _ stored: StoredResource, context: ChannelHandlerContext) {
        let resource = stored.resource
        if resource.behaviour == .closeWithoutResponse {
            closeByServer(context)
            return
        }
        let isGetOrHead = request.method == .GET || request.method == .HEAD
        let notModified =
            (200..<300).contains(resource.status) && isGetOrHead
            && ConditionalRequest.isNotModified(
                ifNoneMatch: request.headers["If-None-Match"], ifModifiedSince: request.headers.first(name: "If-Modified-Since"),
                etag: resource.header("ETag"), lastModified: resource.header("Last-Modified"))

        var headers = HTTPHeaders()
        for (name, value) in resource.headers {
            let lowercased = name.lowercased()
            if lowercased == "content-length" || lowercased == "transfer-encoding" { continue }
            if notModified, !Self.notModifiedFields.contains(lowercased) { continue }
            headers.add(name: name, value: value)
        }
        if !headers.contains(name: "Date") { headers.add(name: "Date", value: HTTPDate.now()) }
        let keepAlive = request.isKeepAlive
        if !keepAlive { headers.replaceOrAdd(name: "Connection", value: "close") }

        let status = notModified ? 304 : resource.status
        let total = stored.contentLength
        let hasBody = !(notModified || request.method == .HEAD || status == 204 || (100..<200).contains(status))

        var limit = total
        var ending = Ending.complete(keepAlive: keepAlive)
        var version = HTTPVersion.http1_1
        var sliceSize = max(stored.body.readableBytes, 1)
        switch resource.behaviour {
        case .normal, .closeWithoutResponse:
            if status != 304 { headers.add(name: "Content-Length", value: String(total)) }
        case .chunked(let chunkSize):
            sliceSize = max(chunkSize, 1)
            if !hasBody, status != 304 { headers.add(name: "Content-Length", value: String(total)) }
        case .stall(let count):
            headers.add(name: "Content-Length", value: String(total))
            limit = min(count, total)
            ending = .stall
        case .truncate(let count):
            headers.add(name: "Content-Length", value: String(total))
            limit = min(count, total)
            ending = .close
        case .declareLength(let declared):
            headers.add(name: "Content-Length", value: String(declared))
            if declared != total { ending = .close }
        case .closeDelimited(let count):
            // An HTTP/1.0 head: NIO's encoder then frames the body by the connection's close.
            version = .http1_0
            headers.replaceOrAdd(name: "Connection", value: "close")
            limit = min(count, total)
            ending = .close
        }

        let head = HTTPResponseHead(version: version, status: HTTPResponseStatus(statusCode: status), headers: headers)
        lastWrite = context.write(wrapOutboundOut(.head(head)))
        guard hasBody else {
            finish(.complete(keepAlive: keepAlive), context: context)
            return
        }
        writer = BodyWriter(buffer: stored.body, sliceSize: sliceSize, limit: limit, ending: ending)
        writeBody(context)
    }

    /// Writes body slices while the channel is writable; finishes when all are written.
    private func writeBody(_ context: ChannelHandlerContext) {
        guard var body = writer else { return }
        let length = body.buffer.readableBytes
        let start = body.sent
        while body.sent < body.limit, context.channel.isWritable {
            let offset = body.sent % length
            let count = min(body.sliceSize, length - offset, body.limit - body.sent)
            let slice = body.buffer.getSlice(at: body.buffer.readerIndex + offset, length: count)!
            lastWrite = context.write(wrapOutboundOut(.body(.byteBuffer(slice))))
            body.sent += count
        }
        state.bodyBytesSent(body.sent - start)
        if body.sent < body.limit {
            writer = body
            context.flush()  // writability returns once this drains
            return
        }
        writer = nil
        finish(body.ending, context: context)
    }

    private func finish(_ ending: Ending, context: ChannelHandlerContext) {
        switch ending {
        case .complete(let keepAlive):
            let written = context.writeAndFlush(wrapOutboundOut(.end(nil)))
            requestOpen = false
            state.requestFinished()
            if !keepAlive {
                written.assumeIsolated().whenComplete { _ in self.closeByServer(context) }
            }
        case .stall:
            context.flush()
        case .close:
            context.flush()
            let written = lastWrite ?? context.eventLoop.makeSucceededVoidFuture()
            written.assumeIsolated().whenComplete { _ in self.closeByServer(context) }
        }
    }

    private func closeByServer(_ context: ChannelHandlerContext) {
        guard context.channel.isActive else { return }
        closingByServer = true
        context.close(promise: nil)
    }
}
