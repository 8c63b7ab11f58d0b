// The baseline build: whatever vector unit the target always has (SSE2 on x86-64).

#if !__has_include(<xxhash.h>)
#error "xxhash.h not found: install libxxhash-dev (scripts/bootstrap.sh does)"
#endif

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "trove_xxh3.h"

#define TROVE_XXH3_BUILD baseline
#include "xxh3_build.h"
