// The body of one build of Trove's XXH3 functions. Included once per build, after xxhash.h
// (with XXH_INLINE_ALL) and with TROVE_XXH3_BUILD naming the suffix: baseline or avx2.

#define TROVE_XXH3_CAT2(a, b) a##b
#define TROVE_XXH3_CAT(a, b) TROVE_XXH3_CAT2(a, b)
#define TROVE_XXH3_FN(name) TROVE_XXH3_CAT(name, TROVE_XXH3_BUILD)

uint64_t TROVE_XXH3_FN(trove_xxh3_64_)(const void *data, size_t length, uint64_t seed) {
    return XXH3_64bits_withSeed(data, length, seed);
}

trove_xxh3_128_t TROVE_XXH3_FN(trove_xxh3_128_)(const void *data, size_t length) {
    XXH128_hash_t hash = XXH3_128bits(data, length);
    trove_xxh3_128_t result = {hash.low64, hash.high64};
    return result;
}

uint64_t TROVE_XXH3_FN(trove_xxh3_64_parts_)(const void *const *parts, const size_t *lengths, size_t count,
                                              uint64_t seed) {
    if (count == 1) return XXH3_64bits_withSeed(parts[0], lengths[0], seed);
    // The state is complete here (XXH_INLINE_ALL) and its members carry their alignment, so it
    // can live on the stack: no allocation per call.
    XXH3_state_t state;
    XXH3_INITSTATE(&state);
    XXH3_64bits_reset_withSeed(&state, seed);
    for (size_t i = 0; i < count; i++) {
        if (lengths[i] > 0) XXH3_64bits_update(&state, parts[i], lengths[i]);
    }
    return XXH3_64bits_digest(&state);
}

void TROVE_XXH3_FN(trove_xxh3_64_stream_update_)(void *state, const void *data, size_t length) {
    if (length > 0) XXH3_64bits_update((XXH3_state_t *)state, data, length);
}

uint64_t TROVE_XXH3_FN(trove_xxh3_64_stream_digest_)(const void *state) {
    return XXH3_64bits_digest((const XXH3_state_t *)state);
}
