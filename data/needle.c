#define _GNU_SOURCE
#include "needle.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/util.h"

// One key in four is held out for evaluation: FNV-1a of the key, then mixed
NeedleSplit needle_split_of(const char* key) {
    return hash64(fnv1a(FNV1A_START, key, strlen(key))) % 4 == 0 ? NEEDLE_EVAL : NEEDLE_TRAIN;
}

void needle_source_init(NeedleSource* src, const Tokenizer* tok, const Shard* text, const char* cities_path,
                        NeedleSplit split) {
    // the haystack is the text between document separators: without any, drawing it never ends
    size_t words = 0;
    for (size_t i = 0; i < text->n_tokens && words <= NEEDLE_COPY_SPAN_MAX; i++) words += text->tokens[i] != TOKEN_EOT;
    if (words <= NEEDLE_COPY_SPAN_MAX) {
        die("the needle episodes draw their haystack from a shard of %zu tokens holding %zu besides document separators; "
            "they need more than %d: prepare more text", text->n_tokens, words, NEEDLE_COPY_SPAN_MAX);
    }
    src->tok = tok;
    src->text = text;
    src->split = split;
    src->n_cities = 0;
    char* all = read_text_file(cities_path, NULL);
    int cap = 1;
    for (char* c = all; *c; c++) cap += *c == '\n';
    src->cities = mallocCheck(cap * sizeof(char*));
    for (char* line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
        while (isspace((unsigned char)*line)) line++;
        size_t n = strlen(line);
        while (n > 0 && isspace((unsigned char)line[n - 1])) line[--n] = 0;
        if (n == 0 || line[0] == '#') continue;
        if (needle_split_of(line) != split) continue;
        int seen = 0;
        for (int i = 0; i < src->n_cities && !seen; i++) seen = strcmp(src->cities[i], line) == 0;
        if (!seen) src->cities[src->n_cities++] = strdup(line);
    }
    free(all);
    if (src->n_cities < NEEDLE_MAX) {
        die("'%s': %d %s cities after de-duplication, need at least %d", cities_path, src->n_cities,
            split == NEEDLE_EVAL ? "evaluation" : "training", NEEDLE_MAX);
    }
}

void needle_source_free(NeedleSource* src) {
    for (int i = 0; i < src->n_cities; i++) free(src->cities[i]);
    free(src->cities);
}

// Tokenizes text into a fresh array
static int* encode(const Tokenizer* tok, const char* text, int* n) {
    size_t len = strlen(text);
    int* ids = mallocCheck((len + 1) * sizeof(int));
    *n = (int)tokenizer_encode(tok, text, len, ids);
    return ids;
}

static int is_sentence_end(const Tokenizer* tok, int id) {
    if (id >= tok->vocab_size || tok->length[id] == 0) return 0;
    char last = (char)tok->bytes[id][tok->length[id] - 1];
    return last == '.' || last == '?' || last == '!';
}

static int starts_blank(const Tokenizer* tok, int id) { return tok->length[id] > 0 && isspace(tok->bytes[id][0]); }

// n haystack tokens from src->text starting after a sentence end, skipping document separators
static void take_haystack(int* out, int n, const NeedleSource* src, uint64_t* rng) {
    const Shard* s = src->text;
    size_t pos = rng_next(rng) % s->n_tokens;
    for (size_t k = 0; k < s->n_tokens; k++, pos = (pos + 1) % s->n_tokens) {
        if (is_sentence_end(src->tok, s->tokens[pos]) && starts_blank(src->tok, s->tokens[(pos + 1) % s->n_tokens])) break;
    }
    for (int i = 0; i < n;) {
        pos = (pos + 1) % s->n_tokens;
        if (s->tokens[pos] != TOKEN_EOT) out[i++] = s->tokens[pos];
    }
}

static int draw_number(NeedleSplit split, uint64_t* rng, const int* taken, int n_taken) {
    for (;;) {
        int number = 1000000 + (int)(rng_next(rng) % 9000000);
        char text[16];
        snprintf(text, sizeof(text), "%d", number);
        int clash = needle_split_of(text) != split;
        for (int i = 0; i < n_taken && !clash; i++) clash = taken[i] == number;
        if (!clash) return number;
    }
}

