// Hand-computed merges, exact round trips of 200 random byte strings, save/load, the
// train/validation split, document boundaries, loader order; 420 KB of zero bytes encode in under 2
// s; `--vocab 65536` trains; crafted tokenizer files (doubling merges, a header promising more
// merges than the file holds) are refused before they allocate.
#define _GNU_SOURCE
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../data/dataset.h"
#include "../data/tokenizer.h"
#include "../base/util.h"
#include "check.h"
#include "fixtures.h"

static void test_hand_merges(void) {
    // chunks "ab", " ab", " ab": (a,b) occurs 3 times and merges first (id 257); then
    // (' ', 257) occurs twice (id 258); nothing else repeats, so training stops at 259 ids.
    const char* docs[1] = {"ab ab ab"};
    size_t lens[1] = {8};
    Tokenizer tok;
    tokenizer_train(&tok, docs, lens, 1, 300);
    CHECK(tok.n_merges == 2 && tok.vocab_size == 259, "expected 2 merges, got %d", tok.n_merges);
    CHECK(tok.merges[0][0] == 'a' && tok.merges[0][1] == 'b', "first merge is (a, b)");
    CHECK(tok.merges[1][0] == ' ' && tok.merges[1][1] == 257, "second merge is (' ', ab)");
    int ids[8];
    size_t n = tokenizer_encode(&tok, "ab ab ab", 8, ids);
    CHECK(n == 3 && ids[0] == 257 && ids[1] == 258 && ids[2] == 258, "encode 'ab ab ab' -> 257 258 258 (got %zu ids)", n);
    tokenizer_free(&tok);
}

static void test_round_trip(void) {
    const char* text =
        "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, "
        "and nothing particular to interest me on shore, I thought I would sail about a little and see the watery "
        "part of the world. It is a way I have of driving off the spleen and regulating the circulation. 1851, 1852!";
    const char* docs[2] = {text, text + 40};
    size_t lens[2] = {strlen(text), strlen(text) - 40};
    Tokenizer tok;
    tokenizer_train(&tok, docs, lens, 2, 400);
    CHECK(tok.vocab_size > 300, "tokenizer learned %d ids", tok.vocab_size);
    int* ids = mallocCheck(4096 * sizeof(int));
    char* back = mallocCheck(4096);
    size_t n = tokenizer_encode(&tok, text, lens[0], ids);
    CHECK(n < lens[0] / 2, "training text compresses: %zu ids for %zu bytes", n, lens[0]);
    size_t m = tokenizer_decode(&tok, ids, n, back);
    CHECK(m == lens[0] && memcmp(back, text, m) == 0, "training text round-trips");
    // arbitrary bytes: NULs, invalid UTF-8, whitespace runs, every byte value
    uint64_t rng = 99;
    int ok = 1;
    for (int trial = 0; trial < 200; trial++) {
        char buf[300];
        size_t len = rng_next(&rng) % 300;
        for (size_t i = 0; i < len; i++) {
            uint64_t r = rng_next(&rng);
            buf[i] = r % 3 == 0 ? " \n\tae"[r % 5] : (char)(r >> 8);
        }
        n = tokenizer_encode(&tok, buf, len, ids);
        m = tokenizer_decode(&tok, ids, n, back);
        ok &= m == len && memcmp(back, buf, len) == 0;
    }
    CHECK(ok, "200 random byte strings round-trip exactly");
    CHECK(tokenizer_encode(&tok, "", 0, ids) == 0, "empty string encodes to nothing");

    const char* path = "build/test_tokenizer.bin";
    tokenizer_save(&tok, path);
    Tokenizer loaded;
    tokenizer_load(&loaded, path);
    CHECK(loaded.vocab_size == tok.vocab_size && loaded.hash == tok.hash &&
          memcmp(loaded.merges, tok.merges, tok.n_merges * sizeof(tok.merges[0])) == 0, "save/load keeps the merges");
    int* ids2 = mallocCheck(4096 * sizeof(int));
    size_t n1 = tokenizer_encode(&tok, text, lens[0], ids), n2 = tokenizer_encode(&loaded, text, lens[0], ids2);
    CHECK(n1 == n2 && memcmp(ids, ids2, n1 * sizeof(int)) == 0, "loaded tokenizer encodes identically");
    unlink(path);
    tokenizer_free(&loaded);
    tokenizer_free(&tok);
    free(ids); free(ids2); free(back);
}

