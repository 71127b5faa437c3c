// Activation outliers (the paper's Table 5): the largest absolute values of the attention
// logits and of the hidden states, streamed over held-out text through the model's activation
// hook without holding the values.
//
//   attention logits  |scale * q k^T| of every map (q1k1 and q2k2 for DIFF) at every causal
//                     position, before the softmax
//   hidden states     each layer's output after both residual additions, every element
//
// Per layer and kind an ActStats keeps the exact 100 largest values, the count, and a
// histogram of the values' float32 bit patterns cut to their top 16 bits (sign, exponent and 7
// mantissa bits): a bin spans a relative width of at most 2^-7, and the median is reported as
// the midpoint of the bin holding it, within a relative error of 2^-8 (0.4%) of the exact
// lower median (the ceil(n/2)-th smallest value, torch.median's convention).
#ifndef OUTLIERS_H
#define OUTLIERS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../data/dataset.h"
#include "../model/model.h"

#define OUTLIER_TOP 100
#define OUTLIER_BINS 65536
#define OUTLIER_BIN_SHIFT 15  // bits of a float32 dropped to make its bin
#define OUTLIER_MEDIAN_REL_ERROR (1.0 / 256)

typedef struct {
    float top[OUTLIER_TOP];  // min-heap of the largest values seen (n_top of them)
    int n_top;
    uint64_t count;
    uint64_t* hist;          // (OUTLIER_BINS)
} ActStats;

void act_stats_init(ActStats* s);
void act_stats_free(ActStats* s);
// Adds |x[i]| for i < n
void act_stats_add(ActStats* s, const float* x, size_t n);
void act_stats_merge(ActStats* into, const ActStats* from);
// The k-th largest value (1-based, k <= OUTLIER_TOP); NaN with fewer than k values
double act_stats_top(const ActStats* s, int k);
// The lower median within OUTLIER_MEDIAN_REL_ERROR; NaN without values
double act_stats_median(const ActStats* s);

enum { OUTLIER_LOGITS, OUTLIER_HIDDEN, OUTLIER_KINDS };
extern const char* const OUTLIER_KIND_NAMES[OUTLIER_KINDS];  // "attention_logits", "hidden_states"

typedef struct {
    int L;
    ActStats* layer[OUTLIER_KINDS];  // (L) each
    ActStats pooled[OUTLIER_KINDS];  // every layer's values together
    int T, windows, stride;
    size_t positions;   // token positions streamed (windows x T)
    size_t distinct;    // distinct held-out tokens those windows cover
} OutlierStats;

// Streams `windows` windows of T tokens of text, window w starting at token w * stride, in
// batches of `batch`, through model's forward (the hook is set for the call and removed),
// collecting both kinds. The attention logits are seen as the backend computes them.
void outlier_stats_collect(OutlierStats* out, Model* model, const Shard* text, int T, int windows, int stride, int batch);
void outlier_stats_free(OutlierStats* s);
// The pooled statistics of each kind as `difftx eval --outliers` prints them: Top-1, Top-10,
// Top-100, median and Top-1 / median, each number in the printf format f
void outlier_stats_print(FILE* out, const OutlierStats* s, const char* f);
// Per-layer and pooled statistics into an HDF5 file (docs/outliers.md has the layout), via a
// temporary file renamed into place
void outlier_stats_write(const OutlierStats* s, const char* path, const char* model_label);

// Windows of T tokens covering `tokens` positions of a shard of n tokens: as many as needed,
// at stride T when the shard holds them side by side, else spread evenly over the shard
// (overlapping). Dies naming the shard when it is shorter than one window.
void outlier_windows(size_t n_tokens, int T, size_t tokens, const char* shard_name, int* windows, int* stride);

#endif
