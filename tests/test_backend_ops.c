// The backend contract. Every operation of the backend table, on every backend built in, through
// the table only (inputs uploaded, outputs downloaded), on random inputs at several shapes (matmuls
// from 1×1×1 to 130×64×256, and a decoding step's one row of 256 × 1,514; attention for every
// variant at T = 1, 5, 64, 70 and 130, so whole and partial 64-row query blocks, and decoding with
// 30 and 70 cached rows), against plain references written in the test: naive loops accumulating in
// double, attention with whole T × T maps and its gradient worked out by hand, to the tolerances
// below. A 0.1% scaling error or a flipped sign fails it. Attention again with
// its logits quantized (4 bits per tensor across three query blocks and when decoding, 6 bits per
// row), forward, backward and maps, against the reference quantizing in double; and the logits
// every attention call shows its hook equal the reference's (quantized where asked; a logit within
// 1e-4 of a level of a rounding midpoint may take either level, as fp32 rounds it). Dropping the
// quantization from the backward's recomputation, or scaling per row where per tensor is asked,
// fails it. DIFF V2's pairing (query heads 2i and 2i+1 inside key/value group i, the official
// code's) and its "halves" ablation (query heads i and i + H, each on its own key/value head)
// against two heads over two tokens written out by hand. Buffers: allocation zeroed, copies exact,
// `zero` clearing exactly its bytes, and a buffer past 2 MiB (the CPU maps those on huge pages)
// zeroed after a written one is released and starting on a 2 MiB boundary. With precision =
// bf16, on each backend that runs it: the weights' products against the bf16-rounded operands'
// double product and the fp32 one (their bounds at expect_bf16_product), the weights' bf16
// copies made once per announced change, and attention for every variant: the path it takes (the
// CUDA backend's cuDNN graphs where every map's sub-heads lie one stride apart, its fp32 kernels
// elsewhere) and its y, lse, dqkv and dlambda against the double reference of bf16 inputs. The
// gradient mode (`--grad` alone; part of every run): each operation with a backward (matmul,
// RMSNorm, RoPE, SwiGLU, cross-entropy, λ, attention of every variant with DINT's integral term)
// against central differences of its own forward on the same backend. `--op GROUP` runs one
// group of operations alone (`--op attention`), for a fast loop on one.
//
// Tolerance: |got - ref| <= atol + rtol * |ref| per element. fp32 arithmetic with sums of up to
// a few hundred terms of O(1) values rounds at about 1e-6 relative; exp runs on vector libm
// (a few ulp). rtol = 1e-4 and atol = 1e-5 leave two orders of magnitude above that and stay
// far below any indexing, sign or scaling error, which is O(1); attention's dqkv, whose sums
// cancel, to 1e-5 times its largest element. Exact operations (copies, gathers, scale, add, the
// squared sum in double) are held to 0 or 1e-12.
#define _POSIX_C_SOURCE 200809L  // setenv
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../model/backend.h"
#include "../base/util.h"
#include "bf16_reference.h"
#include "check.h"
#include "instances.h"

#define RTOL 1e-4
#define ATOL 1e-5

static const Backend* be;
// --variant: the attention variant the attention and bf16 groups run, all when NULL
static const char* only_variant;
static int variant_wanted(AttentionKind k) { return !only_variant || strcmp(ATTN_VARIANTS[k].name, only_variant) == 0; }
static uint64_t rng = 2024;
static const HookSite NO_HOOK = {NULL, 0};

static float* random_host(size_t n, float std) {
    float* a = mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = std * rng_normal(&rng);
    return a;
}

static void* to_backend(const void* host, size_t bytes) {
    void* d = be->alloc(bytes);
    be->upload(d, host, bytes);
    return d;
}

static float* from_backend(const float* d, size_t n) {
    float* h = mallocCheck(n * sizeof(float));
    be->download(h, d, n * sizeof(float));
    return h;
}

// One CHECK for a tensor: every element within atol + rtol |ref|
static void expect_close(const char* op, const char* what, const float* got, const double* ref, size_t n, double rtol,
                         double atol) {
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double excess = fabs(got[i] - ref[i]) / (atol + rtol * fabs(ref[i]));
        if (excess > worst || isnan(got[i])) { worst = isnan(got[i]) ? INFINITY : excess; at = i; }
    }
    CHECK(worst <= 1.0, "%s %s [%s]: element %zu is %.8g, reference %.8g", be->name, op, what, at, n ? got[at] : 0.0,
          n ? ref[at] : 0.0);
}

static double* dzeros(size_t n) { return callocCheck(n, sizeof(double)); }

// A sum of products in fp32 rounds each partial sum, so a result that cancels (small against its
// terms) carries an error of the terms' size, not its own: mag[i] = sum |a b| over element i's
// products widens its tolerance by DOT_EPS (a little under one fp32 rounding, 2^-23) of it
#define DOT_EPS 1e-7
static void expect_close_sum(const char* op, const char* what, const float* got, const double* ref, const double* mag, size_t n) {
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double excess = fabs(got[i] - ref[i]) / (ATOL + RTOL * fabs(ref[i]) + DOT_EPS * mag[i]);
        if (excess > worst || isnan(got[i])) { worst = isnan(got[i]) ? INFINITY : excess; at = i; }
    }
    CHECK(worst <= 1.0, "%s %s [%s]: element %zu is %.8g, reference %.8g (its products' magnitudes sum to %.4g)", be->name, op, what,
          at, n ? got[at] : 0.0, n ? ref[at] : 0.0, n ? mag[at] : 0.0);
}

// ---- buffers ----
static void test_buffers(void) {
    size_t n = 1000;
    float* host = random_host(n, 1);
    float* zeroed = be->alloc(n * sizeof(float));
    float* got = from_backend(zeroed, n);
    int all_zero = 1;
    for (size_t i = 0; i < n; i++) all_zero &= got[i] == 0.0f;
    CHECK(all_zero, "%s alloc returns zeroed memory", be->name);
    float* a = to_backend(host, n * sizeof(float));
    be->copy(zeroed, a, n * sizeof(float));
    free(got);
    got = from_backend(zeroed, n);
    CHECK(memcmp(got, host, n * sizeof(float)) == 0, "%s upload, copy, download round-trip exactly", be->name);
    be->zero(zeroed + 10, 20 * sizeof(float));
    free(got);
    got = from_backend(zeroed, n);
    int zeroed_part = 1;
    for (size_t i = 0; i < n; i++) zeroed_part &= (i >= 10 && i < 30) ? got[i] == 0.0f : got[i] == host[i];
    CHECK(zeroed_part, "%s zero clears exactly the bytes asked", be->name);
    be->release(a);
    be->release(zeroed);
    be->release(NULL);
    free(host);
    free(got);
    // a buffer past a huge page takes the CPU's other path (mapped on huge pages): it comes
    // zeroed, also where a written one of its size was just released, and 2 MiB aligned
    size_t big = (3u << 20) / sizeof(float) + 1;
    float* ones = mallocCheck(big * sizeof(float));
    for (size_t i = 0; i < big; i++) ones[i] = 1.0f;
    be->release(to_backend(ones, big * sizeof(float)));
    float* fresh = be->alloc(big * sizeof(float));
    got = from_backend(fresh, big);
    all_zero = 1;
    for (size_t i = 0; i < big; i++) all_zero &= got[i] == 0.0f;
    CHECK(all_zero, "%s alloc of %zu bytes returns zeroed memory after a written buffer is released", be->name, big * sizeof(float));
    if (be->host_memory) CHECK((uintptr_t)fresh % (2u << 20) == 0, "%s alloc of %zu bytes starts on a 2 MiB page boundary", be->name, big * sizeof(float));
    be->release(fresh);
    free(ones);
    free(got);
}

// ---- matmul ----
static void test_matmul(int N, int IC, int OC) {
    char what[64];
    snprintf(what, sizeof(what), "N=%d IC=%d OC=%d", N, IC, OC);
    float *inp = random_host((size_t)N * IC, 1), *w = random_host((size_t)OC * IC, 1), *old = random_host((size_t)N * OC, 1);
    float *dout = random_host((size_t)N * OC, 1), *dw0 = random_host((size_t)OC * IC, 1);
    float *d_inp = to_backend(inp, (size_t)N * IC * 4), *d_w = to_backend(w, (size_t)OC * IC * 4);
    float* d_out = to_backend(old, (size_t)N * OC * 4);
    double seconds, flops;
    be->matmul_spent(&seconds, &flops);  // the count starts here
    for (int accumulate = 0; accumulate < 2; accumulate++) {
        be->upload(d_out, old, (size_t)N * OC * 4);
        be->matmul_forward(be, d_out, d_inp, d_w, N, IC, OC, accumulate);
        double *ref = dzeros((size_t)N * OC), *mag = dzeros((size_t)N * OC);
        for (int n = 0; n < N; n++) {
            for (int o = 0; o < OC; o++) {
                double s = accumulate ? old[(size_t)n * OC + o] : 0.0, a = fabs(s);
                for (int i = 0; i < IC; i++) {
                    double p = (double)inp[(size_t)n * IC + i] * w[(size_t)o * IC + i];
                    s += p;
                    a += fabs(p);
                }
                ref[(size_t)n * OC + o] = s;
                mag[(size_t)n * OC + o] = a;
            }
        }
        float* got = from_backend(d_out, (size_t)N * OC);
        expect_close_sum(accumulate ? "matmul_forward (accumulate)" : "matmul_forward", what, got, ref, mag, (size_t)N * OC);
        free(got);
        free(ref);
        free(mag);
    }
    float *d_dout = to_backend(dout, (size_t)N * OC * 4), *d_dw = to_backend(dw0, (size_t)OC * IC * 4);
    float* garbage = random_host((size_t)N * IC, 3);  // dinp is overwritten, not accumulated
    float* d_dinp = to_backend(garbage, (size_t)N * IC * 4);
    free(garbage);
    be->matmul_backward(be, d_dinp, d_dw, d_dout, d_inp, d_w, N, IC, OC);
    double *ref_dinp = dzeros((size_t)N * IC), *ref_dw = dzeros((size_t)OC * IC);
    double *mag_dinp = dzeros((size_t)N * IC), *mag_dw = dzeros((size_t)OC * IC);
    for (int n = 0; n < N; n++) {
        for (int i = 0; i < IC; i++) {
            double s = 0, a = 0;
            for (int o = 0; o < OC; o++) {
                double p = (double)dout[(size_t)n * OC + o] * w[(size_t)o * IC + i];
                s += p;
                a += fabs(p);
            }
            ref_dinp[(size_t)n * IC + i] = s;
            mag_dinp[(size_t)n * IC + i] = a;
        }
    }
    for (int o = 0; o < OC; o++) {
        for (int i = 0; i < IC; i++) {
            double s = dw0[(size_t)o * IC + i], a = fabs(s);
            for (int n = 0; n < N; n++) {
                double p = (double)dout[(size_t)n * OC + o] * inp[(size_t)n * IC + i];
                s += p;
                a += fabs(p);
            }
            ref_dw[(size_t)o * IC + i] = s;
            mag_dw[(size_t)o * IC + i] = a;
        }
    }
    float *got_dinp = from_backend(d_dinp, (size_t)N * IC), *got_dw = from_backend(d_dw, (size_t)OC * IC);
    expect_close_sum("matmul_backward dinp", what, got_dinp, ref_dinp, mag_dinp, (size_t)N * IC);
    expect_close_sum("matmul_backward dw (+=)", what, got_dw, ref_dw, mag_dw, (size_t)OC * IC);
    // two forward products (2 N IC OC FLOPs each) and a backward's two, and the time they took
    be->matmul_spent(&seconds, &flops);
    CHECK(flops == 8.0 * N * IC * OC, "%s matmul_spent counts %.0f FLOPs, not 8 x %s", be->name, flops, what);
    CHECK(seconds >= 0 && seconds < 60, "%s matmul_spent %g s for %s", be->name, seconds, what);
    be->matmul_spent(&seconds, &flops);
    CHECK(flops == 0 && seconds == 0, "%s matmul_spent starts again at 0 after a call", be->name);
    free(inp); free(w); free(old); free(dout); free(dw0); free(ref_dinp); free(ref_dw); free(mag_dinp); free(mag_dw); free(got_dinp); free(got_dw);
    be->release(d_inp); be->release(d_w); be->release(d_out); be->release(d_dout); be->release(d_dw); be->release(d_dinp);
}

// Before its first matmul_spent a backend times nothing (a training run never asks): a product
// then is not counted by that first call
static void test_matmul_untimed(void) {
    float two = 2.0f, out = 0.0f;
    float *d_two = to_backend(&two, 4), *d_out = to_backend(&out, 4);
    be->matmul_forward(be, d_out, d_two, d_two, 1, 1, 1, 0);
    double seconds, flops;
    be->matmul_spent(&seconds, &flops);
    CHECK(flops == 0 && seconds == 0, "%s matmul_spent counted %.0f FLOPs, %g s before it was first called", be->name, flops,
          seconds);
    be->release(d_two); be->release(d_out);
}

// More products between two reads than a backend keeps a record of each (the CUDA backend's
// event pairs fold into a sum every 1024 calls): every one still counted, the result still right
static void test_matmul_spent_many(int calls) {
    float two = 2.0f, three = 3.0f, out = 0.0f;
    float *d_two = to_backend(&two, 4), *d_three = to_backend(&three, 4), *d_out = to_backend(&out, 4);
    double seconds, flops;
    be->matmul_spent(&seconds, &flops);
    for (int c = 0; c < calls; c++) be->matmul_forward(be, d_out, d_two, d_three, 1, 1, 1, 1);
    be->matmul_spent(&seconds, &flops);
    be->download(&out, d_out, 4);
    CHECK(flops == 2.0 * calls && seconds >= 0 && seconds < 60 && out == 6.0f * calls,
          "%s matmul_spent over %d calls: %.0f FLOPs, %g s, sum %g", be->name, calls, flops, seconds, out);
    be->release(d_two); be->release(d_three); be->release(d_out);
}

// ---- rmsnorm ----
static void test_rmsnorm(int rows, int W, float scale) {
    char what[64];
    snprintf(what, sizeof(what), "rows=%d W=%d out_scale=%g", rows, W, scale);
    size_t n = (size_t)rows * W;
    float *x = random_host(n, 2), *w = random_host(W, 1), *dout = random_host(n, 1), *dx0 = random_host(n, 1), *dw0 = random_host(W, 1);
    float *d_x = to_backend(x, n * 4), *d_w = to_backend(w, W * 4), *d_out = be->alloc(n * 4), *d_rstd = be->alloc(rows * 4);
    be->rmsnorm_forward(be, d_out, d_rstd, d_x, d_w, scale, rows, W);
    double *ref = dzeros(n), *ref_rstd = dzeros(rows), *ref_dx = dzeros(n), *ref_dw = dzeros(W);
    for (int i = 0; i < W; i++) ref_dw[i] = dw0[i];
    for (int r = 0; r < rows; r++) {
        const float* xr = x + (size_t)r * W;
        double ss = 0;
        for (int i = 0; i < W; i++) ss += (double)xr[i] * xr[i];
        double s = 1.0 / sqrt(ss / W + RMSNORM_EPS);
        ref_rstd[r] = s;
        double dot = 0;
        for (int i = 0; i < W; i++) dot += (double)dout[(size_t)r * W + i] * w[i] * scale * xr[i] * s;
        for (int i = 0; i < W; i++) {
            ref[(size_t)r * W + i] = xr[i] * s * w[i] * scale;
            ref_dx[(size_t)r * W + i] = dx0[(size_t)r * W + i] + s * (dout[(size_t)r * W + i] * w[i] * scale - xr[i] * s * dot / W);
            ref_dw[i] += (double)dout[(size_t)r * W + i] * xr[i] * s * scale;
        }
    }
    float *got = from_backend(d_out, n), *got_rstd = from_backend(d_rstd, rows);
    expect_close("rmsnorm_forward out", what, got, ref, n, RTOL, ATOL);
    expect_close("rmsnorm_forward rstd", what, got_rstd, ref_rstd, rows, RTOL, ATOL);
    float *d_dout = to_backend(dout, n * 4), *d_dx = to_backend(dx0, n * 4), *d_dw = to_backend(dw0, W * 4);
    be->rmsnorm_backward(be, d_dx, d_dw, d_dout, d_x, d_w, d_rstd, scale, rows, W);
    float *got_dx = from_backend(d_dx, n), *got_dw = from_backend(d_dw, W);
    expect_close("rmsnorm_backward dinp (+=)", what, got_dx, ref_dx, n, RTOL, ATOL);
    expect_close("rmsnorm_backward dweight (+=)", what, got_dw, ref_dw, W, RTOL, ATOL);
    free(x); free(w); free(dout); free(dx0); free(dw0); free(ref); free(ref_rstd); free(ref_dx); free(ref_dw);
    free(got); free(got_rstd); free(got_dx); free(got_dw);
    be->release(d_x); be->release(d_w); be->release(d_out); be->release(d_rstd); be->release(d_dout); be->release(d_dx); be->release(d_dw);
}

