#if canImport(Glibc)
    import Glibc
#endif

extension String {
    /// Whether the two strings have the same UTF-8 bytes.
    ///
    /// `String`'s `==` compares by canonical equivalence: "é" as U+00E9 and as "e" + U+0301 are
    /// equal strings with different bytes. Wherever a string decides identity — a key, a
    /// validator, a path, a record compared with the row that describes it — Trove compares
    /// bytes, as the index, the packs and the wire do. This compares the strings' own storage
    /// (as fast as `==` on native strings), and falls back to the bytes one by one for a string
    /// that has no contiguous storage (a bridged one).
    public func hasSameUTF8(as other: String) -> Bool {
        let compared = utf8.withContiguousStorageIfAvailable { x in
            other.utf8.withContiguousStorageIfAvailable { y in
                x.count == y.count && (x.count == 0 || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0)
            }
        }
        if let compared, let compared { return compared }
        return utf8.elementsEqual(other.utf8)
    }
}

extension Optional where Wrapped == String {
    /// Whether both are absent, or both present with the same UTF-8 bytes
    /// (``Swift/String/hasSameUTF8(as:)``).
    public func hasSameUTF8(as other: String?) -> Bool {
        switch (self, other) {
        case (nil, nil): true
        case (let a?, let b?): a.hasSameUTF8(as: b)
        default: false
        }
    }
}
