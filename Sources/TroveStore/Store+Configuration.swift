public import TroveCore
public import TrovePack

extension Store {
    /// The settings of a store. Every property has a default that suits an image cache.
    public struct Configuration: Sendable {
        /// When writes are made durable. Default: ``Durability/batched``.
        public var durability: Durability = .batched

        /// The size at which the active pack segment is sealed and a new one started.
        /// Default: 64 MiB. A larger blob gets a segment of its own.
        public var segmentSize: Int64 = 64 << 20

        /// Bytes of zeros kept in the active segment's file ahead of its writes — written and
        /// synced on a thread of the store's own — so that a write lands inside the file, on blocks
        /// it already has, and its fdatasync writes no file metadata (no journal commit; on ext4
        /// without a journal, no inode write). Default 0: none. Measured here under `full`
        /// (Docs/Benchmarks.md, "zeros ahead of `full` writes"): a sync after such a write costs
        /// 150–276 µs, fills included, against 219–297 µs after an append, and the median `full`
        /// put fell in most rows (64 KiB: 196–240 µs against 326–596); but a writer's sync that
        /// comes between a fill's write and its sync writes the zeros back too, so the slowest puts
        /// (p99) got 2–9 times slower, and eight writers gained nothing reliable — hence off. Every
        /// byte reaches the disk twice, and the file holds up to 1¼ times this much past its
        /// records (counted in ``Store/statistics()`` and against ``capacity``); the zeros are cut
        /// when the segment is sealed and when the store closes; after a crash, opening cuts them
        /// from the newest segment as a torn tail (reported).
        public var zeroFill: Int64 = 0

        /// Bytes of the active segment's file kept in the page cache ahead of its writes, when
        /// ``zeroFill`` is 0. Default 0: none; 4 MiB is what was measured. The writer extends the
        /// file by up to this much at a time — a hole: no disk space, nothing written, nothing
        /// synced — and a thread of the store's reads the hole into the page cache, so that the
        /// kernel allocates and zeroes the pages there rather than inside a put's write. For one
        /// writer of small values, above all on a virtual machine whose host backs the guest's
        /// memory only when it is first touched: measured here (Docs/Benchmarks.md, "pages ahead
        /// of the writes"), a burst of 4 KiB `batched` puts ran 25–33 % faster on a freshly booted
        /// VM and about as fast later, and `trove bench`'s medians of the 4 KiB and dedup-heavy
        /// rows fell 14–61 %. But the reading costs CPU on another thread (~1.5 µs a page), which
        /// writers that keep every core busy lose: eight `batched` writers of 20 KB on two cores
        /// ran 7–25 % slower — hence off. Only while the writes average at most 32 KiB (larger
        /// ones ran as fast or slower into warmed pages). A put never waits for it. The file holds
        /// up to this much past its records (not counted by ``Store/statistics()`` or against
        /// ``capacity``: a hole takes no space); the hole is cut when the segment is sealed and
        /// when the store closes, and after a crash opening cuts it without a report (it never
        /// held a record; Docs/Architecture.md, "Pages ahead of the writes").
        public var warmAhead: Int64 = 0

        /// How often the committer thread syncs queued writes (``Durability/batched``) and applies
        /// them to the index. Default: 10 ms.
        public var batchInterval: Duration = .milliseconds(10)

        /// Queued writes that wake the committer before ``batchInterval`` ends. Default: 256.
        /// Eight times as many make writers run a commit cycle themselves (back-pressure).
        public var batchSize: Int = 256

        /// How often read times are written to the index; reads never wait for it.
        /// Default: 5 s. Read times of the last interval may be lost in a crash (only LRU
        /// order suffers).
        public var accessTimeFlushInterval: Duration = .seconds(5)

        /// How many entries the in-memory key → location map may hold (the index answers
        /// misses). Default: 100 000. Past it, the next commit cycle lets go of slots — the oldest
        /// first, by the put that last wrote each or the get that missed and filled it (a get
        /// that finds a slot does not renew it), never those of writes not yet committed —
        /// until the map is a sixteenth under the limit.
        /// A slot costs a few hundred bytes of heap (its key and row, URL text included);
        /// `trove bench` measures ~0.85 KB of resident growth per entry read once, mapped index
        /// pages and read-time bookkeeping included (Docs/Architecture.md, "Memory"). When 4 096
        /// slots or more go at once, they are freed on a thread of the store's own, not by the
        /// commit cycle.
        public var locationCacheLimit: Int = 100_000

