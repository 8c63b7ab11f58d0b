#ifndef TROVE_CWEBP_SHIM_H
#define TROVE_CWEBP_SHIM_H
#include <webp/decode.h>
#include <webp/encode.h>
#endif
