import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A blocking TCP client on a POSIX socket, for asserting exactly what an origin puts on the
/// wire (lying lengths, truncation, chunked framing) where an HTTP client would hide it.
final class RawConnection {
    private let descriptor: Int32

    /// Connects to `127.0.0.1:port`; reads give up after `timeout`.
    init(port: Int, timeout: Duration = .seconds(2)) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.EIO) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        // No close here: every stored property is set, so `deinit` runs when this throws and
        // closes the socket. A close here as well closed the number twice — by then perhaps
        // another test's socket (NIO's selector asserted on an fd it still had registered).
        guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
        var limit = timeval(
            tv_sec: Int(timeout.components.seconds), tv_usec: Int(timeout.components.attoseconds / 1_000_000_000_000))
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(descriptor) }

    /// Sends a GET for `path` with `headers` (Host is added).
    func sendGet(_ path: String, headers: [String] = [], method: String = "GET") {
        let lines = ["\(method) \(path) HTTP/1.1", "Host: 127.0.0.1"] + headers
        let text = lines.joined(separator: "\r\n") + "\r\n\r\n"
        _ = text.utf8CString.withUnsafeBufferPointer { send(descriptor, $0.baseAddress, $0.count - 1, 0) }
    }

    /// What the connection delivered until the peer closed it (`closed` true) or nothing came
    /// for the timeout (`closed` false).
    func readAll() -> (bytes: [UInt8], closed: Bool) {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                bytes += chunk[0..<count]
            } else if count == 0 {
                return (bytes, true)
            } else if errno == EINTR {
                continue
            } else {
                return (bytes, errno == ECONNRESET)
            }
        }
    }

    /// Splits a response into its head (text before the blank line) and the bytes after it.
    static func split(_ bytes: [UInt8]) -> (head: String, body: [UInt8])? {
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        guard bytes.count >= 4 else { return nil }
        for index in 0...(bytes.count - 4) where Array(bytes[index..<index + 4]) == separator {
            return (String(decoding: bytes[0..<index], as: UTF8.self), Array(bytes[(index + 4)...]))
        }
        return nil
    }
}