// ---- rope ----
// cos_sin (T, D/2, 2) of RoPE's angles t * 10000^(-2j/D), computed in double
static float* rope_table(int T, int D) {
    float* cs = mallocCheck((size_t)T * D * sizeof(float));
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < D / 2; j++) {
            double angle = t * pow(10000.0, -2.0 * j / D);
            cs[(t * (D / 2) + j) * 2] = (float)cos(angle);
            cs[(t * (D / 2) + j) * 2 + 1] = (float)sin(angle);
        }
    }
    return cs;
}

static void test_rope(int rows, int T, int heads, int D, int stride) {
    char what[80];
    snprintf(what, sizeof(what), "rows=%d T=%d heads=%d D=%d stride=%d", rows, T, heads, D, stride);
    float* cs = rope_table(T, D);
    size_t n = (size_t)rows * stride;
    float* x = random_host(n, 1);
    float *d_cs = to_backend(cs, (size_t)T * D * 4), *d_x = to_backend(x, n * 4);
    for (int inverse = 0; inverse < 2; inverse++) {
        be->upload(d_x, x, n * 4);
        be->rope_apply(d_x, d_cs, rows, T, heads, D, stride, inverse);
        double* ref = dzeros(n);
        for (size_t i = 0; i < n; i++) ref[i] = x[i];  // columns past the heads stay as they were
        for (int r = 0; r < rows; r++) {
            for (int h = 0; h < heads; h++) {
                for (int j = 0; j < D / 2; j++) {
                    double angle = (r % T) * pow(10000.0, -2.0 * j / D) * (inverse ? -1 : 1);
                    size_t at = (size_t)r * stride + (size_t)h * D + 2 * j;
                    ref[at] = x[at] * cos(angle) - x[at + 1] * sin(angle);
                    ref[at + 1] = x[at] * sin(angle) + x[at + 1] * cos(angle);
                }
            }
        }
        float* got = from_backend(d_x, n);
        expect_close(inverse ? "rope_apply (inverse)" : "rope_apply", what, got, ref, n, RTOL, ATOL);
        free(got);
        free(ref);
    }
    free(cs); free(x);
    be->release(d_cs); be->release(d_x);
}

// ---- swiglu ----
static void test_swiglu(int N, int F) {
    char what[64];
    snprintf(what, sizeof(what), "N=%d F=%d", N, F);
    float *gu = random_host((size_t)N * 2 * F, 3), *dh = random_host((size_t)N * F, 1);
    float *d_gu = to_backend(gu, (size_t)N * 2 * F * 4), *d_h = be->alloc((size_t)N * F * 4);
    float *d_dh = to_backend(dh, (size_t)N * F * 4), *d_dgu = to_backend(gu, (size_t)N * 2 * F * 4);  // overwritten
    be->swiglu_forward(be, d_h, d_gu, N, F);
    be->swiglu_backward(be, d_dgu, d_dh, d_gu, N, F);
    double *ref = dzeros((size_t)N * F), *ref_d = dzeros((size_t)N * 2 * F);
    for (int n = 0; n < N; n++) {
        for (int i = 0; i < F; i++) {
            double g = gu[(size_t)n * 2 * F + i], u = gu[(size_t)n * 2 * F + F + i], sig = 1.0 / (1.0 + exp(-g));
            double d = dh[(size_t)n * F + i];
            ref[(size_t)n * F + i] = g * sig * u;
            ref_d[(size_t)n * 2 * F + i] = d * u * sig * (1.0 + g * (1.0 - sig));
            ref_d[(size_t)n * 2 * F + F + i] = d * g * sig;
        }
    }
    float *got = from_backend(d_h, (size_t)N * F), *got_d = from_backend(d_dgu, (size_t)N * 2 * F);
    expect_close("swiglu_forward", what, got, ref, (size_t)N * F, RTOL, ATOL);
    expect_close("swiglu_backward", what, got_d, ref_d, (size_t)N * 2 * F, RTOL, ATOL);
    free(gu); free(dh); free(ref); free(ref_d); free(got); free(got_d);
    be->release(d_gu); be->release(d_h); be->release(d_dh); be->release(d_dgu);
}

// ---- embedding ----
static void test_embedding(int N, int V, int C) {
    char what[64];
    snprintf(what, sizeof(what), "N=%d V=%d C=%d", N, V, C);
    int* tokens = mallocCheck(N * sizeof(int));
    for (int n = 0; n < N; n++) tokens[n] = (int)(rng_next(&rng) % (uint64_t)V);  // repeats when N > V
    float *table = random_host((size_t)V * C, 1), *dx = random_host((size_t)N * C, 1), *dtable0 = random_host((size_t)V * C, 1);
    int* d_tokens = to_backend(tokens, N * sizeof(int));
    float *d_table = to_backend(table, (size_t)V * C * 4), *d_x = be->alloc((size_t)N * C * 4);
    float *d_dx = to_backend(dx, (size_t)N * C * 4), *d_dtable = to_backend(dtable0, (size_t)V * C * 4);
    be->embedding_forward(d_x, d_tokens, d_table, N, C);
    be->embedding_backward(d_dtable, d_dx, d_tokens, N, C);
    double *ref = dzeros((size_t)N * C), *ref_d = dzeros((size_t)V * C);
    for (size_t i = 0; i < (size_t)V * C; i++) ref_d[i] = dtable0[i];
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) {
            ref[(size_t)n * C + c] = table[(size_t)tokens[n] * C + c];
            ref_d[(size_t)tokens[n] * C + c] += dx[(size_t)n * C + c];
        }
    }
    float *got = from_backend(d_x, (size_t)N * C), *got_d = from_backend(d_dtable, (size_t)V * C);
    expect_close("embedding_forward", what, got, ref, (size_t)N * C, 0, 0);
    expect_close("embedding_backward (+=)", what, got_d, ref_d, (size_t)V * C, RTOL, ATOL);
    free(tokens); free(table); free(dx); free(dtable0); free(ref); free(ref_d); free(got); free(got_d);
    be->release(d_tokens); be->release(d_table); be->release(d_x); be->release(d_dx); be->release(d_dtable);
}

// ---- cross-entropy ----
static void test_crossentropy(int N, int V) {
    char what[64];
    snprintf(what, sizeof(what), "N=%d V=%d", N, V);
    float* logits = random_host((size_t)N * V, 3);
    int* targets = mallocCheck(N * sizeof(int));
    for (int n = 0; n < N; n++) targets[n] = (int)(rng_next(&rng) % (uint64_t)V);
    float *d_p = to_backend(logits, (size_t)N * V * 4), *d_row = be->alloc(N * 4), *d_stats = be->alloc(2 * N * 4);
    int* d_t = to_backend(targets, N * sizeof(int));
    double sum = be->crossentropy_forward(d_p, d_stats, d_row, d_t, N, V);
    double *ref_p = dzeros((size_t)N * V), *ref_row = dzeros(N), *ref_stats = dzeros(2 * N), ref_sum = 0;
    float dloss = 0.37f;
    double* ref_d = dzeros((size_t)N * V);
    for (int n = 0; n < N; n++) {
        const float* l = logits + (size_t)n * V;
        double mx = l[0], z = 0;
        for (int v = 1; v < V; v++) mx = fmax(mx, l[v]);
        for (int v = 0; v < V; v++) z += exp(l[v] - mx);
        for (int v = 0; v < V; v++) {
            ref_p[(size_t)n * V + v] = exp(l[v] - mx) / z;
            ref_d[(size_t)n * V + v] = (ref_p[(size_t)n * V + v] - (v == targets[n])) * dloss;
        }
        ref_row[n] = mx + log(z) - l[targets[n]];
        ref_stats[2 * n] = mx;
        ref_stats[2 * n + 1] = 1.0 / z;
        ref_sum += ref_row[n];
    }
    float *got_p = from_backend(d_p, (size_t)N * V), *got_row = from_backend(d_row, N), *got_stats = from_backend(d_stats, 2 * N);
    CHECK(memcmp(got_p, logits, (size_t)N * V * sizeof(float)) == 0, "%s crossentropy_forward leaves the logits as they were [%s]",
          be->name, what);
    expect_close("crossentropy_forward row stats (max, 1/sum)", what, got_stats, ref_stats, 2 * N, RTOL, ATOL);
    expect_close("crossentropy_forward row loss", what, got_row, ref_row, N, RTOL, ATOL);
    CHECK(fabs(sum - ref_sum) <= ATOL * N + RTOL * fabs(ref_sum), "%s crossentropy_forward sum [%s]: %.8g vs %.8g", be->name, what, sum, ref_sum);
    be->crossentropy_backward(be, d_p, d_stats, d_t, dloss, N, V);
    float* got_d = from_backend(d_p, (size_t)N * V);
    expect_close("crossentropy_backward", what, got_d, ref_d, (size_t)N * V, RTOL, ATOL);
    free(logits); free(targets); free(ref_p); free(ref_row); free(ref_stats); free(ref_d); free(got_p); free(got_row); free(got_stats);
    free(got_d);
    be->release(d_p); be->release(d_row); be->release(d_stats); be->release(d_t);
}

// ---- attention ----
// Naive attention of one shape in double: y (B*(T-q0), H*Dv), lse (B, H, M, T), the maps
// P (B, H, M, T, T), and the gradient of sum(dy * y) w.r.t. qkv and the layer's lambda. For
// DINT, y is the whole of its attention, integral term included: (P_0 - lambda P_1 + lambda G) V
// with G_i the mean of P_0's rows 0..i, formed here as a map, unlike the kernels.
typedef struct {
    double *y, *lse, *P, *dqkv, dlambda;
    double* S;  // (B, H, M, T, T) the logits each softmax gets, quantized where asked
    // (B, H, M, T, T) as S, but where a logit lies within 1e-4 of a level of the midpoint between
    // two levels, the other one: fp32 logits may round either way there
    double* S_tie;
    // logits within MIDPOINT_MARGIN of a step of the midpoint between two levels: there fp32's
    // rounding of the logit picks the level, and y and lse can follow either
    int near_midpoints;
    double dlambda_terms;  // the sum of dlambda's terms' magnitudes: what its rounding scales with
} AttnRef;
#define MIDPOINT_MARGIN 3e-5

// Column offsets of map m of head h, written out here apart from attention.h: a row is
// [queries | keys | values], sub-heads of width D, value heads of width Dv.
//   paired (standard, DIFF, DINT): query and key sub-head h M + m, value head h of width M D
//   map blocks (shared noise maps, G; Shared DIFF, G = 1): H signal sub-heads then H / G noise
//     ones, head h's h and H + h / G, keys alike; value head h of width 2D
//   DIFF V2: query heads 2h and 2h + 1 on key/value head h of width D; its halves pairing:
//     query heads h and H + h, each on the key/value head grouped-query sharing gives it, (m H + h) / 2
//   GDA: G + 1 query heads a group (G signal, then the noise head), signal head h in group h / G;
//     key heads 2g (signal) and 2g + 1 (noise) and value head g of width 2D for group g
typedef struct { int q, k, v, QH, KH, Dv; } RefHeads;
static RefHeads ref_heads(const AttnShape* s, int h, int m) {
    int H = s->H, M = s->M, D = s->D, G = s->noise_group, g = G ? h / G : 0;
    switch (s->layout) {
    case LAYOUT_PAIRED: return (RefHeads){h * M + m, h * M + m, h, M * H, M * H, M * D};
    case LAYOUT_MAP_BLOCKS: return (RefHeads){m ? H + g : h, m ? H + g : h, h, H + H / G, H + H / G, 2 * D};
    case LAYOUT_SHARED_KV: return (RefHeads){2 * h + m, h, h, 2 * H, H, D};
    case LAYOUT_SHARED_KV_HALVES: return (RefHeads){m * H + h, (m * H + h) / 2, (m * H + h) / 2, 2 * H, H, D};
    case LAYOUT_GROUPED_KV: return (RefHeads){g * (G + 1) + (m ? G : h % G), 2 * g + m, g, H + H / G, 2 * (H / G), 2 * D};
    }
    die("ref_heads: layout %d", (int)s->layout);
}
static int ref_q_col(const AttnShape* s, int h, int m) { return ref_heads(s, h, m).q * s->D; }
static int ref_k_col(const AttnShape* s, int h, int m) { RefHeads r = ref_heads(s, h, m); return (r.QH + r.k) * s->D; }
static int ref_v_col(const AttnShape* s, int h, int m) { RefHeads r = ref_heads(s, h, m); return (r.QH + r.KH) * s->D + r.v * r.Dv; }

// The n_head of a variant's case of about H heads: whole groups of its heads (two for the halves
// pairing, G for the grouped layouts), as few as reach H
static int case_heads(const AttnVariant* v, int H) {
    int per_group = attention_shape(v, attention_test_heads(v, 1), 2, v->test_switch).H;
    return attention_test_heads(v, (H + per_group - 1) / per_group);
}

