#include "cpu.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "../base/util.h"
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

void cpu_matmul_forward(float* out, const float* inp, const float* w, int N, int IC, int OC, int accumulate) {
    double t0 = matmul_begin();
    // Debian 12's OpenBLAS packs all of w for a one-row sgemm above its small-matrix size: at
    // decoding's shapes (IC 256, OC 1,514 or 8,192) that took about 5 times sgemv's time
    if (N == 1) cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, IC, 1.0f, w, IC, inp, 1, accumulate ? 1.0f : 0.0f, out, 1);
    else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, w, IC, accumulate ? 1.0f : 0.0f, out, OC);
    matmul_end(t0, 2.0 * N * IC * (double)OC);
}

void cpu_matmul_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int IC, int OC) {
    double t0 = matmul_begin();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, w, IC, 0.0f, dinp, IC);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
    matmul_end(t0, 4.0 * N * IC * (double)OC);
}

void cpu_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, float out_scale, int rows, int W) {
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float* x = inp + (size_t)r * W;
        float* o = out + (size_t)r * W;
        float s = 1.0f / sqrtf(dot_lanes(x, x, W) / W + RMSNORM_EPS);
        rstd[r] = s;
        for (int i = 0; i < W; i++) o[i] = x[i] * s * weight[i] * out_scale;
    }
}

void cpu_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, float out_scale, int rows, int W) {
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float* x = inp + (size_t)r * W;
        const float* d = dout + (size_t)r * W;
        float* dx = dinp + (size_t)r * W;
        float s = rstd[r];
        float dot = dot3_lanes(d, weight, x, W) * out_scale * s / W;  // mean of dxhat_i * xhat_i
        for (int i = 0; i < W; i++) dx[i] += s * (d[i] * weight[i] * out_scale - x[i] * s * dot);
    }
    // threads split the channels and each sums its channels over the rows in order, so the
    // result never depends on the thread count
    #pragma omp parallel for schedule(static)
    for (int i0 = 0; i0 < W; i0 += 16) {
        int n = i0 + 16 < W ? 16 : W - i0;
        float sum[16];  // the chunk's sums in registers: through dweight, each row's adds would wait on the last row's stores
        memcpy(sum, dweight + i0, n * sizeof(float));
        for (int r = 0; r < rows; r++) {
            const float* x = inp + (size_t)r * W + i0;
            const float* d = dout + (size_t)r * W + i0;
            float k = rstd[r] * out_scale;
            for (int i = 0; i < n; i++) sum[i] += d[i] * x[i] * k;
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

void cpu_swiglu_forward(float* h, const float* gate_up, int N, int F) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* g = gate_up + (size_t)n * 2 * F;
        const float* u = g + F;
        float* o = h + (size_t)n * F;
        exp_shifted(o, g, F, -1.0f, 0.0f);
        for (int i = 0; i < F; i++) o[i] = g[i] / (1.0f + o[i]) * u[i];
    }
}

void cpu_swiglu_backward(float* dgate_up, const float* dh, const float* gate_up, int N, int F) {
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

double cpu_crossentropy_forward(float* probs, float* row_loss, const int* targets, int N, int V) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* p = probs + (size_t)n * V;
        float target_logit = p[targets[n]];
        row_loss[n] = cpu_softmax_inplace(p, V) - target_logit;
    }
    double total = 0.0;  // serial: the sum must not depend on the thread count
    for (int n = 0; n < N; n++) total += row_loss[n];
    return total;
}

void cpu_crossentropy_backward(float* probs, const int* targets, float dloss, int N, int V) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* p = probs + (size_t)n * V;
        for (int i = 0; i < V; i++) p[i] *= dloss;
        p[targets[n]] -= dloss;
    }
}
