import Foundation
import Testing
import TroveCore
import TroveHTTP
import TroveStoreTestSupport
import TroveTestSupport

@testable import Trove

/// Canonically equivalent spellings of a URL are two keys (`CacheKey` compares bytes): the
/// pipeline's stage for originals must not join a request for one to a download of the other,
/// which `String`'s `==` — the stage's key before 2026-11-28 — calls the same URL.
@Suite struct KeyBytesPipelineTests {
    @Test func equivalentSpellingsOfAURLAreFetchedApart() async throws {
        try await withTemporaryDirectory { dir in
            // A Linux file system names files by bytes: both spellings are files of their own.
            let composed = dir + "/caf\u{E9}.jpg"
            let decomposed = dir + "/cafe\u{301}.jpg"
            let first = try jpeg(320, 240, seed: 10)
            let second = try jpeg(320, 240, seed: 200)
            #expect(first != second)
            try Data(first).write(to: URL(fileURLWithPath: composed))
            try Data(second).write(to: URL(fileURLWithPath: decomposed))
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir).count == 2)
            var configuration = Store.Configuration()
            configuration.compactionInterval = nil
            let store = try Store(directory: dir + "/store", configuration: configuration)
            let pipeline = ImagePipeline(store: store, origin: FileOrigin(root: dir))
            // Raw, not percent-encoded: the two URL strings are `==` as Swift strings.
            let urls = ["file://" + composed, "file://" + decomposed]
            #expect(urls[0] == urls[1] && Array(urls[0].utf8) != Array(urls[1].utf8))
            let served = try await withThrowingTaskGroup(of: (Int, [UInt8]).self) { group in
                for i in 0..<40 {
                    group.addTask { (i % 2, Array(try await pipeline.image(for: urls[i % 2]).data)) }
                }
                return try await group.reduce(into: [(Int, [UInt8])]()) { $0.append($1) }
            }
            for (which, bytes) in served { #expect(bytes == (which == 0 ? first : second), "spelling \(which)") }
            #expect(try store.data(for: CacheKey(url: urls[0])).map(Array.init) == first)
            #expect(try store.data(for: CacheKey(url: urls[1])).map(Array.init) == second)
            try await pipeline.shutdown()
            try store.close()
        }
    }
}