static AttnRef attention_reference(const float* qkv, float lambda, const AttnShape* s, const float* dy) {
    int B = s->B, T = s->T, H = s->H, D = s->D, M = s->M, q0 = s->q0, rows = T - q0;
    int Dv = attention_value_width(s), QKV = attention_qkv_width(s), lam = attention_lambda_offset(s);
    double scale = 1.0 / sqrt((double)D);
    int Q = (s->quant.bits > 1 && s->quant.bits < 16) ? (1 << (s->quant.bits - 1)) - 1 : 0;  // levels, 0: none
    AttnRef r = {dzeros((size_t)B * rows * H * Dv), dzeros((size_t)B * H * M * T), dzeros((size_t)B * H * M * T * T),
                 dzeros((size_t)B * T * QKV), 0, dzeros((size_t)B * H * M * T * T),
                 dzeros((size_t)B * H * M * T * T), 0, 0};
    double* dPV = dzeros((size_t)M * T * T);  // (M, T, T) dy_i . v_j of each map's values
    for (int b = 0; b < B; b++) {
        const float* base = qkv + (size_t)b * T * QKV;
        for (int h = 0; h < H; h++) {
            double* P = r.P + (((size_t)b * H + h) * M) * T * T;  // (M, T, T)
            for (int m = 0; m < M; m++) {
                int q_col = ref_q_col(s, h, m), k_col = ref_k_col(s, h, m);
                // over the call's query rows q0..T-1; the rows before them, which only DINT's integral
                // term reads, as the call over rows 0..q0-1 that cached them quantized them
                double tensor_max = 0, head_max = 0;
                for (int i = 0; i < T; i++) {
                    double* Pr = P + ((size_t)m * T + i) * T;
                    for (int j = 0; j <= i; j++) {
                        double dot = 0;
                        for (int c = 0; c < D; c++) dot += (double)base[(size_t)i * QKV + q_col + c] * base[(size_t)j * QKV + k_col + c];
                        Pr[j] = dot * scale;
                        if (i >= q0) tensor_max = fmax(tensor_max, fabs(Pr[j]));
                        else head_max = fmax(head_max, fabs(Pr[j]));
                    }
                }
                for (int i = 0; i < T; i++) {
                    double mx = -INFINITY, z = 0;
                    double* Pr = P + ((size_t)m * T + i) * T;
                    if (Q) {  // S_hat = s clamp(round(S / s), -Q, Q), s = max|S| / Q
                        double row_max = 0;
                        for (int j = 0; j <= i; j++) row_max = fmax(row_max, fabs(Pr[j]));
                        double step = (s->quant.scope == QUANT_PER_ROW ? row_max : i < q0 ? head_max : tensor_max) / Q;
                        double* tie = r.S_tie + ((((size_t)b * H + h) * M + m) * T + i) * T;
                        for (int j = 0; j <= i; j++) {
                            double x = Pr[j] / step, level = nearbyint(x), near_mid = fabs(x - floor(x) - 0.5) < 1e-4;
                            r.near_midpoints += fabs(x - floor(x) - 0.5) < MIDPOINT_MARGIN;
                            double other = near_mid ? (level == floor(x) ? level + 1 : level - 1) : level;
                            Pr[j] = step * fmin(fmax(level, -Q), Q);
                            tie[j] = step * fmin(fmax(other, -Q), Q);
                        }
                    }
                    memcpy(r.S + ((((size_t)b * H + h) * M + m) * T + i) * T, Pr, (i + 1) * sizeof(double));
                    if (!Q) memcpy(r.S_tie + ((((size_t)b * H + h) * M + m) * T + i) * T, Pr, (i + 1) * sizeof(double));
                    for (int j = 0; j <= i; j++) mx = fmax(mx, Pr[j]);
                    for (int j = 0; j <= i; j++) z += exp(Pr[j] - mx);
                    for (int j = 0; j <= i; j++) Pr[j] = exp(Pr[j] - mx) / z;
                    r.lse[(((size_t)b * H + h) * M + m) * T + i] = mx + log(z);
                }
            }
            // forward output y_i = sum over maps of c_m P_m V_m (c_0 = 1, c_1 = -lambda_i), and the
            // gradients of each map's values and of each map's probabilities, c_m dPV_m
            memset(dPV, 0, (size_t)M * T * T * sizeof(double));
            for (int m = 0; m < M; m++) {
                int v_col = ref_v_col(s, h, m);
                for (int i = 0; i < T; i++) {
                    double li = M == 1 ? 0 : lam >= 0 ? base[(size_t)i * QKV + lam + h] : lambda, c_m = m == 0 ? 1.0 : -li;
                    for (int j = 0; j <= i; j++) {
                        double w = c_m * P[((size_t)m * T + i) * T + j];
                        for (int c = 0; c < Dv; c++) {
                            double v = base[(size_t)j * QKV + v_col + c];
                            if (i >= q0) r.y[((size_t)b * rows + i - q0) * H * Dv + h * Dv + c] += w * v;
                            if (dy) {
                                double g = dy[((size_t)b * T + i) * H * Dv + h * Dv + c];
                                r.dqkv[((size_t)b * T + j) * QKV + v_col + c] += w * g;
                                dPV[((size_t)m * T + i) * T + j] += g * v;
                            }
                        }
                    }
                }
            }
            if (s->integral) {
                int v_col = ref_v_col(s, h, 0);
                double* column_sum = dzeros(T);  // of P_0's rows 0..i
                double* later = dzeros(T);       // of lambda / (i' + 1) dy_i' . v_j over the rows i' >= i
                for (int i = 0; i < T; i++) {
                    for (int j = 0; j <= i; j++) column_sum[j] += P[(size_t)i * T + j];
                    for (int j = 0; j <= i; j++) {
                        double g = column_sum[j] / (i + 1);  // G_ij
                        for (int c = 0; c < Dv; c++) {
                            double v = base[(size_t)j * QKV + v_col + c];
                            if (i >= q0) r.y[((size_t)b * rows + i - q0) * H * Dv + h * Dv + c] += lambda * g * v;
                            if (!dy) continue;
                            double d = dy[((size_t)b * T + i) * H * Dv + h * Dv + c];
                            r.dqkv[((size_t)b * T + j) * QKV + v_col + c] += lambda * g * d;
                            r.dlambda += g * d * v;
                        }
                    }
                }
                for (int i = T - 1; dy && i >= 0; i--) {  // G's gradient handed back to P_0
                    for (int j = 0; j <= i; j++) {
                        double dv = 0;
                        for (int c = 0; c < Dv; c++) dv += dy[((size_t)b * T + i) * H * Dv + h * Dv + c] * base[(size_t)j * QKV + v_col + c];
                        later[j] += lambda / (i + 1) * dv;
                    }
                    for (int j = 0; j <= i; j++) dPV[(size_t)i * T + j] += later[j];
                }
                free(column_sum);
                free(later);
            }
            if (!dy) continue;
            for (int m = 0; m < M; m++) {
                int q_col = ref_q_col(s, h, m), k_col = ref_k_col(s, h, m);
                for (int i = 0; i < T; i++) {
                    double li = M == 1 ? 0 : lam >= 0 ? base[(size_t)i * QKV + lam + h] : lambda, c_m = m == 0 ? 1.0 : -li;
                    const double* Pr = P + ((size_t)m * T + i) * T;
                    const double* G = dPV + ((size_t)m * T + i) * T;
                    double rowsum = 0;
                    for (int j = 0; j <= i; j++) rowsum += c_m * G[j] * Pr[j];
                    if (m == 1) {  // d/dlambda of -lambda * (P1 V1): -(dPV_1 . P1)
                        double dl = 0;
                        for (int j = 0; j <= i; j++) dl -= G[j] * Pr[j], r.dlambda_terms += fabs(G[j] * Pr[j]);
                        if (lam >= 0) r.dqkv[((size_t)b * T + i) * QKV + lam + h] += dl;
                        else r.dlambda += dl;
                    }
                    for (int j = 0; j <= i; j++) {
                        double dS = Pr[j] * (c_m * G[j] - rowsum) * scale;
                        for (int c = 0; c < D; c++) {
                            r.dqkv[((size_t)b * T + i) * QKV + q_col + c] += dS * base[(size_t)j * QKV + k_col + c];
                            r.dqkv[((size_t)b * T + j) * QKV + k_col + c] += dS * base[(size_t)i * QKV + q_col + c];
                        }
                    }
                }
            }
        }
    }
    free(dPV);
    return r;
}

// Copies the logit blocks a hook is shown into S (B, H, M, T, T); blocks of distinct (b, h)
// arrive concurrently and never overlap
static void attn_ref_free(AttnRef* r) {
    free(r->y), free(r->lse), free(r->P), free(r->dqkv), free(r->S), free(r->S_tie);
}

typedef struct {
    int B, T, H, M;
    float* S;
} LogitCapture;

static void capture_logits(void* ctx, const Activation* a) {
    LogitCapture* c = ctx;
    if (a->kind != ACT_ATTN_LOGITS) return;
    for (int r = 0; r < a->rows; r++) {
        float* dst = c->S + ((((size_t)a->b * c->H + a->head) * c->M + a->map) * c->T + a->row0 + r) * c->T;
        memcpy(dst, a->data + (size_t)r * a->ld, (a->row0 + r + 1) * sizeof(float));
    }
}

// The whole attention of shape s as the model runs it: for DINT the kernel, then its integral
// term, which when decoding (B = 1) continues the running sums of rows 0..q0-1 from a call over
// them. Returns DINT's running sums (B*(T-q0), H*Dv), the backward's input, else NULL.
static float* whole_attention_forward(float* d_y, float* d_lse, const float* d_qkv, const float* d_lambda, const AttnShape* s, HookSite hook) {
    if (!s->integral) {
        be->attention_forward(be, d_y, NULL, d_lse, d_qkv, d_lambda, s, hook);
        return NULL;
    }
    int Dv = attention_value_width(s), rows = s->T - s->q0;
    size_t HDv = (size_t)s->H * Dv;
    float* d_o1 = be->alloc((size_t)s->B * rows * HDv * 4);
    be->attention_forward(be, d_y, d_o1, d_lse, d_qkv, d_lambda, s, hook);
    float *d_head_y = NULL, *d_head_sums = NULL;
    if (s->q0) {
        if (s->B != 1) die("whole_attention_forward: decoding is for one sequence");
        AttnShape head = *s;
        head.T = s->q0;
        head.q0 = 0;
        d_head_y = be->alloc((size_t)s->q0 * HDv * 4);
        d_head_sums = be->alloc((size_t)s->q0 * HDv * 4);
        be->attention_forward(be, d_head_y, d_head_sums, NULL, d_qkv, d_lambda, &head, NO_HOOK);
        be->integral_forward(d_head_y, d_head_sums, NULL, d_lambda, 1, s->q0, s->H, Dv, 0);
    }
    be->integral_forward(d_y, d_o1, d_head_sums ? d_head_sums + (size_t)(s->q0 - 1) * HDv : NULL, d_lambda, s->B, rows, s->H, Dv, s->q0);
    be->release(d_head_y);
    be->release(d_head_sums);
    return d_o1;
}

// Its backward: DINT's integral term first, whose map-0 gradient the kernel takes
static void whole_attention_backward(float* d_dqkv, float* d_dlambda, const float* d_dy, const float* d_sums, const float* d_qkv,
                                     const float* d_lse, const float* d_lambda, const AttnShape* s) {
    if (!s->integral) {
        be->attention_backward(be, d_dqkv, d_dlambda, d_dy, NULL, d_qkv, d_lse, d_lambda, s, NO_HOOK);
        return;
    }
    int Dv = attention_value_width(s);
    float *d_dy0 = be->alloc((size_t)s->B * s->T * s->H * Dv * 4), *d_dlambda_integral = be->alloc(4);
    be->integral_backward(d_dy0, d_dlambda_integral, d_dy, d_sums, d_lambda, s->B, s->T, s->H, Dv);
    be->attention_backward(be, d_dqkv, d_dlambda, d_dy, d_dy0, d_qkv, d_lse, d_lambda, s, NO_HOOK);
    be->add(d_dlambda, d_dlambda_integral, 1);
    be->release(d_dy0);
    be->release(d_dlambda_integral);
}

// The CUDA backends' attention paths (attention_path): their maps written out through cuBLAS
// for training shapes within the budget (every shape here), their memory-linear kernels for
// decoding or where DIFFTX_ATTENTION_PATH = kernels, and in bf16 cuDNN's graphs where they run
// the shape (graphs: 1 they do, -1 they may, 0 they must not); each pass of the attention cases
// forces one (forced_path) or leaves the choice to the backend (NULL)
static const char* forced_path;
static void expect_attention_path(const AttnShape* s, const char* what, int graphs) {
    if (strcmp(be->device, "cuda") != 0) return;
    const char* path = be->attention_path(be, s);
    int written = strstr(path, "maps written out through cuBLAS") != NULL, kernels = strstr(path, "this backend's fp32 kernels") != NULL;
    int took_graphs = strstr(path, "fused graphs") != NULL;
    int want_kernels = s->q0 || (forced_path && strcmp(forced_path, "kernels") == 0);
    if (graphs == 1 || (graphs == -1 && took_graphs)) {
        CHECK(took_graphs, "%s [%s]: attention takes cuDNN's graphs, not %s", be->name, what, path);
    } else if (graphs == -1) {
        // on a GPU the agreement check decided against the graphs: the path says why, and the
        // maps are written out instead (never the kernels)
        const char* refused = strstr(path, "not cuDNN's graphs: ");
        CHECK(written && !kernels && refused && strlen(refused) > strlen("not cuDNN's graphs: "),
              "%s [%s]: where cuDNN's graphs are refused, the maps are written out and the path says why (%s)", be->name, what, path);
    } else {
        CHECK(!took_graphs && (want_kernels ? kernels && !written : written && !kernels), "%s [%s]: attention takes its %s, not %s", be->name,
              what, want_kernels ? "kernels" : "maps written out", path);
    }
}

static void force_path(const char* path) {
    forced_path = path;
    if (path) setenv("DIFFTX_ATTENTION_PATH", path, 1);
    else unsetenv("DIFFTX_ATTENTION_PATH");
}

static void test_attention(AttentionKind kind, int B, int T, int H, int D, int q0, LogitQuant quant) {
    const AttnVariant* v = &ATTN_VARIANTS[kind];
    AttnShape s = attention_shape(v, case_heads(v, H), D, v->test_switch);
    H = s.H;
    s.B = B;
    s.T = T;
    s.q0 = q0;
    s.quant = quant;
    char what[160];
    snprintf(what, sizeof(what), "%s B=%d T=%d H=%d D=%d q0=%d logits %d bits%s%s", v->name, B, T, H, D, q0, quant.bits,
             quant.bits ? (quant.scope == QUANT_PER_ROW ? " per row" : " per tensor") : "", forced_path ? ", path forced" : "");
    expect_attention_path(&s, what, 0);
    int QKV = attention_qkv_width(&s), Dv = attention_value_width(&s), lam = attention_lambda_offset(&s), M = s.M, rows = T - q0;
    size_t n_qkv = (size_t)B * T * QKV, n_y = (size_t)B * rows * H * Dv;
    // quantized logits: inputs drawn again until no logit lies at a rounding midpoint, where the
    // level (and so y and lse, by a whole step) would be fp32's rounding's choice
    float* qkv = NULL;
    float* dy = NULL;
    float lambda = 0.6f;
    AttnRef ref;
    do {
        if (qkv) free(qkv), free(dy), attn_ref_free(&ref);
        qkv = random_host(n_qkv, 1.5f);
        for (size_t n = 0; lam >= 0 && n < (size_t)B * T; n++) {
            for (int h = 0; h < H; h++) qkv[n * QKV + lam + h] = 0.1f + 0.8f * rng_uniform(&rng);
        }
        dy = q0 == 0 ? random_host(n_y, 1) : NULL;
        ref = attention_reference(qkv, lambda, &s, dy);
    } while (ref.near_midpoints);
    float *d_qkv = to_backend(qkv, n_qkv * 4), *d_lambda = to_backend(&lambda, 4);
    size_t n_lse = (size_t)B * H * M * T;
    float *d_y = be->alloc(n_y * 4), *d_lse = be->alloc(n_lse * 4);
    float* d_sums = whole_attention_forward(d_y, d_lse, d_qkv, d_lambda, &s, NO_HOOK);
    // each call's outputs are read before the next call runs: the hooked call below writes
    // buffers of its own, so neither path can pass on the other's results
    float *got_y = from_backend(d_y, n_y), *got_lse = from_backend(d_lse, n_lse);
    expect_close("attention_forward y", what, got_y, ref.y, n_y, RTOL, ATOL);
    if (q0 == 0) {
        expect_close("attention_forward lse", what, got_lse, ref.lse, n_lse, RTOL, ATOL);
        float* garbage = random_host(n_qkv, 5);  // every column of dqkv must be written
        float *d_dqkv = to_backend(garbage, n_qkv * 4), *d_dy = to_backend(dy, n_y * 4), *d_dlambda = be->alloc(4);
        whole_attention_backward(d_dqkv, d_dlambda, d_dy, d_sums, d_qkv, d_lse, d_lambda, &s);  // this backend's own lse
        float* got_dqkv = from_backend(d_dqkv, n_qkv);
        // dqkv's elements are sums over T rows and D columns that can cancel, so an element
        // near 0 carries rounding of the tensor's scale (its largest element: up to 34 at D =
        // 128), not of its own: atol grows with that scale, still far below an error of that scale
        double largest = 1;
        for (size_t i = 0; i < n_qkv; i++) largest = fmax(largest, fabs(ref.dqkv[i]));
        expect_close("attention_backward dqkv", what, got_dqkv, ref.dqkv, n_qkv, RTOL, ATOL * largest);
        if (v->lambda == LAMBDA_PER_LAYER) {
            float got_dlambda;
            be->download(&got_dlambda, d_dlambda, 4);
            // one sum over every row's terms, which can cancel (terms of 5,357 in all summing to
            // -0.77 in one case): fp32's rounding scales with the terms (at most 8.2e-8 of them
            // over every case here), so atol does
            expect_close("attention_backward dlambda", what, &got_dlambda, &ref.dlambda, 1, RTOL, fmax(ATOL, 1e-6 * ref.dlambda_terms));
        }
        free(garbage); free(got_dqkv);
        be->release(d_dqkv); be->release(d_dy); be->release(d_dlambda);
    }
    // the hooked path: what a hook is shown is what the softmax gets, and its outputs are the same;
    // where the backend does not serve the hooked call (CUDA without its maps written out:
    // decoding, or the kernels forced), it says why, and the model places the call on a CPU
    // instance (test_hook, test_devices)
    const char* hook_why = NULL;
    if (!be->supports(be, &s, HOOKED_TRAINING, &hook_why)) {
        int kernels = forced_path && strcmp(forced_path, "kernels") == 0;
        CHECK(strcmp(be->device, "cuda") == 0 && hook_why &&
                  (kernels ? strstr(hook_why, "DIFFTX_ATTENTION_PATH = kernels") != NULL : q0 > 0 && strstr(hook_why, "decoding") != NULL),
              "%s [%s]: a hooked call refused only where CUDA's maps are not written out, saying why (%s)", be->name, what,
              hook_why ? hook_why : "no reason");
    } else {
        LogitCapture cap = {B, T, H, M, callocCheck((size_t)B * H * M * T * T, sizeof(float))};
        ActivationHook capture = {capture_logits, &cap};
        HookSite site = {&capture, 0};
        float *d_y_hooked = be->alloc(n_y * 4), *d_lse_hooked = be->alloc(n_lse * 4);
        be->release(whole_attention_forward(d_y_hooked, d_lse_hooked, d_qkv, d_lambda, &s, site));
        double worst = 0;
        for (int b = 0; b < B; b++) {
            for (int hm = 0; hm < H * M; hm++) {
                for (int i = q0; i < T; i++) {
                    for (int j = 0; j <= i; j++) {
                        size_t at = (((size_t)b * H * M + hm) * T + i) * T + j;
                        double err = fmin(fabs(cap.S[at] - ref.S[at]), fabs(cap.S[at] - ref.S_tie[at]));
                        worst = fmax(worst, err / (ATOL + RTOL * fabs(ref.S[at])));
                    }
                }
            }
        }
        CHECK(worst <= 1, "%s attention logits shown to the hook [%s]: worst error %.3g x tolerance", be->name, what, worst);
        free(cap.S);
        float *hooked_y = from_backend(d_y_hooked, n_y), *hooked_lse = from_backend(d_lse_hooked, n_lse);
        expect_close("attention_forward y, hooked", what, hooked_y, ref.y, n_y, RTOL, ATOL);
        if (q0 == 0) expect_close("attention_forward lse, hooked", what, hooked_lse, ref.lse, n_lse, RTOL, ATOL);
        free(hooked_y); free(hooked_lse);
        be->release(d_y_hooked); be->release(d_lse_hooked);
    }
    if (B == 1) {  // the analysis maps: sequence 0's rows q0..T-1
        float* d_P = be->alloc((size_t)M * rows * T * 4);
        for (int h = 0; h < H; h++) {
            be->attention_maps(be, d_P, d_qkv, &s, h, NO_HOOK);
            float* got = from_backend(d_P, (size_t)M * rows * T);
            double* want = dzeros((size_t)M * rows * T);
            for (int m = 0; m < M; m++) {
                for (int r = 0; r < rows; r++) {
                    memcpy(want + ((size_t)m * rows + r) * T, ref.P + (((size_t)h * M + m) * T + q0 + r) * T, T * sizeof(double));
                }
            }
            char head[192];
            snprintf(head, sizeof(head), "%s head %d", what, h);
            expect_close("attention_maps", head, got, want, (size_t)M * rows * T, RTOL, ATOL);
            free(got);
            free(want);
        }
        be->release(d_P);
    }
    free(qkv); free(dy); free(got_y); free(got_lse);
    attn_ref_free(&ref);
    be->release(d_qkv); be->release(d_lambda); be->release(d_y); be->release(d_lse); be->release(d_sums);
}

