// A model of the committer's index apply (issue 11): the statements one commit cycle of new
// puts runs, against each layout of the entries table, timed in C so that no language overhead
// hides SQLite's own cost. Not part of Trove's build; Docs/Benchmarks.md ("Index schema 6")
// shows its numbers and how to run it:
//
//   gcc -O2 -o /tmp/index-model scripts/index-model.c -lsqlite3
//   /tmp/index-model LAYOUT ENTRIES [PUTS_PER_CYCLE [ROWS_PER_STATEMENT]]
//
// LAYOUT: v5     entries WITHOUT ROWID keyed by the 16-byte digest (schema 5)
//         v6     entries in a rowid table, the digest in a unique index (schema 6)
//         rowid  entries in a rowid table with no digest index (lookups would need another
//                way: the lower bound of a put's row)
// Every layout also has schema 5's other indexes (URL hash partial, access time, expiry
// partial, blob). The store is filled with ENTRIES puts, then 40 cycles of PUTS_PER_CYCLE
// (default 256) new puts — a blob row and an entry row each, like the committer's
// `insertLinkedBlob` + `insertEntry` — are timed, WAL mode, synchronous=NORMAL, 16 MiB cache,
// mmap on, no automatic checkpoint; then one PASSIVE checkpoint of what they wrote is timed.
// ROWS_PER_STATEMENT (default 1) > 1 inserts that many puts' rows with one multi-row INSERT a
// table, as the committer's groups of new puts do (Docs/Benchmarks.md, "new puts in groups").
// MODEL_WITHOUT=entries_by_access,entries_by_blob (any of the four secondary indexes' names)
// leaves those indexes out.
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static sqlite3 *db;
static sqlite3_stmt *insertEntry, *insertBlob, *groupEntries, *groupBlobs;
static int group = 1;
static long sequence;
static unsigned long long state = 88172645463325252ULL;

static unsigned long long next(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

static void run(const char *sql) {
    char *message = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &message) != SQLITE_OK) {
        fprintf(stderr, "%s: %s\n", sql, message);
        exit(1);
    }
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static long fileSize(const char *path) {
    struct stat s;
    return stat(path, &s) ? 0 : s.st_size;
}

static void step(sqlite3_stmt *statement) {
    if (sqlite3_step(statement) != SQLITE_DONE) {
        fprintf(stderr, "%s\n", sqlite3_errmsg(db));
        exit(1);
    }
    sqlite3_reset(statement);
}

// `group` new puts: their blob rows in one statement, then their entry rows in another.
static void putGroup(void) {
    int b = 1, e = 1;
    for (int k = 0; k < group; k++) {
        long s = ++sequence;
        unsigned long long digest[2] = {next(), next()}, hash[2] = {next(), next()};
        char url[96];
        int length = snprintf(url, sizeof url, "https://img.example.com/photos/%016llx/%ld.jpg", next(), s);
        sqlite3_bind_int64(groupBlobs, b++, s);
        sqlite3_bind_blob(groupBlobs, b++, hash, 16, SQLITE_TRANSIENT);
        sqlite3_bind_int64(groupBlobs, b++, s * 4400);
        sqlite3_bind_blob(groupEntries, e++, digest, 16, SQLITE_TRANSIENT);
        sqlite3_bind_text(groupEntries, e++, url, length, SQLITE_TRANSIENT);
        sqlite3_bind_int64(groupEntries, e++, (long)(next() >> 1));
        sqlite3_bind_int64(groupEntries, e++, s);
        sqlite3_bind_int64(groupEntries, e++, s * 4400);
        sqlite3_bind_int64(groupEntries, e++, s);
        sqlite3_bind_int64(groupEntries, e++, 1700000000000L + s);
        sqlite3_bind_int64(groupEntries, e++, 1700000000000L + s);
    }
    step(groupBlobs);
    step(groupEntries);
}

