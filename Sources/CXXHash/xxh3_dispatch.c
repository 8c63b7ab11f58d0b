// Picks the build once: AVX2 when the CPU and the kernel support it, else the baseline.

#include <stdatomic.h>

#include "trove_xxh3.h"

// -1 until the first call, then 1 for AVX2 or 0 for the baseline. Two threads may both detect
// on their first call; they store the same answer.
static _Atomic int useAVX2 = -1;

static inline int pickAVX2(void) {
    int value = atomic_load_explicit(&useAVX2, memory_order_relaxed);
    if (__builtin_expect(value < 0, 0)) {
        value = trove_xxh3_avx2_supported();
        atomic_store_explicit(&useAVX2, value, memory_order_relaxed);
    }
    return value;
}

uint64_t trove_xxh3_64(const void *data, size_t length, uint64_t seed) {
    return pickAVX2() ? trove_xxh3_64_avx2(data, length, seed) : trove_xxh3_64_baseline(data, length, seed);
}

trove_xxh3_128_t trove_xxh3_128(const void *data, size_t length) {
    return pickAVX2() ? trove_xxh3_128_avx2(data, length) : trove_xxh3_128_baseline(data, length);
}

uint64_t trove_xxh3_64_parts(const void *const *parts, const size_t *lengths, size_t count, uint64_t seed) {
    return pickAVX2() ? trove_xxh3_64_parts_avx2(parts, lengths, count, seed)
                      : trove_xxh3_64_parts_baseline(parts, lengths, count, seed);
}

void trove_xxh3_64_stream_update(void *state, const void *data, size_t length) {
    if (pickAVX2()) {
        trove_xxh3_64_stream_update_avx2(state, data, length);
    } else {
        trove_xxh3_64_stream_update_baseline(state, data, length);
    }
}

uint64_t trove_xxh3_64_stream_digest(const void *state) {
    return pickAVX2() ? trove_xxh3_64_stream_digest_avx2(state) : trove_xxh3_64_stream_digest_baseline(state);
}

const char *trove_xxh3_implementation(void) { return pickAVX2() ? "avx2" : "baseline"; }