// ---- lambda: per layer (DIFF) and per token (DIFF V2) ----
// DIFF V2's pairing, the official code's: query heads 2i and 2i+1 subtract inside key/value
// group i, out_i = attn(q_2i, k_i, v_i) - lambda_i attn(q_2i+1, k_i, v_i), written out here
// by hand for 2 heads over 2 tokens with every vector zero but its first channel (D = 4, scale
// 1/2). The "halves" ablation pairs query heads i and i + H, each on the key/value head that
// grouped-query sharing gives it (query heads 2g, 2g + 1 on group g): out_i = attn(q_i, k_0,
// v_0) - lambda_i attn(q_i+2, k_1, v_1) for these 2 heads, other numbers from the same inputs.
static void test_diff2_pairing(AttentionKind kind) {
    // query head and key/value head of map m of head i, by hand
    static const int official_q[2][2] = {{0, 1}, {2, 3}}, official_kv[2][2] = {{0, 0}, {1, 1}};
    static const int halves_q[2][2] = {{0, 2}, {1, 3}}, halves_kv[2][2] = {{0, 1}, {0, 1}};
    int halves = kind == ATTN_DIFF2_HALVES;
    const int(*qh)[2] = halves ? halves_q : official_q;
    const int(*kv)[2] = halves ? halves_kv : official_kv;
    AttnShape s = attention_shape(&ATTN_VARIANTS[kind], 2, 4, 0);
    s.B = 1;
    s.T = 2;
    int QKV = attention_qkv_width(&s);
    CHECK(QKV == 4 * 4 + 2 * 4 + 2 * 4 + 2, "DIFF V2 row: 4 query heads, 2 key and 2 value heads of 4, 2 lambdas (got %d)", QKV);
    // first channels, in the official projections' order: q heads 0..3, k heads 0..1, v heads 0..1
    static const double q[2][4] = {{0.3, -0.7, 1.1, 0.2}, {1, -1, 2, 0.5}};
    static const double k[2][2] = {{0, 1}, {1, -1}};  // (token, kv head)
    static const double v[2][2] = {{1, 2}, {3, -2}};
    static const double lambda[2][2] = {{0.5, 0.5}, {0.25, 0.75}};
    float* qkv = calloc((size_t)2 * QKV, sizeof(float));
    for (int t = 0; t < 2; t++) {
        for (int j = 0; j < 4; j++) qkv[t * QKV + j * 4] = (float)q[t][j];
        for (int g = 0; g < 2; g++) {
            qkv[t * QKV + 16 + g * 4] = (float)k[t][g];
            qkv[t * QKV + 24 + g * 4] = (float)v[t][g];
            qkv[t * QKV + 32 + g] = (float)lambda[t][g];
        }
    }
    float* d_qkv = to_backend(qkv, (size_t)2 * QKV * 4);
    float* d_y = be->alloc((size_t)2 * 2 * 4 * 4);
    be->attention_forward(be, d_y, NULL, NULL, d_qkv, NULL, &s, NO_HOOK);
    float* y = from_backend(d_y, 2 * 2 * 4);  // (token, head, Dv)
    double want[2][2];
    for (int i = 0; i < 2; i++) {
        // token 0 sees only itself: each map gives its value head's v[0]
        want[0][i] = v[0][kv[i][0]] - lambda[0][i] * v[0][kv[i][1]];
        // token 1: a softmax over the two keys of each map's key/value head
        double out[2];
        for (int m = 0; m < 2; m++) {
            int g = kv[i][m];
            double a = 0.5 * q[1][qh[i][m]] * k[0][g], b = 0.5 * q[1][qh[i][m]] * k[1][g];
            out[m] = (exp(a) * v[0][g] + exp(b) * v[1][g]) / (exp(a) + exp(b));
        }
        want[1][i] = out[0] - lambda[1][i] * out[1];
    }
    int ok = 1;
    for (int t = 0; t < 2; t++) {
        for (int i = 0; i < 2; i++) {
            ok &= fabs(y[(t * 2 + i) * 4] - want[t][i]) < 1e-6;
            for (int c = 1; c < 4; c++) ok &= y[(t * 2 + i) * 4 + c] == 0;
        }
    }
    CHECK(ok, "%s %s pairs query heads %s: y = %.6f %.6f / %.6f %.6f, by hand %.6f %.6f / %.6f %.6f", be->name,
          ATTN_VARIANTS[kind].name, halves ? "i, i+H on the groups of each" : "2i, 2i+1 in group i", y[0], y[4], y[8], y[12],
          want[0][0], want[0][1], want[1][0], want[1][1]);
    be->release(d_qkv);
    be->release(d_y);
    free(qkv);
    free(y);
}

// With one signal head per noise head (G = 1) both grouped layouts are the paper's DIFF: shared
// noise maps with DIFF's query and key sub-heads reordered (DIFF's 2h and 2h + 1, maps 0 and 1
// of head h, are its h and H + h), GDA in DIFF's own order (group h: query heads 2h and 2h + 1,
// key heads 2h and 2h + 1, value head h of width 2D). Same inputs so placed give the same
// outputs, lambda gradient and (placed back) qkv gradients.
static void test_grouped_is_diff(AttentionKind kind) {
    AttnShape diff = attention_shape(&ATTN_VARIANTS[ATTN_DIFF], 3, 4, 0);
    AttnShape grouped = attention_shape(&ATTN_VARIANTS[kind], kind == ATTN_GDA ? 6 : 3, 4, 1);  // GDA's n_head: 3 signal, 3 noise
    diff.B = grouped.B = 2;
    diff.T = grouped.T = 70;
    int H = 3, D = 4, QKV = attention_qkv_width(&diff), N = 2 * 70;
    const char* name = ATTN_VARIANTS[kind].name;
    CHECK(QKV == attention_qkv_width(&grouped) && grouped.H == H, "%s with G = 1 has DIFF's heads and row width (%d, %d)", name, QKV,
          attention_qkv_width(&grouped));
    // column c of a DIFF row is column to_grouped[c] of a grouped row
    int* to_grouped = mallocCheck(QKV * sizeof(int));
    for (int c = 0; c < QKV; c++) {
        int sub = c / D, region = sub / (2 * H), local = sub % (2 * H);  // region 0: queries, 1: keys, past: values
        to_grouped[c] = region >= 2 || kind == ATTN_GDA ? c : (region * 2 * H + (local % 2) * H + local / 2) * D + c % D;
    }
    float *qkv = random_host((size_t)N * QKV, 1.2f), *qkv_g = mallocCheck((size_t)N * QKV * sizeof(float));
    float lambda = 0.7f, *dy = random_host((size_t)N * H * 2 * D, 1);
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < QKV; c++) qkv_g[(size_t)n * QKV + to_grouped[c]] = qkv[(size_t)n * QKV + c];
    }
    const AttnShape* shapes[2] = {&diff, &grouped};
    float* inputs[2] = {qkv, qkv_g};
    float *y[2], *dqkv[2], dlambda[2];
    size_t n_y = (size_t)N * H * 2 * D, n_lse = (size_t)N * H * 2;
    for (int k = 0; k < 2; k++) {
        float *d_qkv = to_backend(inputs[k], (size_t)N * QKV * 4), *d_lambda = to_backend(&lambda, 4), *d_dy = to_backend(dy, n_y * 4);
        float *d_y = be->alloc(n_y * 4), *d_lse = be->alloc(n_lse * 4), *d_dqkv = be->alloc((size_t)N * QKV * 4), *d_dlambda = be->alloc(4);
        be->attention_forward(be, d_y, NULL, d_lse, d_qkv, d_lambda, shapes[k], NO_HOOK);
        be->attention_backward(be, d_dqkv, d_dlambda, d_dy, NULL, d_qkv, d_lse, d_lambda, shapes[k], NO_HOOK);
        y[k] = from_backend(d_y, n_y);
        dqkv[k] = from_backend(d_dqkv, (size_t)N * QKV);
        be->download(&dlambda[k], d_dlambda, 4);
        be->release(d_qkv); be->release(d_lambda); be->release(d_dy); be->release(d_y); be->release(d_lse); be->release(d_dqkv);
        be->release(d_dlambda);
    }
    double worst_y = 0, worst_dqkv = 0;
    for (size_t i = 0; i < n_y; i++) worst_y = fmax(worst_y, fabs(y[0][i] - y[1][i]));
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < QKV; c++) worst_dqkv = fmax(worst_dqkv, fabs(dqkv[0][(size_t)n * QKV + c] - dqkv[1][(size_t)n * QKV + to_grouped[c]]));
    }
    CHECK(worst_y < 1e-6 && worst_dqkv < 1e-6 && fabsf(dlambda[0] - dlambda[1]) < 1e-5 * fabsf(dlambda[0]),
          "%s %s with G = 1 is DIFF with its sub-heads placed as its layout says: max |y diff| %.2g, |dqkv diff| %.2g, dlambda %.7g vs %.7g",
          be->name, name, worst_y, worst_dqkv, dlambda[1], dlambda[0]);
    for (int k = 0; k < 2; k++) {
        free(y[k]);
        free(dqkv[k]);
    }
    free(to_grouped); free(qkv); free(qkv_g); free(dy);
}

static void test_lambda(int D) {
    char what[32];
    snprintf(what, sizeof(what), "D=%d", D);
    float *lam = random_host(4 * (size_t)D, 0.3f), *dlam0 = random_host(4 * (size_t)D, 1), dlambda = -1.3f;
    float *d_lam = to_backend(lam, 16 * (size_t)D), *d_out = be->alloc(4), *d_dlam = to_backend(dlam0, 16 * (size_t)D);
    float* d_dlambda = to_backend(&dlambda, 4);
    be->lambda_forward(d_out, d_lam, 0.2f, D);
    be->lambda_backward(d_dlam, d_dlambda, d_lam, D);
    double d1 = 0, d2 = 0;
    for (int i = 0; i < D; i++) {
        d1 += (double)lam[i] * lam[D + i];
        d2 += (double)lam[2 * D + i] * lam[3 * D + i];
    }
    double want = exp(d1) - exp(d2) + 0.2, *want_d = dzeros(4 * (size_t)D);
    for (int i = 0; i < D; i++) {
        want_d[i] = dlam0[i] + dlambda * exp(d1) * lam[D + i];
        want_d[D + i] = dlam0[D + i] + dlambda * exp(d1) * lam[i];
        want_d[2 * D + i] = dlam0[2 * D + i] - dlambda * exp(d2) * lam[3 * D + i];
        want_d[3 * D + i] = dlam0[3 * D + i] - dlambda * exp(d2) * lam[2 * D + i];
    }
    float got, *got_d = from_backend(d_dlam, 4 * (size_t)D);
    be->download(&got, d_out, 4);
    expect_close("lambda_forward", what, &got, &want, 1, RTOL, ATOL);
    expect_close("lambda_backward (+=)", what, got_d, want_d, 4 * (size_t)D, RTOL, ATOL);
    free(lam); free(dlam0); free(want_d); free(got_d);
    be->release(d_lam); be->release(d_out); be->release(d_dlam); be->release(d_dlambda);

    AttnShape s = attention_shape(&ATTN_VARIANTS[ATTN_DIFF2], 3, D, 0);
    int N = 37, QKV = attention_qkv_width(&s), off = attention_lambda_offset(&s);
    float *qkv = random_host((size_t)N * QKV, 2), *dqkv = random_host((size_t)N * QKV, 1);
    float *d_qkv = to_backend(qkv, (size_t)N * QKV * 4), *d_dqkv = to_backend(dqkv, (size_t)N * QKV * 4);
    be->token_lambda_forward(d_qkv, N, &s);
    be->token_lambda_backward(d_dqkv, d_qkv, N, &s);
    double *want_q = dzeros((size_t)N * QKV), *want_dq = dzeros((size_t)N * QKV);
    for (size_t i = 0; i < (size_t)N * QKV; i++) {
        int col = (int)(i % QKV);
        int is_lambda = col >= off && col < off + s.H;
        double sig = 1.0 / (1.0 + exp(-(double)qkv[i]));
        want_q[i] = is_lambda ? sig : qkv[i];
        want_dq[i] = is_lambda ? dqkv[i] * sig * (1 - sig) : dqkv[i];
    }
    float *got_q = from_backend(d_qkv, (size_t)N * QKV), *got_dq = from_backend(d_dqkv, (size_t)N * QKV);
    expect_close("token_lambda_forward (lambda columns only)", what, got_q, want_q, (size_t)N * QKV, RTOL, ATOL);
    expect_close("token_lambda_backward (lambda columns only)", what, got_dq, want_dq, (size_t)N * QKV, RTOL, ATOL);
    free(qkv); free(dqkv); free(want_q); free(want_dq); free(got_q); free(got_dq);
    be->release(d_qkv); be->release(d_dqkv);
}

// ---- precision = bf16: the weights' products with bf16 operands, fp32 accumulation and output ----
// ref (M, N) = op(A) op(B) (+ C0) in double, A and B rounded to bf16 first where `round` is set;
// mag: the sum of |terms| per element. A is (M, K) or stored transposed (K, M) where ta; B is
// (K, N) or stored (N, K) where tb.
static void bf16_reference(double* ref, double* mag, int ta, int tb, int M, int N, int K, const float* A, const float* B, const float* C0,
                           int round) {
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double sum = C0 ? C0[(size_t)i * N + j] : 0.0, m = fabs(sum);
            for (int k = 0; k < K; k++) {
                float a = ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
                float b = tb ? B[(size_t)j * K + k] : B[(size_t)k * N + j];
                if (round) a = bf16_reference_round(a), b = bf16_reference_round(b);
                sum += (double)a * b;
                m += fabs((double)a * b);
            }
            ref[(size_t)i * N + j] = sum;
            mag[(size_t)i * N + j] = m;
        }
    }
}

