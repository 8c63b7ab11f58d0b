// The AVX2 build, x86-64 only. Every function in this file is compiled for AVX2 through a
// target attribute rather than a -mavx2 flag (which SwiftPM only allows as an unsafe flag, and
// which would let the compiler use AVX2 in code that runs before the CPU check). It is only
// called after trove_xxh3_avx2_supported() said yes.

#include "trove_xxh3.h"

#if defined(__x86_64__) && defined(__clang__)

// Everything xxhash.h includes, declared before the attribute applies.
#include <immintrin.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>
#define TROVE_XXH3_BUILD avx2
#include "xxh3_build.h"
#pragma clang attribute pop

int trove_xxh3_avx2_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? 1 : 0;
}

#else

// No AVX2 build on this target: the names exist so that callers link, and report no support.
int trove_xxh3_avx2_supported(void) { return 0; }
uint64_t trove_xxh3_64_avx2(const void *data, size_t length, uint64_t seed) {
    return trove_xxh3_64_baseline(data, length, seed);
}
trove_xxh3_128_t trove_xxh3_128_avx2(const void *data, size_t length) {
    return trove_xxh3_128_baseline(data, length);
}
uint64_t trove_xxh3_64_parts_avx2(const void *const *parts, const size_t *lengths, size_t count, uint64_t seed) {
    return trove_xxh3_64_parts_baseline(parts, lengths, count, seed);
}
void trove_xxh3_64_stream_update_avx2(void *state, const void *data, size_t length) {
    trove_xxh3_64_stream_update_baseline(state, data, length);
}
uint64_t trove_xxh3_64_stream_digest_avx2(const void *state) { return trove_xxh3_64_stream_digest_baseline(state); }

#endif
