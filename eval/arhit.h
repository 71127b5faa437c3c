// AR-Hit / Others loss slices (Zoology, Arora et al. 2023; the paper's Table 6).
//
// Token i >= 1 of a window w is an AR hit when the bigram (w[i-1], w[i]) already occurred
// earlier in the same window and occurs at most `threshold` times in the training data. Zoology
// uses 1,250 per ~10B Pile tokens; arhit_threshold rescales that frequency to the training set.
#ifndef ARHIT_H
#define ARHIT_H

#include <stddef.h>
#include <stdint.h>

#include "../data/dataset.h"
#include "../model/model.h"

#define ZOOLOGY_COUNT 1250.0
#define ZOOLOGY_TOKENS 10e9

typedef struct {
    int V;
    uint32_t* counts;  // (V, V) bigram counts of the training shards (pages never touched cost no memory)
    double threshold;  // a bigram with count <= threshold is rare enough to count as recall
} BigramTable;

double arhit_threshold(size_t train_tokens);
// Within each shard: a bigram across two shards' boundary is not one
void bigrams_count(BigramTable* table, const ShardList* train);
void bigrams_free(BigramTable* table);
// window (T+1) tokens; hit (T) gets 1 where the token window[t+1] is an AR hit
void arhit_classify(const BigramTable* table, const int* window, int T, unsigned char* hit);

typedef struct {
    double valid, arhit, others;  // mean cross-entropy of all, AR-hit and other tokens
    double arhit_fraction;
    long tokens;
} SliceLoss;

// Validation loss on windows 0 .. n_windows-1 of the validation shard (the same windows for
// every model), split into AR-Hit and Others.
SliceLoss evaluate_slices(Model* model, const Shard* val, const BigramTable* table, int n_windows, int batch);

#endif
