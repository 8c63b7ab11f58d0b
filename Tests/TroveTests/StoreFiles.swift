import Foundation
import TrovePack

/// Paths and byte surgery on a test store's files.
struct StoreFiles {
    let root: String
    var store: String { root + "/store" }
    var packs: String { store + "/packs" }

    func segment(_ id: UInt32) -> String { packs + "/" + PackFormat.fileName(forSegment: id) }

    func segmentIDs() throws -> [UInt32] { try PackDirectory.segmentIDs(in: packs) }

    func size(_ path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.intValue ?? 0
    }

    func flip(_ path: String, at offset: Int, mask: UInt8 = 0x5A) throws {
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64(offset))
        let byte = try handle.read(upToCount: 1)?.first ?? 0
        try handle.seek(toOffset: UInt64(offset))
        try handle.write(contentsOf: [byte ^ mask])
    }

    func truncate(_ path: String, to length: Int) throws {
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.truncate(atOffset: UInt64(length))
    }

    func append(_ path: String, _ bytes: [UInt8]) throws {
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.seekToEnd()
        try handle.write(contentsOf: bytes)
    }

    func copyStore(to destination: String) throws {
        try? FileManager.default.removeItem(atPath: destination)
        try FileManager.default.copyItem(atPath: store, toPath: destination)
    }
}