// One new put: its blob row, then its entry row (an image URL, a random digest).
static void put(void) {
    long s = ++sequence;
    unsigned long long digest[2] = {next(), next()}, hash[2] = {next(), next()};
    char url[96];
    int length = snprintf(url, sizeof url, "https://img.example.com/photos/%016llx/%ld.jpg", next(), s);
    sqlite3_bind_int64(insertBlob, 1, s);
    sqlite3_bind_blob(insertBlob, 2, hash, 16, SQLITE_STATIC);
    sqlite3_bind_int64(insertBlob, 3, s * 4400);
    step(insertBlob);
    int i = 1;
    sqlite3_bind_blob(insertEntry, i++, digest, 16, SQLITE_STATIC);
    sqlite3_bind_text(insertEntry, i++, url, length, SQLITE_STATIC);
    sqlite3_bind_int64(insertEntry, i++, (long)(next() >> 1));
    sqlite3_bind_int64(insertEntry, i++, s);
    sqlite3_bind_int64(insertEntry, i++, s * 4400);
    sqlite3_bind_int64(insertEntry, i++, s);
    sqlite3_bind_int64(insertEntry, i++, 1700000000000L + s);
    sqlite3_bind_int64(insertEntry, i++, 1700000000000L + s);
    step(insertEntry);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s v5|v6|rowid ENTRIES [PUTS_PER_CYCLE [ROWS_PER_STATEMENT]]\n", argv[0]);
        return 2;
    }
    const char *layout = argv[1];
    long entries = atol(argv[2]);
    int cycle = argc > 3 ? atoi(argv[3]) : 256;
    group = argc > 4 ? atoi(argv[4]) : 1;
    if (group < 1 || group > 64 || cycle % group != 0) {
        fprintf(stderr, "ROWS_PER_STATEMENT must be 1...64 and divide PUTS_PER_CYCLE\n");
        return 2;
    }
    char path[256], wal[300];
    snprintf(path, sizeof path, "/tmp/index-model-%s.sqlite", layout);
    snprintf(wal, sizeof wal, "%s-wal", path);
    unlink(path);
    unlink(wal);
    sqlite3_open(path, &db);
    run("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-16384; "
        "PRAGMA mmap_size=1073741824;");
    run("CREATE TABLE blobs(id INTEGER PRIMARY KEY, hash BLOB NOT NULL, length INTEGER NOT NULL, "
        "segment INTEGER NOT NULL, offset INTEGER NOT NULL, record_bytes INTEGER NOT NULL, "
        "refs INTEGER NOT NULL DEFAULT 0)");
    const char *columns =
        "url TEXT NOT NULL, variant TEXT NOT NULL, url_hash INTEGER NOT NULL, blob INTEGER NOT NULL, "
        "link_segment INTEGER NOT NULL, link_offset INTEGER NOT NULL, link_length INTEGER NOT NULL, "
        "sequence INTEGER NOT NULL, etag TEXT, last_modified TEXT, expires_at INTEGER, "
        "created_at INTEGER NOT NULL, accessed_at INTEGER NOT NULL, cost INTEGER NOT NULL, cache_policy TEXT";
    char sql[2048];
    if (strcmp(layout, "v5") == 0) {
        snprintf(sql, sizeof sql, "CREATE TABLE entries(key_hash BLOB PRIMARY KEY, %s) WITHOUT ROWID", columns);
    } else if (strcmp(layout, "v6") == 0 || strcmp(layout, "rowid") == 0) {
        snprintf(sql, sizeof sql, "CREATE TABLE entries(id INTEGER PRIMARY KEY, key_hash BLOB NOT NULL, %s)", columns);
    } else {
        fprintf(stderr, "unknown layout %s\n", layout);
        return 2;
    }
    run(sql);
    if (strcmp(layout, "v6") == 0) run("CREATE UNIQUE INDEX entries_by_key ON entries(key_hash)");
    // MODEL_WITHOUT (a comma-separated list of these index names) leaves those out: what each
    // secondary index costs a put.
    const char *without = getenv("MODEL_WITHOUT") ? getenv("MODEL_WITHOUT") : "";
    const char *indexes[][2] = {
        {"entries_by_url", "CREATE INDEX entries_by_url ON entries(url_hash) WHERE variant != ''"},
        {"entries_by_access", "CREATE INDEX entries_by_access ON entries(accessed_at)"},
        {"entries_by_expiry", "CREATE INDEX entries_by_expiry ON entries(expires_at) WHERE expires_at IS NOT NULL"},
        {"entries_by_blob", "CREATE INDEX entries_by_blob ON entries(blob)"},
    };
    for (int i = 0; i < 4; i++) {
        if (!strstr(without, indexes[i][0])) run(indexes[i][1]);
    }
    sqlite3_prepare_v2(db,
        "INSERT INTO blobs(id, hash, length, segment, offset, record_bytes, refs) "
        "VALUES (?, ?, 4096, 1, ?, 4148, 1) ON CONFLICT(id) DO NOTHING",
        -1, &insertBlob, NULL);
    sqlite3_prepare_v2(db,
        "INSERT INTO entries(key_hash, url, variant, url_hash, blob, link_segment, link_offset, link_length, "
        "sequence, created_at, accessed_at, cost) VALUES (?, ?, '', ?, ?, 1, ?, 103, ?, ?, ?, 4096)",
        -1, &insertEntry, NULL);
    if (group > 1) {
        static char blobs[8192], rows[16384];
        strcpy(blobs, "INSERT INTO blobs(id, hash, length, segment, offset, record_bytes, refs) VALUES ");
        strcpy(rows, "INSERT INTO entries(key_hash, url, variant, url_hash, blob, link_segment, link_offset, "
                     "link_length, sequence, created_at, accessed_at, cost) VALUES ");
        for (int k = 0; k < group; k++) {
            strcat(blobs, k ? ", (?, ?, 4096, 1, ?, 4148, 1)" : "(?, ?, 4096, 1, ?, 4148, 1)");
            strcat(rows, k ? ", (?, ?, '', ?, ?, 1, ?, 103, ?, ?, ?, 4096)" : "(?, ?, '', ?, ?, 1, ?, 103, ?, ?, ?, 4096)");
        }
        if (sqlite3_prepare_v2(db, blobs, -1, &groupBlobs, NULL) != SQLITE_OK
            || sqlite3_prepare_v2(db, rows, -1, &groupEntries, NULL) != SQLITE_OK) {
            fprintf(stderr, "%s\n", sqlite3_errmsg(db));
            return 1;
        }
    }
    for (long k = 0; k < entries; k += 4096) {
        run("BEGIN");
        for (int j = 0; j < 4096; j++) put();
        run("COMMIT");
    }
    run("PRAGMA wal_checkpoint(TRUNCATE)");
    run("PRAGMA wal_autocheckpoint=0");
    enum { rounds = 40 };
    double times[rounds], total = 0;
    long walBefore = fileSize(wal);
    for (int r = 0; r < rounds; r++) {
        double start = now();
        run("BEGIN");
        if (group > 1) {
            for (int j = 0; j < cycle; j += group) putGroup();
        } else {
            for (int j = 0; j < cycle; j++) put();
        }
        run("COMMIT");
        times[r] = now() - start;
        total += times[r];
    }
    long walAfter = fileSize(wal);
    double start = now();
    run("PRAGMA wal_checkpoint(PASSIVE)");
    double checkpoint = now() - start;
    for (int i = 0; i < rounds; i++)
        for (int j = i + 1; j < rounds; j++)
            if (times[j] < times[i]) {
                double t = times[i];
                times[i] = times[j];
                times[j] = t;
            }
    double puts = (double)rounds * cycle;
    printf("%-6s %8ld entries, %4d puts a cycle, %2d a statement: apply %5.1f µs a put (p50 cycle %5.1f), "
           "%.2f log pages a put, checkpoint %5.1f µs a put, index %.1f MB\n",
        layout, entries, cycle, group, total / puts * 1e6, times[rounds / 2] / cycle * 1e6,
        (double)(walAfter - walBefore) / (4096 + 24) / puts, checkpoint / puts * 1e6, fileSize(path) / 1e6);
    sqlite3_close(db);
    unlink(path);
    unlink(wal);
    return 0;
}