// got within unit * mag of ref, elementwise, against two references: the product of the operands
// rounded to bf16 (only fp32 accumulation's error: 2 (K + 2) 2^-24 of the terms' magnitude, K
// terms summed in any order, with fused multiply-adds or not), and the fp32 operands' exact
// product (bf16's own error besides: 8 significant bits put each operand within 2^-8 relative,
// so each term within 2^-7 + 2^-16). Unrounded operands fail the first; a wrong transpose or a
// lost old value, both.
static void expect_bf16_product(const char* op, const char* what, const float* got, int ta, int tb, int M, int N, int K, const float* A,
                                const float* B, const float* C0) {
    size_t n = (size_t)M * N;
    double *ref = dzeros(n), *mag = dzeros(n);
    double accumulation = 2.0 * (K + 2) * ldexp(1.0, -24), rounding = ldexp(1.0, -7) + ldexp(1.0, -16) + accumulation;
    double worst[2] = {0, 0};
    for (int exact = 0; exact < 2; exact++) {
        bf16_reference(ref, mag, ta, tb, M, N, K, A, B, C0, !exact);
        for (size_t i = 0; i < n; i++) {
            double r = fabs(got[i] - ref[i]) / ((exact ? rounding : accumulation) * mag[i] + 1e-30);
            if (!(r <= worst[exact])) worst[exact] = isnan(r) ? INFINITY : r;
        }
    }
    CHECK(worst[0] <= 1 && worst[1] <= 1, "%s bf16 %s [%s]: %.3g of fp32 accumulation's bound on the bf16 operands' product, %.3g of "
          "bf16's bound on the fp32 operands' product", be->name, op, what, worst[0], worst[1]);
    free(ref);
    free(mag);
}

static void test_matmul_bf16(int N, int IC, int OC) {
    char what[64];
    snprintf(what, sizeof(what), "N=%d IC=%d OC=%d", N, IC, OC);
    float *inp = random_host((size_t)N * IC, 1), *w = random_host((size_t)OC * IC, 1), *old = random_host((size_t)N * OC, 1);
    float *dw0 = random_host((size_t)OC * IC, 1);
    float *d_inp = to_backend(inp, (size_t)N * IC * 4), *d_w = to_backend(w, (size_t)OC * IC * 4);
    float* d_out = to_backend(old, (size_t)N * OC * 4);
    for (int accumulate = 0; accumulate < 2; accumulate++) {
        be->upload(d_out, old, (size_t)N * OC * 4);
        be->matmul_forward(be, d_out, d_inp, d_w, N, IC, OC, accumulate);
        float* got = from_backend(d_out, (size_t)N * OC);
        expect_bf16_product(accumulate ? "matmul_forward (accumulate)" : "matmul_forward", what, got, 0, 1, N, OC, IC, inp, w,
                            accumulate ? old : NULL);
        free(got);
    }
    // backward, old playing dout: dinp = dout . w (overwritten), dw += dout^T . inp
    float *d_dout = to_backend(old, (size_t)N * OC * 4), *d_dw = to_backend(dw0, (size_t)OC * IC * 4);
    float* garbage = random_host((size_t)N * IC, 3);
    float* d_dinp = to_backend(garbage, (size_t)N * IC * 4);
    be->matmul_backward(be, d_dinp, d_dw, d_dout, d_inp, d_w, N, IC, OC);
    float *got_dinp = from_backend(d_dinp, (size_t)N * IC), *got_dw = from_backend(d_dw, (size_t)OC * IC);
    expect_bf16_product("matmul_backward dinp", what, got_dinp, 0, 0, N, IC, OC, old, w, NULL);
    expect_bf16_product("matmul_backward dw (+=)", what, got_dw, 1, 0, OC, IC, N, old, inp, dw0);
    free(inp); free(w); free(old); free(dw0); free(garbage); free(got_dinp); free(got_dw);
    be->release(d_inp); be->release(d_w); be->release(d_out); be->release(d_dout); be->release(d_dw); be->release(d_dinp);
}

// A weight's bf16 copy is made when the model says the weights changed (weights_changed), and
// every product reads that copy: a change not announced is not seen, an announced one is, a
// forgotten range is rounded again by each product. In fp32 no copy exists to go stale.
static void test_weight_copies(int bf16) {
    enum { N = 8, IC = 16, OC = 12 };
    float inp[N * IC], w[OC * IC], before[N * OC], after[N * OC], fresh[N * OC], forgotten[N * OC];
    for (int i = 0; i < N * IC; i++) inp[i] = rng_normal(&rng);
    for (int i = 0; i < OC * IC; i++) w[i] = rng_normal(&rng);
    float *d_inp = to_backend(inp, sizeof(inp)), *d_w = to_backend(w, sizeof(w)), *d_out = be->alloc(sizeof(before));
    be->weights_changed(be, d_w, OC * IC);
    be->matmul_forward(be, d_out, d_inp, d_w, N, IC, OC, 0);
    be->download(before, d_out, sizeof(before));
    for (int i = 0; i < OC * IC; i++) w[i] += 0.5f;
    be->upload(d_w, w, sizeof(w));
    be->matmul_forward(be, d_out, d_inp, d_w, N, IC, OC, 0);
    be->download(after, d_out, sizeof(after));
    be->weights_changed(be, d_w, OC * IC);
    be->matmul_forward(be, d_out, d_inp, d_w, N, IC, OC, 0);
    be->download(fresh, d_out, sizeof(fresh));
    be->weights_changed(be, d_w, 0);
    for (int i = 0; i < OC * IC; i++) w[i] -= 0.5f;
    be->upload(d_w, w, sizeof(w));
    be->matmul_forward(be, d_out, d_inp, d_w, N, IC, OC, 0);
    be->download(forgotten, d_out, sizeof(forgotten));
    if (bf16) {
        CHECK(memcmp(before, after, sizeof(before)) == 0 && memcmp(after, fresh, sizeof(after)) != 0 &&
                  memcmp(before, forgotten, sizeof(before)) == 0,
              "%s bf16: products read the weights' copy made at the last announced change; a forgotten range is read afresh", be->name);
    } else {
        CHECK(memcmp(before, after, sizeof(before)) != 0 && memcmp(after, fresh, sizeof(after)) == 0,
              "%s fp32: every product reads the weights as they are", be->name);
    }
    be->release(d_inp); be->release(d_w); be->release(d_out);
}

// dw (OC, IC) of one matmul_backward reading d_inp, from zero, into host memory
static void backward_dw(float* dw, const float* d_inp, const float* d_dout, const float* d_w, int N, int IC, int OC) {
    float *d_dw = be->alloc((size_t)OC * IC * sizeof(float)), *d_dinp = be->alloc((size_t)N * IC * sizeof(float));
    be->matmul_backward(be, d_dinp, d_dw, d_dout, d_inp, d_w, N, IC, OC);
    be->download(dw, d_dw, (size_t)OC * IC * sizeof(float));
    be->release(d_dw), be->release(d_dinp);
}

// The forward's rounding of a product's input, kept for the backward (activations_changed): in
// bf16, a backward reads rows inside a block of activations as the last forward product that
// read exactly those rows rounded them, and rounds afresh rows no forward kept: rows outside
// every block, rows a forward with other rows overlapping them released, and any rows of a
// forgotten block. Each dw is compared bitwise with a backward reading the expected values from
// a buffer outside every block. In fp32 every backward reads the rows as they are.
static void test_kept_roundings(int bf16) {
    enum { N = 8, IC = 16, OC = 12, ROWS = 3 * N };
    float old[ROWS * IC], now_[ROWS * IC], w[OC * IC], dout[N * OC], out[N * OC];
    float want[OC * IC], got[OC * IC];
    for (int i = 0; i < ROWS * IC; i++) old[i] = rng_normal(&rng), now_[i] = rng_normal(&rng);
    for (int i = 0; i < OC * IC; i++) w[i] = rng_normal(&rng);
    for (int i = 0; i < N * OC; i++) dout[i] = rng_normal(&rng);
    float *d_w = to_backend(w, sizeof(w)), *d_dout = to_backend(dout, sizeof(dout)), *d_out = be->alloc(sizeof(out));
    float *block = to_backend(old, sizeof(old)), *apart = to_backend(old, sizeof(old));
    be->weights_changed(be, d_w, OC * IC);
    be->activations_changed(be, block, ROWS * IC);
    float* x1 = block + N * IC;  // rows N .. 2N - 1 of the block
    // the rows read by a backward as `values` has them (rows N .. 2N - 1), from outside the block
    #define EXPECT_DW(values, kept_says)                                                                         \
        do {                                                                                                     \
            be->upload(apart, (values) + N * IC, N * IC * sizeof(float));                                        \
            backward_dw(want, apart, d_dout, d_w, N, IC, OC);                                                    \
            backward_dw(got, x1, d_dout, d_w, N, IC, OC);                                                        \
            CHECK(memcmp(got, want, sizeof(got)) == 0, "%s %s: %s", be->name, bf16 ? "bf16" : "fp32", kept_says); \
        } while (0)
    be->matmul_forward(be, d_out, x1, d_w, N, IC, OC, 0);
    be->upload(block, now_, sizeof(now_));
    EXPECT_DW(bf16 ? old : now_, "a backward reads its rows as the forward rounded them (fp32: as they are)");
    // rows inside the kept ones but not the same rows are another product's: read as they are
    backward_dw(got, x1 + IC, d_dout, d_w, N - 1, IC, OC);
    be->upload(apart, now_ + (N + 1) * IC, (N - 1) * IC * sizeof(float));
    backward_dw(want, apart, d_dout, d_w, N - 1, IC, OC);
    CHECK(memcmp(got, want, sizeof(got)) == 0, "%s %s: rows inside kept ones, not the same rows, are read as they are", be->name,
          bf16 ? "bf16" : "fp32");
    be->matmul_forward(be, d_out, x1, d_w, N, IC, OC, 0);
    EXPECT_DW(now_, "a forward rounds its rows again");
    be->upload(block, old, sizeof(old));
    be->matmul_forward(be, d_out, x1 - IC, d_w, N, IC, OC, 0);  // one row earlier: overlapping, not the same rows
    EXPECT_DW(old, "a forward over overlapping rows releases their rounding");
    be->matmul_forward(be, d_out, x1, d_w, N, IC, OC, 0);
    be->upload(block, now_, sizeof(now_));
    be->activations_changed(be, block, 0);
    EXPECT_DW(now_, "a forgotten block's rows are rounded afresh");
    // outside every block nothing is kept: `apart` plays the forward's input, `block` the check's
    float* outside = to_backend(old + N * IC, N * IC * sizeof(float));
    be->matmul_forward(be, d_out, outside, d_w, N, IC, OC, 0);
    be->upload(outside, now_ + N * IC, N * IC * sizeof(float));
    backward_dw(got, outside, d_dout, d_w, N, IC, OC);
    be->upload(apart, now_ + N * IC, N * IC * sizeof(float));
    backward_dw(want, apart, d_dout, d_w, N, IC, OC);
    CHECK(memcmp(got, want, sizeof(got)) == 0, "%s %s: rows outside every block are read as they are", be->name, bf16 ? "bf16" : "fp32");
    #undef EXPECT_DW
    be->weights_changed(be, d_w, 0);
    be->release(d_w), be->release(d_dout), be->release(d_out), be->release(block), be->release(apart), be->release(outside);
}

// Cross-entropy's backward on a bf16 instance with its logits inside a block of activations: the
// LM head's backward product reads dlogits from the rounding that backward kept (on CUDA the only
// place they are written), and computes bitwise what it computes from fp32 dlogits outside every
// block, rounded afresh
static void test_crossentropy_rounded(int N, int V, int C) {
    float *logits = random_host((size_t)N * V, 3), *x = random_host((size_t)N * C, 1), *w = random_host((size_t)V * C, 1);
    int* targets = mallocCheck(N * sizeof(int));
    for (int n = 0; n < N; n++) targets[n] = (int)(rng_next(&rng) % V);
    float *d_x = to_backend(x, (size_t)N * C * 4), *d_w = to_backend(w, (size_t)V * C * 4);
    int* d_t = to_backend(targets, N * sizeof(int));
    float *d_stats = be->alloc(2 * N * sizeof(float)), *d_rows = be->alloc(N * sizeof(float));
    be->weights_changed(be, d_w, (size_t)V * C);
    float *dx[2], *dw[2];
    for (int kept = 0; kept < 2; kept++) {
        float *d_logits = to_backend(logits, (size_t)N * V * 4), *d_dx = be->alloc((size_t)N * C * 4), *d_dw = be->alloc((size_t)V * C * 4);
        if (kept) be->activations_changed(be, d_logits, (size_t)N * V);
        be->crossentropy_forward(d_logits, d_stats, d_rows, d_t, N, V);
        be->crossentropy_backward(be, d_logits, d_stats, d_t, 1.0f / N, N, V);
        be->matmul_backward(be, d_dx, d_dw, d_logits, d_x, d_w, N, C, V);
        dx[kept] = from_backend(d_dx, (size_t)N * C);
        dw[kept] = from_backend(d_dw, (size_t)V * C);
        if (kept) be->activations_changed(be, d_logits, 0);
        be->release(d_logits), be->release(d_dx), be->release(d_dw);
    }
    CHECK(memcmp(dx[0], dx[1], (size_t)N * C * 4) == 0 && memcmp(dw[0], dw[1], (size_t)V * C * 4) == 0,
          "%s bf16 N=%d V=%d C=%d: the LM head's backward from cross-entropy's kept rounding of dlogits equals it from fp32 dlogits",
          be->name, N, V, C);
    be->weights_changed(be, d_w, 0);
    free(logits), free(x), free(w), free(targets), free(dx[0]), free(dx[1]), free(dw[0]), free(dw[1]);
    be->release(d_x), be->release(d_w), be->release(d_t), be->release(d_stats), be->release(d_rows);
}

// The backward operations that write a gradient a product reads next as its dout (RMSNorm's
// dinp, +=; SwiGLU's dgate_up), on a bf16 instance with it inside a block: the product's backward
// reads the rounding the operation kept (on CUDA, for SwiGLU, the only place it is written),
// bitwise what it computes from the fp32 gradient outside every block, rounded afresh
static void test_written_gradients(int N, int F, int C) {
    const char* ops[2] = {"rmsnorm_backward", "swiglu_backward"};
    float *gu = random_host((size_t)N * 2 * F, 2), *dh = random_host((size_t)N * F, 1), *x = random_host((size_t)N * C, 1);
    float *gain = random_host(2 * F, 1), *dinp0 = random_host((size_t)N * 2 * F, 1), *w = random_host((size_t)2 * F * C, 1);
    float *d_gu = to_backend(gu, (size_t)N * 2 * F * 4), *d_dh = to_backend(dh, (size_t)N * F * 4), *d_x = to_backend(x, (size_t)N * C * 4);
    float *d_gain = to_backend(gain, 2 * F * 4), *d_w = to_backend(w, (size_t)2 * F * C * 4), *rstd = be->alloc(N * 4);
    float *d_dgain = be->alloc(2 * F * 4), *normed = be->alloc((size_t)N * 2 * F * 4);
    be->rmsnorm_forward(be, normed, rstd, d_gu, d_gain, 1.0f, N, 2 * F);  // the rstd of gate_up's rows
    be->weights_changed(be, d_w, (size_t)2 * F * C);
    for (int op = 0; op < 2; op++) {
        float *dx[2], *dw[2];
        for (int kept = 0; kept < 2; kept++) {
            float *d_g = to_backend(dinp0, (size_t)N * 2 * F * 4), *d_dx = be->alloc((size_t)N * C * 4), *d_dw = be->alloc((size_t)2 * F * C * 4);
            if (kept) be->activations_changed(be, d_g, (size_t)N * 2 * F);
            if (op == 0) be->rmsnorm_backward(be, d_g, d_dgain, d_gu, d_gu, d_gain, rstd, 1.0f, N, 2 * F);
            else be->swiglu_backward(be, d_g, d_dh, d_gu, N, F);
            be->matmul_backward(be, d_dx, d_dw, d_g, d_x, d_w, N, C, 2 * F);
            dx[kept] = from_backend(d_dx, (size_t)N * C);
            dw[kept] = from_backend(d_dw, (size_t)2 * F * C);
            if (kept) be->activations_changed(be, d_g, 0);
            be->release(d_g), be->release(d_dx), be->release(d_dw);
        }
        CHECK(memcmp(dx[0], dx[1], (size_t)N * C * 4) == 0 && memcmp(dw[0], dw[1], (size_t)2 * F * C * 4) == 0,
              "%s bf16 %s N=%d width %d C=%d: the product's backward from its kept rounding equals it from the fp32 gradient", be->name,
              ops[op], N, 2 * F, C);
        free(dx[0]), free(dx[1]), free(dw[0]), free(dw[1]);
    }
    be->weights_changed(be, d_w, 0);
    free(gu), free(dh), free(x), free(gain), free(dinp0), free(w);
    be->release(d_gu), be->release(d_dh), be->release(d_x), be->release(d_gain), be->release(d_w), be->release(rstd), be->release(d_dgain);
    be->release(normed);
}

