#include "cpu.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/util.h"
#include "../weight_copies.h"
#include "lanes.h"
#include "vecmath.h"

// The weights' products, timed for matmul_spent (backend.h) once it has been called; the model
// calls them from one thread, each one parallel inside OpenBLAS
static int matmul_timing;
static double matmul_seconds, matmul_flops;

void cpu_matmul_spent(double* seconds, double* flops) {
    *seconds = matmul_seconds;
    *flops = matmul_flops;
    matmul_seconds = matmul_flops = 0.0;
    matmul_timing = 1;
}

// t0: wall_time() before the product, or 0 when nobody asks for the time
static double matmul_begin(void) { return matmul_timing ? wall_time() : 0.0; }

static void matmul_end(double t0, double flops) {
    if (!matmul_timing) return;
    matmul_seconds += wall_time() - t0;
    matmul_flops += flops;
}

// Row-major C (M, N) = op(A) op(B) + beta C with op(A) (M, K), op(B) (K, N), each thread taking
// its own band of C's rows in one single-threaded call (OpenBLAS's OpenMP build runs
// single-threaded inside a parallel region). OpenBLAS's own division of one product between
// threads makes them wait for each other's packed panels: at the training step's shapes (inner
// dimension 256 to 4,096, 4,096 rows at the bench shape) the bands ran the step's products 7%
// faster on 2 threads, and a 2048^3 product no faster or slower. Bands under BAND_MIN_ROWS rows
// are not worth a thread.
#define BAND_MIN_ROWS 64
static void sgemm_row_bands(int trans_a, int trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float beta,
                            float* C, int ldc) {
    int bands = M / BAND_MIN_ROWS < omp_get_max_threads() ? M / BAND_MIN_ROWS : omp_get_max_threads();
    if (bands < 1) bands = 1;  // one call, which OpenBLAS divides between threads itself
    #pragma omp parallel for schedule(static) if (bands > 1)
    for (int t = 0; t < bands; t++) {
        int r0 = (int)((long)M * t / bands), r1 = (int)((long)M * (t + 1) / bands);
        const float* a = A + (trans_a ? (size_t)r0 : (size_t)r0 * lda);  // row r0 of op(A)
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, r1 - r0, N, K, 1.0f, a, lda, B,
                    ldb, beta, C + (size_t)r0 * ldc, ldc);
    }
}

void cpu_matmul_forward(const Backend* be, float* out, const float* inp, const float* w, int N, int IC, int OC, int accumulate) {
    double t0 = matmul_begin();
    if (be->precision == PRECISION_BF16) {
        cpu_bf16_matmul_forward(be->copies, out, inp, w, N, IC, OC, accumulate);
        matmul_end(t0, 2.0 * N * IC * (double)OC);
        return;
    }
    // Debian 12's OpenBLAS packs all of w for a one-row sgemm above its small-matrix size: at
    // decoding's shapes (IC 256, OC 1,514 or 8,192) that took about 5 times sgemv's time
    if (N == 1) cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, IC, 1.0f, w, IC, inp, 1, accumulate ? 1.0f : 0.0f, out, 1);
    else sgemm_row_bands(0, 1, N, OC, IC, inp, IC, w, IC, accumulate ? 1.0f : 0.0f, out, OC);
    matmul_end(t0, 2.0 * N * IC * (double)OC);
}

void cpu_matmul_backward(const Backend* be, float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int IC,
                         int OC) {
    double t0 = matmul_begin();
    if (be->precision == PRECISION_BF16) {
        cpu_bf16_matmul_backward(be->copies, dinp, dw, dout, inp, w, N, IC, OC);
    } else {
        sgemm_row_bands(0, 0, N, IC, OC, dout, OC, w, IC, 0.0f, dinp, IC);
        sgemm_row_bands(1, 0, OC, IC, N, dout, OC, inp, IC, 1.0f, dw, IC);
    }
    matmul_end(t0, 4.0 * N * IC * (double)OC);
}

