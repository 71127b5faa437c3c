// Attention maps of selected episodes in one HDF5 file (drawn without the model by
// `difftx attn`, viz/attn_plot.c). Layout (docs/attention_maps.md):
//   /                        attrs format, attention, checkpoint, git_commit, machine, n_layer, n_head,
//                            maps_per_head (M: 1, or 2 for the differential variants)
//   /sample_SSS              attrs n_context, n_needles, length; a needle episode's also depth, seed
//   /sample_SSS/tokens       int32 (T)      prompt ids: BOS, haystack with needles, question 0 (or
//                                           BOS and a text, from `difftx maps`)
//   /sample_SSS/text         string (T)     each token's text
//   /sample_SSS/needles      int32 (N, 2)   start and length of each needle; row 0 the answer (N = 0
//                                           for a text)
//   /sample_SSS/rows         int32 (R)      positions of the saved query rows
//   /sample_SSS/layer_LL/head_HH/map     float32 (R, T)  one map per head: the softmax map; two:
//                                                         the combined A1 - lambda A2 the forward uses
//   /sample_SSS/layer_LL/head_HH/A1, A2  float32 (R, T)  two maps per head only, each a softmax map;
//                                                         for attention = dint, A2 is the noise map
//                                                         less the integral term G (attention.h),
//                                                         within [-1, 1], its rows summing to zero
//   /sample_SSS/layer_LL/head_HH/lambda  float32 (R)     two maps per head only, lambda of each row
// Row r of a map is query position rows[r]; entries beyond it are zero.
#ifndef ATTNMAP_H
#define ATTNMAP_H

#include <hdf5.h>

#include "../data/needle.h"
#include "../model/model.h"
#include "retrieval.h"

#define ATTNMAP_FORMAT "difftx-attention-maps"
// `difftx maps` saves at most this many layers and heads (layer_LL/head_HH), and readers
// refuse files claiming more, so a hostile file cannot make them loop over absent groups
#define ATTNMAP_MAX_INDEX 256
#define ATTNMAP_FULL_ROWS 256  // prompts up to this length keep every row, longer ones the question's

typedef struct {
    hid_t file, sample;
    char path[4096], tmp[4096], label[4200];
    int n_samples;
} MapsFile;

void maps_file_create(MapsFile* f, const char* path, const Model* model, const char* checkpoint);
// Starts the next sample group; returns whether it keeps every row (short prompts)
int maps_file_sample(MapsFile* f, const Episode* e, const Tokenizer* tok, int length, uint64_t seed);
// MapsCallback: writes one layer and head of the current sample
void maps_file_head(void* f, int layer, int head, const HeadMaps* maps);
// Starts the next sample group for a text (tokens, T): every row kept, no needles
void maps_file_text(MapsFile* f, const int* tokens, int T, const Tokenizer* tok);
// Prefills tokens (T) into m's cache and hands maps_cb the maps of every row of each listed
// (layer, head)
void maps_of_text(Model* m, const int* tokens, int T, const int* layers, int n_layers, const int* heads, int n_heads,
                  MapsCallback maps_cb, void* ctx);
// Closes and renames into place
void maps_file_close(MapsFile* f);

// Maps are T x T floats per head and map, so a text is bounded: 2,048 tokens is 16 MiB a map
#define MAPS_MAX_TOKENS 2048
// `difftx maps`: the maps file `out` of one text (len bytes; `source` names it in messages: a
// file or "--prompt") read by model after <|endoftext|>, as training documents start, for the
// listed layers and heads; dies, before writing anything, on a zero byte (binary data) or more
// than MAPS_MAX_TOKENS tokens, saying the size; prints the size it writes
void maps_of_document(const char* out, Model* model, const Tokenizer* tok, const char* text, size_t len, const char* source,
                      const int* layers, int n_layers, const int* heads, int n_heads, const char* checkpoint);

// Reader: one sample of a maps file, opened read-only and checked (format, layer and head
// counts, increasing rows, needle spans); every error dies naming the file ("attention maps
// 'path'", label) and the sample
typedef struct {
    hid_t file, group;
    char label[4200], name[64];  // name: sample_SSS
    char *attention, *checkpoint;  // checkpoint: NULL where the file does not name one
    int n_layer, n_head, maps;   // maps: M, softmax maps per head (1 or 2)
    int integral;                // attention = dint: A2 holds the noise map less the integral term
    int T, R, N;                 // tokens, saved rows, needles
    int n_context;               // BOS, haystack and needles: the question's rows start here (T for a
                                 // text); -1 where the sample does not say
    int* tokens;                 // (T)
    char** text;                 // (T) each token's text; NULL where none was written
    int* rows;                   // (R) increasing within 0..T-1
    int* needles;                // (N, 2) start and length
} MapsSample;
void maps_sample_open(MapsSample* s, const char* path, int sample);
// Whether the sample holds layer's head (`difftx maps --layers/--heads` keeps some)
int maps_sample_has_head(const MapsSample* s, int layer, int head);
// Reads one (R, T) map of a saved head: "map", or for M = 2 "A1", "A2"; or "lambda" (R). Softmax
// maps (A1, A2, M = 1's map) must lie in [0, 1] on the causal entries (DINT's A2 in [-1, 1]) and
// λ must be finite
void maps_sample_read(const MapsSample* s, int layer, int head, const char* map, float* out);
void maps_sample_close(MapsSample* s);
// One saved head's attention-noise metrics (Allocation, eval/retrieval.h) averaged over the
// question's saved rows of a needle episode (answer: needle 0), or every saved row of a text;
// A (M, R, T) and lambda (R) as maps_sample_read gives them. Returns the rows averaged (0: none,
// or a sample without n_context)
int maps_sample_noise(const MapsSample* s, const float* A, const float* lambda, Allocation* out);

#endif
