// Activation outliers and logit quantization: Top-1/2/3/10/100 and the median of ±1..±1000 and of
// five hand values; 300,007 random values with planted outliers added in uneven chunks to three
// accumulators and merged: Top-100 equal to an exact sort, median within its 2⁻⁸ bound; for each
// variant, the collector's per-layer and pooled statistics against every value a hook sees in the
// same forward passes (overlapping windows, batches of 2 and 1) and the logit count
// L·windows·H·M·T(T+1)/2; the HDF5 file read back; the window placement; the quantizer on hand
// cases (4-bit (3, −1.2, 0.4, 2.2) → (3, −9/7, 3/7, 15/7), halves to even, clamping, its s/2 error
// bound reached and never exceeded at 2-8 bits); a model at 16 bits bitwise equal to the
// unquantized one, and its loss moving more at 4 bits than at 8.
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../eval/outliers.h"
#include "../base/h5.h"
#include "../model/model.h"
#include "../base/util.h"
#include "check.h"
#include "fixtures.h"
#include "instances.h"

static int by_value_desc(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return (x < y) - (x > y);
}

// Exact statistics of |x| by sorting: top[k] the k+1-th largest, *median the lower median
static void exact_stats(const float* x, size_t n, float* top, double* median) {
    float* a = mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = fabsf(x[i]);
    qsort(a, n, sizeof(float), by_value_desc);
    for (int k = 0; k < OUTLIER_TOP; k++) top[k] = k < (int)n ? a[k] : NAN;
    *median = a[n - (n + 1) / 2];  // the ceil(n/2)-th smallest
    free(a);
}

static void expect_matches_exact(const char* what, const ActStats* s, const float* x, size_t n) {
    float top[OUTLIER_TOP];
    double median;
    exact_stats(x, n, top, &median);
    int same = 1;
    for (int k = 0; k < OUTLIER_TOP && k < (int)n; k++) same &= act_stats_top(s, k + 1) == top[k];
    CHECK(same, "%s: the 100 largest differ from the exact sort (Top-1 %.6g vs %.6g)", what, act_stats_top(s, 1), top[0]);
    CHECK(s->count == n, "%s: count %llu, expected %zu", what, (unsigned long long)s->count, n);
    double m = act_stats_median(s);
    CHECK(fabs(m - median) <= OUTLIER_MEDIAN_REL_ERROR * median, "%s: median %.8g, exact %.8g (bound %.2g relative)", what, m,
          median, OUTLIER_MEDIAN_REL_ERROR);
}

static void test_known_arrays(void) {
    // +-1 .. +-1000 in a scrambled order: |x| = 1..1000
    float x[1000];
    for (int i = 0; i < 1000; i++) x[(i * 7919) % 1000] = (float)((i % 2 ? -1 : 1) * (i + 1));
    ActStats s;
    act_stats_init(&s);
    act_stats_add(&s, x, 1000);
    CHECK(act_stats_top(&s, 1) == 1000 && act_stats_top(&s, 2) == 999 && act_stats_top(&s, 3) == 998,
          "Top-1..3 of 1..1000: %g %g %g", act_stats_top(&s, 1), act_stats_top(&s, 2), act_stats_top(&s, 3));
    CHECK(act_stats_top(&s, 10) == 991 && act_stats_top(&s, 100) == 901, "Top-10, Top-100 of 1..1000: %g %g",
          act_stats_top(&s, 10), act_stats_top(&s, 100));
    double m = act_stats_median(&s);
    CHECK(fabs(m - 500) <= 500 * OUTLIER_MEDIAN_REL_ERROR, "median of 1..1000: %.6g, lower median 500", m);
    act_stats_free(&s);

    // fewer values than the tops asked; an odd count; zeros
    float few[5] = {0.0f, -4.0f, 2.0f, 0.0f, 1.0f};
    act_stats_init(&s);
    CHECK(isnan(act_stats_median(&s)) && isnan(act_stats_top(&s, 1)), "empty statistics are NaN");
    act_stats_add(&s, few, 5);
    CHECK(act_stats_top(&s, 1) == 4 && act_stats_top(&s, 5) == 0 && isnan(act_stats_top(&s, 6)), "Top-k of 5 values: %g %g %g",
          act_stats_top(&s, 1), act_stats_top(&s, 5), act_stats_top(&s, 6));
    CHECK(fabs(act_stats_median(&s) - 1.0) <= OUTLIER_MEDIAN_REL_ERROR, "median of {0,4,2,0,1}: %.6g, exact 1", act_stats_median(&s));
    act_stats_free(&s);
}

