import TroveHTTP

/// Limits small enough that failing tests fail fast.
func testLimits(
    requestTimeout: Duration = .seconds(5), maximumBodySize: Int = 64 << 20, perHost: Int = 8, total: Int = 64,
    maximumRedirects: Int = 5
) -> OriginLimits {
    OriginLimits(
        connectTimeout: .seconds(2), requestTimeout: requestTimeout, maximumBodySize: maximumBodySize,
        maximumConcurrentRequestsPerHost: perHost, maximumConcurrentRequests: total, maximumRedirects: maximumRedirects)
}

/// Runs `body` with an `HTTPOrigin` and shuts it down afterwards, thrown or not.
func withHTTPOrigin<T>(limits: OriginLimits = testLimits(), _ body: (HTTPOrigin) async throws -> T) async throws -> T {
    let origin = HTTPOrigin(limits: limits)
    do {
        let result = try await body(origin)
        try await origin.shutdown()
        return result
    } catch {
        try? await origin.shutdown()
        throw error
    }
}

/// The error `fetch` threw, or nil when it returned.
func fetchError(_ fetcher: some OriginFetching, _ request: OriginRequest) async -> OriginError? {
    do {
        _ = try await fetcher.fetch(request)
        return nil
    } catch {
        return error
    }
}