void episode_make(Episode* e, const NeedleSource* src, int length, int n_needles, int n_queries, double depth,
                  int answers, uint64_t seed) {
    if (n_needles < 1 || n_needles > NEEDLE_MAX) die("needles per episode must lie in 1..%d, got %d", NEEDLE_MAX, n_needles);
    if (n_queries < 1 || n_queries > n_needles) die("queries per episode must lie in 1..%d (the needles), got %d", n_needles, n_queries);
    if (depth > 1.0) die("needle depth must lie in [0, 1], got %g", depth);
    memset(e, 0, sizeof(*e));
    e->n_needles = n_needles;
    e->n_queries = n_queries;
    e->depth = depth;
    uint64_t rng = hash64(seed ^ 0x6e6565646c65ull);

    // distinct cities (partial Fisher-Yates over the split) and numbers
    int* order = mallocCheck(src->n_cities * sizeof(int));
    for (int i = 0; i < src->n_cities; i++) order[i] = i;
    for (int i = 0; i < n_needles; i++) {
        int j = i + (int)(rng_next(&rng) % (uint64_t)(src->n_cities - i));
        int t = order[i]; order[i] = order[j]; order[j] = t;
        e->city[i] = order[i];
        e->number[i] = draw_number(src->split, &rng, e->number, i);
    }
    free(order);
    // query 0 asks for the answer needle, the rest for distinct distractors
    int rest[NEEDLE_MAX];
    for (int i = 1; i < n_needles; i++) rest[i - 1] = i;
    for (int i = 0; i < n_needles - 1; i++) {
        int j = i + (int)(rng_next(&rng) % (uint64_t)(n_needles - 1 - i));
        int t = rest[i]; rest[i] = rest[j]; rest[j] = t;
    }
    e->query[0] = 0;
    for (int r = 1; r < n_queries; r++) e->query[r] = rest[r - 1];

    char text[512];
    int* needle[NEEDLE_MAX];
    int* answer[NEEDLE_MAX];
    int answer_len[NEEDLE_MAX], needle_total = 0, tail = 0;
    for (int i = 0; i < n_needles; i++) {
        const char* city = src->cities[e->city[i]];
        snprintf(text, sizeof(text), " The special magic %s number is: %d.", city, e->number[i]);
        needle[i] = encode(src->tok, text, &e->len[i]);
        needle_total += e->len[i];
    }
    for (int r = 0; r < n_queries; r++) {
        const char* city = src->cities[e->city[e->query[r]]];
        snprintf(text, sizeof(text), " What is the special magic %s number? The special magic %s number is", city, city);
        e->question[r] = encode(src->tok, text, &e->question_len[r]);
        snprintf(text, sizeof(text), ": %d.", e->number[e->query[r]]);
        answer[r] = encode(src->tok, text, &answer_len[r]);
        if (answers) tail += e->question_len[r] + answer_len[r];
        else tail = e->question_len[r] > tail ? e->question_len[r] : tail;
    }
    int H = length - 1 - needle_total - tail;
    if (H < 1) die("a context of %d tokens has no room for a haystack beside %d needles", length, n_needles);
    int* hay = mallocCheck(H * sizeof(int));
    take_haystack(hay, H, src, &rng);

    // insertion points are sentence ends: b = 0, or hay[b - 1] ends a sentence and hay[b]
    // starts with whitespace (not the "00" of "$10.00")
    int* bounds = mallocCheck((H + 1) * sizeof(int));
    int n_bounds = 0;
    for (int b = 0; b <= H; b++) {
        if (b == 0 || (is_sentence_end(src->tok, hay[b - 1]) && (b == H || starts_blank(src->tok, hay[b])))) bounds[n_bounds++] = b;
    }
    int at[NEEDLE_MAX];
    for (int i = 0; i < n_needles; i++) at[i] = bounds[rng_next(&rng) % n_bounds];
    if (depth >= 1.0) {
        at[0] = H;  // 100%: right before the question
    } else if (depth >= 0.0) {
        int target = (int)(depth * H);
        at[0] = 0;
        for (int k = 0; k < n_bounds && bounds[k] <= target; k++) at[0] = bounds[k];
    }
    free(bounds);

    e->n_context = 1 + H + needle_total;
    e->n_tokens = answers ? length : e->n_context;
    e->tokens = mallocCheck(length * sizeof(int));
    int n = 0;
    e->tokens[n++] = TOKEN_EOT;
    for (int b = 0; b <= H; b++) {
        for (int i = 0; i < n_needles; i++) {  // needles at one point go in index order
            if (at[i] != b) continue;
            e->start[i] = n;
            memcpy(e->tokens + n, needle[i], e->len[i] * sizeof(int));
            n += e->len[i];
        }
        if (b < H) e->tokens[n++] = hay[b];
    }
    for (int r = 0; answers && r < n_queries; r++) {
        memcpy(e->tokens + n, e->question[r], e->question_len[r] * sizeof(int));
        n += e->question_len[r];
        memcpy(e->tokens + n, answer[r], answer_len[r] * sizeof(int));
        n += answer_len[r];
    }
    for (int i = 0; i < n_needles; i++) free(needle[i]);
    for (int r = 0; r < n_queries; r++) free(answer[r]);
    free(hay);
}

