// A probe of appends into pages the page cache already holds (issue 11): one thread appends
// records of one size to a new file, syncing every 64 writes, and times each `pwrite` and each
// `fdatasync`; with WARM set, the file is first extended a chunk at a time (a hole, 4 MiB past
// the last write whenever fewer than 2 MiB are left) and the new range is read into the page
// cache before the writes reach it, untimed — what a thread beside the writer would do. Not
// part of Trove's build; Docs/Benchmarks.md ("pages ahead of the writes") shows its numbers:
//
//   gcc -O2 -o /tmp/page-warm-probe scripts/page-warm-probe.c
//   /tmp/page-warm-probe WARM RECORD_BYTES WRITES [FILE]
//
// WARM: 0  plain appends
//       1  extend, then posix_fadvise(POSIX_FADV_WILLNEED) over the new range
//       2  extend, then pread the new range (1 MiB reads into a scratch buffer)
// FILE defaults to ./page-warm-probe.bin (removed afterwards). Prints the mean write and sync
// time per write, and the file's size and allocated bytes (a hole allocates nothing).
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s WARM RECORD_BYTES WRITES [FILE]\n", argv[0]);
        return 2;
    }
    int warm = atoi(argv[1]);
    size_t record = (size_t)atol(argv[2]);
    long writes = atol(argv[3]);
    const char *path = argc > 4 ? argv[4] : "page-warm-probe.bin";
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    char *bytes = malloc(record);
    memset(bytes, 7, record);
    static char scratch[1 << 20];
    const off_t chunk = 4 << 20;
    off_t end = 0, prepared = 0;
    double writing = 0, syncing = 0;
    for (long i = 0; i < writes; i++) {
        if (warm && prepared < end + chunk / 2) {
            off_t upper = end + chunk;
            if (ftruncate(fd, upper) != 0) return 1;
            if (warm == 1) {
                posix_fadvise(fd, prepared, upper - prepared, POSIX_FADV_WILLNEED);
            } else {
                for (off_t o = prepared; o < upper; o += sizeof scratch) pread(fd, scratch, sizeof scratch, o);
            }
            prepared = upper;
        }
        double t0 = now();
        if (pwrite(fd, bytes, record, end) != (ssize_t)record) return 1;
        writing += now() - t0;
        end += record;
        if (i % 64 == 63) {
            t0 = now();
            fdatasync(fd);
            syncing += now() - t0;
        }
    }
    fdatasync(fd);
    struct stat st;
    fstat(fd, &st);
    printf("warm=%d record=%zu end=%ld size=%ld allocated=%ld write %.2f us, sync %.2f us a write\n", warm, record,
           (long)end, (long)st.st_size, (long)st.st_blocks * 512, writing / writes * 1e6, syncing / writes * 1e6);
    unlink(path);
    return 0;
}
