// Token shards, data folders and batching.
//
// A shard of this project is a 1024-byte header of 256 int32 (magic 20261121, version, n_tokens,
// n_documents, vocab_size, block, the tokenizer's hash as two int32 (low, high), then zeros)
// followed by n_tokens uint16 ids; every document starts with the <|endoftext|> id, so document
// boundaries survive. Version 1 shards (no tokenizer hash) are still read. llm.c's shards are
// read as they are: 256 int32 (magic 20240520, version 1, n_tokens, then zeros) and n_tokens
// uint16 GPT-2 ids. Shards are memory-mapped, so a corpus larger than memory trains.
//
// A data folder is either
//   made by `difftx prepare` (data/prepare.h): tokenizer.bin with train.bin and val.bin, or
//     train_000000.bin, train_000001.bin, ... where a split takes several shards;
//   or llm.c's shards: files *_train*.bin and *_val*.bin (fineweb_train_000001.bin, ...), with
//     llm.c's gpt2_tokenizer.bin beside them when text is to be decoded.
// Training windows come from every training shard; evaluation reads the first validation shard.
#ifndef DATASET_H
#define DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

#define SHARD_MAGIC 20261121
#define SHARD_VERSION 2
#define LLMC_SHARD_MAGIC 20240520
#define SHARD_HEADER_BYTES 1024

typedef struct {
    uint16_t* tokens;  // (n_tokens) the file's mapping (read only), or memory the caller owns
    size_t n_tokens;
    int n_documents, vocab_size;  // n_documents 0 in llm.c's shards
    int block;  // > 0: the shard is made of self-contained blocks of this many tokens (needle training)
    uint64_t tokenizer_hash;  // of the tokenizer that made it; 0 in version 1 shards
    uint64_t content_hash;    // of n_tokens and every id: what identifies the shard's text
    void* map;                // the whole file's mapping, NULL when tokens are not mapped
    size_t map_bytes;
} Shard;

// Maps path and checks every id against the vocabulary; dies naming the file
void shard_load(Shard* s, const char* path);
void shard_free(Shard* s);
// The 256 int32 that start a shard of n tokens of n_docs documents made by tok
void shard_header(int32_t header[256], size_t n, int n_docs, const Tokenizer* tok, int block);
// ids (n) of tok written as a shard of n_docs documents, via a temporary file and rename
void shard_write(const char* path, const int* ids, size_t n, int n_docs, const Tokenizer* tok, int block);

// The shards of one split, in file-name order
typedef struct {
    Shard* parts;  // (n)
    char (*paths)[4096];
    int n;
    size_t n_tokens;  // over all parts
} ShardList;

// The shard files of split `name` ("train", "val") of the data folder dir, found as data_open
// finds them, without opening them (paths and n only)
void data_list_split(ShardList* list, const char* dir, const char* name);
void shard_list_free(ShardList* list);

// The data folder's tokenizer and the splits asked for (DATA_TRAIN, DATA_VAL), which must have
// been made with that tokenizer. Dies naming the folder as the `data` key.
enum { DATA_TRAIN = 1, DATA_VAL = 2 };
#define DATA_IDENTITY 256
typedef struct {
    char dir[4096];
    char absolute[4096];  // dir from the root, as checkpoints and the registry record it
    // The tokenizer's hash, the splits' shard and token counts, and one hash over each shard's
    // name, token count and content hash: the same text for the same data wherever it lies
    char identity[DATA_IDENTITY];
    int llmc;  // llm.c's shards of GPT-2 ids
    Tokenizer tok;
    ShardList train;
    Shard val;  // the first validation shard
    int parts;
} DataDir;
void data_open(DataDir* d, const char* dir, int parts);
void data_close(DataDir* d);
// data_open(DATA_TRAIN | DATA_VAL)'s identity of the folder dir (remembered for the last folder
// asked about: table runners ask once per row)
const char* data_identity(const char* dir);
// The tokenizer of identity `hash` in folder: its tokenizer.bin, or for GPT-2 ids llm.c's
// gpt2_tokenizer.bin. Returns 0 (tok untouched) when folder holds none that matches.
int tokenizer_in_folder(Tokenizer* tok, const char* folder, uint64_t hash);
// Copies d's tokenizer file into folder (a run folder), so that the run's checkpoint is
// readable wherever it goes; nothing for GPT-2 ids without llm.c's token table
void data_copy_tokenizer(const DataDir* d, const char* folder);

// The training split as one shard, for what reads it whole (the needle training mix); dies
// naming `purpose` when it has several
const Shard* data_single_train_shard(const DataDir* d, const char* purpose);

// Training batches: every training shard is cut into windows of T+1 tokens (T inputs, T targets
// shifted by one); each epoch visits every window once in an order drawn from (seed, epoch).
// Row r of the whole run is a pure function of (seed, r), so a resumed run sees exactly the
// same data whatever the number of processes.
typedef struct {
    const ShardList* shards;
    int T;
    uint64_t seed;
    size_t n_windows;
    size_t* first_window;  // (n + 1) the index of each shard's first window; the total last
    long epoch;            // epoch whose order is in `order`, -1 before any
    uint32_t* order;       // (n_windows)
} Loader;

void loader_init(Loader* l, const ShardList* shards, int T, uint64_t seed);
void loader_free(Loader* l);
// inputs, targets (B, T) for global rows first_row .. first_row + B - 1
void loader_rows(Loader* l, size_t first_row, int B, int* inputs, int* targets);
// validation: windows taken in order from the start of the shard, wrapping around
void loader_eval_rows(const Shard* shard, int T, size_t first_row, int B, int* inputs, int* targets);

#endif
