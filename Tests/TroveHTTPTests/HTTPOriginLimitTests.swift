import Foundation
import Testing
import TroveHTTP
import TroveOrigin
import TroveTestSupport

/// HTTPOrigin's limits against a misbehaving loopback origin: sizes, lengths, timeouts,
/// cancellation and concurrency.
@Suite("HTTPOrigin: limits")
struct HTTPOriginLimitTests {
    @Test func aDeclaredLengthOverTheLimitFailsBeforeTheBody() async throws {
        try await withOriginServer { server in
            let block = jpegLike(count: 1 << 20)
            server.set("/big", OriginResource(body: block, repetitions: 512))  // 512 MiB declared
            try await withHTTPOrigin(limits: testLimits(maximumBodySize: 1 << 20)) { origin in
                let start = ContinuousClock.now
                let error = try #require(await fetchError(origin, OriginRequest(url: server.url("/big"))))
                #expect(error.code == .tooLarge)
                #expect(error.message.contains("declares"))
                #expect(ContinuousClock.now - start < .seconds(5))
                // Exactly the limit is accepted.
                server.set("/fits", OriginResource(body: block))
                #expect(try await origin.fetch(OriginRequest(url: server.url("/fits"))).body.count == 1 << 20)
            }
            #expect(await server.wait { $0.connectionsClosedByClient >= 1 })
            #expect(server.statistics.bodyBytesSent < 64 << 20, "the client hung up instead of reading on")
        }
    }

    @Test func aStreamedBodyOverTheLimitFailsWhileStreaming() async throws {
        try await withOriginServer { server in
            // Chunked, no declared length: 1 GiB on the wire unless the client stops.
            server.set(
                "/stream",
                OriginResource(body: jpegLike(count: 64 * 1024), repetitions: 16_384, behaviour: .chunked(chunkSize: 16 * 1024)))
            try await withHTTPOrigin(limits: testLimits(maximumBodySize: 1 << 20)) { origin in
                let start = ContinuousClock.now
                let error = try #require(await fetchError(origin, OriginRequest(url: server.url("/stream"))))
                #expect(error.code == .tooLarge)
                #expect(error.message.contains("more than the limit"))
                #expect(ContinuousClock.now - start < .seconds(5))
            }
            #expect(await server.wait { $0.connectionsClosedByClient == 1 })
            #expect(server.statistics.bodyBytesSent < 64 << 20)
        }
    }

    @Test func aChunkedBodyWithinTheLimitIsWhole() async throws {
        try await withOriginServer { server in
            let body = jpegLike(count: 300_000)
            server.set("/c", OriginResource(body: body, behaviour: .chunked(chunkSize: 7000)))
            try await withHTTPOrigin { origin in
                let response = try await origin.fetch(OriginRequest(url: server.url("/c")))
                #expect(response.body == Data(body))
            }
        }
    }

    @Test func aDeclaredLengthLargerThanTheBodyIsTruncated() async throws {
        try await withOriginServer { server in
            server.set("/more", OriginResource(body: jpegLike(count: 1000), behaviour: .declareLength(5000)))
            try await withHTTPOrigin { origin in
                let error = try #require(await fetchError(origin, OriginRequest(url: server.url("/more"))))
                #expect(error.code == .truncated)
            }
        }
    }

    @Test func aDeclaredLengthSmallerThanTheBodyIsAnError() async throws {
        // HTTP/1.1 framing makes the first 1000 bytes the whole message (the rest is garbage on
        // the connection): only the image's own end marker shows it was cut.
        try await withOriginServer { server in
            server.set("/fewer", OriginResource(body: jpegLike(count: 5000), behaviour: .declareLength(1000)))
            try await withHTTPOrigin { origin in
                let error = try #require(await fetchError(origin, OriginRequest(url: server.url("/fewer"))))
                #expect(error.code == .truncated)
                #expect(error.message.contains("JPEG"))
            }
        }
    }

    @Test func aCloseDelimitedBodyIsCheckedByTheImageItself() async throws {
        try await withOriginServer { server in
            let png = pngLike(count: 50_000)
            server.set("/whole", OriginResource(body: png, behaviour: .closeDelimited(afterBytes: .max)))
            server.set("/cut", OriginResource(body: png, behaviour: .closeDelimited(afterBytes: 20_000)))
            try await withHTTPOrigin { origin in
                let whole = try await origin.fetch(OriginRequest(url: server.url("/whole")))
                #expect(whole.body == Data(png))
                #expect(whole.headers["Content-Length"] == nil)
                #expect(await fetchError(origin, OriginRequest(url: server.url("/cut")))?.code == .truncated)
            }
        }
    }