// Random values with a few planted outliers, added in uneven chunks to three accumulators and
// merged: the same as one exact sort of all of them
static void test_streaming_equals_exact(void) {
    size_t n = 300007;
    float* x = mallocCheck(n * sizeof(float));
    uint64_t rng = 42;
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(&rng) * (i % 3 ? 1.0f : 0.01f);
    for (int k = 0; k < 50; k++) x[(k * 104729) % n] = (k % 2 ? -1 : 1) * (100.0f + k);
    ActStats part[3], all;
    for (int p = 0; p < 3; p++) act_stats_init(&part[p]);
    act_stats_init(&all);
    for (size_t i = 0, p = 0; i < n; p = (p + 1) % 3) {
        size_t len = 1 + rng_next(&rng) % 5000;
        if (len > n - i) len = n - i;
        act_stats_add(&part[p], x + i, len);
        i += len;
    }
    for (int p = 0; p < 3; p++) act_stats_merge(&all, &part[p]);
    expect_matches_exact("300007 random values in chunks, merged", &all, x, n);
    for (int p = 0; p < 3; p++) act_stats_free(&part[p]);
    act_stats_free(&all);
    free(x);
}

static void test_quantizer(void) {
    CHECK(logit_quant_levels(8) == 127 && logit_quant_levels(6) == 31 && logit_quant_levels(4) == 7 &&
          logit_quant_levels(2) == 1, "Q = 2^(b-1) - 1: %d %d %d %d", logit_quant_levels(8), logit_quant_levels(6),
          logit_quant_levels(4), logit_quant_levels(2));
    CHECK(logit_quant_levels(16) == 0 && logit_quant_levels(0) == 0, "16 and 0 bits mean unquantized");
    // S = (3, -1.2, 0.4, 2.2) at 4 bits: s = 3/7, S/s = (7, -2.8, 0.933, 5.133) -> (7, -3, 1, 5)
    const float S[4] = {3.0f, -1.2f, 0.4f, 2.2f};
    const double want[4] = {3.0, -9.0 / 7, 3.0 / 7, 15.0 / 7};
    float s = 3.0f / 7;
    int ok = 1;
    for (int i = 0; i < 4; i++) ok &= fabs(absmax_quantize(S[i], s, 7) - want[i]) <= 1e-6;
    CHECK(ok, "4-bit absmax of (3, -1.2, 0.4, 2.2): (%.6f %.6f %.6f %.6f), expected (3, -9/7, 3/7, 15/7)", absmax_quantize(S[0], s, 7),
          absmax_quantize(S[1], s, 7), absmax_quantize(S[2], s, 7), absmax_quantize(S[3], s, 7));
    // halves round to even as torch.round; values beyond Q*s clamp; s = 0 leaves x alone
    CHECK(absmax_quantize(2.5f, 1, 7) == 2 && absmax_quantize(3.5f, 1, 7) == 4 && absmax_quantize(-2.5f, 1, 7) == -2,
          "half to even: %g %g %g", absmax_quantize(2.5f, 1, 7), absmax_quantize(3.5f, 1, 7), absmax_quantize(-2.5f, 1, 7));
    CHECK(absmax_quantize(9.0f, 1, 7) == 7 && absmax_quantize(-9.0f, 1, 7) == -7, "clamped to +-Q s");
    CHECK(absmax_quantize(0.3f, 0, 7) == 0.3f, "s = 0 (an all-zero tensor) leaves the value");
    // the error bound: |S_hat - S| <= s / 2 for |S| <= Q s, at every width
    uint64_t rng = 7;
    for (int bits = 2; bits <= 8; bits++) {
        int Q = logit_quant_levels(bits);
        float amax = 5.0f, step = amax / Q;
        double worst = 0;
        for (int i = 0; i < 10000; i++) {
            float x = (2 * rng_uniform(&rng) - 1) * amax;
            worst = fmax(worst, fabs(absmax_quantize(x, step, Q) - x));
        }
        CHECK(worst <= step / 2 * (1 + 1e-5), "%d bits: worst error %.6g > s/2 = %.6g", bits, worst, step / 2);
        CHECK(worst > step / 2 * 0.9, "%d bits: worst error %.6g, expected near s/2 = %.6g", bits, worst, step / 2);
    }
}