void episode_free(Episode* e) {
    free(e->tokens);
    for (int r = 0; r < e->n_queries; r++) free(e->question[r]);
}

int needle_answer_correct(const char* continuation, int number) {
    const char* p = continuation;
    while (*p && !isdigit((unsigned char)*p)) p++;
    if (!*p) return 0;
    char expected[16];
    int n = snprintf(expected, sizeof(expected), "%d", number);
    return strncmp(p, expected, n) == 0 && !isdigit((unsigned char)p[n]);
}

// A training episode of exactly `length` tokens at out: 1..max_needles needles (at least 80
// tokens each), every one asked and answered
static void add_episode(int* out, const NeedleSource* src, int length, int max_needles, uint64_t seed) {
    int fit = length / 80 < max_needles ? length / 80 : max_needles;
    int needles = 1 + (int)(seed % (uint64_t)(fit > 1 ? fit : 1));
    Episode e;
    episode_make(&e, src, length, needles, needles, -1.0, 1, seed);
    memcpy(out, e.tokens, length * sizeof(int));
    episode_free(&e);
}

// Fills out (n) with copy practice: <|endoftext|>, a span of span_min..span_max tokens of
// text, the same span again, and so on. Every second copy is predictable only by copying,
// the signal that makes induction heads form.
static void copy_practice(int* out, size_t n, const Shard* text, int span_min, int span_max, uint64_t seed) {
    size_t at = 0;
    while (at < n) {
        int span = span_min + (int)(hash64(seed + at) % (uint64_t)(span_max - span_min + 1));
        size_t from = hash64(seed ^ (uint64_t)at) % (text->n_tokens - span);
        out[at++] = TOKEN_EOT;
        for (int copy = 0; copy < 2; copy++) {
            for (int i = 0; i < span && at < n; i++) out[at++] = text->tokens[from + i];
        }
    }
}

// The copy stage's data: copy practice of as many tokens as the text
static void write_copy_shard(const char* path, const Shard* text, const Tokenizer* tok, uint64_t seed) {
    int* ids = mallocCheck(text->n_tokens * sizeof(int));
    copy_practice(ids, text->n_tokens, text, NEEDLE_COPY_SPAN_MIN, NEEDLE_COPY_SPAN_MAX, seed);
    shard_write(path, ids, text->n_tokens, 1, tok, 0);
    free(ids);
}