// An operation writing rows a product reads next (RMSNorm's out, SwiGLU's h) writes their bf16
// rounding too where they lie in a block of activations: the forward product reads it without
// rounding, bitwise what it computes from the same rows outside every block; the next forward
// product of those rows, changed since, rounds them again
static void test_written_roundings(void) {
    enum { N = 6, W = 40, OC = 9 };
    float *x = random_host(N * W, 2), *gain = random_host(W, 1), *gate_up = random_host(N * 2 * W, 2), *w = random_host(OC * W, 1);
    float *other = random_host(N * W, 1), got[N * OC], want[N * OC];
    float *d_x = to_backend(x, N * W * 4), *d_gain = to_backend(gain, W * 4), *d_gu = to_backend(gate_up, N * 2 * W * 4);
    float *d_w = to_backend(w, OC * W * 4), *block = be->alloc(2 * N * W * 4), *apart = be->alloc(N * W * 4);
    float *rstd = be->alloc(N * 4), *d_got = be->alloc(N * OC * 4), *d_want = be->alloc(N * OC * 4);
    be->weights_changed(be, d_w, OC * W);
    be->activations_changed(be, block, 2 * N * W);
    const char* ops[2] = {"rmsnorm_forward", "swiglu_forward"};
    for (int op = 0; op < 2; op++) {
        float* rows = block + op * N * W;  // RMSNorm's out, then SwiGLU's h, side by side in the block
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 0 && op == 0) {
                be->rmsnorm_forward(be, rows, rstd, d_x, d_gain, 0.7f, N, W);
                be->rmsnorm_forward(be, apart, rstd, d_x, d_gain, 0.7f, N, W);
            } else if (pass == 0) {
                be->swiglu_forward(be, rows, d_gu, N, W);
                be->swiglu_forward(be, apart, d_gu, N, W);
            } else {
                be->upload(rows, other, N * W * 4);
                be->upload(apart, other, N * W * 4);
            }
            be->matmul_forward(be, d_got, rows, d_w, N, W, OC, 0);
            be->matmul_forward(be, d_want, apart, d_w, N, W, OC, 0);
            be->download(got, d_got, sizeof(got));
            be->download(want, d_want, sizeof(want));
            CHECK(memcmp(got, want, sizeof(got)) == 0, "%s %s: %s", be->name, ops[op],
                  pass ? "the next forward product of the rows, changed since, rounds them again"
                       : "the forward product reads the rounding it wrote, bitwise as rounding its rows");
        }
    }
    be->activations_changed(be, block, 0);
    be->weights_changed(be, d_w, 0);
    free(x), free(gain), free(gate_up), free(w), free(other);
    be->release(d_x), be->release(d_gain), be->release(d_gu), be->release(d_w), be->release(block), be->release(apart);
    be->release(rstd), be->release(d_got), be->release(d_want);
}

// AdamW on weights with a bf16 twin writes the twin as it writes them and says so: the product
// that reads the weights next computes bitwise what it computes once the twin is made again from
// them (weights_changed); weights without a twin (and every fp32 instance's) get 0
static void test_adamw_twins(int bf16) {
    enum { N = 5, IC = 24, OC = 7, W = OC * IC };
    float *x = random_host(N * IC, 1), *p = random_host(W, 1), *g = random_host(W, 1), *mv = random_host(2 * W, 0.1f);
    for (int i = W; i < 2 * W; i++) mv[i] = fabsf(mv[i]);  // v >= 0
    float got[N * OC], want[N * OC];
    float *d_x = to_backend(x, N * IC * 4), *d_p = to_backend(p, W * 4), *d_g = to_backend(g, W * 4), *d_mv = to_backend(mv, 2 * W * 4);
    float *d_out = be->alloc(N * OC * 4), *loose = to_backend(p, W * 4);
    AdamWStep st = {.decay = 0.99f, .beta1 = 0.9f, .beta2 = 0.95f, .step_size = 3e-2f, .bc2_sqrt = 0.3f, .eps = 1e-8f};
    be->weights_changed(be, d_p, W);
    be->matmul_forward(be, d_out, d_x, d_p, N, IC, OC, 0);  // the twin in use before the update
    int wrote = be->adamw_update(be, d_p, d_g, d_mv, d_mv + W, W, &st);
    be->matmul_forward(be, d_out, d_x, d_p, N, IC, OC, 0);
    be->download(got, d_out, sizeof(got));
    be->weights_changed(be, d_p, W);
    be->matmul_forward(be, d_out, d_x, d_p, N, IC, OC, 0);
    be->download(want, d_out, sizeof(want));
    CHECK(wrote == bf16 && memcmp(got, want, sizeof(got)) == 0, "%s %s: AdamW %s (%d), and the next product reads the weights as updated",
          be->name, bf16 ? "bf16" : "fp32", bf16 ? "writes the weights' twin" : "has no twin to write", wrote);
    CHECK(be->adamw_update(be, loose, d_g, d_mv, d_mv + W, W, &st) == 0, "%s: AdamW on weights without a twin says it wrote none",
          be->name);
    be->weights_changed(be, d_p, 0);
    free(x), free(p), free(g), free(mv);
    be->release(d_x), be->release(d_p), be->release(d_g), be->release(d_mv), be->release(d_out), be->release(loose);
}

// relative L2 error of got against a double reference
static double rel_l2_ref(const float* got, const double* ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += (got[i] - ref[i]) * (got[i] - ref[i]), den += ref[i] * ref[i];
    return sqrt(num / (den + 1e-300));
}

// Attention in precision = bf16: the path each variant takes (the CUDA backend's cuDNN graphs
// where a map's sub-heads lie one stride apart: standard, DIFF, DIFF V2, Shared DIFF; its fp32
// kernels for the others; the CPU's fp32 kernels), and its results against the double reference
// of the same qkv rounded to bf16: y and dqkv within bf16's error of the products and the
// probabilities (relative L2 at most 1e-2), lse (fp32 statistics) within 1e-3 absolute, dlambda
// within 1e-2 of itself plus bf16's rounding over its terms' magnitudes
static void test_attention_bf16(AttentionKind kind, int B, int T, int H, int D) {
    const AttnVariant* v = &ATTN_VARIANTS[kind];
    AttnShape s = attention_shape(v, case_heads(v, H), D, v->test_switch);
    H = s.H;
    s.B = B;
    s.T = T;
    char what[160];
    snprintf(what, sizeof(what), "bf16 %s B=%d T=%d H=%d D=%d%s", v->name, B, T, H, D, forced_path ? ", maps written out" : "");
    const char* path = be->attention_path(be, &s);
    // the rule the graphs follow, stated here apart from the backend: every map's query, key and
    // value sub-heads one column stride apart over the heads (a stride of 0 included), no
    // integral term
    int one_stride = !s.integral;
    for (int m = 0; m < s.M; m++) {
        for (int h = 2; h < H; h++) {
            one_stride &= attention_q_col(&s, h, m) - attention_q_col(&s, h - 1, m) == attention_q_col(&s, 1, m) - attention_q_col(&s, 0, m);
            one_stride &= attention_k_col(&s, h, m) - attention_k_col(&s, h - 1, m) == attention_k_col(&s, 1, m) - attention_k_col(&s, 0, m);
            one_stride &= attention_v_col(&s, h, m) - attention_v_col(&s, h - 1, m) == attention_v_col(&s, 1, m) - attention_v_col(&s, 0, m);
        }
    }
    // on a GPU a shape the rule admits may still keep the kernels where the installed cuDNN
    // offers no engine for a graph, no plan finalizes or executes, or the graphs' results
    // disagree with the kernels': the path then says so (the emulation's engine must agree)
    int graphs = strcmp(be->device, "cuda") == 0 && one_stride && !forced_path, on_gpu = strcmp(be->name, "cuda") == 0;
    expect_attention_path(&s, what, graphs ? (on_gpu ? -1 : 1) : 0);
    int QKV = attention_qkv_width(&s), Dv = attention_value_width(&s), lam = attention_lambda_offset(&s);
    size_t n_qkv = (size_t)B * T * QKV, n_y = (size_t)B * T * H * Dv, n_lse = (size_t)B * H * s.M * T;
    float *qkv = random_host(n_qkv, 1.0f), *dy = random_host(n_y, 1.0f);
    for (size_t n = 0; lam >= 0 && n < (size_t)B * T; n++) {
        for (int h = 0; h < H; h++) qkv[n * QKV + lam + h] = 0.1f + 0.8f * rng_uniform(&rng);
    }
    for (size_t i = 0; i < n_qkv; i++) qkv[i] = bf16_reference_round(qkv[i]);  // the reference's inputs are the bf16 ones
    float lambda = 0.6f;
    AttnRef ref = attention_reference(qkv, lambda, &s, dy);
    float *d_qkv = to_backend(qkv, n_qkv * 4), *d_lambda = to_backend(&lambda, 4), *d_dy = to_backend(dy, n_y * 4);
    float *d_y = be->alloc(n_y * 4), *d_lse = be->alloc(n_lse * 4), *d_dqkv = be->alloc(n_qkv * 4), *d_dlambda = be->alloc(4);
    float* d_sums = whole_attention_forward(d_y, d_lse, d_qkv, d_lambda, &s, NO_HOOK);
    whole_attention_backward(d_dqkv, d_dlambda, d_dy, d_sums, d_qkv, d_lse, d_lambda, &s);
    float *y = from_backend(d_y, n_y), *lse = from_backend(d_lse, n_lse), *dqkv = from_backend(d_dqkv, n_qkv), dlambda;
    be->download(&dlambda, d_dlambda, 4);
    double worst_lse = 0;
    for (size_t i = 0; i < n_lse; i++) worst_lse = fmax(worst_lse, isnan(lse[i]) ? INFINITY : fabs(lse[i] - ref.lse[i]));
    double ey = rel_l2_ref(y, ref.y, n_y), eq = rel_l2_ref(dqkv, ref.dqkv, n_qkv);
    // dlambda = -sum dy . O_2 cancels: held to bf16's rounding of the probabilities (2^-8 of each
    // O_2 entry, 2^-7 allowed) over the sum of the terms' magnitudes, besides 1e-2 of its own
    double el = 0;
    if (v->lambda == LAMBDA_PER_LAYER) {
        double mag = 0;
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < H; h++) {
                const double* P1 = ref.P + (((size_t)b * H + h) * s.M + 1) * T * T;
                for (int i = 0; i < T; i++) {
                    for (int c = 0; c < Dv; c++) {
                        double o2 = 0;
                        for (int j = 0; j <= i; j++) o2 += P1[(size_t)i * T + j] * qkv[((size_t)b * T + j) * QKV + attention_v_col(&s, h, 1) + c];
                        mag += fabs(dy[(((size_t)b * T + i) * H + h) * Dv + c] * o2);
                    }
                }
            }
        }
        el = fabs(dlambda - ref.dlambda) / (1e-2 * fabs(ref.dlambda) + ldexp(1.0, -7) * mag);
    }
    CHECK(ey <= 1e-2 && eq <= 1e-2 && worst_lse <= 1e-3 && el <= 1,
          "%s [%s, %s]: relative L2 errors y %.2e, dqkv %.2e; lse within %.2e; dlambda %.2f of its tolerance", be->name, what, path, ey, eq,
          worst_lse, el);
    printf("backend %s %s: %s; relative L2 errors y %.1e, dqkv %.1e\n", be->name, what, path, ey, eq);
    free(qkv), free(dy), free(y), free(lse), free(dqkv);
    attn_ref_free(&ref);
    be->release(d_qkv), be->release(d_lambda), be->release(d_dy), be->release(d_y), be->release(d_lse), be->release(d_dqkv);
    be->release(d_dlambda), be->release(d_sums);
}

// The backend's bf16 instance beside the fp32 one `be` is, or NULL with why not
static Backend* open_bf16(const char** why) { return backend_open(backend_device_index(be->device), PRECISION_BF16, why); }

// Every bf16 case, on a backend that runs precision = bf16 here; said and skipped where it does
// not (a CPU without bf16 dot products: test_bf16 checks its refusal). The cases run on a bf16
// instance of the backend, opened beside its fp32 instance, which stays as it was.
static void test_bf16(void) {
    test_weight_copies(0);
    test_kept_roundings(0);
    test_adamw_twins(0);
    const char* why;
    Backend* bf16 = open_bf16(&why);
    if (!bf16) {
        printf("skipped: backend %s: its bf16 products and attention: %s\n", be->name, why);
        return;
    }
    const Backend* fp32 = be;
    be = bf16;
    CHECK(strstr(be->device_name(be), "bf16"), "%s names its bf16 products in its description (%s)", be->name, be->device_name(be));
    test_weight_copies(1);
    test_kept_roundings(1);
    test_crossentropy_rounded(5, 37, 8);
    test_crossentropy_rounded(3, 4099, 16);  // a row wider than a block
    test_written_roundings();
    test_written_gradients(5, 24, 16);
    test_adamw_twins(1);
    test_matmul_bf16(1, 5, 3);
    test_matmul_bf16(7, 5, 3);
    test_matmul_bf16(64, 96, 80);
    test_matmul_bf16(130, 257, 129);
    // on CUDA twice: as the backend chooses (cuDNN's graphs where they run a shape), then with
    // every shape's maps written out
    for (int pass = 0; pass < (strcmp(be->device, "cuda") == 0 ? 2 : 1); pass++) {
        force_path(pass ? "written" : NULL);
        for (AttentionKind k = 0; k < ATTN_VARIANT_COUNT; k++) {
            if (!variant_wanted(k)) continue;
            test_attention_bf16(k, 2, 70, 2, 8);
            test_attention_bf16(k, 1, 33, 4, 16);  // four heads: the halves pairing's key/value heads no longer one stride apart
        }
    }
    force_path(NULL);
    double rate = be->matmul_rate(be);
    CHECK(rate > 0 && isfinite(rate), "%s bf16 matmul_rate %.1f GFLOP/s", be->name, rate);
    printf("backend %s: bf16 products, matmul rate %.1f GFLOP/s (%s)\n", be->name, rate, be->device_name(be));
    be = fp32;
    backend_close(bf16);
    CHECK(!strstr(be->device_name(be), "bf16"), "%s's fp32 instance beside it stays fp32 (%s)", be->name, be->device_name(be));
}

// ---- --parts: bf16 attention part by part at a model's shape (the GPU window's verdict) ----
// Sums of squares over the columns [c0, c0 + w) of rows of `stride` floats: of got - ref (err)
// and of ref (size), added to what they hold
static void add_squares(double* err, double* size, const float* got, const float* ref, size_t rows, int stride, int c0, int w) {
    for (size_t r = 0; r < rows; r++) {
        for (int c = c0; c < c0 + w; c++) {
            double d = (double)got[r * stride + c] - ref[r * stride + c];
            *err += d * d, *size += (double)ref[r * stride + c] * ref[r * stride + c];
        }
    }
}
static double relative(double err, double size) { return isnan(err) ? INFINITY : sqrt(err / (size + 1e-300)); }

