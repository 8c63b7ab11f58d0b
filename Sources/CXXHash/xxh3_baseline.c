// The baseline build: whatever vector unit the target always has (SSE2 on x86-64).

#if !__has_include(<xxhash.h>)
#error "xxhash.h not found: install libxxhash-dev (scripts/bootstrap.sh does)"
#endif

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "trove_xxh3.h"

#define TROVE_XXH3_BUILD baseline
#include "xxh3_build.h"

// The streaming state's layout and its reset do not depend on the build: one definition here.
size_t trove_xxh3_state_size(void) { return sizeof(XXH3_state_t); }
size_t trove_xxh3_state_alignment(void) { return _Alignof(XXH3_state_t); }
void trove_xxh3_64_stream_reset(void *state, uint64_t seed) {
    XXH3_INITSTATE((XXH3_state_t *)state);
    XXH3_64bits_reset_withSeed((XXH3_state_t *)state, seed);
}
