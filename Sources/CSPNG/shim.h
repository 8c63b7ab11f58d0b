#ifndef TROVE_CSPNG_SHIM_H
#define TROVE_CSPNG_SHIM_H
#include <spng.h>
#endif