// Every logit and hidden value a hook is shown, per layer, for the exact statistics
typedef struct {
    int L;
    float* values[2][4];  // [kind][layer]
    size_t n[2][4], cap[2][4];
} Everything;

static void keep(Everything* e, int kind, int layer, const float* x, size_t n) {
    if (e->n[kind][layer] + n > e->cap[kind][layer]) {
        e->cap[kind][layer] = 2 * (e->n[kind][layer] + n);
        e->values[kind][layer] = realloc(e->values[kind][layer], e->cap[kind][layer] * sizeof(float));
    }
    memcpy(e->values[kind][layer] + e->n[kind][layer], x, n * sizeof(float));
    e->n[kind][layer] += n;
}

static void keep_everything(void* ctx, const Activation* a) {
    Everything* e = ctx;
    #pragma omp critical
    {
        if (a->kind == ACT_LAYER_OUTPUT) keep(e, OUTLIER_HIDDEN, a->layer, a->data, (size_t)a->rows * a->cols);
        else if (!a->recompute) {
            for (int r = 0; r < a->rows; r++) keep(e, OUTLIER_LOGITS, a->layer, a->data + (size_t)r * a->ld, a->row0 + r + 1);
        }
    }
}

static void test_collector(AttentionKind kind) {
    Config cfg = tiny_model_config(kind);
    Model m;
    model_build(&m, &cfg.model, backend_named(BACKEND_DEVICES[cfg.device]), 50, cfg.batch_size);
    model_init_params(&m, 3);
    int T = cfg.model.seq_len, windows = 5, stride = 31;  // overlapping windows, batches of 2 and a last 1
    Shard text = {0};
    text.n_tokens = (size_t)(windows - 1) * stride + T;
    text.tokens = mallocCheck(text.n_tokens * sizeof(uint16_t));
    uint64_t rng = 11;
    for (size_t i = 0; i < text.n_tokens; i++) text.tokens[i] = (uint16_t)(rng_next(&rng) % 50);
    OutlierStats st;
    outlier_stats_collect(&st, &m, &text, T, windows, stride, 2);

    Everything e = {.L = m.L};
    ActivationHook hook = {keep_everything, &e};
    model_set_hook(&m, &hook);
    // the same batches as the collector's: a matmul's rounding depends on its row count
    int* tokens = mallocCheck((size_t)2 * T * sizeof(int));
    for (int first = 0; first < windows; first += 2) {
        int rows = windows - first < 2 ? windows - first : 2;
        for (int b = 0; b < rows; b++) {
            for (int t = 0; t < T; t++) tokens[b * T + t] = text.tokens[(size_t)(first + b) * stride + t];
        }
        model_forward(&m, tokens, NULL, rows, T, 0);
    }
    model_set_hook(&m, NULL);
    char what[96];
    for (int k = 0; k < OUTLIER_KINDS; k++) {
        size_t total = 0;
        for (int l = 0; l < m.L; l++) total += e.n[k][l];
        float* pooled = mallocCheck(total * sizeof(float));
        for (int l = 0, at = 0; l < m.L; at += e.n[k][l], l++) {
            memcpy(pooled + at, e.values[k][l], e.n[k][l] * sizeof(float));
            snprintf(what, sizeof(what), "%s %s layer %d", ATTN_VARIANTS[kind].name, OUTLIER_KIND_NAMES[k], l);
            expect_matches_exact(what, &st.layer[k][l], e.values[k][l], e.n[k][l]);
        }
        snprintf(what, sizeof(what), "%s %s pooled", ATTN_VARIANTS[kind].name, OUTLIER_KIND_NAMES[k]);
        expect_matches_exact(what, &st.pooled[k], pooled, total);
        free(pooled);
    }
    size_t logits = (size_t)m.L * windows * m.H * m.M * T * (T + 1) / 2;
    CHECK(st.pooled[OUTLIER_LOGITS].count == logits, "%s: %llu logits collected, every causal position of every map is %zu",
          ATTN_VARIANTS[kind].name, (unsigned long long)st.pooled[OUTLIER_LOGITS].count, logits);
    CHECK(st.positions == (size_t)windows * T && st.distinct == text.n_tokens, "positions %zu, distinct %zu", st.positions, st.distinct);

    // the HDF5 file holds what the table prints
    char path[] = "/tmp/difftx_outliers_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    outlier_stats_write(&st, path, "test model");
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    float top[OUTLIER_TOP];
    double median;
    uint64_t count;
    h5_read_dataset(file, "attention_logits/pooled_top", H5T_NATIVE_FLOAT, OUTLIER_TOP, top, path);
    h5_read_dataset(file, "hidden_states/pooled_median", H5T_NATIVE_DOUBLE, 1, &median, path);
    h5_read_dataset(file, "attention_logits/pooled_count", H5T_NATIVE_UINT64, 1, &count, path);
    H5Fclose(file);
    unlink(path);
    CHECK(top[0] == act_stats_top(&st.pooled[OUTLIER_LOGITS], 1) && top[99] == act_stats_top(&st.pooled[OUTLIER_LOGITS], 100) &&
              median == act_stats_median(&st.pooled[OUTLIER_HIDDEN]) && count == logits,
          "%s: the HDF5 file's pooled statistics differ from the collector's", ATTN_VARIANTS[kind].name);

    for (int k = 0; k < 2; k++) {
        for (int l = 0; l < 4; l++) free(e.values[k][l]);
    }
    outlier_stats_free(&st);
    free(tokens);
    free(text.tokens);
    model_free(&m);
}

