import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing
import TroveOrigin
import TroveTestSupport

/// The origin's static directory mode: files under one directory and nothing else.
@Suite("OriginServer: static directory")
struct OriginServerDirectoryTests {
    private func get(_ client: HTTPClient, _ url: String, headers: [(String, String)] = []) async throws -> (
        status: Int, response: HTTPClientResponse, body: [UInt8]
    ) {
        var request = HTTPClientRequest(url: url)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        let response = try await client.execute(request, timeout: .seconds(5))
        let body = try await response.body.collect(upTo: 1 << 24)
        return (Int(response.status.code), response, Array(buffer: body))
    }

    @Test func servesFilesWithValidatorsAndAnswersConditionalRequests() async throws {
        try await withTemporaryDirectory { directory in
            let bytes = jpegLike(count: 3000)
            try Data(bytes).write(to: URL(fileURLWithPath: "\(directory)/cat photo.jpg"))
            try await withOriginServer(serving: directory, cacheControl: "max-age=120") { origin in
                try await withPlainClient { client in
                    let first = try await get(client, origin.url("/cat%20photo.jpg"))
                    #expect(first.status == 200)
                    #expect(first.body == bytes)
                    let etag = try #require(first.response.headers.first(name: "ETag"))
                    #expect(etag.hasPrefix("\"bb8-"), "size 3000 in hexadecimal, then the mtime")
                    #expect(first.response.headers.first(name: "Cache-Control") == "max-age=120")
                    #expect(first.response.headers.first(name: "Content-Type") == "image/jpeg")
                    let lastModified = try #require(first.response.headers.first(name: "Last-Modified"))

                    #expect(
                        try await get(client, origin.url("/cat%20photo.jpg"), headers: [("If-None-Match", etag)]).status == 304)
                    #expect(
                        try await get(client, origin.url("/cat%20photo.jpg"), headers: [("If-Modified-Since", lastModified)])
                            .status == 304)

                    // Changed content: new validators, served at once.
                    try Data(jpegLike(count: 4000, seed: 9)).write(to: URL(fileURLWithPath: "\(directory)/cat photo.jpg"))
                    let changed = try await get(client, origin.url("/cat%20photo.jpg"), headers: [("If-None-Match", etag)])
                    #expect(changed.status == 200)
                    #expect(changed.body.count == 4000)
                    #expect(changed.response.headers.first(name: "ETag") != etag)
                }
            }
        }
    }

    @Test func refusesPathsOutsideTheDirectoryAndNonRegularFiles() async throws {
        try await withTemporaryDirectory { base in
            let served = "\(base)/served"
            try FileManager.default.createDirectory(atPath: "\(served)/sub", withIntermediateDirectories: true)
            try Data(jpegLike(count: 10)).write(to: URL(fileURLWithPath: "\(base)/secret.jpg"))
            try Data(jpegLike(count: 10)).write(to: URL(fileURLWithPath: "\(served)/sub/inside.jpg"))
            try FileManager.default.createSymbolicLink(atPath: "\(served)/escape.jpg", withDestinationPath: "\(base)/secret.jpg")
            try FileManager.default.createSymbolicLink(atPath: "\(served)/alias.jpg", withDestinationPath: "sub/inside.jpg")
            try FileManager.default.createSymbolicLink(atPath: "\(served)/up", withDestinationPath: base)
            #expect(mkfifo("\(served)/fifo", 0o644) == 0)

            try await withOriginServer(serving: served) { origin in
                try await withPlainClient { client in
                    #expect(try await get(client, origin.url("/sub/inside.jpg")).status == 200)
                    #expect(try await get(client, origin.url("/alias.jpg")).status == 200, "a link inside the directory")
                    for path in [
                        "/escape.jpg", "/up/secret.jpg", "/sub/%2e%2e/%2e%2e/secret.jpg", "/sub/../../secret.jpg",
                        "/%2e%2e/secret.jpg", "//etc/passwd", "/sub", "/", "/fifo", "/missing.jpg", "/bad%zz",
                        "/sub/./inside.jpg",
                    ] {
                        let connection = try RawConnection(port: origin.port)
                        connection.sendGet(path, headers: ["Connection: close"])
                        let head = RawConnection.split(connection.readAll().bytes)?.head ?? ""
                        #expect(head.hasPrefix("HTTP/1.1 404"), "\(path) → \(head.prefix(20))")
                    }
                }
            }
        }
    }

    /// The served directory's resolved path is compared with a file's by bytes: a sibling
    /// whose name is a canonically equivalent spelling of the directory's (an equal Swift
    /// string) is outside it.
    @Test func aSiblingSpelledEquivalentlyIsOutside() async throws {
        try await withTemporaryDirectory { base in
            let served = "\(base)/caf\u{E9}"
            let sibling = "\(base)/cafe\u{301}"
            for directory in [served, sibling] {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            }
            try Data(jpegLike(count: 10)).write(to: URL(fileURLWithPath: "\(sibling)/secret.jpg"))
            try Data(jpegLike(count: 10)).write(to: URL(fileURLWithPath: "\(served)/inside.jpg"))
            try FileManager.default.createSymbolicLink(atPath: "\(served)/out", withDestinationPath: sibling)
            try await withOriginServer(serving: served) { origin in
                try await withPlainClient { client in
                    let inside = try await get(client, origin.url("/inside.jpg"))
                    let outside = try await get(client, origin.url("/out/secret.jpg"))
                    #expect(inside.status == 200)
                    #expect(outside.status == 404, "the link leads to the equivalently spelled sibling")
                }
            }
        }
    }

    @Test func aMissingDirectoryIsRefused() async throws {
        await #expect(throws: OriginServerError.self) {
            try await OriginServer.start(serving: "/nonexistent/trove-origin-test")
        }
    }
}
