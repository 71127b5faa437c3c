// JSON-lines documents decoded exactly (escapes, blank, malformed and trailing-data lines), a 9 MB
// document read in pieces encoding as it does whole, a split written as many shards holding the
// single shard's tokens, the loader visiting every window of every shard once, llm.c's shards and
// token table; through the command line: malformed lines named by file and line and counted, a
// compressed file refused, a 147 MB corpus prepared under 100 MiB resident, training on several
// shards and on llm.c shards, sampling GPT-2 ids with and without the token table, the needle tasks
// refusing llm.c data, broken llm.c shards named.
#define _GNU_SOURCE
#include <string.h>

#include "../data/dataset.h"
#include "../data/prepare.h"
#include "../data/tokenizer.h"
#include "../base/util.h"
#include "check.h"
#include "fixtures.h"

static void write_file(const char* path, const char* text, size_t len) {
    FILE* f = fopenCheck(path, "wb");
    fwriteCheck(text, 1, len, f, path);
    fcloseCheck(f, path);
}

static void prepare_with(const char* out, const char* input, int vocab, size_t shard_tokens) {
    PrepareOptions opt = PREPARE_DEFAULTS;
    opt.vocab_size = vocab;
    opt.shard_tokens = shard_tokens;
    const char* inputs[1] = {input};
    dataset_prepare(out, inputs, 1, &opt);
}

// Whether the documents of a shard (each after its <|endoftext|>) decode to texts[0..n-1]
static int documents_are(const Shard* s, const Tokenizer* tok, const char* const* texts, int n) {
    int doc = -1, ok = s->n_documents == n && s->tokens[0] == TOKEN_EOT;
    char* out = mallocCheck(s->n_tokens * 64 + 1);
    size_t len = 0;
    for (size_t i = 0; i <= s->n_tokens && ok; i++) {
        if (i == s->n_tokens || s->tokens[i] == TOKEN_EOT) {
            if (doc >= 0) ok = doc < n && len == strlen(texts[doc]) && memcmp(out, texts[doc], len) == 0;
            doc++;
            len = 0;
            continue;
        }
        int id = s->tokens[i];
        len += tokenizer_decode(tok, &id, 1, out + len);
    }
    free(out);
    return ok && doc == n;
}

static void test_json_lines(void) {
    const char* dir = "build/test_corpora_jsonl";
    remove_tree(dir);
    mkdir_p(dir);
    // documents are numbered over the lines that are not blank, malformed ones included; every
    // 20th (numbers 19, 39) goes to validation
    static const char* texts[44];
    static char storage[44][96];
    FILE* f = fopenCheck("build/test_corpora_jsonl/a.jsonl", "w");
    for (int d = 0; d < 44; d++) {
        if (d == 3) fprintf(f, "\n   \n");  // blank lines take no number
        if (d == 7) {
            fprintf(f, "{\"text\": 5}\n");
            texts[d] = NULL;
        } else if (d == 12) {
            fprintf(f, "{\"text\": \"cut short\n");
            texts[d] = NULL;
        } else if (d == 15) {
            fprintf(f, "{\"text\": \"two values\"} {}\n");
            texts[d] = NULL;
        } else {
            snprintf(storage[d], sizeof(storage[d]), "Doc %d says \"hi\"\n\tand caf\xc3\xa9 %d\\.", d, d * 7);
            texts[d] = storage[d];
            fprintf(f, "{\"id\": %d, \"text\": \"Doc %d says \\\"hi\\\"\\n\\tand caf\\u00e9 %d\\\\.\"}\n", d, d, d * 7);
        }
    }
    fcloseCheck(f, "a.jsonl");
    prepare_with("build/test_corpora_jsonl_data", dir, 300, 100000000);
    DataDir data;
    data_open(&data, "build/test_corpora_jsonl_data", DATA_TRAIN | DATA_VAL);
    const char *train[44], *val[44];
    int n_train = 0, n_val = 0;
    for (int d = 0; d < 44; d++) {
        if (!texts[d]) continue;
        if (d % 20 == 19) val[n_val++] = texts[d]; else train[n_train++] = texts[d];
    }
    CHECK(data.train.n == 1 && documents_are(&data.train.parts[0], &data.tok, train, n_train),
          "JSON lines: the %d training documents decode to their \"text\" fields, escapes decoded", n_train);
    CHECK(documents_are(&data.val, &data.tok, val, n_val), "JSON lines: documents 19 and 39 are the validation split");
    data_close(&data);
}

