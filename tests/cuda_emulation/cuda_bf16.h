// The bf16 subset of CUDA's device language that model/cuda/*.cu uses, for its CPU emulation
// (cuda_runtime.h beside it): the storage type and its two conversions, with the rounding
// CUDA specifies (to nearest, ties to even; a NaN stays a NaN).
#ifndef DIFFTX_CUDA_EMULATION_BF16_H
#define DIFFTX_CUDA_EMULATION_BF16_H

#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
    uint16_t bits;
};

static inline __nv_bfloat16 __float2bfloat16_rn(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return __nv_bfloat16{(uint16_t)((u >> 16) | 0x40)};
    u += 0x7FFFu + ((u >> 16) & 1u);
    return __nv_bfloat16{(uint16_t)(u >> 16)};
}

static inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = (uint32_t)b.bits << 16;
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

#endif