// bf16: where rows x (n) lie in a block of activations, the twin their writer rounds them into
// (weight_copies_write), row by row while each is in cache; else NULL
static uint16_t* written_rounding(const Backend* be, const float* x, size_t n) {
    return be->copies ? weight_copies_write(be->copies, x, n) : NULL;
}

static void round_row(uint16_t* rounded, const float* row, int W) {
    for (int i = 0; i < W; i++) rounded[i] = cpu_bf16_round(row[i]);
}

void cpu_rmsnorm_forward(const Backend* be, float* out, float* rstd, const float* inp, const float* weight, float out_scale, int rows,
                         int W) {
    uint16_t* rounded = written_rounding(be, out, (size_t)rows * W);
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float* x = inp + (size_t)r * W;
        float* o = out + (size_t)r * W;
        float s = 1.0f / sqrtf(dot_lanes(x, x, W) / W + RMSNORM_EPS);
        rstd[r] = s;
        for (int i = 0; i < W; i++) o[i] = x[i] * s * weight[i] * out_scale;
        if (rounded) round_row(rounded + (size_t)r * W, o, W);
    }
}

float* cpu_thread_scratch(size_t floats) {
    static _Thread_local float* buffer;
    static _Thread_local size_t capacity;
    if (floats > capacity) {
        free(buffer);
        buffer = mallocCheck(floats * sizeof(float));
        capacity = floats;
    }
    return buffer;
}

// Rows per partial sum of the weight's gradient: a fixed block, so that the sum's order, and
// so its bits, never depend on the thread count
#define NORM_ROW_BLOCK 64

void cpu_rmsnorm_backward(const Backend* be, float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                          const float* rstd, float out_scale, int rows, int W) {
    uint16_t* rounded = written_rounding(be, dinp, (size_t)rows * W);
    // one pass over the rows: the input's gradient, and each block's part of the weight's
    // gradient while its rows are in cache (a second pass over all rows re-read two
    // activations of the size of the layer's input)
    int blocks = (rows + NORM_ROW_BLOCK - 1) / NORM_ROW_BLOCK;
    float* partial = cpu_thread_scratch((size_t)blocks * W);  // (blocks, W); the calling thread's, shared with the team
    #pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
        float* part = partial + (size_t)blk * W;
        int r1 = (blk + 1) * NORM_ROW_BLOCK < rows ? (blk + 1) * NORM_ROW_BLOCK : rows;
        memset(part, 0, W * sizeof(float));
        for (int r = blk * NORM_ROW_BLOCK; r < r1; r++) {
            const float* x = inp + (size_t)r * W;
            const float* d = dout + (size_t)r * W;
            float* dx = dinp + (size_t)r * W;
            float s = rstd[r], k = s * out_scale;
            float dot = dot3_lanes(d, weight, x, W) * out_scale * s / W;  // mean of dxhat_i * xhat_i
            for (int i = 0; i < W; i++) {
                dx[i] += s * (d[i] * weight[i] * out_scale - x[i] * s * dot);
                part[i] += d[i] * x[i] * k;
            }
            if (rounded) round_row(rounded + (size_t)r * W, dx, W);
        }
    }
    // the blocks' parts added in block order, threads splitting the channels
    #pragma omp parallel for schedule(static)
    for (int i0 = 0; i0 < W; i0 += 16) {
        int n = i0 + 16 < W ? 16 : W - i0;
        float sum[16];
        memcpy(sum, dweight + i0, n * sizeof(float));
        for (int blk = 0; blk < blocks; blk++) {
            const float* part = partial + (size_t)blk * W + i0;
            for (int i = 0; i < n; i++) sum[i] += part[i];
        }
        memcpy(dweight + i0, sum, n * sizeof(float));
    }
}

void cpu_rope_apply(float* x, const float* cos_sin, int rows, int T, int heads, int D, int stride, int inverse) {
    float sign = inverse ? -1.0f : 1.0f;
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float* cs = cos_sin + (size_t)(r % T) * D;
        for (int h = 0; h < heads; h++) {
            float* v = x + (size_t)r * stride + (size_t)h * D;
            for (int j = 0; j < D / 2; j++) {
                float c = cs[2 * j], s = sign * cs[2 * j + 1];
                float a = v[2 * j], b = v[2 * j + 1];
                v[2 * j] = a * c - b * s;
                v[2 * j + 1] = a * s + b * c;
            }
        }
    }
}

