// The optimizer's kernels: global-norm clipping and AdamW.
#include <math.h>
#include <stdlib.h>

#include "../../base/util.h"
#include "../weight_copies.h"
#include "cpu.h"
#include "lanes.h"

double cpu_sum_squares(const float* x, size_t n) {
    // partial sums over fixed chunks, added in order: the same result for any thread count
    size_t chunk = 1 << 16, n_chunks = (n + chunk - 1) / chunk;
    double* partial = callocCheck(n_chunks, sizeof(double));
    #pragma omp parallel for schedule(static)
    for (size_t c = 0; c < n_chunks; c++) {
        const float* g = x + c * chunk;
        size_t len = c + 1 < n_chunks ? chunk : n - c * chunk;
        partial[c] = sum_squares_lanes(g, len);
    }
    double sum = 0.0;
    for (size_t c = 0; c < n_chunks; c++) sum += partial[c];
    free(partial);
    return sum;
}

void cpu_scale(float* x, size_t n, float factor) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= factor;
}

void cpu_add(float* y, const float* x, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

int cpu_adamw_update(const Backend* be, float* p, const float* g, float* m, float* v, size_t n, const AdamWStep* st) {
    float decay = st->decay, b1 = st->beta1, b2 = st->beta2, step_size = st->step_size, bc2_sqrt = st->bc2_sqrt, eps = st->eps;
    uint16_t* twin = be->copies ? weight_copies_weights_twin(be->copies, p, n) : NULL;  // bf16: rounded as written
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        p[i] *= decay;
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        p[i] -= step_size * m[i] / (sqrtf(v[i]) / bc2_sqrt + eps);
        if (twin) twin[i] = cpu_bf16_round(p[i]);
    }
    return twin != NULL;
}