    @Test func withoutRequiringAnImageOnlyTheFramingIsChecked() async throws {
        // The documented limit of HTTP/1 framing: a close-delimited body cut short looks whole.
        try await withOriginServer { server in
            server.set("/cut", OriginResource(body: pngLike(count: 50_000), behaviour: .closeDelimited(afterBytes: 20_000)))
            server.set("/declared", OriginResource(body: pngLike(count: 50_000), behaviour: .truncate(afterBytes: 20_000)))
            try await withHTTPOrigin { origin in
                let cut = try await origin.fetch(OriginRequest(url: server.url("/cut"), requiresImage: false))
                #expect(cut.body.count == 20_000)
                let declared = await fetchError(origin, OriginRequest(url: server.url("/declared"), requiresImage: false))
                #expect(declared?.code == .truncated, "a declared length is always enforced")
            }
        }
    }

    @Test func aBodyCutMidwayIsTruncated() async throws {
        try await withOriginServer { server in
            server.set("/cut", OriginResource(body: jpegLike(count: 100_000), behaviour: .truncate(afterBytes: 40_000)))
            try await withHTTPOrigin { origin in
                let error = try #require(await fetchError(origin, OriginRequest(url: server.url("/cut"))))
                #expect(error.code == .truncated)
                #expect(error.attempts == 1)
            }
        }
    }

    @Test func aStalledBodyHitsTheWholeRequestTimeout() async throws {
        try await withOriginServer { server in
            server.set("/stall", OriginResource(body: jpegLike(count: 100_000), behaviour: .stall(afterBytes: 10_000)))
            try await withHTTPOrigin(limits: testLimits(requestTimeout: .milliseconds(400))) { origin in
                let start = ContinuousClock.now
                let error = try #require(await fetchError(origin, OriginRequest(url: server.url("/stall"))))
                let elapsed = ContinuousClock.now - start
                #expect(error.code == .timeout)
                #expect(elapsed >= .milliseconds(400) && elapsed < .seconds(3), "\(elapsed)")
            }
            #expect(await server.wait { $0.connectionsClosedByClient == 1 }, "the stalled connection was closed")
        }
    }

    @Test func aLateHeadHitsTheWholeRequestTimeout() async throws {
        try await withOriginServer { server in
            server.set("/late", OriginResource(body: jpegLike(count: 10), headDelay: .seconds(3)))
            try await withHTTPOrigin(limits: testLimits(requestTimeout: .milliseconds(500))) { origin in
                let start = ContinuousClock.now
                #expect(await fetchError(origin, OriginRequest(url: server.url("/late")))?.code == .timeout)
                #expect(ContinuousClock.now - start < .seconds(3))
            }
            #expect(server.requestCount(for: "/late") <= 1, "a timeout is not retried")
        }
    }

    @Test func cancellationThrowsAtOnceAndTheOriginSeesTheConnectionClosed() async throws {
        try await withOriginServer { server in
            server.set("/stall", OriginResource(body: jpegLike(count: 100_000), behaviour: .stall(afterBytes: 5000)))
            try await withHTTPOrigin { origin in
                let task = Task { await fetchError(origin, OriginRequest(url: server.url("/stall"))) }
                #expect(await server.wait { $0.inFlightRequests == 1 && $0.bodyBytesSent >= 5000 })
                try await Task.sleep(for: .milliseconds(50))  // the client is reading the body now
                let cancelled = ContinuousClock.now
                task.cancel()
                let error = await task.value
                #expect(error?.code == .cancelled)
                #expect(ContinuousClock.now - cancelled < .seconds(1))
                #expect(await server.wait { $0.connectionsClosedByClient == 1 && $0.inFlightRequests == 0 })
            }
        }
    }

    @Test func cancellationBeforeTheHeadClosesTheConnectionToo() async throws {
        try await withOriginServer { server in
            server.set("/late", OriginResource(body: jpegLike(count: 10), headDelay: .seconds(10)))
            try await withHTTPOrigin { origin in
                let task = Task { await fetchError(origin, OriginRequest(url: server.url("/late"))) }
                #expect(await server.wait { $0.inFlightRequests == 1 })
                task.cancel()
                #expect(await task.value?.code == .cancelled)
                #expect(await server.wait { $0.connectionsClosedByClient == 1 })
            }
        }
    }

