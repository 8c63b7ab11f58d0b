import Foundation
import Testing
import TroveCore
import TroveHTTP
import TroveOrigin
import TroveTestSupport

/// HTTPOrigin against a real loopback origin: responses, conditional requests, redirects,
/// statuses, retries and what is sent.
@Suite("HTTPOrigin")
struct HTTPOriginTests {
    @Test func fetchesA200WithItsBodyHeadersAndTimes() async throws {
        try await withOriginServer { server in
            let body = jpegLike(count: 64 * 1024)
            server.set(
                "/a.jpg",
                OriginResource(
                    body: body, etag: "\"v1\"", lastModified: "Wed, 21 Oct 2015 07:28:00 GMT", cacheControl: "max-age=60",
                    contentType: "image/jpeg", headers: [("Age", "3")]))
            try await withHTTPOrigin { origin in
                let before = Date()
                let response = try await origin.fetch(OriginRequest(url: server.url("/a.jpg")))
                #expect(response.status == 200)
                #expect(!response.isNotModified)
                #expect(response.body == Data(body))
                #expect(response.bytesReceived == body.count)
                #expect(response.format == .jpeg)
                #expect(response.requestedURL == server.url("/a.jpg"))
                #expect(response.finalURL == server.url("/a.jpg"))
                #expect(response.redirectCount == 0)
                #expect(response.headers["cache-control"] == "max-age=60")
                #expect(response.headers["Age"] == "3")
                #expect(response.headers["Date"] != nil)
                #expect(response.validators == Validators(entityTag: "\"v1\"", lastModified: "Wed, 21 Oct 2015 07:28:00 GMT"))
                #expect(before <= response.requestTime && response.requestTime <= response.responseTime)
                #expect(response.responseTime <= Date())
            }
            let sent = try #require(server.requests(for: "/a.jpg").first)
            #expect(sent.header("If-None-Match") == nil)
            #expect(sent.header("If-Modified-Since") == nil)
            #expect(sent.header("Accept-Encoding") == "identity")
            #expect(sent.header("User-Agent") == "Trove")
            #expect(sent.header("Accept")?.hasPrefix("image/webp") == true)
        }
    }

    @Test func aConditionalRequestSendsTheValidatorsVerbatimAndReturns304() async throws {
        try await withOriginServer { server in
            let lastModified = "Wed, 21 Oct 2015 07:28:00 GMT"
            server.set(
                "/a.jpg",
                OriginResource(
                    body: jpegLike(count: 5000), etag: "W/\"v1\"", lastModified: lastModified, cacheControl: "max-age=5"))
            try await withHTTPOrigin { origin in
                let validators = Validators(entityTag: "W/\"v1\"", lastModified: lastModified)
                let response = try await origin.fetch(OriginRequest(url: server.url("/a.jpg"), validators: validators))
                #expect(response.status == 304)
                #expect(response.isNotModified)
                #expect(response.body.isEmpty)
                #expect(response.bytesReceived == 0)
                #expect(response.format == nil)
                #expect(response.headers["ETag"] == "W/\"v1\"")
                #expect(response.headers["Cache-Control"] == "max-age=5")

                let sent = try #require(server.requests(for: "/a.jpg").last)
                #expect(sent.header("If-None-Match") == "W/\"v1\"")
                #expect(sent.header("If-Modified-Since") == lastModified)

                // Only a date: If-Modified-Since alone.
                let byDate = try await origin.fetch(
                    OriginRequest(url: server.url("/a.jpg"), validators: Validators(lastModified: lastModified)))
                #expect(byDate.status == 304)
                #expect(server.requests(for: "/a.jpg").last?.header("If-None-Match") == nil)

                // Changed content: a 200 with the new body and validators.
                let changed = jpegLike(count: 6000, seed: 7)
                server.set("/a.jpg", OriginResource(body: changed, etag: "\"v2\""))
                let fresh = try await origin.fetch(OriginRequest(url: server.url("/a.jpg"), validators: validators))
                #expect(fresh.status == 200)
                #expect(fresh.body == Data(changed))
                #expect(fresh.validators.entityTag == "\"v2\"")
            }
        }
    }

    @Test func a304ToAnUnconditionalRequestIsAnError() async throws {
        try await withOriginServer { server in
            server.set("/odd", OriginResource(status: 304))
            try await withHTTPOrigin { origin in
                let error = await fetchError(origin, OriginRequest(url: server.url("/odd")))
                #expect(error?.code == .status)
                #expect(error?.status == 304)
            }
        }
    }

