#include "arhit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../model/base/util.h"

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

SliceLoss evaluate_slices(Model* model, const Shard* val, const BigramTable* table, int n_windows, int batch) {
    int T = model->cfg.seq_len;
    size_t N = (size_t)batch * T;
    int* inputs = mallocCheck(N * sizeof(int));
    int* targets = mallocCheck(N * sizeof(int));
    int* window = mallocCheck(((size_t)T + 1) * sizeof(int));
    unsigned char* hit = mallocCheck(T);
    float* row_loss = mallocCheck(N * sizeof(float));
    double sum_all = 0, sum_hit = 0;
    long n_all = 0, n_hit = 0;
    for (int first = 0; first < n_windows; first += batch) {
        int rows = n_windows - first < batch ? n_windows - first : batch;
        loader_eval_rows(val, T, first, rows, inputs, targets);
        model_forward(model, inputs, targets, rows, T, 0);
        model_row_losses(model, row_loss);
        for (int b = 0; b < rows; b++) {
            window[0] = inputs[(size_t)b * T];
            memcpy(window + 1, targets + (size_t)b * T, T * sizeof(int));
            arhit_classify(table, window, T, hit);
            for (int t = 0; t < T; t++) {
                double l = row_loss[(size_t)b * T + t];
                sum_all += l;
                n_all++;
                if (hit[t]) { sum_hit += l; n_hit++; }
            }
        }
    }
    free(inputs);
    free(targets);
    free(window);
    free(hit);
    free(row_loss);
    SliceLoss s = {sum_all / n_all, n_hit ? sum_hit / n_hit : NAN, n_all > n_hit ? (sum_all - sum_hit) / (n_all - n_hit) : NAN,
                   (double)n_hit / n_all, n_all};
    return s;
}
