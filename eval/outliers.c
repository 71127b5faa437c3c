#include "outliers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/h5.h"
#include "../base/util.h"

const char* const OUTLIER_KIND_NAMES[OUTLIER_KINDS] = {"attention_logits", "hidden_states"};

void act_stats_init(ActStats* s) {
    memset(s, 0, sizeof(*s));
    s->hist = callocCheck(OUTLIER_BINS, sizeof(uint64_t));
}

void act_stats_free(ActStats* s) {
    free(s->hist);
    s->hist = NULL;
}

static uint32_t float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static float bits_float(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

// top[] is a min-heap: top[0] is the smallest of the values kept, the one a larger value evicts
static void heap_offer(ActStats* s, float v) {
    int i;
    if (s->n_top < OUTLIER_TOP) {
        i = s->n_top++;
        while (i > 0 && s->top[(i - 1) / 2] > v) {
            s->top[i] = s->top[(i - 1) / 2];
            i = (i - 1) / 2;
        }
        s->top[i] = v;
        return;
    }
    if (!(v > s->top[0])) return;
    i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= OUTLIER_TOP) break;
        if (c + 1 < OUTLIER_TOP && s->top[c + 1] < s->top[c]) c++;
        if (s->top[c] >= v) break;
        s->top[i] = s->top[c];
        i = c;
    }
    s->top[i] = v;
}

void act_stats_add(ActStats* s, const float* x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        s->hist[float_bits(a) >> OUTLIER_BIN_SHIFT]++;
        if (s->n_top < OUTLIER_TOP || a > s->top[0]) heap_offer(s, a);
    }
    s->count += n;
}

void act_stats_merge(ActStats* into, const ActStats* from) {
    for (int i = 0; i < OUTLIER_BINS; i++) into->hist[i] += from->hist[i];
    for (int i = 0; i < from->n_top; i++) heap_offer(into, from->top[i]);
    into->count += from->count;
}

static int descending(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return (x < y) - (x > y);
}

double act_stats_top(const ActStats* s, int k) {
    if (k < 1 || k > OUTLIER_TOP) die("act_stats_top: k = %d outside 1..%d", k, OUTLIER_TOP);
    if (k > s->n_top) return NAN;
    float sorted[OUTLIER_TOP];
    memcpy(sorted, s->top, s->n_top * sizeof(float));
    qsort(sorted, s->n_top, sizeof(float), descending);
    return sorted[k - 1];
}

double act_stats_median(const ActStats* s) {
    if (s->count == 0) return NAN;
    uint64_t rank = (s->count + 1) / 2, seen = 0;
    for (uint32_t bin = 0; bin < OUTLIER_BINS; bin++) {
        seen += s->hist[bin];
        if (seen >= rank) {
            // a non-negative float's bits order like its value, so a bin is one interval
            double lo = bits_float(bin << OUTLIER_BIN_SHIFT), hi = bits_float((bin + 1) << OUTLIER_BIN_SHIFT);
            return 0.5 * (lo + hi);
        }
    }
    return NAN;
}

// ---- collection through the activation hook ----
// The hook is called one block at a time, in an order that may vary (backend.h); histograms,
// counts and the top values are the same in any order, so the statistics never depend on the
// backend's blocks or threads.
typedef struct {
    int L;
    ActStats* stats;  // (OUTLIER_KINDS * L)
} Collector;

static void collect_hook(void* ctx, const Activation* act) {
    Collector* c = ctx;
    ActStats* s = c->stats;
    if (act->kind == ACT_ATTN_LOGITS) {
        if (act->recompute) return;
        ActStats* st = &s[OUTLIER_LOGITS * c->L + act->layer];
        for (int r = 0; r < act->rows; r++) act_stats_add(st, act->data + (size_t)r * act->ld, (size_t)act->row0 + r + 1);
    } else {
        act_stats_add(&s[OUTLIER_HIDDEN * c->L + act->layer], act->data, (size_t)act->rows * act->cols);
    }
}

