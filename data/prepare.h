// Corpus preparation: text in, a data folder (dataset.h) out, in memory bounded by the options
// whatever the corpus size.
//
// Inputs are files and folders (searched recursively for regular files, skipping names that
// start with '.', taken in sorted path order). A file ending in .jsonl or .ndjson holds one
// document per line, a JSON object whose string field "text" is the document (as web-text
// dumps ship); any other file is one document of plain text. Binary files are refused.
// Documents are numbered in that order (blank JSON lines take no number, malformed ones do);
// every 20th goes to validation until it holds min(10M, shard_tokens) tokens, the rest to
// training. Malformed JSON lines are skipped, counted, and the first few named by file and line.
//
// Two passes: the first draws the tokenizer's training sample, each training document kept
// with probability sample_mb MB / corpus size by a hash of its number (the whole training split
// when it is smaller); the second encodes every document on all cores, in batches, and writes
// shards of at most shard_tokens tokens as it goes (train.bin, or train_000000.bin, ...,
// when several). A document longer than 4 MB is read and encoded in pieces cut after a newline
// that a non-space follows, where its encoding cannot change. The folder is written whole: an
// interrupted `prepare` leaves the previous folder as it was. Memory: the sample and the
// tokenizer trained on it, then about 5 bytes per byte of a batch, whatever the corpus size.
#ifndef PREPARE_H
#define PREPARE_H

#include <stddef.h>

#define VAL_EVERY 20
#define VAL_MAX_TOKENS 10000000

typedef struct {
    int vocab_size;
    double sample_mb;     // the tokenizer's training sample
    size_t shard_tokens;  // most tokens in one shard file
} PrepareOptions;

#define PREPARE_DEFAULTS {.vocab_size = 4096, .sample_mb = 256, .shard_tokens = 100000000}

void dataset_prepare(const char* out_dir, const char* const* inputs, int n_inputs, const PrepareOptions* opt);

#endif
