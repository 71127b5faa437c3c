// Multi-needle retrieval episodes (paper Section 3.4; protocol in docs/needle.md).
//
// An episode is a haystack of corpus text with N needles "The special magic {city} number
// is: {number}." spliced in at sentence ends, followed by R cloze questions "What is the
// special magic {city} number? The special magic {city} number is". Needle 0 is the answer
// needle: it sits at the requested depth and query 0 asks for it; the distractors sit at
// random sentence ends; later queries ask for distractors. Everything is a pure function of
// (source, length, N, R, depth, seed).
//
// Cities come from a de-duplicated list and, like the 7-digit numbers, are split into
// training and evaluation sets by a hash, so no training episode shows an evaluation city
// or number.
#ifndef NEEDLE_H
#define NEEDLE_H

#include <stdint.h>

#include "dataset.h"
#include "tokenizer.h"

#define NEEDLE_MAX 16
#define NEEDLE_DATA_SEED 1  // of the training episodes in `difftx needle-data` and `difftx needle`
#define NEEDLE_TRAIN_NEEDLES 8  // training episodes hold 1..8 needles
#define NEEDLE_EPISODES_PER_BLOCK 3  // training blocks (episodes, copy practice) per block of plain text
#define NEEDLE_COPY_SEQ_LEN 64     // the copy stage's windows ...
#define NEEDLE_COPY_SPAN_MIN 8     // ... hold a span of 8..28 tokens and its copy
#define NEEDLE_COPY_SPAN_MAX 28

typedef enum { NEEDLE_TRAIN, NEEDLE_EVAL } NeedleSplit;

// The split a city name or a number's decimal text belongs to
NeedleSplit needle_split_of(const char* key);

typedef struct {
    const Tokenizer* tok;
    const Shard* text;     // haystack text: validation text for evaluation, training text for training
    NeedleSplit split;
    char** cities;         // (n_cities) this split's cities, de-duplicated, in file order
    int n_cities;
} NeedleSource;

// Reads the city list (one per line, '#' comments), dies naming the file on an empty list
void needle_source_init(NeedleSource* src, const Tokenizer* tok, const Shard* text, const char* cities_path,
                        NeedleSplit split);
void needle_source_free(NeedleSource* src);

typedef struct {
    int* tokens;              // (n_tokens): BOS, haystack with needles [, questions and answers]
    int n_context;            // BOS + haystack + needles
    int n_tokens;
    int n_needles, n_queries;
    double depth;             // of needle 0, in [0, 1]; negative: needle 0 at a random sentence end
    int city[NEEDLE_MAX];     // index into src->cities
    int number[NEEDLE_MAX];
    int start[NEEDLE_MAX];    // needle i occupies tokens[start[i] .. start[i] + len[i] - 1]
    int len[NEEDLE_MAX];
    int query[NEEDLE_MAX];    // the needle query r asks for; query[0] = 0
    int* question[NEEDLE_MAX];  // (question_len[r]) the cloze question of query r
    int question_len[NEEDLE_MAX];
} Episode;

// An episode of exactly `length` tokens. Evaluation (answers = 0): the context plus the
// longest question fill `length`, the questions are kept apart in question[]. Training
// (answers = 1): every question is followed by ": {number}." inside tokens, in query order.
void episode_make(Episode* e, const NeedleSource* src, int length, int n_needles, int n_queries, double depth,
                  int answers, uint64_t seed);
void episode_free(Episode* e);

// 1 when the first run of digits in `continuation` is exactly `number`
int needle_answer_correct(const char* continuation, int number);

// Writes OUT_DIR/{tokenizer.bin, train.bin, val.bin}: DATA_DIR's training text cut into blocks
// of seq_len tokens, plus NEEDLE_EPISODES_PER_BLOCK times as many blocks, in turn: one
// training episode of seq_len tokens; training episodes of 160..800 tokens back to back (N
// uniform in 1..max_needles, every needle asked and answered, needles at random places); copy
// practice (spans of 8..64 tokens of training text, each followed by itself). Validation text
// copied. OUT_DIR/copy/ holds the copy stage's data: copy practice with spans of
// NEEDLE_COPY_SPAN_MIN..NEEDLE_COPY_SPAN_MAX tokens, from the training text (train.bin) and
// from the validation text (val.bin).
void needle_prepare(const char* out_dir, const char* data_dir, const char* cities_path, int seq_len, int max_needles,
                    uint64_t seed);

#endif
