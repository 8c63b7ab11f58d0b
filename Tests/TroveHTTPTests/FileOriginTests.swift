import Foundation
import Testing
import TroveCore
import TroveTestSupport

@testable import TroveHTTP

/// FileOrigin: local originals with size-and-mtime validators.
@Suite("FileOrigin")
struct FileOriginTests {
    private func write(_ bytes: [UInt8], to path: String, modified: Date? = nil) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        if let modified {
            try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: path)
        }
    }

    private func fileURL(_ path: String) -> String { URL(fileURLWithPath: path).absoluteString }

    @Test func fetchesAFileWithValidatorsMadeFromSizeAndModificationTime() async throws {
        try await withTemporaryDirectory { directory in
            let path = "\(directory)/a photo.png"
            let bytes = pngLike(count: 4096)
            let modified = Date(timeIntervalSince1970: 1_700_000_000.25)
            try write(bytes, to: path, modified: modified)
            let response = try await FileOrigin().fetch(OriginRequest(url: fileURL(path)))
            #expect(fileURL(path).contains("%20"))
            #expect(response.status == 200)
            #expect(response.body == Data(bytes))
            #expect(response.format == .png)
            #expect(response.headers["Content-Type"] == "image/png")
            #expect(response.headers["Content-Length"] == "4096")
            #expect(response.headers["ETag"] == "\"1000-\(String(1_700_000_000_250_000_000, radix: 16))\"")
            #expect(response.headers["Last-Modified"] == "Tue, 14 Nov 2023 22:13:20 GMT")
            #expect(response.requestedURL == fileURL(path) && response.finalURL == fileURL(path))
            #expect(response.requestTime <= response.responseTime)
        }
    }

    @Test func aConditionalRequestIsAnswered304UntilTheFileChanges() async throws {
        try await withTemporaryDirectory { directory in
            let path = "\(directory)/a.jpg"
            try write(jpegLike(count: 1000), to: path, modified: Date(timeIntervalSince1970: 1_600_000_000))
            let origin = FileOrigin()
            let first = try await origin.fetch(OriginRequest(url: fileURL(path)))
            let validators = first.validators

            let byTag = try await origin.fetch(OriginRequest(url: fileURL(path), validators: validators))
            #expect(byTag.status == 304)
            #expect(byTag.body.isEmpty)
            #expect(byTag.headers["ETag"] == validators.entityTag)
            let weak = Validators(entityTag: "W/" + validators.entityTag!)
            #expect(try await origin.fetch(OriginRequest(url: fileURL(path), validators: weak)).status == 304)
            let byDate = Validators(lastModified: validators.lastModified)
            #expect(try await origin.fetch(OriginRequest(url: fileURL(path), validators: byDate)).status == 304)
            let earlier = Validators(lastModified: "Sun, 13 Sep 2020 12:26:39 GMT")
            #expect(try await origin.fetch(OriginRequest(url: fileURL(path), validators: earlier)).status == 200)

            // Same size, new modification time (even within the same second): a new ETag.
            try write(jpegLike(count: 1000, seed: 5), to: path, modified: Date(timeIntervalSince1970: 1_600_000_000.5))
            let changed = try await origin.fetch(OriginRequest(url: fileURL(path), validators: validators))
            #expect(changed.status == 200)
            #expect(changed.body == Data(jpegLike(count: 1000, seed: 5)))
            #expect(changed.validators.entityTag != validators.entityTag)
        }
    }

    @Test func aMissingFileIsA404() async {
        await withTemporaryDirectory { directory in
            let error = await fetchError(FileOrigin(), OriginRequest(url: fileURL("\(directory)/missing.jpg")))
            #expect(error?.code == .status)
            #expect(error?.status == 404)
            let inFile = await fetchError(FileOrigin(), OriginRequest(url: fileURL("\(directory)/missing.jpg/x")))
            #expect(inFile?.status == 404)
        }
    }

    @Test func aFileOverTheLimitIsRefusedBeforeItIsRead() async throws {
        try await withTemporaryDirectory { directory in
            let path = "\(directory)/big.jpg"
            try write(jpegLike(count: 2000), to: path)
            let error = await fetchError(FileOrigin(maximumBodySize: 1999), OriginRequest(url: fileURL(path)))
            #expect(error?.code == .tooLarge)
            #expect(try await FileOrigin(maximumBodySize: 2000).fetch(OriginRequest(url: fileURL(path))).body.count == 2000)
        }
    }

    @Test func onlyRegularFilesAreRead() async {
        await withTemporaryDirectory { directory in
            #expect(await fetchError(FileOrigin(), OriginRequest(url: fileURL(directory)))?.code == .io)
            #expect(mkfifo("\(directory)/fifo", 0o644) == 0)
            let start = ContinuousClock.now
            #expect(await fetchError(FileOrigin(), OriginRequest(url: fileURL("\(directory)/fifo")))?.code == .io)
            #expect(ContinuousClock.now - start < .seconds(1), "opening a FIFO does not block")
        }
    }

    @Test func aRootKeepsFetchesInsideIt() async throws {
        try await withTemporaryDirectory { directory in
            let root = "\(directory)/root"
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
            try write(jpegLike(count: 10), to: "\(root)/in.jpg")
            try write(jpegLike(count: 10), to: "\(directory)/out.jpg")
            try FileManager.default.createSymbolicLink(atPath: "\(root)/link.jpg", withDestinationPath: "\(directory)/out.jpg")
            let origin = FileOrigin(root: root)
            #expect(try await origin.fetch(OriginRequest(url: fileURL("\(root)/in.jpg"))).status == 200)
            for path in ["\(directory)/out.jpg", "\(root)/link.jpg", "\(root)/../out.jpg"] {
                let error = await fetchError(origin, OriginRequest(url: "file://" + path))
                #expect(error?.code == .status && error?.status == 403, "\(path)")
            }
            // Without a root, the link is followed.
            #expect(try await FileOrigin().fetch(OriginRequest(url: fileURL("\(root)/link.jpg"))).status == 200)
        }
    }

    /// A sibling directory whose name is a canonically equivalent spelling of the root's is
    /// another directory (Linux names files by bytes): outside the root. (`hasPrefix` compared
    /// characters and let it through; found by an outside review, 2026-11-28.)
    @Test func aRootIsComparedByBytes() async throws {
        try await withTemporaryDirectory { directory in
            let root = "\(directory)/caf\u{E9}"
            let sibling = "\(directory)/cafe\u{301}"
            for dir in [root, sibling] { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory).count == 2)
            try write(jpegLike(count: 10), to: "\(root)/in.jpg")
            try write(jpegLike(count: 20), to: "\(sibling)/secret.jpg")
            try FileManager.default.createSymbolicLink(atPath: "\(root)/link.jpg", withDestinationPath: "\(sibling)/secret.jpg")
            let origin = FileOrigin(root: root)
            #expect(try await origin.fetch(OriginRequest(url: "file://\(root)/in.jpg")).status == 200)
            for path in ["\(sibling)/secret.jpg", "\(root)/link.jpg", "\(root)/../cafe\u{301}/secret.jpg"] {
                let error = await fetchError(origin, OriginRequest(url: "file://" + path))
                #expect(error?.code == .status && error?.status == 403, "\(path)")
            }
        }
    }

    /// Validators are octets: a 304 whose ETag or Last-Modified is a canonically equivalent
    /// spelling of the stored one does not identify the stored bytes.
    @Test func validatorsAreComparedByBytes() {
        let now = Date()
        let stored = Validators(entityTag: "\"caf\u{E9}\"", lastModified: "x\u{E9}")
        #expect(stored.areIdentified(byNotModified: Validators(entityTag: "\"caf\u{E9}\""), now: now))
        #expect(!stored.areIdentified(byNotModified: Validators(entityTag: "\"cafe\u{301}\""), now: now))
        #expect(!stored.areIdentified(byNotModified: Validators(entityTag: "W/\"cafe\u{301}\""), now: now))
        #expect(stored.areIdentified(byNotModified: Validators(lastModified: "x\u{E9}"), now: now))
        #expect(!stored.areIdentified(byNotModified: Validators(lastModified: "xe\u{301}"), now: now))
    }

    @Test func aFileThatIsNotAnImageIsRefusedUnlessAllowed() async throws {
        try await withTemporaryDirectory { directory in
            let path = "\(directory)/notes.txt"
            try write(Array("hello".utf8), to: path)
            #expect(await fetchError(FileOrigin(), OriginRequest(url: fileURL(path)))?.code == .notAnImage)
            let allowed = try await FileOrigin().fetch(OriginRequest(url: fileURL(path), requiresImage: false))
            #expect(allowed.format == nil)
            #expect(allowed.headers["Content-Type"] == "application/octet-stream")
        }
    }

    @Test func aCutImageFileIsTruncated() async throws {
        try await withTemporaryDirectory { directory in
            let path = "\(directory)/partial.jpg"
            try write(Array(jpegLike(count: 10_000).prefix(6000)), to: path)
            #expect(await fetchError(FileOrigin(), OriginRequest(url: fileURL(path)))?.code == .truncated)
        }
    }

    @Test func fileURLsMustNameALocalAbsolutePath() async throws {
        for url in ["file://example.com/a.jpg", "http://example.com/a.jpg", "file:relative.jpg", "nonsense"] {
            #expect(await fetchError(FileOrigin(), OriginRequest(url: url))?.code == .invalidURL, "\(url)")
        }
        #expect(FileOrigin.path(of: "file://localhost/tmp/a%20b.jpg") == "/tmp/a b.jpg")
        #expect(FileOrigin.path(of: "file:///tmp/a.jpg") == "/tmp/a.jpg")
    }

    @Test func aCancelledTaskReadsNothing() async throws {
        try await withTemporaryDirectory { directory in
            let path = "\(directory)/a.jpg"
            try write(jpegLike(count: 100), to: path)
            let task = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return await fetchError(FileOrigin(), OriginRequest(url: fileURL(path)))
            }
            #expect(await task.value?.code == .cancelled)
        }
    }

    /// A conditional request's entity tag is compared with the file's by bytes (RFC 9110
    /// §8.8.3): a canonically equivalent spelling is another tag, and `W/` is two bytes.
    @Test func entityTagsAreComparedByBytes() {
        #expect(
            !FileOrigin.isNotModified(Validators(entityTag: "\"caf\u{E9}\""), entityTag: "\"cafe\u{301}\"", modifiedSeconds: 0))
        #expect(
            !FileOrigin.isNotModified(Validators(entityTag: "W/\"caf\u{E9}\""), entityTag: "\"cafe\u{301}\"", modifiedSeconds: 0))
        #expect(
            FileOrigin.isNotModified(Validators(entityTag: "W/\"caf\u{E9}\""), entityTag: "\"caf\u{E9}\"", modifiedSeconds: 0))
        #expect(FileOrigin.isNotModified(Validators(entityTag: "W/\u{301}\"a\""), entityTag: "\u{301}\"a\"", modifiedSeconds: 0))
    }
}