void needle_prepare(const char* out_dir, const char* data_dir, const char* cities_path, int seq_len, int max_needles,
                    uint64_t seed) {
    char path[4200], out[4200];
    const char* inputs[2] = {data_dir, cities_path};
    refuse_output_over_input("output folder", out_dir, inputs, 2);
    // a needle mix is known by its copy stage's tokenizer, which no prepared corpus has: a corpus
    // named as the output (which holds a tokenizer.bin too) is refused, never replaced
    refuse_replacing_foreign_folder("output folder", out_dir, "copy/tokenizer.bin");
    DataDir data;
    data_open(&data, data_dir, DATA_TRAIN | DATA_VAL);
    if (data.llmc) {
        die("the needle tasks write their questions as text and need this project's tokenizer, but '%s' holds llm.c's "
            "GPT-2 shards; make the corpus with `difftx prepare` for them", data_dir);
    }
    const Tokenizer* tok = &data.tok;
    const Shard *train = data_single_train_shard(&data, "the needle training mix"), *val = &data.val;
    if (seq_len < 1 || train->n_tokens < (size_t)seq_len) {
        die("option --seq-len: '%s' holds %zu training tokens, fewer than one block of %d: the needle mix is made of such "
            "blocks", data_dir, train->n_tokens, seq_len);
    }
    if (val->n_tokens <= NEEDLE_COPY_SPAN_MAX) {
        die("'%s' holds %zu validation tokens; the copy stage's data needs more than %d", data_dir, val->n_tokens, NEEDLE_COPY_SPAN_MAX);
    }
    NeedleSource src;
    needle_source_init(&src, tok, train, cities_path, NEEDLE_TRAIN);
    size_t blocks = train->n_tokens / seq_len, episodes = NEEDLE_EPISODES_PER_BLOCK * blocks;
    int* ids = mallocCheck((blocks + episodes) * seq_len * sizeof(int));
    size_t n = 0;
    for (; n < blocks * seq_len; n++) ids[n] = train->tokens[n];
    for (size_t b = 0; b < episodes; b++) {
        uint64_t s = hash64(seed + b);
        if (b % 3 == 2) {
            // copy practice keeps the induction heads of the copy stage at long range
            copy_practice(ids + n, seq_len, train, NEEDLE_COPY_SPAN_MIN, 64, s);
        } else if (b % 3 == 0) {
            // one episode fills the block, so needles up to seq_len tokens before their
            // question are as common as near ones: the far ones are what evaluation asks
            // at depth 0% and what episodes of random length rarely show
            add_episode(ids + n, &src, seq_len, max_needles, s);
        } else {
            // short episodes back to back: every token of the block is retrieval practice
            int at = 0;
            while (at < seq_len) {
                int left = seq_len - at, length = left;
                if (left >= 2 * 160) length = 160 + (int)(hash64(s + at) % (uint64_t)((left - 160 < 640 ? left - 160 : 640) - 159));
                add_episode(ids + n + at, &src, length, max_needles, s + at);
                at += length;
            }
        }
        n += seq_len;
    }
    char dir[4096];
    tmp_folder(dir, sizeof(dir), out_dir);
    path_printf(out, sizeof(out), "%s/train.bin", dir);
    shard_write(out, ids, n, train->n_documents + (int)episodes, tok, seq_len);
    path_printf(out, sizeof(out), "%s/val.bin", dir);
    path_printf(path, sizeof(path), "%s/val.bin", data_dir);
    copy_file(path, out);
    path_printf(path, sizeof(path), "%s/tokenizer.bin", data_dir);
    path_printf(out, sizeof(out), "%s/tokenizer.bin", dir);
    copy_file(path, out);
    path_printf(out, sizeof(out), "%s/copy", dir);
    mkdir_p(out);
    path_printf(out, sizeof(out), "%s/copy/tokenizer.bin", dir);
    copy_file(path, out);
    path_printf(out, sizeof(out), "%s/copy/train.bin", dir);
    write_copy_shard(out, train, tok, hash64(seed ^ 2));
    path_printf(out, sizeof(out), "%s/copy/val.bin", dir);
    write_copy_shard(out, val, tok, hash64(seed ^ 3));
    replace_folder(dir, out_dir);
    printf("  %s: %zu tokens of text and needle blocks of %d; copy stage data in %s/copy\n", out_dir, n, seq_len, out_dir);
    free(ids);
    needle_source_free(&src);
    data_close(&data);
}