    @Test func extraHeadersReplaceTheDefaults() async throws {
        try await withOriginServer { server in
            server.set("/a", OriginResource(body: jpegLike(count: 100)))
            try await withHTTPOrigin { origin in
                let request = OriginRequest(
                    url: server.url("/a"), headers: [("user-agent", "Test/1"), ("X-Extra", "yes")])
                _ = try await origin.fetch(request)
            }
            let sent = try #require(server.requests.last)
            #expect(sent.headers.filter { $0.name.lowercased() == "user-agent" }.map(\.value) == ["Test/1"])
            #expect(sent.header("X-Extra") == "yes")
        }
    }

    @Test func redirectsAreFollowedAndBothURLsReported() async throws {
        try await withOriginServer { server in
            let body = pngLike(count: 3000)
            server.set("/a", .redirect(to: "/b", status: 301))
            server.set("/b", .redirect(to: server.url("/c?x=1"), status: 302))
            server.set("/c", .redirect(to: "d", status: 307))
            server.set("/d", .redirect(to: "/e", status: 308))
            server.set("/e", OriginResource(body: body, etag: "\"e\""))
            try await withHTTPOrigin { origin in
                let response = try await origin.fetch(OriginRequest(url: server.url("/a")))
                #expect(response.status == 200)
                #expect(response.body == Data(body))
                #expect(response.format == .png)
                #expect(response.requestedURL == server.url("/a"))
                #expect(response.finalURL == server.url("/e"))
                #expect(response.redirectCount == 4)
                #expect(response.headers["ETag"] == "\"e\"")
            }
            #expect(server.requests.map(\.target) == ["/a", "/b", "/c?x=1", "/d", "/e"])
        }
    }

    @Test func redirectsAreBoundedAndALoopIsTooManyRedirects() async throws {
        try await withOriginServer { server in
            server.set("/loop1", .redirect(to: "/loop2"))
            server.set("/loop2", .redirect(to: "/loop1"))
            for index in 0..<3 { server.set("/chain\(index)", .redirect(to: "/chain\(index + 1)")) }
            server.set("/chain3", OriginResource(body: jpegLike(count: 10)))
            try await withHTTPOrigin(limits: testLimits(maximumRedirects: 3)) { origin in
                let error = await fetchError(origin, OriginRequest(url: server.url("/loop1")))
                #expect(error?.code == .tooManyRedirects)
                #expect(server.statistics.requests == 4, "the first request and 3 redirects, then it stops")
                // Exactly the limit is fine.
                let atTheLimit = try await origin.fetch(OriginRequest(url: server.url("/chain0")))
                #expect(atTheLimit.redirectCount == 3)
            }
            try await withHTTPOrigin(limits: testLimits(maximumRedirects: 0)) { origin in
                #expect(await fetchError(origin, OriginRequest(url: server.url("/chain2")))?.code == .tooManyRedirects)
            }
        }
    }

    @Test func aRedirectOutsideHTTPOrWithoutLocationIsInvalid() async throws {
        try await withOriginServer { server in
            server.set("/to-file", .redirect(to: "file:///etc/passwd"))
            server.set("/nowhere", OriginResource(status: 302))
            try await withHTTPOrigin { origin in
                #expect(await fetchError(origin, OriginRequest(url: server.url("/to-file")))?.code == .invalidRedirect)
                #expect(await fetchError(origin, OriginRequest(url: server.url("/nowhere")))?.code == .invalidRedirect)
            }
        }
    }

    @Test func credentialsAreNotSentOnToAnotherOrigin() async throws {
        try await withOriginServer { first in
            try await withOriginServer { second in
                first.set("/same", .redirect(to: "/there"))
                first.set("/there", .redirect(to: second.url("/image")))
                second.set("/image", OriginResource(body: jpegLike(count: 10)))
                try await withHTTPOrigin { origin in
                    let request = OriginRequest(
                        url: first.url("/same"), headers: [("Authorization", "Bearer secret"), ("Cookie", "a=b")])
                    let response = try await origin.fetch(request)
                    #expect(response.finalURL == second.url("/image"))
                }
                #expect(first.requests(for: "/there").first?.header("Authorization") == "Bearer secret")
                #expect(second.requests.first?.header("Authorization") == nil)
                #expect(second.requests.first?.header("Cookie") == nil)
            }
        }
    }

