// bf16 written here from the format's definition, for the tests' references: the rounding (to
// nearest, ties to even), and the reference a model's bf16 error is judged by under
// FlashAttention's rule (no more than twice the error of the same computation done in bf16
// another way): the CPU backend with every weight product's operands rounded to bf16 here, then
// multiplied by OpenBLAS in fp32, and where the backend judged runs attention in bf16 too, its
// attention on bf16-rounded inputs. It runs on any CPU, and shares no code with oneDNN's or
// cuBLAS's bf16 products.
#ifndef DIFFTX_TESTS_BF16_REFERENCE_H
#define DIFFTX_TESTS_BF16_REFERENCE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../base/util.h"
#include "../model/cpu/cpu.h"
#include "instances.h"

// x rounded to bf16 and back (a NaN or an infinity kept)
static inline float bf16_reference_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7FFFFFFFu) <= 0x7F800000u) u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    float r;
    memcpy(&r, &u, sizeof(r));
    return r;
}

static inline float* bf16_reference_copy(const float* x, size_t n, int slot) {
    static float* scratch[3];
    static size_t capacity[3];
    if (n > capacity[slot]) {
        free(scratch[slot]);
        scratch[slot] = mallocCheck(n * sizeof(float));
        capacity[slot] = n;
    }
    for (size_t i = 0; i < n; i++) scratch[slot][i] = bf16_reference_round(x[i]);
    return scratch[slot];
}

static inline void bf16_reference_forward(const Backend* be, float* out, const float* inp, const float* w, int N, int IC, int OC,
                                          int accumulate) {
    cpu_matmul_forward(be, out, bf16_reference_copy(inp, (size_t)N * IC, 0), bf16_reference_copy(w, (size_t)OC * IC, 1), N, IC, OC,
                       accumulate);
}

static inline void bf16_reference_backward(const Backend* be, float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                                           int N, int IC, int OC) {
    cpu_matmul_backward(be, dinp, dw, bf16_reference_copy(dout, (size_t)N * OC, 0), bf16_reference_copy(inp, (size_t)N * IC, 1),
                        bf16_reference_copy(w, (size_t)OC * IC, 2), N, IC, OC);
}

// Attention on qkv (and dy) rounded to bf16, the inputs a bf16 attention reads, then the CPU's
// fp32 kernels
static inline void bf16_reference_attention_forward(const Backend* be, float* y, float* o1, float* lse, const float* qkv, const float* lambda,
                                                    const AttnShape* s, HookSite hook) {
    size_t n = (size_t)s->B * s->T * attention_qkv_width(s);
    cpu_attention_forward(be, y, o1, lse, bf16_reference_copy(qkv, n, 0), lambda, s, hook);
}
static inline void bf16_reference_attention_backward(const Backend* be, float* dqkv, float* dlambda, const float* dy, const float* dy0,
                                                     const float* qkv, const float* lse, const float* lambda, const AttnShape* s, HookSite hook) {
    size_t n = (size_t)s->B * s->T * attention_qkv_width(s), n_y = (size_t)s->B * s->T * s->H * attention_value_width(s);
    cpu_attention_backward(be, dqkv, dlambda, bf16_reference_copy(dy, n_y, 1), dy0, bf16_reference_copy(qkv, n, 0), lse, lambda, s,
                           hook);
}

// The CPU backend's fp32 instance with those products, and with attention_bf16 its attention on
// bf16 inputs too
static inline Backend bf16_reference_backend(int attention_bf16) {
    Backend b = *backend_named("cpu");
    b.matmul_forward = bf16_reference_forward;
    b.matmul_backward = bf16_reference_backward;
    if (attention_bf16) {
        b.attention_forward = bf16_reference_attention_forward;
        b.attention_backward = bf16_reference_attention_backward;
    }
    return b;
}

// relative L2 error of got against ref
static inline double relative_l2(const float* got, const float* ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]), den += (double)ref[i] * ref[i];
    return sqrt(num / (den + 1e-300));
}

#endif