static void test_prepare_and_loader(void) {
    const char* dir = "build/test_corpus";
    write_test_corpus(dir, 25);
    const char* inputs[1] = {dir};
    prepare_corpus("build/test_prepared", inputs, 1, 300);
    Shard train, val;
    shard_load(&train, "build/test_prepared/train.bin");
    shard_load(&val, "build/test_prepared/val.bin");
    CHECK(train.n_documents == 24 && val.n_documents == 1, "every 20th document goes to validation: %d/%d", train.n_documents, val.n_documents);
    Tokenizer tok;
    tokenizer_load(&tok, "build/test_prepared/tokenizer.bin");
    int eot = 0;
    for (size_t i = 0; i < train.n_tokens; i++) eot += train.tokens[i] == TOKEN_EOT;
    CHECK(train.tokens[0] == TOKEN_EOT && eot == 24, "each document starts with <|endoftext|> (%d found)", eot);
    // validation holds doc19 (sorted index 19), decoded back exactly
    int* ids = mallocCheck(val.n_tokens * sizeof(int));
    for (size_t i = 0; i < val.n_tokens; i++) ids[i] = val.tokens[i];
    char* text = mallocCheck(val.n_tokens * 64);
    size_t len = tokenizer_decode(&tok, ids, val.n_tokens, text);
    size_t expect_len;
    char* expect = read_text_file("build/test_corpus/doc19.txt", &expect_len);
    CHECK(len == expect_len && memcmp(text, expect, len) == 0, "validation shard decodes to doc19.txt");
    free(expect); free(text); free(ids);

    // loader: each epoch visits every window once; rows depend only on (seed, row)
    int T = 16;
    Loader a, b;
    ShardList shards = {.parts = &train, .n = 1, .n_tokens = train.n_tokens};
    loader_init(&a, &shards, T, 5);
    loader_init(&b, &shards, T, 5);
    size_t W = a.n_windows;
    int* seen = callocCheck(W, sizeof(int));
    int *in = mallocCheck(T * sizeof(int)), *tg = mallocCheck(T * sizeof(int));
    int *in2 = mallocCheck(T * sizeof(int)), *tg2 = mallocCheck(T * sizeof(int));
    int shifted = 1;
    for (size_t r = 0; r < W; r++) {
        loader_rows(&a, r, 1, in, tg);
        for (int t = 0; t + 1 < T; t++) shifted &= tg[t] == in[t + 1];
        for (size_t w = 0; w < W; w++) {
            int same = 1;
            for (int t = 0; t < T && same; t++) same = train.tokens[w * T + t] == in[t];
            if (same) { seen[w]++; break; }
        }
    }
    int all_once = 1;
    for (size_t w = 0; w < W; w++) all_once &= seen[w] >= 1;
    CHECK(all_once, "one epoch covers every window");
    CHECK(shifted, "targets are the inputs shifted by one");
    loader_rows(&a, 3 * W + 7, 1, in, tg);  // jump ahead, as a resumed run does
    loader_rows(&b, 3 * W + 7, 1, in2, tg2);
    CHECK(memcmp(in, in2, T * sizeof(int)) == 0, "a row is a function of (seed, row) alone");
    loader_rows(&b, 7, 1, in2, tg2);
    loader_rows(&a, W + 7, 1, in, tg);
    CHECK(memcmp(in, in2, T * sizeof(int)) != 0, "epochs are shuffled differently");
    loader_free(&a); loader_free(&b);
    free(seen); free(in); free(tg); free(in2); free(tg2);
    tokenizer_free(&tok);
    shard_free(&train);
    shard_free(&val);
}