    @Test(arguments: [404, 410, 500, 503])
    func aStatusErrorIsTypedAndNeverRetried(_ status: Int) async throws {
        try await withOriginServer { server in
            server.set("/e", .failure(status: status))
            try await withHTTPOrigin { origin in
                let error = try #require(await fetchError(origin, OriginRequest(url: server.url("/e"))))
                #expect(error.code == .status)
                #expect(error.status == status)
                #expect(error.attempts == 1)
                #expect(error.message.contains("\(status)"))
            }
            #expect(server.requestCount(for: "/e") == 1)
        }
    }

    @Test func aBodyThatIsNotAnImageIsRefusedUnlessAllowed() async throws {
        try await withOriginServer { server in
            let html = Array("<!doctype html><p>not an image</p>".utf8)
            server.set("/page", OriginResource(body: html, contentType: "text/html"))
            try await withHTTPOrigin { origin in
                let error = await fetchError(origin, OriginRequest(url: server.url("/page")))
                #expect(error?.code == .notAnImage)
                let allowed = try await origin.fetch(OriginRequest(url: server.url("/page"), requiresImage: false))
                #expect(allowed.body == Data(html))
                #expect(allowed.format == nil)
                // A short body is judged whole.
                server.set("/short", OriginResource(body: [0xFF, 0xD8]))
                #expect(await fetchError(origin, OriginRequest(url: server.url("/short")))?.code == .notAnImage)
            }
        }
    }

    @Test func aLargeBodyThatIsNotAnImageFailsOnItsFirstBytes() async throws {
        try await withOriginServer { server in
            let block = Array(repeating: UInt8(ascii: "x"), count: 1 << 20)
            server.set(  // 1 GiB, chunked: no declared length to refuse it by
                "/huge.html", OriginResource(body: block, repetitions: 1024, behaviour: .chunked(chunkSize: 64 * 1024)))
            try await withHTTPOrigin { origin in
                let start = ContinuousClock.now
                #expect(await fetchError(origin, OriginRequest(url: server.url("/huge.html")))?.code == .notAnImage)
                #expect(ContinuousClock.now - start < .seconds(5))
            }
            #expect(await server.wait { $0.connectionsClosedByClient == 1 })
            #expect(server.statistics.bodyBytesSent < 256 << 20)
        }
    }

    @Test func invalidURLsAreRefusedBeforeAnyRequest() async throws {
        try await withHTTPOrigin { origin in
            for url in ["ftp://example.com/a.jpg", "file:///tmp/a.jpg", "not a url", "http://", "/relative.jpg"] {
                #expect(await fetchError(origin, OriginRequest(url: url))?.code == .invalidURL, "\(url)")
            }
        }
    }
}

/// Retries: once for a connection that fails before a response head, never otherwise.
@Suite("HTTPOrigin: retries")
struct HTTPOriginRetryTests {
    @Test func aRefusedConnectionIsRetriedOnceThenATransportError() async throws {
        let server = try await OriginServer.start()
        let url = server.url("/a.jpg")
        try await server.shutdown()  // nothing listens there now
        try await withHTTPOrigin { origin in
            let error = try #require(await fetchError(origin, OriginRequest(url: url)))
            #expect(error.code == .transport)
            #expect(error.attempts == 2)
            #expect(error.underlying != nil)
        }
    }

    @Test func aConnectionClosedBeforeTheHeadIsRetriedOnce() async throws {
        try await withOriginServer { server in
            server.set("/drop", OriginResource(body: jpegLike(count: 10), behaviour: .closeWithoutResponse))
            try await withHTTPOrigin { origin in
                let error = try #require(await fetchError(origin, OriginRequest(url: server.url("/drop"))))
                #expect(error.code == .transport)
                #expect(error.attempts == 2)
            }
            #expect(server.requestCount(for: "/drop") == 2)
        }
    }

    @Test func noRetryOnceAResponseHeadArrived() async throws {
        try await withOriginServer { server in
            server.set("/cut", OriginResource(body: jpegLike(count: 10_000), behaviour: .truncate(afterBytes: 100)))
            try await withHTTPOrigin { origin in
                #expect(await fetchError(origin, OriginRequest(url: server.url("/cut")))?.code == .truncated)
            }
            #expect(server.requestCount(for: "/cut") == 1)
        }
    }

    @Test func retriesCanBeTurnedOff() async throws {
        try await withOriginServer { server in
            server.set("/drop", OriginResource(body: jpegLike(count: 10), behaviour: .closeWithoutResponse))
            var limits = testLimits()
            limits.connectionRetries = 0
            try await withHTTPOrigin(limits: limits) { origin in
                #expect(await fetchError(origin, OriginRequest(url: server.url("/drop")))?.attempts == 1)
            }
            #expect(server.requestCount(for: "/drop") == 1)
        }
    }
}