static void test_windows(void) {
    int w, s;
    outlier_windows(1000, 100, 500, "shard", &w, &s);
    CHECK(w == 5 && s == 100, "500 of 1000 tokens at T 100: %d windows at stride %d, expected 5 at 100", w, s);
    outlier_windows(1000, 100, 2000, "shard", &w, &s);
    CHECK(w == 20 && s == 47 && (size_t)(w - 1) * s + 100 <= 1000, "2000 positions of 1000 tokens: %d windows at stride %d", w, s);
    outlier_windows(1000, 100, 1000, "shard", &w, &s);
    CHECK(w == 10 && s == 100, "1000 of 1000 tokens: %d windows at stride %d", w, s);
}

// Quantization runs in the model's own attention: 16 bits is the model bit for bit, fewer bits
// move the loss, and more bits move it less
static void test_model_quantization(AttentionKind kind) {
    Config cfg = tiny_model_config(kind);
    Model m;
    model_build(&m, &cfg.model, backend_named(BACKEND_DEVICES[cfg.device]), 50, cfg.batch_size);
    model_init_params(&m, 5);
    int B = 2, T = cfg.model.seq_len, N = B * T;
    int *tokens = mallocCheck(N * sizeof(int)), *targets = mallocCheck(N * sizeof(int));
    uint64_t rng = 9;
    for (int i = 0; i < N; i++) tokens[i] = (int)(rng_next(&rng) % 50), targets[i] = (int)(rng_next(&rng) % 50);
    float* plain = mallocCheck(N * sizeof(float));
    float* got = mallocCheck(N * sizeof(float));
    model_forward(&m, tokens, targets, B, T, 0);
    model_row_losses(&m, plain);
    double base = model_loss(&m);
    model_set_logit_quant(&m, (LogitQuant){16, QUANT_PER_TENSOR});
    model_forward(&m, tokens, targets, B, T, 0);
    model_row_losses(&m, got);
    CHECK(memcmp(plain, got, N * sizeof(float)) == 0, "%s: 16 bits changes the row losses", ATTN_VARIANTS[kind].name);
    double gap[3];
    const int bits[3] = {8, 6, 4};
    for (int i = 0; i < 3; i++) {
        model_set_logit_quant(&m, (LogitQuant){bits[i], QUANT_PER_TENSOR});
        model_forward(&m, tokens, targets, B, T, 0);
        gap[i] = fabs(model_loss(&m) - base);
    }
    model_set_logit_quant(&m, (LogitQuant){0, QUANT_PER_TENSOR});
    model_forward(&m, tokens, targets, B, T, 0);
    CHECK(model_loss(&m) == base, "%s: turning quantization off restores the loss", ATTN_VARIANTS[kind].name);
    CHECK(gap[0] > 0 && gap[0] < gap[2], "%s: loss moves by %.3g at 8 bits and %.3g at 4 bits; expected 0 < 8-bit < 4-bit",
          ATTN_VARIANTS[kind].name, gap[0], gap[2]);
    free(tokens); free(targets); free(plain); free(got);
    model_free(&m);
}

int main(void) {
    test_known_arrays();
    test_streaming_equals_exact();
    test_quantizer();
    test_windows();
    for (AttentionKind k = 0; k < ATTN_VARIANT_COUNT; k++) {
        test_collector(k);
        test_model_quantization(k);
    }
    return check_summary();
}
