// Corpus preparation and batching.
//
// `prepare` takes text files and folders (searched recursively for regular files, taken in
// sorted path order; each file is one document), sends every 20th document to validation,
// trains the BPE tokenizer on the training documents and writes, into one folder:
//   tokenizer.bin, train.bin, val.bin
// A shard is a 1024-byte header of 256 int32 (magic, version, n_tokens, n_documents,
// vocab_size, block, the tokenizer's hash as two int32 (low, high), then zeros) followed by
// n_tokens uint16 ids; every document starts with the <|endoftext|> id, so document boundaries
// survive. Version 1 shards (no tokenizer hash) are still read. The folder is written whole:
// an interrupted `prepare` leaves the previous folder as it was.
#ifndef DATASET_H
#define DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

#define SHARD_MAGIC 20261121
#define SHARD_VERSION 2
#define VAL_EVERY 20

void dataset_prepare(const char* out_dir, const char* const* inputs, int n_inputs, int vocab_size);

typedef struct {
    uint16_t* tokens;
    size_t n_tokens;
    int n_documents, vocab_size;
    int block;  // > 0: the shard is made of self-contained blocks of this many tokens (needle training)
    uint64_t tokenizer_hash;  // of the tokenizer that made it; 0 in version 1 shards
} Shard;

void shard_load(Shard* s, const char* path);
void shard_free(Shard* s);
// ids (n) of tok written as a shard of n_docs documents, via a temporary file and rename
void shard_write(const char* path, const int* ids, size_t n, int n_docs, const Tokenizer* tok, int block);

// A folder made by `prepare`: its tokenizer and the shards asked for (DATA_TRAIN, DATA_VAL),
// which must have been made with that tokenizer. Dies naming the folder as the `data` key.
enum { DATA_TRAIN = 1, DATA_VAL = 2 };
typedef struct {
    char dir[4096];
    Tokenizer tok;
    Shard train, val;  // loaded as asked
    int parts;
} DataDir;
void data_open(DataDir* d, const char* dir, int parts);
void data_close(DataDir* d);

// Training batches: the shard is cut into windows of T+1 tokens (T inputs, T targets shifted
// by one); each epoch visits every window once in an order drawn from (seed, epoch). Row r of
// the whole run is a pure function of (seed, r), so a resumed run sees exactly the same data.
typedef struct {
    const Shard* shard;
    int T;
    uint64_t seed;
    size_t n_windows;
    long epoch;           // epoch whose order is in `order`, -1 before any
    uint32_t* order;      // (n_windows)
} Loader;

void loader_init(Loader* l, const Shard* shard, int T, uint64_t seed);
void loader_free(Loader* l);
// inputs, targets (B, T) for global rows first_row .. first_row + B - 1
void loader_rows(Loader* l, size_t first_row, int B, int* inputs, int* targets);
// validation: windows taken in order from the start of the shard, wrapping around
void loader_eval_rows(const Shard* shard, int T, size_t first_row, int B, int* inputs, int* targets);

#endif
