public import TroveCore

/// A change to what a key serves or where its bytes are, reported to
/// ``Store/Configuration/keyChanges`` — what a cache in front of the store (a memory tier)
/// needs to stay right.
public struct KeyChange: Hashable, Sendable {
    /// What happened to the key.
    public enum Kind: Hashable, Sendable {
        /// It has a new value: a put, or repair, a rebuild or opening's replay restoring an
        /// entry from its record.
        case stored
        /// It has no value any more: a removal (one key or a URL's), expiry or eviction by the
        /// compactor, a damaged record dropped, or repair. (An entry that passes its expiry is
        /// a miss from that instant, with no event until the compactor removes it: a cache in
        /// front checks expiry itself.)
        case removed
        /// Same value, new place: the compactor (or a read that found it moved) relocated its
        /// records.
        case relocated
    }

    /// The key.
    public var key: CacheKey
    /// What happened to it.
    public var kind: Kind

    public init(key: CacheKey, kind: Kind) {
        self.key = key
        self.kind = kind
    }
}
