/// The space a ``PackWriter`` prepared past its last record (``WarmAheadPolicy``: a hole), as a
/// crash or a killed process leaves it in the newest segment: opening cuts it without calling it
/// damage, because it never held a record — only past what the index reflects (a hole over
/// committed records is damage, reported), and never in a rebuild, which has no index to say so.
///
/// What it is, exactly: a hole that lasts to the end of the file (the file system reports no
/// data in it: nothing was ever written there), and before it, at most one block of zeros — the
/// rest of the block that holds the last record's end (a block is data once any byte of it is
/// written). Anything else past the last record — a record cut short, zeros that were written,
/// a hole followed by data, a hole or zeros over what the index reflects — stays a torn tail,
/// reported as before. Cutting a trailing hole past the index loses nothing a truncation would
/// not: the bytes there were never written, so a record that was there (written after the last
/// sync, lost in a power cut before writeback) is gone either way, as it would be from a file
/// that had ended before it.
public enum PreparedTail {
    /// The most zeros accepted before the hole: less than one block of the file system (at most
    /// 64 KiB, and 4 KiB when it does not say).
    static func leftoverLimit(_ file: SegmentFile) -> UInt64 {
        min(file.blockSize ?? 4_096, 64 << 10)
    }

    /// Where `file`'s trailing hole starts, if it has one at or past `floor` (what the index
    /// already reflects): the end of the file as a scan should see it, and the offset
    /// ``isLeftover(_:in:cutAt:above:)`` needs. Nothing is cut here: the caller cuts the hole
    /// together with what a scan up to it finds torn (the leftover zeros of its first block),
    /// in one truncation. Cut on its own first, a kill before the second cut would leave those
    /// zeros ending the file with no hole after them, which the next opening can no longer
    /// tell from a torn write and reports as one.
    public static func start(_ file: SegmentFile, above floor: UInt64) throws -> UInt64? {
        guard let start = try file.trailingHole(), start >= floor else { return nil }
        return start
    }

    /// Whether `torn`, the torn tail a scan up to `cutAt` (from ``start(_:above:)``) found, is
    /// only the leftover of the block the hole started after: it ends where the hole was cut,
    /// starts at or past `floor` (what the index reflects: zeros over committed records are
    /// damage), spans less than a block, and holds zeros only.
    public static func isLeftover(_ torn: DamagedRange, in file: SegmentFile, cutAt: UInt64?, above floor: UInt64) throws
        -> Bool
    {
        guard torn.end == cutAt, torn.start >= floor else { return false }
        return try isLeftover(torn.start, in: file, cutAt: cutAt)
    }

    /// Whether the bytes from `offset` to `cutAt` (from ``start(_:above:)``) are only the
    /// leftover of the block the hole started after: fewer than a block, zeros only. What the
    /// index reflects ending there is the usual state a kill leaves in the newest segment: no
    /// record past it, so nothing before it need be scanned again.
    public static func isLeftover(_ offset: UInt64, in file: SegmentFile, cutAt: UInt64?) throws -> Bool {
        guard let cutAt, offset < cutAt, cutAt - offset < leftoverLimit(file) else { return false }
        let count = Int(cutAt - offset)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: count, alignment: 16)
        defer { buffer.deallocate() }
        guard try file.read(into: buffer, at: offset) == count else { return false }
        return buffer.allSatisfy { $0 == 0 }
    }
}
