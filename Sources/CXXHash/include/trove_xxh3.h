#ifndef TROVE_XXH3_H
#define TROVE_XXH3_H

// XXH3 for Trove, compiled from libxxhash's header (libxxhash-dev) rather than linked against
// Debian's libxxhash.so, which is an SSE2 build. Two builds of the same code live in this
// module: a baseline one (SSE2 on x86-64, NEON on arm64) and, on x86-64, an AVX2 one that is
// picked once at run time when the CPU and the kernel support AVX2. Both give the same hashes;
// only the speed differs.

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t low64;
    uint64_t high64;
} trove_xxh3_128_t;

/// XXH3-64 of `length` bytes at `data` (which may be NULL when `length` is 0), seeded.
uint64_t trove_xxh3_64(const void *data, size_t length, uint64_t seed);

/// XXH3-128 of `length` bytes at `data`, unseeded.
trove_xxh3_128_t trove_xxh3_128(const void *data, size_t length);

/// XXH3-64 of the concatenation of `count` buffers, seeded, without joining them.
uint64_t trove_xxh3_64_parts(const void *const *parts, const size_t *lengths, size_t count, uint64_t seed);

/// Streaming XXH3-64, for inputs read in pieces (a record scanned from disk in chunks). The
/// state is caller-owned memory of trove_xxh3_state_size() bytes aligned to
/// trove_xxh3_state_alignment(); it holds no pointers and needs no freeing.
size_t trove_xxh3_state_size(void);
size_t trove_xxh3_state_alignment(void);
void trove_xxh3_64_stream_reset(void *state, uint64_t seed);
void trove_xxh3_64_stream_update(void *state, const void *data, size_t length);
uint64_t trove_xxh3_64_stream_digest(const void *state);

/// The name of the build the functions above use: "avx2" or "baseline".
const char *trove_xxh3_implementation(void);

// Each build called directly, for tests and benchmarks that compare them. The AVX2 functions
// may only be called when trove_xxh3_avx2_supported() returns 1.
int trove_xxh3_avx2_supported(void);
uint64_t trove_xxh3_64_baseline(const void *data, size_t length, uint64_t seed);
trove_xxh3_128_t trove_xxh3_128_baseline(const void *data, size_t length);
uint64_t trove_xxh3_64_parts_baseline(const void *const *parts, const size_t *lengths, size_t count, uint64_t seed);
uint64_t trove_xxh3_64_avx2(const void *data, size_t length, uint64_t seed);
trove_xxh3_128_t trove_xxh3_128_avx2(const void *data, size_t length);
uint64_t trove_xxh3_64_parts_avx2(const void *const *parts, const size_t *lengths, size_t count, uint64_t seed);
void trove_xxh3_64_stream_update_baseline(void *state, const void *data, size_t length);
uint64_t trove_xxh3_64_stream_digest_baseline(const void *state);
void trove_xxh3_64_stream_update_avx2(void *state, const void *data, size_t length);
uint64_t trove_xxh3_64_stream_digest_avx2(const void *state);

#endif
