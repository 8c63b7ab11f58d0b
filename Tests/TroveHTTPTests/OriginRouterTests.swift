import Foundation
import Testing
import TroveCore
import TroveTestSupport

@testable import TroveHTTP

/// OriginRouter and OriginHeaders: routing by scheme, header lookups.
@Suite("OriginRouter")
struct OriginRouterTests {
    /// A fetcher that answers every request with a 200 naming itself.
    private struct Named: OriginFetching {
        var name: String
        func fetch(_ request: OriginRequest) async throws(OriginError) -> OriginResponse {
            OriginResponse(
                status: 200, headers: [("X-Fetcher", name)], requestedURL: request.url, requestTime: Date(),
                responseTime: Date())
        }
    }

    @Test func routesBySchemeCaseInsensitively() async throws {
        let router = OriginRouter(http: Named(name: "http"), file: Named(name: "file"))
        for (url, fetcher) in [
            ("http://a/1.jpg", "http"), ("HTTPS://a/1.jpg", "http"), ("file:///tmp/1.jpg", "file"), ("File:///x", "file"),
        ] {
            #expect(try await router.fetch(OriginRequest(url: url)).headers["X-Fetcher"] == fetcher, "\(url)")
        }
    }

    @Test func anUnhandledSchemeIsAnInvalidURL() async throws {
        let router = OriginRouter(http: Named(name: "http"))
        for url in ["file:///etc/passwd", "ftp://a/1.jpg", "data:image/png;base64,AAAA", "no-scheme", "1http://a"] {
            #expect(await fetchError(router, OriginRequest(url: url))?.code == .invalidURL, "\(url)")
        }
    }

    @Test func routesToTheRealFetchers() async throws {
        try await withTemporaryDirectory { directory in
            let path = "\(directory)/a.jpg"
            try Data(jpegLike(count: 100)).write(to: URL(fileURLWithPath: path))
            try await withHTTPOrigin { http in
                let router = OriginRouter(http: http, file: FileOrigin())
                let response = try await router.fetch(OriginRequest(url: "file://" + path))
                #expect(response.format == .jpeg)
            }
        }
    }
}

@Suite("OriginHeaders")
struct OriginHeadersTests {
    @Test func lookupsIgnoreCaseAndKeepOrder() {
        var headers: OriginHeaders = [("Cache-Control", "max-age=60"), ("ETag", "\"a\""), ("cache-control", "no-transform")]
        #expect(headers["CACHE-CONTROL"] == "max-age=60")
        #expect(headers["etag"] == "\"a\"")
        #expect(headers["Age"] == nil)
        #expect(headers.values(for: "Cache-control") == ["max-age=60", "no-transform"])
        #expect(headers.combinedValue(for: "cache-control") == "max-age=60, no-transform")
        #expect(headers.contains("Etag"))
        headers.replaceOrAdd(name: "Cache-Control", value: "no-store")
        #expect(headers.values(for: "cache-control") == ["no-store"])
        headers.remove(name: "ETAG")
        #expect(headers.count == 1)
        #expect(!OriginHeaders.namesMatch("a-b", "A_B"))
        #expect(OriginHeaders.namesMatch("Content-Length", "content-length"))
    }

    @Test func theFreshnessRulesReadThemAsTheyAre() {
        let headers: OriginHeaders = [("Cache-Control", "max-age=600")]
        let now = Date()
        let freshness = ResponseFreshness(status: 200, headers: headers, requestTime: now, responseTime: now)
        #expect(freshness.isStorable)
        #expect(freshness.lifetimeSource == .maxAge)
    }
}

@Suite("ConcurrencyLimiter")
struct ConcurrencyLimiterTests {
    @Test func aKeyAtItsLimitLetsOtherKeysPass() async throws {
        let limiter = ConcurrencyLimiter(total: 3, perKey: 1)
        #expect(await limiter.acquire("a"))
        let waitingForA = Task { await limiter.acquire("a") }
        while limiter.waiting < 1 { await Task.yield() }
        #expect(await limiter.acquire("b"), "b is not held up by a's line")
        #expect(await limiter.acquire("c"))
        #expect(limiter.held == 3)
        limiter.release("b")
        #expect(limiter.waiting == 1, "a is still at its own limit")
        limiter.release("a")
        #expect(await waitingForA.value)
        #expect(limiter.held == 2)
        limiter.release("a")
        limiter.release("c")
        #expect(limiter.held == 0)
    }

    @Test func waitersAreServedInOrderAndACancelledOneLeavesAtOnce() async throws {
        let limiter = ConcurrencyLimiter(total: 1, perKey: 1)
        #expect(await limiter.acquire("a"))
        let first = Task { await limiter.acquire("x") }
        while limiter.waiting < 1 { await Task.yield() }
        let second = Task { await limiter.acquire("y") }
        while limiter.waiting < 2 { await Task.yield() }
        first.cancel()
        #expect(await first.value == false)
        #expect(limiter.waiting == 1)
        limiter.release("a")
        #expect(await second.value)
        #expect(limiter.held == 1)
        limiter.release("y")
        // A task cancelled before it asks gets nothing.
        let late = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await limiter.acquire("z")
        }
        #expect(await late.value, "a free slot is taken even by a cancelled task: the caller checks cancellation")
        limiter.release("z")
    }
}
