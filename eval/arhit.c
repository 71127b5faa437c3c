#include "arhit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/util.h"

double arhit_threshold(size_t train_tokens) { return ZOOLOGY_COUNT * (double)train_tokens / ZOOLOGY_TOKENS; }

void bigrams_count(BigramTable* table, const ShardList* train) {
    table->V = train->parts[0].vocab_size;
    table->counts = callocCheck((size_t)table->V * table->V, sizeof(uint32_t));
    for (int s = 0; s < train->n; s++) {
        const Shard* shard = &train->parts[s];
        for (size_t i = 0; i + 1 < shard->n_tokens; i++) table->counts[(size_t)shard->tokens[i] * table->V + shard->tokens[i + 1]]++;
    }
    table->threshold = arhit_threshold(train->n_tokens);
}

void bigrams_free(BigramTable* table) { free(table->counts); }

void arhit_classify(const BigramTable* table, const int* w, int T, unsigned char* hit) {
    // open-addressing set of the bigrams seen so far in this window
    size_t cap = 1;
    while (cap < 2 * (size_t)T + 2) cap <<= 1;
    uint64_t* seen = mallocCheck(cap * sizeof(uint64_t));
    memset(seen, 0xff, cap * sizeof(uint64_t));
    for (int t = 0; t < T; t++) {
        uint64_t key = (uint64_t)w[t] * table->V + w[t + 1];
        size_t j = hash64(key) & (cap - 1);
        while (seen[j] != UINT64_MAX && seen[j] != key) j = (j + 1) & (cap - 1);
        int before = seen[j] == key;
        seen[j] = key;
        hit[t] = before && table->counts[key] <= table->threshold;
    }
    free(seen);
}

const char* window_slice_name(int k) {
    static const char* names[WINDOW_SLICES] = {"valid", "arhit", "pos1", "pos2", "pos3", "pos4", "pos5", "pos6", "pos7", "pos8"};
    return names[k];
}

void window_loss_add(WindowLoss* w, const float* loss, const unsigned char* hit, int T) {
    for (int t = 0; t < T; t++) {
        int bin = SLICE_POSITION + (int)((long)t * POSITION_BINS / T);
        w->sum[SLICE_ALL] += loss[t];
        w->count[SLICE_ALL]++;
        w->sum[bin] += loss[t];
        w->count[bin]++;
        if (hit[t]) {
            w->sum[SLICE_ARHIT] += loss[t];
            w->count[SLICE_ARHIT]++;
        }
    }
}

static double mean_or_nan(double sum, long count) { return count ? sum / count : NAN; }

SliceLoss evaluate_slices(Model* model, const Shard* val, const BigramTable* table, int n_windows, int batch,
                          WindowLoss* per_window) {
    int T = model->cfg.seq_len;
    size_t N = (size_t)batch * T;
    int* inputs = mallocCheck(N * sizeof(int));
    int* targets = mallocCheck(N * sizeof(int));
    int* window = mallocCheck(((size_t)T + 1) * sizeof(int));
    unsigned char* hit = mallocCheck(T);
    float* row_loss = mallocCheck(N * sizeof(float));
    WindowLoss total = {{0}, {0}};
    for (int first = 0; first < n_windows; first += batch) {
        int rows = n_windows - first < batch ? n_windows - first : batch;
        loader_eval_rows(val, T, first, rows, inputs, targets);
        model_forward(model, inputs, targets, rows, T, 0);
        model_row_losses(model, row_loss);
        for (int b = 0; b < rows; b++) {
            window[0] = inputs[(size_t)b * T];
            memcpy(window + 1, targets + (size_t)b * T, T * sizeof(int));
            arhit_classify(table, window, T, hit);
            // the totals add token by token (not window sums), as they always have: the same bits
            window_loss_add(&total, row_loss + (size_t)b * T, hit, T);
            if (per_window) {
                per_window[first + b] = (WindowLoss){{0}, {0}};
                window_loss_add(&per_window[first + b], row_loss + (size_t)b * T, hit, T);
            }
        }
    }
    free(inputs);
    free(targets);
    free(window);
    free(hit);
    free(row_loss);
    long n_all = total.count[SLICE_ALL], n_hit = total.count[SLICE_ARHIT];
    SliceLoss s = {total.sum[SLICE_ALL] / n_all, mean_or_nan(total.sum[SLICE_ARHIT], n_hit),
                   mean_or_nan(total.sum[SLICE_ALL] - total.sum[SLICE_ARHIT], n_all - n_hit), (double)n_hit / n_all, n_all,
                   {0}, table->threshold};
    for (int b = 0; b < POSITION_BINS; b++) {
        s.position[b] = mean_or_nan(total.sum[SLICE_POSITION + b], total.count[SLICE_POSITION + b]);
    }
    return s;
}

SliceLoss evaluate_on_data(Model* model, const DataDir* data, int n_windows, int batch, WindowLoss* per_window) {
    BigramTable table;
    bigrams_count(&table, &data->train);
    SliceLoss s = evaluate_slices(model, &data->val, &table, n_windows, batch, per_window);
    bigrams_free(&table);
    return s;
}

void slice_loss_print(FILE* out, const SliceLoss* s, const char* f, int T) {
    fprintf(out, "valid ");
    fprintf(out, f, s->valid);
    if (isfinite(s->arhit)) {
        fprintf(out, " | AR-Hit ");
        fprintf(out, f, s->arhit);
        fprintf(out, " (%.2f%% of tokens: %ld)", 100 * s->arhit_fraction, (long)llround(s->arhit_fraction * s->tokens));
    } else {
        fprintf(out, " | AR-Hit: no AR-Hit tokens in these windows");
    }
    fprintf(out, " | Others ");
    fprintf(out, f, s->others);
    fprintf(out, "\nby position (%d bins of %d tokens):", POSITION_BINS, T / POSITION_BINS);
    for (int b = 0; b < POSITION_BINS; b++) {
        fprintf(out, " ");
        fprintf(out, f, s->position[b]);
    }
    fprintf(out, "\n");
}