// A run of one byte: (0, 0) merges into 257, (257, 257) into 258 and so on, so encoding a long
// run merges about n times; each merge must cost O(log n), not a rescan of the run (420 KB of
// zero bytes once took minutes)
static void test_long_run(void) {
    size_t n = 420000;
    char* zeros = callocCheck(n, 1);
    const char* docs[2] = {zeros, zeros};
    size_t lens[2] = {n, n};
    Tokenizer tok;
    tokenizer_train(&tok, docs, lens, 2, 300);
    int* ids = mallocCheck(n * sizeof(int));
    double t0 = wall_time();
    size_t got = tokenizer_encode(&tok, zeros, n, ids);
    double seconds = wall_time() - t0;
    char* back = mallocCheck(n);
    size_t bytes = tokenizer_decode(&tok, ids, got, back);
    CHECK(bytes == n && memcmp(back, zeros, n) == 0 && got < 64, "420 KB of zero bytes encode to %zu ids and back", got);
    CHECK(seconds < 2.0, "and take %.3f s to encode (at most 2 s)", seconds);
    tokenizer_free(&tok);
    free(zeros);
    free(ids);
    free(back);
}

// The largest vocabulary trains with memory in proportion to the pairs seen (dense
// 65536 x 65536 tables needed 32 GiB)
static void test_largest_vocabulary(void) {
    const char* text = "the cat sat on the mat, the dog sat on the log; 0123 4567 0123 4567!";
    const char* docs[1] = {text};
    size_t lens[1] = {strlen(text)};
    Tokenizer tok;
    tokenizer_train(&tok, docs, lens, 1, 65536);
    int ids[128];
    char back[128];
    size_t n = tokenizer_encode(&tok, text, lens[0], ids);
    CHECK(tok.n_merges > 5 && tokenizer_decode(&tok, ids, n, back) == lens[0] && memcmp(back, text, lens[0]) == 0,
          "--vocab 65536 trains (%d merges) and round-trips", tok.n_merges);
    tokenizer_free(&tok);
}

// Runs tokenizer_load on a file of these bytes in a child; returns its stderr (exit status in *status)
static void load_crafted(const void* bytes, size_t n, char* err, size_t cap, int* status) {
    const char* path = "build/test_crafted_tokenizer.bin";
    FILE* f = fopenCheck(path, "wb");
    fwriteCheck(bytes, 1, n, f, path);
    fcloseCheck(f, path);
    int pipefd[2];
    if (pipe(pipefd) != 0) die("pipe");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2);
        Tokenizer tok;
        tokenizer_load(&tok, path);
        _exit(0);
    }
    close(pipefd[1]);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < cap && (k = read(pipefd[0], err + got, cap - 1 - got)) > 0) got += (size_t)k;
    err[got] = 0;
    close(pipefd[0]);
    waitpid(pid, status, 0);
    unlink(path);
}

// Tokenizer files whose header or merges would make the loader allocate without bound are
// refused before that, by name
static void test_crafted_files(void) {
    unsigned char file[16 + 4 * 43];
    memcpy(file, "DTXTOK01", 8);
    uint32_t header[2] = {257 + 43, 43};
    memcpy(file + 8, header, 8);
    for (int i = 0; i < 43; i++) {  // each merge doubles the last: a token of 2^44 bytes
        uint16_t pair[2] = {(uint16_t)(i ? 256 + i : 0), (uint16_t)(i ? 256 + i : 0)};
        memcpy(file + 16 + 4 * i, pair, 4);
    }
    char err[1024];
    int status;
    load_crafted(file, sizeof(file), err, sizeof(err), &status);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1 && strstr(err, "merge 26 makes a token of 134217728 bytes, more than 67108864"),
          "doubling merges (a %zu-byte file) are refused at the first too-long token: %s", sizeof(file), err);
    header[0] = 65536;
    header[1] = 65536 - 257;
    memcpy(file + 8, header, 8);
    load_crafted(file, sizeof(file), err, sizeof(err), &status);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1 && strstr(err, "has 188 bytes, but its header's 65279 merges make 261132"),
          "a header promising more merges than the file holds is refused before allocating: %s", err);
}

int main(void) {
    test_hand_merges();
    test_long_run();
    test_largest_vocabulary();
    test_crafted_files();
    test_round_trip();
    test_prepare_and_loader();
    return check_summary();
}
