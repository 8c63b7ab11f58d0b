#ifndef TROVE_CXXHASH_SHIM_H
#define TROVE_CXXHASH_SHIM_H
#include <xxhash.h>
#endif