void outlier_windows(size_t n_tokens, int T, size_t tokens, const char* shard_name, int* windows, int* stride) {
    if (n_tokens < (size_t)T) die("'%s' holds %zu tokens, fewer than one window of %d", shard_name, n_tokens, T);
    size_t w = (tokens + T - 1) / T;
    if (w < 1) w = 1;
    if (w > 1 << 30) die("outlier statistics: %zu windows of %d tokens are too many", w, T);
    *windows = (int)w;
    *stride = w == 1 || w * T <= n_tokens ? T : (int)((n_tokens - T) / (w - 1));
}

void outlier_stats_collect(OutlierStats* out, Model* model, const Shard* text, int T, int windows, int stride, int batch) {
    if (T < 1 || windows < 1 || stride < 1 || batch < 1) die("outlier statistics: T %d, windows %d, stride %d, batch %d must be positive", T, windows, stride, batch);
    if ((size_t)(windows - 1) * stride + T > text->n_tokens) {
        die("outlier statistics: %d windows of %d tokens at stride %d need %zu tokens, the shard has %zu", windows, T, stride,
            (size_t)(windows - 1) * stride + T, text->n_tokens);
    }
    int L = model->L;
    Collector c = {L, mallocCheck((size_t)OUTLIER_KINDS * L * sizeof(ActStats))};
    for (int k = 0; k < OUTLIER_KINDS * L; k++) act_stats_init(&c.stats[k]);
    ActivationHook hook = {collect_hook, &c};
    model_set_hook(model, &hook);
    int* tokens = mallocCheck((size_t)batch * T * sizeof(int));
    for (int first = 0; first < windows; first += batch) {
        int rows = windows - first < batch ? windows - first : batch;
        for (int b = 0; b < rows; b++) {
            const uint16_t* w = text->tokens + (size_t)(first + b) * stride;
            for (int t = 0; t < T; t++) tokens[(size_t)b * T + t] = w[t];
        }
        model_forward(model, tokens, NULL, rows, T, 0);
    }
    model_set_hook(model, NULL);
    free(tokens);

    out->L = L;
    out->T = T;
    out->windows = windows;
    out->stride = stride;
    out->positions = (size_t)windows * T;
    out->distinct = stride >= T ? out->positions : (size_t)(windows - 1) * stride + T;
    for (int k = 0; k < OUTLIER_KINDS; k++) {
        out->layer[k] = mallocCheck((size_t)L * sizeof(ActStats));
        act_stats_init(&out->pooled[k]);
        for (int l = 0; l < L; l++) {
            act_stats_init(&out->layer[k][l]);
            act_stats_merge(&out->layer[k][l], &c.stats[k * L + l]);
            act_stats_merge(&out->pooled[k], &out->layer[k][l]);
        }
    }
    for (int k = 0; k < OUTLIER_KINDS * L; k++) act_stats_free(&c.stats[k]);
    free(c.stats);
}

void outlier_stats_free(OutlierStats* s) {
    for (int k = 0; k < OUTLIER_KINDS; k++) {
        for (int l = 0; l < s->L; l++) act_stats_free(&s->layer[k][l]);
        free(s->layer[k]);
        act_stats_free(&s->pooled[k]);
    }
}

// dataset group/name under file
static void write_in_group(hid_t file, const char* group, const char* name, hid_t file_type, hid_t mem_type, int ndim,
                           const int* dims, const void* data, const char* label) {
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", group, name);
    h5_write_dataset(file, path, file_type, mem_type, ndim, dims, data, label);
}

