// Answering needle episodes with a model: greedy decoding on the KV cache, and the attention
// allocation of the question's tokens (Table 3, Figure 1).
#ifndef RETRIEVAL_H
#define RETRIEVAL_H

#include "../data/needle.h"
#include "../model/model.h"

#define ANSWER_TOKENS 12  // greedy tokens decoded per query, enough for ": " and 7 digits
#define ANSWER_TEXT 128

// The cache size an episode needs: context, longest question, decoded tokens
int episode_cache_need(const Episode* e);

// Prefills the context once, then for each query r appends question r at the end of the
// context (the cache steps back, so queries do not see each other) and decodes greedily until
// a complete number or ANSWER_TOKENS. text[r] gets the continuation, correct[r] its score.
// Returns how many queries were answered. model_cache_init(model, >= episode_cache_need(e)).
int episode_answer(Model* model, const Tokenizer* tok, const Episode* e, char (*text)[ANSWER_TEXT], int* correct);

// Copying check: BOS, a span of `half` tokens of `text` from a random place, the same span
// again; the fraction of each copy's tokens (after its first) that greedy prediction gets
// right, over `sequences` draws. The first copy is what the language model guesses alone;
// retrieval needs copying (an induction head), and a model whose second copy scores no better
// than its first cannot retrieve.
typedef struct {
    double first, second;
} CopyScore;
CopyScore copy_score(Model* model, const Shard* text, int half, int sequences, uint64_t seed);

// Where one attention row's weight goes, and how it is spread. Rows are normalised to sum to 1:
// a softmax row as it is, a DIFF row w = A1 - lambda A2 divided by its sum 1 - lambda.
// Dividing by 1 - lambda magnifies a layer whose lambda nears 1 without bound, so the answer
// and noise weights are also given over the row's absolute weight sum |w|: bounded by 1
// whatever lambda, equal to the shares for a softmax row.
typedef struct {
    double answer;    // the answer needle's tokens
    double noise;     // every other context token after BOS, distractor needles included
    double question;  // the question's own tokens
    double bos;       // position 0: the attention sink's mass
    double entropy;   // -sum p ln p in nats, p = |w| / sum |w| over the visible positions (softmax: p = w)
    double negative;  // sum of max(0, -w): the weight DIFF puts below zero (0 for a softmax row)
    double answer_abs;  // answer / sum |w|, in [-1, 1]
    double noise_abs;   // noise / sum |w|, in [-1, 1]
} Allocation;

// row (visible) over positions 0..visible-1; context = BOS + haystack + needles; the answer
// needle occupies answer_start .. answer_start + answer_len - 1
Allocation allocation_of_row(const float* row, int visible, int context, int answer_start, int answer_len);

// Maps of one layer and head for the rows of question 0, read from the cache after
// episode_allocation's forward: A (M, rows, T) softmax maps, lambda (rows) of each row
// (DIFF: the layer's; DIFF V2: the token's; standard: 0). DINT's map 1 is its noise map less the
// integral term (model_attention_maps), each row summing to zero.
typedef struct {
    int rows, T, M;
    int first_row;   // position of the first question token
    float* A;        // (M, rows, T)
    float* lambda;   // (rows)
    int integral;    // DINT: map 1 less the integral term, so each combined row sums to one
} HeadMaps;

// Prefills context + question 0 (no decoding) and returns the allocation of the question's
// tokens averaged over its rows, every head and every layer; per_head (L, H), when not NULL,
// gets each head's own average over the question's rows. With maps_cb, each (layer, head)'s
// maps are handed over before they are freed: the question's rows, or with all_rows every row
// of the prompt.
typedef void (*MapsCallback)(void* ctx, int layer, int head, const HeadMaps* maps);
Allocation episode_allocation(Model* model, const Episode* e, int all_rows, Allocation* per_head, MapsCallback maps_cb, void* ctx);
// Adds a to sum, field by field; allocation_divide divides every field by n
void allocation_add(Allocation* sum, const Allocation* a);
Allocation allocation_divide(Allocation a, double n);

// The combined map of one row, A_0 - lambda A_1 (A_0 with one map): the weights the forward
// pass applies to V; normalise divides by its sum, 1 - lambda (1 for DINT, whose rows sum to one).
// Returns 0, with the row not divided, where normalising is asked and lambda is exactly 1 (DIFF
// V2's sigmoid saturates there in float32; DIFF's lambda is unbounded): that row sums to zero and
// has no shares, so the metrics over rows leave it out; 1 otherwise.
int head_maps_combined_row(const HeadMaps* maps, int row, int normalise, float* out);

#endif
