#include "attention.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "vecmath.h"

// Shapes and strides of one attention call, derived once.
typedef struct {
    int B, T, H, D, M, Dv, QK, QKV, HDv;
    float scale;
} Dims;

// Per-thread scratch kept between calls: freeing it each call would hand the pages back to
// the kernel and fault them in again on every layer (several percent of a training step).
static float* thread_scratch(size_t floats) {
    static _Thread_local float* buffer;
    static _Thread_local size_t capacity;
    if (floats > capacity) {
        free(buffer);
        buffer = mallocCheck(floats * sizeof(float));
        capacity = floats;
    }
    return buffer;
}

static Dims dims_of(int B, int T, int H, int D, int M) {
    Dims d = {B, T, H, D, M, M * D, M * H * D, 0, 0, 1.0f / sqrtf((float)D)};
    d.QKV = 2 * d.QK + H * d.Dv;
    d.HDv = H * d.Dv;
    return d;
}

// S (nq, kn) = scale * Q_blk K^T for map m of head h, rows i0.. of sequence b
static void block_scores(float* S, const float* qkv, const Dims* d, int b, int h, int m, int i0, int nq, int kn) {
    const float* base = qkv + (size_t)b * d->T * d->QKV;
    const float* q = base + (size_t)i0 * d->QKV + (size_t)(h * d->M + m) * d->D;
    const float* k = base + d->QK + (size_t)(h * d->M + m) * d->D;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, kn, d->D, d->scale, q, d->QKV, k, d->QKV, 0.0f, S, kn);
}

void attention_forward(float* y, float* lse, const float* qkv, float lambda, int B, int T, int H, int D, int M) {
    Dims d = dims_of(B, T, H, D, M);
    int block = T < ATTN_BLOCK ? T : ATTN_BLOCK;
    #pragma omp parallel
    {
        float* P = thread_scratch((size_t)M * block * T);  // (M, block, T)
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < H; h++) {
                const float* v = qkv + (size_t)b * T * d.QKV + 2 * d.QK + (size_t)h * d.Dv;
                for (int i0 = 0; i0 < T; i0 += block) {
                    int nq = T - i0 < block ? T - i0 : block, kn = i0 + nq;
                    for (int m = 0; m < M; m++) {
                        float* S = P + (size_t)m * block * T;
                        float* row_lse = lse + (((size_t)b * H + h) * M + m) * T;
                        block_scores(S, qkv, &d, b, h, m, i0, nq, kn);
                        for (int r = 0; r < nq; r++) {
                            float* s = S + (size_t)r * kn;
                            int visible = i0 + r + 1;
                            float maxv = s[0];
                            for (int j = 1; j < visible; j++) maxv = s[j] > maxv ? s[j] : maxv;
                            for (int j = 0; j < visible; j++) s[j] -= maxv;
                            exp_inplace(s, visible);
                            float sum = 0.0f;
                            for (int j = 0; j < visible; j++) sum += s[j];
                            float inv = 1.0f / sum;
                            for (int j = 0; j < visible; j++) s[j] *= inv;
                            for (int j = visible; j < kn; j++) s[j] = 0.0f;
                            row_lse[i0 + r] = maxv + logf(sum);
                        }
                    }
                    if (M == 2) {
                        float* P1 = P + (size_t)block * T;
                        for (size_t i = 0; i < (size_t)nq * kn; i++) P[i] -= lambda * P1[i];
                    }
                    float* out = y + ((size_t)b * T + i0) * d.HDv + (size_t)h * d.Dv;
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, d.Dv, kn, 1.0f, P, kn, v, d.QKV, 0.0f, out, d.HDv);
                }
            }
        }
    }
}