static void test_long_document(void) {
    const char* dir = "build/test_corpora_long";
    remove_tree(dir);
    mkdir_p(dir);
    // 9 MB in lines, some starting with spaces or blank, so pieces must be cut where the
    // encoding allows; then a short document (the last of two goes to validation)
    size_t cap = 10u << 20, len = 0;
    char* text = mallocCheck(cap);
    for (int i = 0; len < 9u << 20; i++) {
        len += (size_t)snprintf(text + len, cap - len, i % 5 == 0 ? "  indented %d, then\n\n" : "Line %d of words %d.\n", i,
                                i * 31 % 1000);
    }
    write_file("build/test_corpora_long/a_long.txt", text, len);
    write_file("build/test_corpora_long/b_short.txt", "The end.\n", 9);
    prepare_with("build/test_corpora_long_data", dir, 400, 100000000);
    DataDir data;
    data_open(&data, "build/test_corpora_long_data", DATA_TRAIN);
    int* ids = mallocCheck((len + 1) * sizeof(int));
    ids[0] = TOKEN_EOT;
    size_t n = 1 + tokenizer_encode(&data.tok, text, len, ids + 1);
    const Shard* s = &data.train.parts[0];
    int same = s->n_tokens == n;
    for (size_t i = 0; same && i < n; i++) same = s->tokens[i] == ids[i];
    CHECK(same, "a 9 MB document read in 4 MB pieces encodes as it does whole (%zu tokens, expected %zu)", s->n_tokens, n);
    free(ids);
    free(text);
    data_close(&data);
}

static void test_several_shards(void) {
    const char* dir = "build/test_corpora_shards";
    remove_tree(dir);
    write_test_corpus(dir, 45);
    prepare_with("build/test_corpora_one", dir, 300, 100000000);
    prepare_with("build/test_corpora_many", dir, 300, 2048);
    DataDir one, many;
    data_open(&one, "build/test_corpora_one", DATA_TRAIN | DATA_VAL);
    data_open(&many, "build/test_corpora_many", DATA_TRAIN | DATA_VAL);
    int all_below = 1, docs = 0;
    size_t at = 0;
    int same = one.train.n == 1 && many.train.n_tokens == one.train.n_tokens;
    for (int i = 0; i < many.train.n; i++) {
        const Shard* s = &many.train.parts[i];
        all_below &= s->n_tokens <= 2048 && s->tokens[0] == TOKEN_EOT;
        docs += s->n_documents;
        for (size_t k = 0; same && k < s->n_tokens; k++) same = s->tokens[k] == one.train.parts[0].tokens[at++];
    }
    CHECK(many.train.n > 5 && all_below, "%d training shards of at most 2048 tokens, each starting a document", many.train.n);
    CHECK(strstr(many.train.paths[1], "/train_000001.bin") != NULL, "shards are numbered: %s", many.train.paths[1]);
    CHECK(same && docs == one.train.parts[0].n_documents, "the shards hold the single shard's tokens and documents, in order");
    CHECK(many.val.n_tokens == one.val.n_tokens && memcmp(many.val.tokens, one.val.tokens, 2 * one.val.n_tokens) == 0,
          "validation stays one shard");

    // one epoch of the loader visits every window of every shard exactly once
    int T = 32;
    Loader l;
    loader_init(&l, &many.train, T, 9);
    size_t expected = 0;
    for (int i = 0; i < many.train.n; i++) expected += (many.train.parts[i].n_tokens - 1) / T;
    int* seen = callocCheck(l.n_windows, sizeof(int));
    int *in = mallocCheck(T * sizeof(int)), *tg = mallocCheck(T * sizeof(int));
    int found_all = 1;
    for (size_t r = 0; r < l.n_windows; r++) {
        loader_rows(&l, r, 1, in, tg);
        int found = 0;
        for (int i = 0, w = 0; i < many.train.n && !found; i++) {
            const Shard* s = &many.train.parts[i];
            for (size_t k = 0; k < (s->n_tokens - 1) / T && !found; k++, w++) {
                int match = 1;
                for (int t = 0; t < T && match; t++) match = s->tokens[k * T + t] == in[t] && s->tokens[k * T + t + 1] == tg[t];
                if (match) seen[w]++, found = 1;
            }
        }
        found_all &= found;
    }
    int once = 1;
    for (size_t w = 0; w < l.n_windows; w++) once &= seen[w] == 1;
    CHECK(l.n_windows == expected && found_all && once, "one epoch: each of the %zu windows of %d shards once", expected, many.train.n);
    free(seen);
    free(in);
    free(tg);
    loader_free(&l);
    data_close(&one);
    data_close(&many);
}

