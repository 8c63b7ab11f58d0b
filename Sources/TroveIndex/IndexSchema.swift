/// Trove's index schema and its migrations, by version (`PRAGMA user_version`).
///
/// Append a migration to change the schema; never edit a shipped one.
enum IndexSchema {
    /// The version this build writes.
    static let currentVersion = migrations.count

    /// Migration `i` takes the schema from version `i` to `i + 1`.
    static let migrations: [String] = [
        """
        CREATE TABLE meta(
            key TEXT PRIMARY KEY,
            value INTEGER NOT NULL
        ) WITHOUT ROWID;

        CREATE TABLE segments(
            id INTEGER PRIMARY KEY,
            indexed_bytes INTEGER NOT NULL,
            live_bytes INTEGER NOT NULL DEFAULT 0,
            sealed INTEGER NOT NULL DEFAULT 0
        );

        CREATE TABLE blobs(
            id INTEGER PRIMARY KEY, -- the blob id written in the blob record

            hash BLOB NOT NULL,
            length INTEGER NOT NULL,
            segment INTEGER NOT NULL,
            offset INTEGER NOT NULL,
            record_bytes INTEGER NOT NULL,
            refs INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX blobs_by_hash ON blobs(hash);

        CREATE TABLE entries(
            key_hash BLOB PRIMARY KEY,
            url TEXT NOT NULL,
            variant TEXT NOT NULL,
            url_hash INTEGER NOT NULL,
            blob INTEGER NOT NULL,
            link_segment INTEGER NOT NULL,
            link_offset INTEGER NOT NULL,
            link_length INTEGER NOT NULL,
            sequence INTEGER NOT NULL,
            etag TEXT,
            last_modified TEXT,
            expires_at INTEGER,
            created_at INTEGER NOT NULL,
            accessed_at INTEGER NOT NULL,
            cost INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX entries_by_url ON entries(url_hash);
        CREATE INDEX entries_by_access ON entries(accessed_at);
        CREATE INDEX entries_by_expiry ON entries(expires_at) WHERE expires_at IS NOT NULL;
        """,
        // Version 2: damage found outside fsck (by reads, compaction, recovery, rebuilds) that
        // every command reports until `trove fsck --repair` has dealt with it.
        """
        CREATE TABLE damage(
            segment INTEGER NOT NULL,
            start INTEGER NOT NULL,
            end INTEGER NOT NULL,
            kind TEXT NOT NULL,
            message TEXT NOT NULL,
            found_at INTEGER NOT NULL,
            PRIMARY KEY (segment, start, kind)
        ) WITHOUT ROWID;
        """,
        // Version 3: entries by blob, so that whether a blob is linked is read from the entries
        // themselves (a damaged reference count must never make the compactor drop a live blob).
        """
        CREATE INDEX entries_by_blob ON entries(blob);
        """,
        // Version 4: a cache layer's policy text per entry (the pipeline's HTTP freshness),
        // kept with the entry like its validators. Builds before it refuse this index.
        """
        ALTER TABLE entries ADD COLUMN cache_policy TEXT;
        """,
        // Version 5 (issue 11): a new original no longer goes into two random-key B-trees
        // besides its row, each of which cost a put about one written page. Blobs are not
        // indexed by hash (a store finds dedup candidates through its in-memory hints: blob ids
        // by hash prefix, checked by id, hash, length and bytes), and the URL index holds
        // variants only (an original is found by its digest, the primary key).
        """
        DROP INDEX blobs_by_hash;
        DROP INDEX entries_by_url;
        CREATE INDEX entries_by_url ON entries(url_hash) WHERE variant != '';
        """,
        // Version 6 (issue 11): entries in a rowid table, appended in write order, with the key
        // digest in a slim unique index. A put's row no longer goes into a random place of a
        // tree of fat `WITHOUT ROWID` cells (URL, validators, policy): only its ~30-byte index
        // cell does, so a commit cycle dirties about a third fewer pages and a checkpoint copies
        // about half as many. The copy keeps write order (by sequence); the old table's pages
        // go to the free list and are reused by later rows.
        """
        CREATE TABLE entries_v6(
            id INTEGER PRIMARY KEY,
            key_hash BLOB NOT NULL,
            url TEXT NOT NULL,
            variant TEXT NOT NULL,
            url_hash INTEGER NOT NULL,
            blob INTEGER NOT NULL,
            link_segment INTEGER NOT NULL,
            link_offset INTEGER NOT NULL,
            link_length INTEGER NOT NULL,
            sequence INTEGER NOT NULL,
            etag TEXT,
            last_modified TEXT,
            expires_at INTEGER,
            created_at INTEGER NOT NULL,
            accessed_at INTEGER NOT NULL,
            cost INTEGER NOT NULL,
            cache_policy TEXT
        );
        INSERT INTO entries_v6(key_hash, url, variant, url_hash, blob, link_segment, link_offset, link_length,
            sequence, etag, last_modified, expires_at, created_at, accessed_at, cost, cache_policy)
        SELECT key_hash, url, variant, url_hash, blob, link_segment, link_offset, link_length,
            sequence, etag, last_modified, expires_at, created_at, accessed_at, cost, cache_policy
        FROM entries ORDER BY sequence;
        DROP TABLE entries;
        ALTER TABLE entries_v6 RENAME TO entries;
        CREATE UNIQUE INDEX entries_by_key ON entries(key_hash);
        CREATE INDEX entries_by_url ON entries(url_hash) WHERE variant != '';
        CREATE INDEX entries_by_access ON entries(accessed_at);
        CREATE INDEX entries_by_expiry ON entries(expires_at) WHERE expires_at IS NOT NULL;
        CREATE INDEX entries_by_blob ON entries(blob);
        """,
        // Version 7 (issue 11): no digest index. Any B-tree keyed at random cost a put about one
        // written page a commit cycle however slim its cells; a lookup by key now finds its row
        // id in memory (the entry digest table, loaded from the rows when a writer opens) and
        // reads the row by id. One row per key is kept by the writer, which refuses an index in
        // which two rows share a digest.
        """
        DROP INDEX entries_by_key;
        """,
    ]
}