void cpu_swiglu_forward(const Backend* be, float* h, const float* gate_up, int N, int F) {
    uint16_t* rounded = written_rounding(be, h, (size_t)N * F);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* g = gate_up + (size_t)n * 2 * F;
        const float* u = g + F;
        float* o = h + (size_t)n * F;
        exp_shifted(o, g, F, -1.0f, 0.0f);
        for (int i = 0; i < F; i++) o[i] = g[i] / (1.0f + o[i]) * u[i];
        if (rounded) round_row(rounded + (size_t)n * F, o, F);
    }
}

void cpu_swiglu_backward(const Backend* be, float* dgate_up, const float* dh, const float* gate_up, int N, int F) {
    uint16_t* rounded = written_rounding(be, dgate_up, (size_t)N * 2 * F);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* g = gate_up + (size_t)n * 2 * F;
        const float* u = g + F;
        const float* d = dh + (size_t)n * F;
        float* dg = dgate_up + (size_t)n * 2 * F;
        float* du = dg + F;
        exp_shifted(dg, g, F, -1.0f, 0.0f);
        for (int i = 0; i < F; i++) {
            float sig = 1.0f / (1.0f + dg[i]);
            float silu = g[i] * sig;
            du[i] = d[i] * silu;
            dg[i] = d[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
        }
        if (rounded) round_row(rounded + (size_t)n * 2 * F, dg, 2 * F);
    }
}

void cpu_embedding_forward(float* x, const int* tokens, const float* tok_embedding, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) memcpy(x + (size_t)n * C, tok_embedding + (size_t)tokens[n] * C, C * sizeof(float));
}

void cpu_embedding_backward(float* dtok_embedding, const float* dx, const int* tokens, int N, int C) {
    for (int n = 0; n < N; n++) {
        float* dst = dtok_embedding + (size_t)tokens[n] * C;
        const float* src = dx + (size_t)n * C;
        for (int i = 0; i < C; i++) dst[i] += src[i];
    }
}

float cpu_softmax_inplace(float* x, int n) {
    float maxv = max_lanes(x, n);
    exp_shifted(x, x, n, 1.0f, maxv);
    float sum = sum_lanes(x, n);
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++) x[i] *= inv;
    return maxv + logf(sum);
}

// The exponentials of a row go to a scratch row of the thread's, so the logits stay as they
// are; the backward computes them again, with the same functions, so that its probabilities are
// bitwise those the forward's sum was taken over
double cpu_crossentropy_forward(const float* logits, float* row_stats, float* row_loss, const int* targets, int N, int V) {
    #pragma omp parallel
    {
        float* e = cpu_thread_scratch((size_t)V);
        #pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float* l = logits + (size_t)n * V;
            float maxv = max_lanes(l, V);
            exp_shifted(e, l, V, 1.0f, maxv);
            float sum = sum_lanes(e, V);
            row_stats[2 * n] = maxv;
            row_stats[2 * n + 1] = 1.0f / sum;
            row_loss[n] = maxv + logf(sum) - l[targets[n]];
        }
    }
    double total = 0.0;  // serial: the sum must not depend on the thread count
    for (int n = 0; n < N; n++) total += row_loss[n];
    return total;
}

void cpu_crossentropy_backward(const Backend* be, float* logits, const float* row_stats, const int* targets, float dloss, int N, int V) {
    // bf16: each row rounded while it is in cache, for the LM head's backward product
    uint16_t* rounded = written_rounding(be, logits, (size_t)N * V);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* p = logits + (size_t)n * V;
        float inv = row_stats[2 * n + 1];
        exp_shifted(p, p, V, 1.0f, row_stats[2 * n]);
        for (int i = 0; i < V; i++) {
            float prob = p[i] * inv;  // rounded as a stored probability would be
            p[i] = prob * dloss;
        }
        p[targets[n]] -= dloss;
        if (rounded) round_row(rounded + (size_t)n * V, p, V);
    }
}