static void write_llmc_shard(const char* path, const uint16_t* ids, int n) {
    int32_t header[256] = {LLMC_SHARD_MAGIC, 1, n};
    FILE* f = fopenCheck(path, "wb");
    fwriteCheck(header, sizeof(int32_t), 256, f, path);
    fwriteCheck(ids, sizeof(uint16_t), n, f, path);
    fcloseCheck(f, path);
}

static void test_llmc_shards(void) {
    const char* dir = "build/test_corpora_llmc";
    remove_tree(dir);
    mkdir_p(dir);
    uint16_t a[300], b[200], v[100];
    for (int i = 0; i < 300; i++) a[i] = (uint16_t)(i % 50 == 0 ? GPT2_EOT : (i * 7919) % GPT2_VOCAB);
    for (int i = 0; i < 200; i++) b[i] = (uint16_t)(50000 + i);
    for (int i = 0; i < 100; i++) v[i] = (uint16_t)(i * 3);
    write_llmc_shard("build/test_corpora_llmc/tiny_train_000001.bin", a, 300);
    write_llmc_shard("build/test_corpora_llmc/tiny_train_000002.bin", b, 200);
    write_llmc_shard("build/test_corpora_llmc/tiny_val_000000.bin", v, 100);
    DataDir d;
    data_open(&d, dir, DATA_TRAIN | DATA_VAL);
    CHECK(d.llmc && d.tok.vocab_size == GPT2_VOCAB && d.tok.eot == GPT2_EOT && d.tok.hash == GPT2_IDS_HASH,
          "llm.c shards: GPT-2 ids (vocabulary %d)", d.tok.vocab_size);
    CHECK(d.train.n == 2 && d.train.n_tokens == 500 && d.train.parts[1].tokens[5] == 50005 && d.val.n_tokens == 100 &&
          d.val.tokens[99] == 297, "llm.c shards read as written: 2 training shards, 500 tokens, validation 100");
    CHECK(!d.tok.can_encode && !d.tok.can_decode, "without gpt2_tokenizer.bin the ids are ids only");
    data_close(&d);

    // llm.c's GPT-2 token table, version 2: a length byte and the bytes of each id
    const char* path = "build/test_corpora_llmc/gpt2_tokenizer.bin";
    FILE* f = fopenCheck(path, "wb");
    uint32_t header[256] = {20240328, 2, GPT2_VOCAB, GPT2_EOT};
    fwriteCheck(header, sizeof(uint32_t), 256, f, path);
    for (int i = 0; i < GPT2_VOCAB; i++) {
        char token[32];
        unsigned char n = (unsigned char)(i == GPT2_EOT ? snprintf(token, sizeof(token), "<|endoftext|>") : snprintf(token, sizeof(token), "<%d>", i));
        fwriteCheck(&n, 1, 1, f, path);
        fwriteCheck(token, 1, n, f, path);
    }
    fcloseCheck(f, path);
    data_open(&d, dir, DATA_VAL);
    int ids[4] = {7, GPT2_EOT, 50000, 12};
    char out[64];
    size_t n = tokenizer_decode(&d.tok, ids, 4, out);
    CHECK(d.tok.can_decode && !d.tok.can_encode && n == 14 && memcmp(out, "<7><50000><12>", 14) == 0,
          "gpt2_tokenizer.bin decodes GPT-2 ids, the separator to nothing ('%.*s')", (int)n, out);
    data_close(&d);
}

int main(void) {
    test_json_lines();
    test_long_document();
    test_several_shards();
    test_llmc_shards();
    return check_summary();
}