// One kind's statistics: per-layer rows, then the pooled ones
static void write_kind(hid_t file, const OutlierStats* s, int kind, const char* label) {
    int L = s->L;
    float* top = mallocCheck((size_t)(L + 1) * OUTLIER_TOP * sizeof(float));
    double* median = mallocCheck((size_t)(L + 1) * sizeof(double));
    uint64_t* count = mallocCheck((size_t)(L + 1) * sizeof(uint64_t));
    uint64_t* hist = mallocCheck((size_t)L * OUTLIER_BINS * sizeof(uint64_t));
    for (int l = 0; l <= L; l++) {  // row L: pooled
        const ActStats* a = l < L ? &s->layer[kind][l] : &s->pooled[kind];
        for (int k = 0; k < OUTLIER_TOP; k++) top[(size_t)l * OUTLIER_TOP + k] = (float)act_stats_top(a, k + 1);
        median[l] = act_stats_median(a);
        count[l] = a->count;
        if (l < L) memcpy(hist + (size_t)l * OUTLIER_BINS, a->hist, OUTLIER_BINS * sizeof(uint64_t));
    }
    const char* g = OUTLIER_KIND_NAMES[kind];
    int dims_top[2] = {L, OUTLIER_TOP}, dims_l[1] = {L}, dims_hist[2] = {L, OUTLIER_BINS}, dims_p[1] = {OUTLIER_TOP}, one[1] = {1};
    write_in_group(file, g, "top", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, dims_top, top, label);
    write_in_group(file, g, "median", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, dims_l, median, label);
    write_in_group(file, g, "count", H5T_STD_U64LE, H5T_NATIVE_UINT64, 1, dims_l, count, label);
    write_in_group(file, g, "histogram", H5T_STD_U64LE, H5T_NATIVE_UINT64, 2, dims_hist, hist, label);
    write_in_group(file, g, "pooled_top", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, dims_p, top + (size_t)L * OUTLIER_TOP, label);
    write_in_group(file, g, "pooled_median", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, one, median + L, label);
    write_in_group(file, g, "pooled_count", H5T_STD_U64LE, H5T_NATIVE_UINT64, 1, one, count + L, label);
    free(top);
    free(median);
    free(count);
    free(hist);
}

void outlier_stats_write(const OutlierStats* s, const char* path, const char* model_label) {
    char tmp[4200], label[4300];
    tmp_path(tmp, sizeof(tmp), path);
    snprintf(label, sizeof(label), "outlier statistics '%s'", path);
    hid_t file = h5_create_checksummed(tmp, label);
    h5_write_string_attr(file, "model", model_label, label);
    int ints[4] = {s->T, s->windows, s->stride, OUTLIER_BIN_SHIFT};
    const char* names[4] = {"seq_len", "windows", "stride", "bin_shift"};
    for (int i = 0; i < 4; i++) h5_write_attr(file, names[i], H5T_NATIVE_INT, &ints[i], label);
    uint64_t positions = s->positions, distinct = s->distinct;
    h5_write_attr(file, "positions", H5T_NATIVE_UINT64, &positions, label);
    h5_write_attr(file, "distinct_tokens", H5T_NATIVE_UINT64, &distinct, label);
    for (int k = 0; k < OUTLIER_KINDS; k++) write_kind(file, s, k, label);
    h5_check(H5Fclose(file), "closing", label);
    renameCheck(tmp, path);
}

void outlier_stats_print(FILE* out, const OutlierStats* st, const char* f) {
    for (int k = 0; k < OUTLIER_KINDS; k++) {
        const ActStats* a = &st->pooled[k];
        fprintf(out, "%s, pooled over %d layers: Top-1 ", k == OUTLIER_LOGITS ? "attention logits" : "hidden states", st->L);
        fprintf(out, f, act_stats_top(a, 1));
        fprintf(out, ", Top-10 ");
        fprintf(out, f, act_stats_top(a, 10));
        fprintf(out, ", Top-100 ");
        fprintf(out, f, act_stats_top(a, 100));
        fprintf(out, ", median ");
        fprintf(out, f, act_stats_median(a));
        fprintf(out, ", Top-1 / median %.1f\n", act_stats_top(a, 1) / act_stats_median(a));
    }
}
