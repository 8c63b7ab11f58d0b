#ifndef TROVE_CTURBOJPEG_SHIM_H
#define TROVE_CTURBOJPEG_SHIM_H
#include <stddef.h>
#include <turbojpeg.h>

// TJSCALED is a function-like macro, which Swift does not import.
static inline int CTurboJPEG_scaled(int dimension, tjscalingfactor factor) {
    return TJSCALED(dimension, factor);
}

#endif