// The training attention of spec "VARIANT:B:T:N_HEAD:D" on random inputs (qkv rounded to bf16,
// the same for every path): the backend's fp32 kernels (DIFFTX_ATTENTION_PATH = kernels) as the
// reference, against the bf16 path it chooses and, where that is not it, bf16 with the maps
// written out. Each part on its own: y, the log-sum-exp (largest absolute error), each map's dQ,
// dK and dV (relative L2 over that map's sub-heads' columns of dqkv; a sub-head two maps share
// counts in both) and dlambda (relative); each within 2e-2, bf16's own error being a few 1e-3.
// One markdown row per path.
static void attention_parts(const char* spec) {
    char name[64];
    int B, T, n_head, D;
    if (sscanf(spec, "%63[a-z0-9_]:%d:%d:%d:%d", name, &B, &T, &n_head, &D) != 5 || B < 1 || T < 1 || n_head < 1 || D < 1)
        die("test_backend_ops --parts: '%s' is not VARIANT:B:T:N_HEAD:D", spec);
    const AttnVariant* v = attention_variant_named(name);
    if (!v) die("test_backend_ops --parts: no attention variant '%s'", name);
    AttnShape s = attention_shape(v, n_head, D, v->test_switch);
    s.B = B, s.T = T;
    const char* why;
    if (!be->supports(be, &s, HOOKED_NONE, &why)) die("test_backend_ops --parts %s: %s", spec, why);
    Backend* bf16 = open_bf16(&why);
    if (!bf16) die("test_backend_ops --parts: %s cannot run bf16: %s", be->name, why);
    const Backend* fp32 = be;
    int QKV = attention_qkv_width(&s), Dv = attention_value_width(&s), lam = attention_lambda_offset(&s), H = s.H, M = s.M;
    int per_layer = M == 2 && lam < 0;
    size_t N = (size_t)B * T, n_qkv = N * QKV, n_y = N * H * Dv, n_lse = (size_t)B * H * M * T;
    float *qkv = random_host(n_qkv, 1.0f), *dy = random_host(n_y, 1.0f);
    for (size_t n = 0; lam >= 0 && n < N; n++) {
        for (int h = 0; h < H; h++) qkv[n * QKV + lam + h] = 0.1f + 0.8f * rng_uniform(&rng);
    }
    for (size_t i = 0; i < n_qkv; i++) qkv[i] = bf16_reference_round(qkv[i]);
    float lambda = 0.6f;
    float *d_qkv = to_backend(qkv, n_qkv * 4), *d_lambda = to_backend(&lambda, 4), *d_dy = to_backend(dy, n_y * 4);
    float *d_y = be->alloc(n_y * 4), *d_lse = be->alloc(n_lse * 4), *d_dqkv = be->alloc(n_qkv * 4), *d_dlambda = be->alloc(4);
    float* ref[3] = {NULL, NULL, NULL};  // y, lse, dqkv of the fp32 kernels
    float ref_dlambda = 0;
    printf("| bf16 attention %s B=%d T=%d H=%d D=%d: path | y | lse | ", name, B, T, H, D);
    for (int m = 0; m < M; m++) printf("map %d dQ | dK | dV | ", m);
    printf("dlambda | verdict |\n|---|---|---|");
    for (int m = 0; m < M; m++) printf("---|---|---|");
    printf("---|---|\n");
    const char* forced[] = {"kernels", NULL, "written"};
    char chosen[1400] = "";
    for (int run = 0; run < 3; run++) {
        force_path(forced[run]);
        be = run ? bf16 : fp32;
        char path[1400];
        snprintf(path, sizeof(path), "%s", be->attention_path(be, &s));
        if (run == 2 && (strstr(chosen, "maps written out") || !strstr(path, "maps written out"))) break;  // ran, or cannot run
        if (run == 1) snprintf(chosen, sizeof(chosen), "%s", path);
        float* d_sums = whole_attention_forward(d_y, d_lse, d_qkv, d_lambda, &s, NO_HOOK);
        whole_attention_backward(d_dqkv, d_dlambda, d_dy, d_sums, d_qkv, d_lse, d_lambda, &s);
        be->release(d_sums);
        float got_dlambda, *got[3] = {from_backend(d_y, n_y), from_backend(d_lse, n_lse), from_backend(d_dqkv, n_qkv)};
        be->download(&got_dlambda, d_dlambda, 4);
        if (run == 0) {
            memcpy(ref, got, sizeof(got));
            ref_dlambda = got_dlambda;
            continue;
        }
        double err = 0, size = 0, e_lse = 0;
        add_squares(&err, &size, got[0], ref[0], N, H * Dv, 0, H * Dv);
        double worst = relative(err, size);
        printf("| %s | %.1e | ", path, worst);
        for (size_t i = 0; i < n_lse; i++) e_lse = fmax(e_lse, isnan(got[1][i]) ? INFINITY : fabs(got[1][i] - ref[1][i]));
        worst = fmax(worst, e_lse);
        printf("%.1e | ", e_lse);
        for (int m = 0; m < M; m++) {
            for (int k = 0; k < 3; k++) {  // dQ, dK, dV
                err = size = 0;
                for (int h = 0; h < H; h++) {
                    int col = k == 0 ? attention_q_col(&s, h, m) : k == 1 ? attention_k_col(&s, h, m) : attention_v_col(&s, h, m);
                    add_squares(&err, &size, got[2], ref[2], N, QKV, col, k == 2 ? Dv : D);
                }
                worst = fmax(worst, relative(err, size));
                printf("%.1e | ", relative(err, size));
            }
        }
        double e_lambda = per_layer ? fabs((double)got_dlambda - ref_dlambda) / (fabs(ref_dlambda) + 1e-30) : 0;
        worst = fmax(worst, e_lambda);
        if (per_layer) printf("%.1e | ", e_lambda);
        else printf("- | ");
        printf("%s |\n", worst <= 2e-2 ? "agrees" : "DISAGREES");
        CHECK(worst <= 2e-2, "%s bf16 attention %s [%s]: worst part %.2e (at most 2e-2)", be->name, spec, path, worst);
        for (int k = 0; k < 3; k++) free(got[k]);
    }
    force_path(NULL);
    be = fp32;
    backend_close(bf16);
    for (int k = 0; k < 3; k++) free(ref[k]);
    free(qkv), free(dy);
    be->release(d_qkv), be->release(d_lambda), be->release(d_dy), be->release(d_y), be->release(d_lse), be->release(d_dqkv);
    be->release(d_dlambda);
}

// ---- optimizer ----
static void test_optimizer(size_t n) {
    char what[32];
    snprintf(what, sizeof(what), "n=%zu", n);
    float* x = random_host(n, 1);
    float* d_x = to_backend(x, n * 4);
    double want = 0;
    for (size_t i = 0; i < n; i++) want += (double)x[i] * x[i];
    double got = be->sum_squares(d_x, n);
    CHECK(fabs(got - want) <= 1e-12 * want, "%s sum_squares [%s]: %.17g vs %.17g", be->name, what, got, want);
    be->scale(d_x, n, 0.3f);
    float* scaled = from_backend(d_x, n);
    double* want_scaled = dzeros(n);
    for (size_t i = 0; i < n; i++) want_scaled[i] = x[i] * 0.3f;  // one float product: exact
    expect_close("scale", what, scaled, want_scaled, n, 0, 0);
    float* y = random_host(n, 1);
    float* d_y = to_backend(y, n * 4);
    be->add(d_y, d_x, n);
    float* sum = from_backend(d_y, n);
    for (size_t i = 0; i < n; i++) want_scaled[i] = y[i] + scaled[i];  // one float sum: exact
    expect_close("add", what, sum, want_scaled, n, 0, 0);
    free(y); free(sum);
    be->release(d_y);

    float *g = random_host(n, 1), *m = random_host(n, 0.1f), *v = random_host(n, 0.1f);
    for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i];
    AdamWStep st = {0.999f, 0.9f, 0.98f, 1e-3f / (1.0f - powf(0.9f, 3)), sqrtf(1.0f - powf(0.98f, 3)), 1e-8f};
    float *d_g = to_backend(g, n * 4), *d_m = to_backend(m, n * 4), *d_v = to_backend(v, n * 4);
    be->upload(d_x, x, n * 4);
    be->adamw_update(be, d_x, d_g, d_m, d_v, n, &st);
    double *want_p = dzeros(n), *want_m = dzeros(n), *want_v = dzeros(n);
    for (size_t i = 0; i < n; i++) {
        want_m[i] = st.beta1 * (double)m[i] + (1 - (double)st.beta1) * g[i];
        want_v[i] = st.beta2 * (double)v[i] + (1 - (double)st.beta2) * g[i] * g[i];
        want_p[i] = x[i] * (double)st.decay - st.step_size * want_m[i] / (sqrt(want_v[i]) / st.bc2_sqrt + st.eps);
    }
    float *got_p = from_backend(d_x, n), *got_m = from_backend(d_m, n), *got_v = from_backend(d_v, n);
    expect_close("adamw_update parameters", what, got_p, want_p, n, RTOL, ATOL);
    expect_close("adamw_update first moment", what, got_m, want_m, n, RTOL, ATOL);
    expect_close("adamw_update second moment", what, got_v, want_v, n, RTOL, ATOL);
    free(x); free(scaled); free(want_scaled); free(g); free(m); free(v); free(want_p); free(want_m); free(want_v);
    free(got_p); free(got_m); free(got_v);
    be->release(d_x); be->release(d_g); be->release(d_m); be->release(d_v);
}

// The table is whole, a missing operation is named, and supports() answers before a run:
// the CPU takes every shape, the CUDA kernels (on a GPU or emulated) refuse what their
// registers and grid cannot hold
static void test_table(void) {
    CHECK(backend_missing_entry(be) == NULL, "%s: every operation of the table is there", be->name);
    Backend broken = *be;
    broken.attention_maps = NULL;
    const char* missing = backend_missing_entry(&broken);
    CHECK(missing && strcmp(missing, "attention_maps") == 0, "%s without attention_maps: the missing entry is named (%s)", be->name,
          missing ? missing : "none");
    AttnShape s = attention_shape(&ATTN_VARIANTS[ATTN_DIFF], 2, 128, 0);
    s.B = 4;
    s.T = 2048;
    const char* why = NULL;
    CHECK(be->supports(be, &s, HOOKED_NONE, &why), "%s supports DIFF at head dim 128, T 2048 (%s)", be->name, why ? why : "");
    s.D = 256;
    why = NULL;
    int wide = be->supports(be, &s, HOOKED_NONE, &why);
    if (strcmp(be->device, "cuda") == 0) {
        CHECK(!wide && why && strstr(why, "head_dim up to 128, not 256"), "%s refuses head dim 256 saying why (%s)", be->name,
              why ? why : "no reason");
    } else {
        CHECK(wide, "%s supports head dim 256", be->name);
    }
    // A hook: the CPU serves every call; CUDA where the maps are written out, which a budget of
    // 0 MiB refuses for training and forward calls alike (the model then places the call on a CPU
    // instance: test_hook, test_devices)
    AttnShape hooked = attention_shape(&ATTN_VARIANTS[ATTN_DIFF], 2, 16, 0);
    hooked.B = 1, hooked.T = 64;
    int kinds[2] = {HOOKED_FORWARD, HOOKED_TRAINING}, within[2], over[2];
    const char* over_why[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) within[k] = be->supports(be, &hooked, kinds[k], &why);
    setenv("DIFFTX_ATTENTION_MIB", "0", 1);
    for (int k = 0; k < 2; k++) over[k] = be->supports(be, &hooked, kinds[k], &over_why[k]);
    unsetenv("DIFFTX_ATTENTION_MIB");
    if (strcmp(be->device, "cuda") == 0) {
        CHECK(within[0] && within[1] && !over[0] && !over[1] && strstr(over_why[1], "over the budget of 0 MiB"),
              "%s serves a hooked call where its maps are written out, and refuses one over the budget saying why (%s)", be->name,
              over_why[1] ? over_why[1] : "no reason");
    } else {
        CHECK(within[0] && within[1] && over[0] && over[1], "%s serves every hooked call", be->name);
    }
}

// The operations' groups, for --op
static const char* const OPS[] = {"table", "buffers", "matmul", "bf16", "rmsnorm", "rope", "swiglu", "embedding", "crossentropy",
                                  "attention", "lambda", "optimizer", NULL};
static const char* only_op;
static int wanted(const char* op) { return !only_op || strcmp(only_op, op) == 0; }
static int grad_only;  // --grad: the gradient mode alone

// ---- gradient mode: finite differences of every operation with a backward ----
// Each operation's backward against central differences of its own forward on the same backend,
// for a loss L = sum(out * R) in double over its output, R fixed random weights (the backward is
// fed R as the output's gradient). The inputs live on the host, where the differences perturb
// them, and every evaluation uploads them: the backend's buffers are only written by its
// operations. Step h = 1e-2; fp32's rounding of L is about 1e-7 |L| / h and the truncation error
// about h^2 |f'''|, both below atol = 1e-3 with rtol = 1e-2 at these sizes; a sign or a factor
// error misses them by orders of magnitude. Every coordinate of the small tensors is perturbed,
// and up to GRAD_SAMPLES of attention's qkv on the CPU; on a device a twentieth of them at
// shorter lengths, as the CPU emulation of the GPU is slow (a tenth at the CPU's lengths took
// its gradient mode 5 minutes; the contract above holds the kernels at every length).
#define GRAD_H 1e-2
#define GRAD_RTOL 1e-2
#define GRAD_ATOL 1e-3
#define GRAD_SAMPLES 400

// A case: up to three host inputs and their device copies, the forward, and R
typedef struct GradCase GradCase;
struct GradCase {
    float* host[3];
    float* dev[3];
    size_t n[3];
    float* out;      // (n_out) on the device
    size_t n_out;
    const float* R;  // (n_out) on the host
    double (*forward)(GradCase* c);
    const void* op;  // the operation's sizes
};

static double weighted_output(const GradCase* c) {
    float* out = from_backend(c->out, c->n_out);
    double s = 0.0;
    for (size_t i = 0; i < c->n_out; i++) s += (double)out[i] * c->R[i];
    free(out);
    return s;
}

static double grad_case_loss(void* p) {
    GradCase* c = p;
    for (int i = 0; i < 3 && c->host[i]; i++) be->upload(c->dev[i], c->host[i], c->n[i] * sizeof(float));
    return c->forward(c);
}

// The case's inputs: host copies of random values (std), device buffers of their size
static GradCase grad_case(const size_t* n, const float* std, int inputs, size_t n_out, double (*forward)(GradCase*), const void* op) {
    GradCase c = {{0}, {0}, {0}, be->alloc(n_out * sizeof(float)), n_out, random_host(n_out, 1), forward, op};
    for (int i = 0; i < inputs; i++) {
        c.n[i] = n[i];
        c.host[i] = random_host(n[i], std[i]);
        c.dev[i] = be->alloc(n[i] * sizeof(float));
    }
    grad_case_loss(&c);  // every input on the device, the forward's saved values made
    return c;
}

static void grad_case_free(GradCase* c) {
    for (int i = 0; i < 3 && c->host[i]; i++) {
        free(c->host[i]);
        be->release(c->dev[i]);
    }
    be->release(c->out);
    free((void*)c->R);
}

// Input i's analytic gradient (on the device, n[i] floats) against the case's differences
static void grad_expect(GradCase* c, int i, const float* d_grad, const char* what, int samples) {
    float* grad = from_backend(d_grad, c->n[i]);
    char name[160];
    snprintf(name, sizeof(name), "%s: %s", be->name, what);
    grad_check(name, grad_case_loss, c, c->host[i], grad, c->n[i], samples, GRAD_H, GRAD_RTOL, GRAD_ATOL);
    free(grad);
}

// The R of a case on the device, as the backward's output gradient
static float* grad_of_output(const GradCase* c) { return to_backend(c->R, c->n_out * sizeof(float)); }

typedef struct { int N, IC, OC; } MatmulSize;
static double matmul_grad_forward(GradCase* c) {
    const MatmulSize* s = c->op;
    be->matmul_forward(be, c->out, c->dev[0], c->dev[1], s->N, s->IC, s->OC, 0);
    return weighted_output(c);
}
static void grad_matmul(int N, int IC, int OC) {
    MatmulSize s = {N, IC, OC};
    GradCase c = grad_case((size_t[]){(size_t)N * IC, (size_t)OC * IC}, (float[]){1, 1}, 2, (size_t)N * OC, matmul_grad_forward, &s);
    float *dout = grad_of_output(&c), *dinp = to_backend(c.host[1], (size_t)N * IC * sizeof(float)) /* overwritten */,
          *dw = be->alloc((size_t)OC * IC * sizeof(float));
    be->matmul_backward(be, dinp, dw, dout, c.dev[0], c.dev[1], N, IC, OC);
    grad_expect(&c, 0, dinp, "matmul d_inp", GRAD_SAMPLES);
    grad_expect(&c, 1, dw, "matmul d_w", GRAD_SAMPLES);
    be->release(dout); be->release(dinp); be->release(dw);
    grad_case_free(&c);
}

