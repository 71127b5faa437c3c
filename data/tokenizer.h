// Byte-level BPE. Ids 0-255 are the bytes, 256 is the document separator <|endoftext|>, and
// each merge adds one id. Text is first cut into chunks (an optional leading space with a run
// of letters, of digits or of other symbols; or a run of whitespace) and merges never cross a
// chunk, as in GPT-2. Encoding then decoding gives back any byte string exactly.
#ifndef TOKENIZER_H
#define TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define TOKEN_EOT 256
#define TOKENIZER_BASE 257

#define TOKEN_MAX_BYTES (1 << 26)  // the longest token a tokenizer may hold

// (a, b) -> value, open addressing: memory in proportion to the pairs held, not vocab_size^2
typedef struct {
    uint64_t* keys;  // (cap) a << 16 | b, or UINT64_MAX where empty
    int64_t* values;
    size_t cap, used;
} PairMap;

typedef struct {
    int vocab_size;
    int n_merges;
    uint16_t (*merges)[2];   // (n_merges, 2): merge i joins these two ids into id 257 + i
    PairMap ranks;           // (a, b) -> the id merging them makes (ids are made in rank order)
    unsigned char** bytes;   // (vocab_size) the bytes each id stands for
    int* length;             // (vocab_size)
    uint64_t hash;           // identity: a hash of the merge list
    int eot;                 // the document separator's id
    int can_encode;          // 0: ids only, and text is refused (llm.c's GPT-2 ids)
    int can_decode;          // 0: no token table (GPT-2 ids without gpt2_tokenizer.bin)
} Tokenizer;

// llm.c's token shards hold GPT-2 ids; their tokenizer is an identity, not a merge list here
#define GPT2_VOCAB 50257
#define GPT2_EOT 50256
#define GPT2_IDS_HASH 0x4750542d32696473ull  // "GPT-2ids"

// docs: n_docs byte strings with their lengths
void tokenizer_train(Tokenizer* tok, const char* const* docs, const size_t* lens, int n_docs, int vocab_size);
void tokenizer_save(const Tokenizer* tok, const char* path);
void tokenizer_load(Tokenizer* tok, const char* path);
// GPT-2 ids for llm.c's shards: decoded with llm.c's gpt2_tokenizer.bin when path names one
// (else NULL: ids only); never encodes, since GPT-2's merges are not part of llm.c's files
void tokenizer_gpt2(Tokenizer* tok, const char* path);
void tokenizer_free(Tokenizer* tok);
// out must hold len ids; returns the number written. O(len log len). Dies unless can_encode.
size_t tokenizer_encode(const Tokenizer* tok, const char* text, size_t len, int* out);
// The last position p in (0, len) where text[0..p) and text[p..len) encode to what text encodes
// to, as far as len bytes show (after a newline that a non-space follows), or len when there is
// none: where a long text may be cut into pieces
size_t tokenizer_safe_cut(const char* text, size_t len);
// out must hold the sum of the ids' lengths; returns the bytes written (EOT writes none).
// Dies unless can_decode.
size_t tokenizer_decode(const Tokenizer* tok, const int* ids, size_t n, char* out);

#endif