float attention_backward(float* dqkv, const float* dy, const float* qkv, const float* lse, float lambda,
                         int B, int T, int H, int D, int M) {
    Dims d = dims_of(B, T, H, D, M);
    int block = T < ATTN_BLOCK ? T : ATTN_BLOCK;
    float* dlambda_part = callocCheck((size_t)B * H, sizeof(float));  // summed in fixed order below
    #pragma omp parallel
    {
        // P_m (M, block, T), dPV = dy V^T (block, T), the combined map for dV (block, T)
        float* P = thread_scratch((size_t)(M + 2) * block * T);
        float* dPV = P + (size_t)M * block * T;
        float* Pc = dPV + (size_t)block * T;
        float rowsum[ATTN_BLOCK];
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < H; h++) {
                const float* base = qkv + (size_t)b * T * d.QKV;
                float* dbase = dqkv + (size_t)b * T * d.QKV;
                const float* v = base + 2 * d.QK + (size_t)h * d.Dv;
                float* dv = dbase + 2 * d.QK + (size_t)h * d.Dv;
                // dK and dV of this head gather contributions from every query block
                for (int t = 0; t < T; t++) {
                    for (int m = 0; m < M; m++) memset(dbase + (size_t)t * d.QKV + d.QK + (size_t)(h * M + m) * D, 0, D * sizeof(float));
                    memset(dv + (size_t)t * d.QKV, 0, d.Dv * sizeof(float));
                }
                float dlambda = 0.0f;
                for (int i0 = 0; i0 < T; i0 += block) {
                    int nq = T - i0 < block ? T - i0 : block, kn = i0 + nq;
                    const float* dyb = dy + ((size_t)b * T + i0) * d.HDv + (size_t)h * d.Dv;
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, kn, d.Dv, 1.0f, dyb, d.HDv, v, d.QKV, 0.0f, dPV, kn);
                    for (int m = 0; m < M; m++) {
                        float* S = P + (size_t)m * block * T;
                        const float* row_lse = lse + (((size_t)b * H + h) * M + m) * T;
                        block_scores(S, qkv, &d, b, h, m, i0, nq, kn);
                        for (int r = 0; r < nq; r++) {
                            float* s = S + (size_t)r * kn;
                            const float* g = dPV + (size_t)r * kn;
                            int visible = i0 + r + 1;
                            float l = row_lse[i0 + r], acc = 0.0f;
                            for (int j = 0; j < visible; j++) s[j] -= l;
                            exp_inplace(s, visible);
                            for (int j = 0; j < visible; j++) acc += s[j] * g[j];
                            for (int j = visible; j < kn; j++) s[j] = 0.0f;
                            rowsum[r] = acc;
                            if (m == 1) dlambda -= acc;  // y = O_0 - lambda O_1, and rowsum = dy . O_1
                        }
                        if (m == 0) {
                            memcpy(Pc, S, (size_t)nq * kn * sizeof(float));
                        } else {
                            for (size_t i = 0; i < (size_t)nq * kn; i++) Pc[i] -= lambda * S[i];
                        }
                        // dS_m = c_m P_m (dPV - rowsum), c_0 = 1, c_1 = -lambda
                        float c = m == 0 ? 1.0f : -lambda;
                        for (int r = 0; r < nq; r++) {
                            float* s = S + (size_t)r * kn;
                            const float* g = dPV + (size_t)r * kn;
                            for (int j = 0; j < kn; j++) s[j] = c * s[j] * (g[j] - rowsum[r]);
                        }
                    }
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, d.Dv, nq, 1.0f, Pc, kn, dyb, d.HDv, 1.0f, dv, d.QKV);
                    for (int m = 0; m < M; m++) {
                        const float* dS = P + (size_t)m * block * T;
                        size_t sub = (size_t)(h * M + m) * D;
                        const float* q = base + (size_t)i0 * d.QKV + sub;
                        const float* k = base + d.QK + sub;
                        float* dq = dbase + (size_t)i0 * d.QKV + sub;
                        float* dk = dbase + d.QK + sub;
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, D, kn, d.scale, dS, kn, k, d.QKV, 0.0f, dq, d.QKV);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, D, nq, d.scale, dS, kn, q, d.QKV, 1.0f, dk, d.QKV);
                    }
                }
                dlambda_part[b * H + h] = dlambda;
            }
        }
    }
    float dlambda = 0.0f;
    for (int i = 0; i < B * H; i++) dlambda += dlambda_part[i];
    free(dlambda_part);
    return dlambda;
}