typedef struct { int rows, W; float scale; float* rstd; } NormSize;
static double rmsnorm_grad_forward(GradCase* c) {
    const NormSize* s = c->op;
    be->rmsnorm_forward(be, c->out, s->rstd, c->dev[0], c->dev[1], s->scale, s->rows, s->W);
    return weighted_output(c);
}
static void grad_rmsnorm(int rows, int W, float scale) {
    NormSize s = {rows, W, scale, be->alloc(rows * sizeof(float))};
    GradCase c = grad_case((size_t[]){(size_t)rows * W, (size_t)W}, (float[]){1, 1}, 2, (size_t)rows * W, rmsnorm_grad_forward, &s);
    float *dout = grad_of_output(&c), *dinp = be->alloc((size_t)rows * W * sizeof(float)), *dw = be->alloc(W * sizeof(float));
    be->rmsnorm_backward(be, dinp, dw, dout, c.dev[0], c.dev[1], s.rstd, scale, rows, W);
    grad_expect(&c, 0, dinp, "rmsnorm d_inp (out_scale)", GRAD_SAMPLES);
    grad_expect(&c, 1, dw, "rmsnorm d_weight", GRAD_SAMPLES);
    be->release(dout); be->release(dinp); be->release(dw); be->release(s.rstd);
    grad_case_free(&c);
}

typedef struct { int rows, T, heads, D, stride; float* cos_sin; } RopeSize;
static double rope_grad_forward(GradCase* c) {
    const RopeSize* s = c->op;
    be->copy(c->out, c->dev[0], c->n_out * sizeof(float));
    be->rope_apply(c->out, s->cos_sin, s->rows, s->T, s->heads, s->D, s->stride, 0);
    return weighted_output(c);
}
static void grad_rope(int rows, int T, int heads, int D, int stride) {
    float* table = rope_table(T, D);
    RopeSize s = {rows, T, heads, D, stride, to_backend(table, (size_t)T * D * sizeof(float))};
    GradCase c = grad_case((size_t[]){(size_t)rows * stride}, (float[]){1}, 1, (size_t)rows * stride, rope_grad_forward, &s);
    float* dx = grad_of_output(&c);
    be->rope_apply(dx, s.cos_sin, rows, T, heads, D, stride, 1);
    grad_expect(&c, 0, dx, "rope d_x (the inverse rotation)", GRAD_SAMPLES);
    be->release(dx); be->release(s.cos_sin);
    free(table);
    grad_case_free(&c);
}

typedef struct { int N, F; } SwigluSize;
static double swiglu_grad_forward(GradCase* c) {
    const SwigluSize* s = c->op;
    be->swiglu_forward(be, c->out, c->dev[0], s->N, s->F);
    return weighted_output(c);
}
static void grad_swiglu(int N, int F) {
    SwigluSize s = {N, F};
    GradCase c = grad_case((size_t[]){(size_t)N * 2 * F}, (float[]){2}, 1, (size_t)N * F, swiglu_grad_forward, &s);
    float *dh = grad_of_output(&c), *dgu = be->alloc((size_t)N * 2 * F * sizeof(float));
    be->swiglu_backward(be, dgu, dh, c.dev[0], N, F);
    grad_expect(&c, 0, dgu, "swiglu d_gate_up", GRAD_SAMPLES);
    be->release(dh); be->release(dgu);
    grad_case_free(&c);
}

// Cross-entropy's loss is its own output: the sum of the rows' losses, weighted by nothing
typedef struct { int N, V; int* targets; float *rows, *stats; } CeSize;
static double crossentropy_grad_forward(GradCase* c) {
    const CeSize* s = c->op;
    be->copy(c->out, c->dev[0], c->n_out * sizeof(float));
    return be->crossentropy_forward(c->out, s->stats, s->rows, s->targets, s->N, s->V);
}
static void grad_crossentropy(int N, int V) {
    int* targets = mallocCheck(N * sizeof(int));
    for (int i = 0; i < N; i++) targets[i] = (int)(rng_next(&rng) % V);
    CeSize s = {N, V, to_backend(targets, N * sizeof(int)), be->alloc(N * sizeof(float)), be->alloc(2 * N * sizeof(float))};
    GradCase c = grad_case((size_t[]){(size_t)N * V}, (float[]){2}, 1, (size_t)N * V, crossentropy_grad_forward, &s);
    be->crossentropy_backward(be, c.out, s.stats, s.targets, 1.0f, N, V);  // the forward's logits become dlogits
    grad_expect(&c, 0, c.out, "crossentropy d_logits", GRAD_SAMPLES);
    be->release(s.targets); be->release(s.rows); be->release(s.stats);
    free(targets);
    grad_case_free(&c);
}

typedef struct { int D; float lambda_init; } LambdaSize;
static double lambda_grad_forward(GradCase* c) {
    const LambdaSize* s = c->op;
    be->lambda_forward(c->out, c->dev[0], s->lambda_init, s->D);
    return weighted_output(c);
}
static void grad_lambda(int D) {
    LambdaSize s = {D, 0.3f};
    GradCase c = grad_case((size_t[]){(size_t)4 * D}, (float[]){0.3f}, 1, 1, lambda_grad_forward, &s);
    float *dlambda = grad_of_output(&c), *dlam = be->alloc((size_t)4 * D * sizeof(float));
    be->lambda_backward(dlam, dlambda, c.dev[0], D);
    grad_expect(&c, 0, dlam, "lambda d_lam", GRAD_SAMPLES);
    be->release(dlambda); be->release(dlam);
    grad_case_free(&c);
}

// Attention of a variant: qkv (its per-token lambda columns through their sigmoid, as the model
// feeds them) and the layer's lambda; DINT's attention with its integral term, the two
// backward operations together
typedef struct { AttnShape s; float *o1, *lse; } AttnSize;
static double attention_grad_forward(GradCase* c) {
    const AttnSize* a = c->op;
    const AttnShape* s = &a->s;
    if (s->token_lambda) be->token_lambda_forward(c->dev[0], s->B * s->T, s);
    be->attention_forward(be, c->out, a->o1, a->lse, c->dev[0], c->dev[1], s, NO_HOOK);
    if (a->o1) be->integral_forward(c->out, a->o1, NULL, c->dev[1], s->B, s->T, s->H, attention_value_width(s), 0);
    return weighted_output(c);
}
static void grad_attention(AttentionKind kind, int T, int samples) {
    const AttnVariant* v = &ATTN_VARIANTS[kind];
    AttnSize a = {attention_shape(v, attention_test_heads(v, 2), 4, v->test_switch), NULL, NULL};
    AttnShape* s = &a.s;
    s->B = 2;
    s->T = T;
    size_t N = (size_t)s->B * T, ny = N * s->H * attention_value_width(s);
    a.lse = be->alloc(N * s->H * s->M * sizeof(float));
    a.o1 = s->integral ? be->alloc(ny * sizeof(float)) : NULL;
    GradCase c = grad_case((size_t[]){N * attention_qkv_width(s), 1}, (float[]){1, 0}, 2, ny, attention_grad_forward, &a);
    c.host[1][0] = 0.6f;
    grad_case_loss(&c);  // the forward's saved values at this lambda
    float *dy = grad_of_output(&c), *dqkv = to_backend(c.host[0], c.n[0] * sizeof(float)) /* overwritten */;
    float *dlambda = be->alloc(sizeof(float)), *dy0 = NULL, *d_integral = NULL;
    if (s->integral) {
        dy0 = be->alloc(ny * sizeof(float));
        d_integral = be->alloc(sizeof(float));
        be->integral_backward(dy0, d_integral, dy, a.o1, c.dev[1], s->B, T, s->H, attention_value_width(s));
    }
    // the backward reads qkv as the model keeps it, its lambda columns through their sigmoid
    be->attention_backward(be, dqkv, dlambda, dy, dy0, c.dev[0], a.lse, c.dev[1], s, NO_HOOK);
    if (s->token_lambda) be->token_lambda_backward(dqkv, c.dev[0], (int)N, s);
    if (d_integral) be->add(dlambda, d_integral, 1);
    char what[96];
    snprintf(what, sizeof(what), "attention %s T=%d d_qkv", v->name, T);
    grad_expect(&c, 0, dqkv, what, samples);
    if (v->lambda == LAMBDA_PER_LAYER) {
        snprintf(what, sizeof(what), "attention %s T=%d d_lambda", v->name, T);
        grad_expect(&c, 1, dlambda, what, 1);
    }
    be->release(dy); be->release(dqkv); be->release(dlambda); be->release(dy0); be->release(d_integral);
    be->release(a.lse); be->release(a.o1);
    grad_case_free(&c);
}

static void test_gradients(int device) {
    if (wanted("matmul")) grad_matmul(5, 7, 6);
    if (wanted("rmsnorm")) grad_rmsnorm(6, 8, 0.7f);
    if (wanted("rope")) grad_rope(6, 3, 2, 4, 10);  // 2 columns past the heads stay untouched
    if (wanted("swiglu")) grad_swiglu(4, 5);
    if (wanted("crossentropy")) grad_crossentropy(3, 5);
    if (wanted("lambda")) grad_lambda(4);
    for (AttentionKind k = 0; k < ATTN_VARIANT_COUNT && wanted("attention"); k++) {
        if (!variant_wanted(k)) continue;
        grad_attention(k, 5, device ? GRAD_SAMPLES / 20 : GRAD_SAMPLES);
        // three query blocks of the CPU's kernel, the last partial; two query tiles of the GPU's,
        // the second partial
        grad_attention(k, device ? 20 : 130, device ? GRAD_SAMPLES / 20 : GRAD_SAMPLES);
    }
}

// The contract of every operation against the references above; small: without T = 1,024
static void test_contract(int small) {
    if (wanted("table")) test_table();
    if (wanted("buffers")) test_buffers();
    if (wanted("matmul")) {
        test_matmul_untimed();
        test_matmul(1, 1, 1);
        test_matmul(7, 13, 5);
        test_matmul(64, 96, 33);
        test_matmul(130, 64, 256);
        test_matmul(1, 256, 1514);  // a decoding step's row through a feed-forward's width
        test_matmul(331, 40, 197);  // rows (forward, input gradient) and output channels (weight gradient) in uneven bands
        test_matmul_spent_many(2500);
    }
    if (wanted("bf16")) test_bf16();
    if (wanted("rmsnorm")) {
        test_rmsnorm(1, 1, 1.0f);
        test_rmsnorm(9, 16, 1.0f);
        test_rmsnorm(33, 64, 0.7f);
        test_rmsnorm(150, 40, 0.9f);  // the weight gradient over three row blocks, the last one partial
    }
    if (wanted("rope")) {
        test_rope(6, 3, 2, 4, 10);
        test_rope(70, 70, 5, 8, 48);
    }
    if (wanted("swiglu")) {
        test_swiglu(1, 1);
        test_swiglu(9, 40);
    }
    if (wanted("embedding")) {
        test_embedding(5, 7, 3);
        test_embedding(40, 6, 16);
    }
    if (wanted("crossentropy")) {
        test_crossentropy(1, 2);
        test_crossentropy(13, 300);
        test_crossentropy(3, 4099);  // wider than a block: each thread's running max grows over its elements
    }
    const LogitQuant none = {0, QUANT_PER_TENSOR}, tensor4 = {4, QUANT_PER_TENSOR}, row6 = {6, QUANT_PER_ROW};
    // on CUDA twice: with the maps written out (the backend's choice at these sizes), then on its
    // memory-linear kernels
    int passes = strcmp(be->device, "cuda") == 0 ? 2 : 1;
    for (int pass = 0; pass < passes && wanted("attention"); pass++) {
        force_path(pass ? "kernels" : NULL);
        for (AttentionKind k = 0; k < ATTN_VARIANT_COUNT; k++) {
            if (!variant_wanted(k)) continue;
            test_attention(k, 2, 1, 2, 4, 0, none);   // one row
            test_attention(k, 2, 5, 2, 4, 0, none);   // a partial block
            test_attention(k, 2, 64, 1, 8, 0, none);  // exactly one block
            test_attention(k, 1, 70, 2, 4, 0, none);  // a block and a partial one
            test_attention(k, 1, 130, 1, 4, 0, none); // two blocks and a partial one
            test_attention(k, 1, 80, 2, 8, 30, none); // decoding: 50 new rows after 30 cached ones
            test_attention(k, 1, 71, 2, 4, 70, none); // decoding one token
            // quantized logits: the per-tensor scale spans blocks, the backward recomputes them
            test_attention(k, 2, 130, 2, 4, 0, tensor4);
            test_attention(k, 1, 80, 2, 8, 30, tensor4);
            test_attention(k, 2, 70, 1, 4, 0, row6);
            test_attention(k, 1, 80, 2, 8, 30, row6);
            // the widths and lengths of real models: head dim 128 (DIFF's values 256 wide, the
            // largest tiles), and head dim 64 at T = 1024 (16 blocks), each where the backend
            // supports it
            test_attention(k, 2, 70, 1, 128, 0, none);
            if (small) continue;
            test_attention(k, 1, 1024, 1, 64, 0, none);
        }
    }
    force_path(NULL);
    if (wanted("attention")) {
        test_diff2_pairing(ATTN_DIFF2);
        test_diff2_pairing(ATTN_DIFF2_HALVES);
        test_grouped_is_diff(ATTN_DIFF_SHARED_NOISE);
        test_grouped_is_diff(ATTN_GDA);
    }
    if (wanted("lambda")) {
        test_lambda(4);
        test_lambda(32);
    }
    if (wanted("optimizer")) {
        test_optimizer(1);
        test_optimizer(1000);
        test_optimizer(200003);  // more than one of the squared sum's chunks
    }
}


// usage: test_backend_ops [--backend DEVICE] [--small] [--op OP] [--variant NAME] [--grad]. --backend runs the backend a
// device names (cpu, cuda) alone and fails when it cannot run here; --small leaves out the longest attention shape
// (T = 1024) (for compute-sanitizer, whose racecheck is slow); --op runs one group of operations (OPS), its contract
// and its gradients; --variant runs one attention variant's cases of the attention and bf16 groups; --grad runs the
// gradient mode alone; --parts (up to 8) runs bf16 attention part by part at those shapes alone (attention_parts)
int main(int argc, char** argv) {
    const char* only = NULL;
    const char* parts[8];
    int small = 0, n_parts = 0;
    const char* usage = "usage: test_backend_ops [--backend DEVICE] [--small] [--op table|buffers|matmul|bf16|rmsnorm|rope|swiglu|embedding|"
                        "crossentropy|attention|lambda|optimizer] [--variant NAME] [--grad] [--parts VARIANT:B:T:N_HEAD:D]...";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) only = argv[++i];
        else if (strcmp(argv[i], "--small") == 0) small = 1;
        else if (strcmp(argv[i], "--op") == 0 && i + 1 < argc) only_op = argv[++i];
        else if (strcmp(argv[i], "--variant") == 0 && i + 1 < argc) only_variant = argv[++i];
        else if (strcmp(argv[i], "--grad") == 0) grad_only = 1;
        else if (strcmp(argv[i], "--parts") == 0 && i + 1 < argc && n_parts < 8) parts[n_parts++] = argv[++i];
        else die("test_backend_ops: unknown argument '%s' (%s)", argv[i], usage);
    }
    int known = !only_op;
    for (int i = 0; OPS[i]; i++) known |= only_op && strcmp(OPS[i], only_op) == 0;
    if (!known) die("test_backend_ops: no operation group '%s' (%s)", only_op, usage);
    int variant_known = !only_variant;
    for (AttentionKind k = 0; k < ATTN_VARIANT_COUNT; k++) variant_known |= only_variant && variant_wanted(k);
    if (!variant_known) die("test_backend_ops: no attention variant '%s' (%s)", only_variant, usage);
    if (only) backend_named(only);  // dies saying why when it cannot run here
    for (int b = 0; b < backend_count(); b++) {
        if (only && strcmp(backend_at(b)->device, only) != 0) continue;
        const char* why = backend_device_refusal(backend_device_index(backend_at(b)->device));
        if (why) {  // a CUDA build on a machine without a GPU: said, so a GPU check can refuse it
            printf("backend %s: not run: %s\n", backend_at(b)->name, why);
            continue;
        }
        be = backend_named(backend_at(b)->device);
        if (n_parts) {  // --parts alone
            for (int k = 0; k < n_parts; k++) attention_parts(parts[k]);
            continue;
        }
        int before = checks_passed + checks_failed;
        if (!grad_only) test_contract(small);
        test_gradients(strcmp(be->device, "cpu") != 0);
        int timed = !grad_only && wanted("matmul");
        double rate = timed ? be->matmul_rate(be) : 0;
        if (timed) CHECK(rate > 0 && isfinite(rate), "%s matmul_rate %.1f GFLOP/s", be->name, rate);
        printf("backend %s: %d checks", be->name, checks_passed + checks_failed - before);
        if (only_op) printf(" of %s", only_op);
        if (timed) printf(", matmul rate %.1f GFLOP/s", rate);
        printf("\n");
    }
    return check_summary();
}