    @Test func theGlobalConcurrencyLimitHolds() async throws {
        try await withOriginServer { server in
            // Long enough that three requests overlap however slowly connections open on a
            // loaded machine.
            server.set("/slow", OriginResource(body: jpegLike(count: 1000), headDelay: .milliseconds(400)))
            try await withHTTPOrigin(limits: testLimits(perHost: 8, total: 3)) { origin in
                try await withThrowingTaskGroup(of: Int.self) { group in
                    for index in 0..<10 {
                        group.addTask {
                            try await origin.fetch(OriginRequest(url: server.url("/slow?\(index)"))).status
                        }
                    }
                    for try await status in group { #expect(status == 200) }
                }
            }
            #expect(server.statistics.peakInFlightRequests == 3)
            #expect(server.requestCount(for: "/slow") == 10)
        }
    }

    @Test func thePerHostLimitHoldsForEachOriginAndLetsOthersPass() async throws {
        try await withOriginServer { first in
            try await withOriginServer { second in
                first.set("/hold", OriginResource(body: jpegLike(count: 1000), behaviour: .stall(afterBytes: 10)))
                second.set("/ok", OriginResource(body: jpegLike(count: 1000)))
                try await withHTTPOrigin(limits: testLimits(perHost: 2, total: 64)) { origin in
                    let held = (0..<3).map { _ in
                        Task { await fetchError(origin, OriginRequest(url: first.url("/hold"))) }
                    }
                    #expect(await first.wait { $0.inFlightRequests == 2 })
                    // The other origin is served while the first is at its limit …
                    try await withThrowingTaskGroup(of: Int.self) { group in
                        for _ in 0..<4 {
                            group.addTask { try await origin.fetch(OriginRequest(url: second.url("/ok"))).status }
                        }
                        for try await status in group { #expect(status == 200) }
                    }
                    // … and the third request to the first one is still waiting for a slot.
                    #expect(first.requestCount(for: "/hold") == 2)
                    for task in held { task.cancel() }
                    for task in held { #expect(await task.value?.code == .cancelled) }
                }
                #expect(first.statistics.peakInFlightRequests == 2)
                #expect(second.statistics.peakInFlightRequests <= 2)
                #expect(second.statistics.connectionsAccepted <= 2, "the pool keeps at most 2 connections per origin")
            }
        }
    }

    @Test func aRequestWaitingForASlotLeavesAtOnceWhenCancelled() async throws {
        try await withOriginServer { server in
            server.set("/hold", OriginResource(body: jpegLike(count: 100), behaviour: .stall(afterBytes: 10)))
            server.set("/next", OriginResource(body: jpegLike(count: 100)))
            try await withHTTPOrigin(limits: testLimits(total: 1)) { origin in
                let holder = Task { await fetchError(origin, OriginRequest(url: server.url("/hold"))) }
                #expect(await server.wait { $0.inFlightRequests == 1 })
                let waiter = Task { await fetchError(origin, OriginRequest(url: server.url("/next"))) }
                try await Task.sleep(for: .milliseconds(100))
                let cancelled = ContinuousClock.now
                waiter.cancel()
                #expect(await waiter.value?.code == .cancelled)
                #expect(ContinuousClock.now - cancelled < .seconds(1))
                #expect(server.requestCount(for: "/next") == 0, "it never reached the origin")
                holder.cancel()
                #expect(await holder.value?.code == .cancelled)
                // The slot is free again.
                #expect(try await origin.fetch(OriginRequest(url: server.url("/next"))).status == 200)
            }
        }
    }

    @Test func keepAliveServesManyRequestsOnFewConnections() async throws {
        try await withOriginServer { server in
            for index in 0..<64 { server.set("/\(index)", OriginResource(body: jpegLike(count: 64 * 1024, seed: UInt64(index)))) }
            // 256 fetches queue for 8 connections, and a fetch's timeout counts its wait for one:
            // the last ones wait for most of the run (~4 s in a debug build), so the test's usual
            // 5 s timed out on a loaded machine. This test is about connections, not time.
            try await withHTTPOrigin(limits: testLimits(requestTimeout: .seconds(60))) { origin in
                try await withThrowingTaskGroup(of: Bool.self) { group in
                    for index in 0..<256 {
                        group.addTask {
                            let response = try await origin.fetch(OriginRequest(url: server.url("/\(index % 64)")))
                            return response.body == Data(jpegLike(count: 64 * 1024, seed: UInt64(index % 64)))
                        }
                    }
                    for try await matches in group { #expect(matches) }
                }
            }
            #expect(server.statistics.connectionsAccepted <= 8)
        }
    }
}
