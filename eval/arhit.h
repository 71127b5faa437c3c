// AR-Hit / Others loss slices (Zoology, Arora et al. 2023; the paper's Table 6).
//
// Token i >= 1 of a window w is an AR hit when the bigram (w[i-1], w[i]) already occurred
// earlier in the same window and occurs at most `threshold` times in the training data. Zoology
// uses 1,250 per ~10B Pile tokens; arhit_threshold rescales that frequency to the training set.
#ifndef ARHIT_H
#define ARHIT_H

#include <stddef.h>
#include <stdio.h>
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

// Loss by position: bin b holds positions [b T / POSITION_BINS, (b + 1) T / POSITION_BINS) of
// every window, so a claim about long context is read at the positions it is about
#define POSITION_BINS 8
// One window's loss sums and token counts per slice: every token, the AR hits, then each
// position bin (Others = every token minus the AR hits). The units a bootstrap resamples.
enum { SLICE_ALL = 0, SLICE_ARHIT = 1, SLICE_POSITION = 2, WINDOW_SLICES = 2 + POSITION_BINS };
typedef struct {
    double sum[WINDOW_SLICES];
    long count[WINDOW_SLICES];
} WindowLoss;
// "valid", "arhit", "pos1" .. "pos8": slice k's name in the registry
const char* window_slice_name(int k);
// Adds one window's per-token losses loss (T) with its AR-hit marks hit (T) to w
void window_loss_add(WindowLoss* w, const float* loss, const unsigned char* hit, int T);

typedef struct {
    double valid, arhit, others;  // mean cross-entropy of all, AR-hit and other tokens
    double arhit_fraction;
    long tokens;
    double position[POSITION_BINS];  // mean cross-entropy of each position bin
    double threshold;                // the AR-Hit bigram count threshold used
} SliceLoss;

// Validation loss on windows 0 .. n_windows-1 of the validation shard (the same windows for
// every model), split into AR-Hit and Others and into position bins; per_window (n_windows)
// receives each window's sums when not NULL.
SliceLoss evaluate_slices(Model* model, const Shard* val, const BigramTable* table, int n_windows, int batch,
                          WindowLoss* per_window);
// The evaluation of a trained model on a data folder, as `difftx eval` and Table 6 both take it:
// the training shards' bigram counts (AR-Hit's reference), then evaluate_slices over the first
// n_windows validation windows in batches of `batch` windows
SliceLoss evaluate_on_data(Model* model, const DataDir* data, int n_windows, int batch, WindowLoss* per_window);
// s as `difftx eval` prints it: valid, AR-Hit with its token share, Others, then the position
// bins of seq_len T, each number in the printf format f ("%.4f")
void slice_loss_print(FILE* out, const SliceLoss* s, const char* f, int T);

#endif
