/// A shard's recent invalidations, which decide whether an insert made with an insertion
/// token may go ahead (``MemoryCache/insertionToken(for:)``).
///
/// Every invalidation — of a key (a store change, `remove`) or of all keys of a URL
/// (`removeAll(url:)`) — advances ``epoch`` by one and is remembered by its hash in a ring of
/// the last ``capacity``. A token is the epoch when it was taken; the invalidations since are
/// the last `epoch - token` of the ring, as long as the ring still holds that many. Beyond that,
/// and after ``recordEverything()``, the log cannot tell and the insert is refused.
struct InvalidationLog {
    /// How many invalidations a shard remembers. A fill that takes longer than this many
    /// invalidations in its shard is refused even if its own key was not touched.
    static let capacity = 64

    /// One invalidation: a key's hash, or a URL's hash covering all its keys.
    private struct Record {
        var hash = 0
        var isURL = false
    }

    /// Invalidations so far.
    private(set) var epoch: UInt64 = 0
    /// The last invalidations: the one that moved the epoch from `e` to `e + 1` is at
    /// `e % capacity`.
    private var recent = [Record](repeating: Record(), count: capacity)
    /// How many of the last epochs `recent` holds (the rest were overwritten, or cleared).
    private var remembered = 0

    /// Records an invalidation of the key with hash `hash`.
    mutating func record(_ hash: Int) {
        append(Record(hash: hash, isURL: false))
    }

    /// Records an invalidation of every key of the URL with hash `urlHash`.
    mutating func record(url urlHash: Int) {
        append(Record(hash: urlHash, isURL: true))
    }

    /// Records an invalidation of every key: every earlier token is refused.
    mutating func recordEverything() {
        epoch += 1
        remembered = 0
    }

    /// How many invalidations since epoch `since` touched the key with `hashes`; nil when the
    /// log no longer reaches back that far (or `since` is not an epoch it has seen).
    func changes(of hashes: KeyHashes, since: UInt64) -> Int? {
        guard since <= epoch, epoch - since <= UInt64(remembered) else { return nil }
        var changes = 0
        var e = since
        while e < epoch {
            let record = recent[Int(e % UInt64(Self.capacity))]
            if record.hash == (record.isURL ? hashes.urlHash : hashes.hash) { changes += 1 }
            e += 1
        }
        return changes
    }

    private mutating func append(_ record: Record) {
        recent[Int(epoch % UInt64(Self.capacity))] = record
        epoch += 1
        remembered = min(remembered + 1, Self.capacity)
    }
}