        /// How many bytes of large read buffers the store keeps for its next gets, counted by
        /// capacity; 0 keeps none. Default: 0.
        ///
        /// A read of 64 KiB or more (a value's record and its link's) goes into a buffer of its
        /// own, owned by the `Data` returned. Freed with it, its pages go back to the kernel
        /// sooner or later, and a later large read pays for fresh ones: a fault and a zeroed page
        /// every 4 KiB. Kept (``ReadBuffers``), the next read of its power of two copies into
        /// pages that are there. In a fresh process reading an image catalog once, 8 MiB cut the
        /// page faults by about 60 % and made the first reads 6–14 % faster, but raised the
        /// process's peak resident memory by about 7 MiB, most of the room the store's memory
        /// budget leaves over one file per entry — hence off (Docs/Benchmarks.md, "read buffers
        /// kept for the next read"). Turn it on for a process that reads many large values and
        /// can spare the memory. The budget counts buffers the store holds, not those its callers
        /// still hold: a value held keeps under twice its size resident (Docs/Architecture.md,
        /// "Memory").
        public var readBufferRetention: Int = 0

        /// Read-only index connections kept for concurrent gets. Default: 4.
        public var readerConnections: Int = 4

        // MARK: Compaction (Docs/Compaction.md)

        /// The disk usage (pack segments plus index files) the compactor keeps the store within;
        /// nil for no limit. Default: nil.
        public var capacity: Int64?

        /// When disk usage passes this fraction of ``capacity``, least recently read entries are
        /// evicted. Default: 0.95.
        public var highWatermark: Double = 0.95

        /// Eviction stops when disk usage would fall below this fraction of ``capacity``. Default: 0.85.
        public var lowWatermark: Double = 0.85

        /// How long an entry stored without an expiry stays fresh; nil for forever. Applied when
        /// the entry is stored. Default: nil.
        public var defaultTimeToLive: Duration?

        /// A sealed segment whose live bytes fall below this fraction of its size is rewritten:
        /// its live records are copied forward and the file deleted. Default: 0.5.
        public var rewriteLiveRatio: Double = 0.5

        /// How often the background thread runs a compaction pass; nil turns the timer off. A pass
        /// also starts whenever disk usage passes the high watermark of ``capacity`` (checked
        /// once a second), and ``Store/compact(timeToLive:)`` runs one on demand. Default: 60 s.
        public var compactionInterval: Duration? = .seconds(60)

        /// Whether opening a directory that holds no store creates one. Default: true. Tools that
        /// only read (`trove get`, `ls`, `stats`) turn it off, so a mistyped path is an error
        /// (``StoreError/Code/notAStore``) rather than a new, empty store.
        public var createsMissingStore = true

        /// Told of every key whose value changed or went away, or whose records moved, by any
        /// path: puts, removals, expiry, eviction, compaction, a damaged record dropped, repair,
        /// and the replay or rebuild done while opening. (Passing an expiry is not an event: the
        /// entry is a miss from then on, and reported when the compactor removes it.) Called
        /// synchronously, in the order
        /// the changes happen, while the store holds an internal lock: it must return quickly
        /// and must not call the store.
        public var keyChanges: (@Sendable (KeyChange) -> Void)?

        /// Injects failures into the pack layer's file I/O (tests only; Docs/Operations.md).
        @_spi(Testing) public var faultInjector: FaultInjector?

        /// The function that addresses content. Tests replace it to force hash collisions.
        @_spi(Testing) public var contentHasher: @Sendable (UnsafeRawBufferPointer) -> ContentHash = {
            XXH3.hash128($0)
        }

        /// The clock, in milliseconds since 1970. Tests replace it.
        @_spi(Testing) public var clock: @Sendable () -> Int64 = { wallClockMilliseconds() }

        /// The default configuration.
        public init() {}

        /// A configuration with durability `durability` and defaults otherwise.
        public init(durability: Durability) {
            self.durability = durability
        }
    }
}
