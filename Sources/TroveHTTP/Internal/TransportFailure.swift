import AsyncHTTPClient
import NIOCore
import NIOHTTP1

/// How a failure of AsyncHTTPClient before any response head is judged: whether to send the
/// request once more, and which ``OriginError`` it becomes.
enum TransportFailure {
    /// Whether `error` is a connection-level failure worth one more attempt: refused, reset,
    /// closed before the head (a kept-alive connection the server closed meanwhile), a TLS
    /// failure. Not a timeout (the time is spent), a cancellation, a malformed URL or response,
    /// or any other failure the client itself reports.
    static func isRetryable(_ error: any Error) -> Bool {
        switch error {
        case is CancellationError, is HTTPParserError:
            return false
        case let error as HTTPClientError:
            return error == .remoteConnectionClosed
        case let error as ChannelError:
            if case .connectTimeout = error { return false }
            return true
        default:
            // IOError (ECONNREFUSED, ECONNRESET, …), NIO's connection errors, TLS errors.
            return true
        }
    }

    /// The ``OriginError`` a failure before any response head becomes.
    static func originError(_ error: any Error, url: String, target: String, attempts: Int) -> OriginError {
        let tries = attempts == 1 ? "" : " (\(attempts) attempts)"
        if error is CancellationError || (error as? HTTPClientError) == .cancelled {
            return .cancelled(url)
        }
        if let error = error as? HTTPClientError {
            switch error {
            case .deadlineExceeded, .readTimeout, .writeTimeout:
                return OriginError(
                    code: .timeout, message: "\(target) did not answer within the request timeout\(tries); try again later",
                    url: url, attempts: attempts, underlying: error)
            case .connectTimeout, .tlsHandshakeTimeout:
                return OriginError(
                    code: .timeout,
                    message: "connecting to \(target) took longer than the connect timeout\(tries); the host is down "
                        + "or unreachable",
                    url: url, attempts: attempts, underlying: error)
            case .invalidURL, .emptyHost, .emptyScheme:
                return OriginError(
                    code: .invalidURL, message: "\(target) is not a URL the HTTP client accepts: \(error)", url: url,
                    attempts: attempts, underlying: error)
            default:
                break
            }
        }
        if let error = error as? ChannelError, case .connectTimeout = error {
            return OriginError(
                code: .timeout,
                message: "connecting to \(target) took longer than the connect timeout\(tries); the host is down or "
                    + "unreachable",
                url: url, attempts: attempts, underlying: error)
        }
        return OriginError(
            code: .transport,
            message: "the connection to \(target) failed before a response arrived\(tries): \(error); "
                + "check that the origin is reachable",
            url: url, attempts: attempts, underlying: error)
    }
}
