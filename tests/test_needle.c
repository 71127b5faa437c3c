// The episode generator (answer needle at the requested depth, moved back to the nearest sentence
// end; every needle after BOS, a sentence end or another needle; distinct cities and numbers; the
// city list de-duplicated; training and evaluation cities and numbers disjoint; same seed, same
// episode; training blocks end with the last answer), the scorer on hand cases, the copying check,
// allocation on hand-made rows, and the training mix (its single-episode blocks start at BOS,
// hold one episode, ask every needle and end with the questions and answers). Decoding on the KV
// cache and the analysis maps are test_decoding's.
#define _DEFAULT_SOURCE
#include <math.h>
#include <string.h>

#include "../data/needle.h"
#include "../eval/retrieval.h"
#include "../model/cpu/cpu.h"
#include "../base/util.h"
#include "check.h"
#include "fixtures.h"
#include "instances.h"

static void test_scorer(void) {
    CHECK(needle_answer_correct(": 1234567.", 1234567), "plain answer");
    CHECK(needle_answer_correct(" 1234567 and 99", 1234567), "first number counts");
    CHECK(!needle_answer_correct(": 12345678.", 1234567), "longer number is wrong");
    CHECK(!needle_answer_correct(": 123456.", 1234567), "prefix of the number is wrong");
    CHECK(!needle_answer_correct(": 7654321, 1234567", 1234567), "right number second is wrong");
    CHECK(!needle_answer_correct(": unknown.", 1234567), "no number");
    CHECK(needle_answer_correct("1234567", 1234567), "number at the very end");
}

static void test_split(const NeedleSource* train, const NeedleSource* eval) {
    int unique = 1, disjoint = 1, split_ok = 1;
    for (int i = 0; i < eval->n_cities; i++) {
        for (int j = i + 1; j < eval->n_cities; j++) unique &= strcmp(eval->cities[i], eval->cities[j]) != 0;
        for (int j = 0; j < train->n_cities; j++) disjoint &= strcmp(eval->cities[i], train->cities[j]) != 0;
        split_ok &= needle_split_of(eval->cities[i]) == NEEDLE_EVAL;
    }
    CHECK(unique, "evaluation cities are unique after de-duplication");
    CHECK(disjoint, "no city is both a training and an evaluation city");
    CHECK(split_ok, "evaluation cities hash to the evaluation split");
}

static int ends_sentence(const Tokenizer* tok, int id) {
    return tok->length[id] > 0 && strchr(".?!", tok->bytes[id][tok->length[id] - 1]) != NULL;
}

static int starts_blank(const Tokenizer* tok, int id) { return tok->length[id] > 0 && strchr(" \n\t", tok->bytes[id][0]) != NULL; }

static void test_episodes(const NeedleSource* src, const NeedleSource* train_src, const Tokenizer* tok) {
    static const double depths[] = {0.0, 0.25, 0.5, 0.75, 1.0};
    for (int k = 0; k < 5; k++) {
        Episode e, f;
        episode_make(&e, src, 400, 4, 2, depths[k], 0, 100 + k);
        episode_make(&f, src, 400, 4, 2, depths[k], 0, 100 + k);
        CHECK(e.n_context == f.n_context && memcmp(e.tokens, f.tokens, e.n_context * sizeof(int)) == 0 &&
              memcmp(e.number, f.number, sizeof(e.number)) == 0, "depth %g: same seed, same episode", depths[k]);
        int longest = e.question_len[0] > e.question_len[1] ? e.question_len[0] : e.question_len[1];
        CHECK(e.n_context + longest == 400, "depth %g: context %d + question %d fill the length", depths[k], e.n_context, longest);
        CHECK(e.tokens[0] == TOKEN_EOT, "episode starts with BOS");
        int distinct = 1, numbers_eval = 1;
        for (int i = 0; i < e.n_needles; i++) {
            char text[16];
            snprintf(text, sizeof(text), "%d", e.number[i]);
            numbers_eval &= needle_split_of(text) == NEEDLE_EVAL && e.number[i] >= 1000000 && e.number[i] <= 9999999;
            for (int j = i + 1; j < e.n_needles; j++) distinct &= e.city[i] != e.city[j] && e.number[i] != e.number[j];
        }
        CHECK(distinct, "depth %g: needles have distinct cities and numbers", depths[k]);
        CHECK(numbers_eval, "depth %g: numbers are 7-digit evaluation numbers", depths[k]);
        CHECK(e.query[0] == 0 && e.query[1] != 0, "query 0 asks for the answer needle, query 1 a distractor");
        // the answer needle's text is where start says, after a sentence end or BOS
        char got[256], want[256];
        size_t n = tokenizer_decode(tok, e.tokens + e.start[0], e.len[0], got);
        got[n] = 0;
        snprintf(want, sizeof(want), " The special magic %s number is: %d.", src->cities[e.city[0]], e.number[0]);
        CHECK(strcmp(got, want) == 0, "depth %g: answer needle text '%s'", depths[k], got);
        // depth: haystack tokens before the needle, over the haystack, at or below the depth,
        // and no sentence end between the needle and the depth's position
        int hay_before = 0, hay_total = e.n_context - 1;
        for (int i = 0; i < e.n_needles; i++) hay_total -= e.len[i];
        for (int i = 1; i < e.start[0]; i++) {
            int in_needle = 0;
            for (int j = 1; j < e.n_needles; j++) in_needle |= i >= e.start[j] && i < e.start[j] + e.len[j];
            hay_before += !in_needle;
        }
        if (depths[k] >= 1.0) {
            CHECK(e.start[0] + e.len[0] == e.n_context, "depth 100%%: the answer needle ends the context");
        } else {
            int target = (int)(depths[k] * hay_total);
            CHECK(hay_before <= target && (k == 0 ? hay_before == 0 : hay_before > target - 120),
                  "depth %g: needle after %d of %d haystack tokens (target %d)", depths[k], hay_before, hay_total, target);
            // the nearest sentence end: no haystack token hay_before .. target - 1 ends a sentence
            // with whitespace after it
            int later_end = 0, index = hay_before, prev_end = 0;
            for (int i = e.start[0] + e.len[0]; i < e.n_context && index <= target; i++) {
                int in_needle = 0;
                for (int j = 1; j < e.n_needles; j++) in_needle |= i >= e.start[j] && i < e.start[j] + e.len[j];
                if (in_needle) continue;
                later_end |= prev_end && starts_blank(tok, e.tokens[i]);
                prev_end = ends_sentence(tok, e.tokens[i]);
                index++;
            }
            CHECK(!later_end, "depth %g: moved back to the nearest sentence end", depths[k]);
        }
        episode_free(&e);
        episode_free(&f);
    }
    Episode g;
    episode_make(&g, src, 400, 4, 2, 0.5, 0, 999);
    Episode h;
    episode_make(&h, src, 400, 4, 2, 0.5, 0, 1000);
    CHECK(memcmp(g.tokens, h.tokens, 50 * sizeof(int)) != 0 || g.number[0] != h.number[0], "different seeds, different episodes");
    episode_free(&g);
    episode_free(&h);

    Episode t;
    episode_make(&t, train_src, 600, 3, 3, -1.0, 1, 5);
    CHECK(t.n_tokens == 600, "training episode fills its block (%d)", t.n_tokens);
    char* text = mallocCheck(8192);
    size_t n = tokenizer_decode(tok, t.tokens, t.n_tokens, text);
    text[n] = 0;
    char answer[128];
    snprintf(answer, sizeof(answer), "The special magic %s number is: %d.", train_src->cities[t.city[t.query[2]]], t.number[t.query[2]]);
    CHECK(n > strlen(answer) && strcmp(text + n - strlen(answer), answer) == 0, "training episode ends with the last answer");
    free(text);
    episode_free(&t);
}

// Needles sit at sentence ends of the haystack: every needle token is preceded by BOS, a
// sentence end or another needle
static void test_sentence_ends(const NeedleSource* src, const Tokenizer* tok) {
    int ok = 1;
    for (int s = 0; s < 20; s++) {
        Episode e;
        episode_make(&e, src, 600, 6, 2, 0.25 * (s % 5), 0, 7000 + s);
        for (int i = e.depth >= 1.0; i < e.n_needles; i++) {  // at 100% the answer needle just ends the context
            int p = e.start[i] - 1, after_needle = 0;
            for (int j = 0; j < e.n_needles; j++) after_needle |= e.start[j] + e.len[j] == e.start[i];
            int q = e.start[i] + e.len[i], before_needle = 0;  // and whitespace (or a needle) follows
            for (int j = 0; j < e.n_needles; j++) before_needle |= e.start[j] == q;
            ok &= p == 0 || after_needle || ends_sentence(tok, e.tokens[p]);
            ok &= q == e.n_context || before_needle || starts_blank(tok, e.tokens[q]);
        }
        episode_free(&e);
    }
    CHECK(ok, "every needle sits between a sentence end (or BOS, or a needle) and whitespace (or a needle, or the end)");
}





static float* tensor_at(const Model* m, float* params, const char* name) {
    for (int i = 0; i < m->n_tensors; i++) {
        if (strcmp(m->tensors[i].name, name) == 0) return params + m->tensors[i].offset;
    }
    die("no tensor %s", name);
}

// A model whose every prediction is fixed by its LM head: all residuals are the embedding's
// ones, so logit v = sum of lm_head row v. On a text made of token 257 only, predicting 257
// scores 1, predicting BOS scores 0.
static void test_copy_score(void) {
    Config cfg = short_context_config(ATTN_STANDARD);
    Model m;
    model_build(&m, &cfg.model, backend_named(BACKEND_DEVICES[cfg.device]), 258, cfg.batch_size);
    float* params = callocCheck(m.n_params, sizeof(float));
    float *embedding = tensor_at(&m, params, "tok_embedding"), *lm_head = tensor_at(&m, params, "lm_head");
    for (int i = 0; i < 258 * m.C; i++) embedding[i] = 1.0f;
    for (int i = 0; i < m.C; i++) tensor_at(&m, params, "final_norm")[i] = 1.0f;
    for (int i = 0; i < m.C; i++) lm_head[257 * m.C + i] = 1.0f;
    model_set_params(&m, params);
    uint16_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = 257;
    Shard text = {.tokens = ids, .n_tokens = 40, .vocab_size = 258};
    CopyScore always_right = copy_score(&m, &text, 16, 2, 3);
    for (int i = 0; i < m.C; i++) lm_head[256 * m.C + i] = 2.0f;
    model_set_params(&m, params);
    CopyScore always_wrong = copy_score(&m, &text, 16, 2, 3);
    CHECK(always_right.first == 1.0 && always_right.second == 1.0 && always_wrong.first == 0.0 && always_wrong.second == 0.0,
          "copy score %.2f/%.2f when every guess is the copy, %.2f/%.2f when none is", always_right.first,
          always_right.second, always_wrong.first, always_wrong.second);
    free(params);
    model_free(&m);
}

static void test_allocation(void) {
    // BOS, 3 noise, answer at 4..5, 1 noise, question at 7..8: a row of the question token 8
    float row[9] = {0.30f, 0.05f, 0.05f, 0.10f, 0.20f, 0.15f, 0.05f, 0.04f, 0.06f};
    Allocation a = allocation_of_row(row, 9, 7, 4, 2);
    CHECK(fabs(a.bos - 0.30) < 1e-6 && fabs(a.answer - 0.35) < 1e-6 && fabs(a.noise - 0.25) < 1e-6 &&
          fabs(a.question - 0.10) < 1e-6, "hand-made row: bos %.2f answer %.2f noise %.2f question %.2f", a.bos, a.answer,
          a.noise, a.question);
    // a DIFF row is normalised by 1 - lambda: A1 all on the answer, A2 uniform over 4 positions
    float A[2 * 4] = {0, 0, 1, 0, 0.25f, 0.25f, 0.25f, 0.25f}, lam = 0.5f, out[4];
    HeadMaps maps = {1, 4, 2, 3, A, &lam, 0};
    head_maps_combined_row(&maps, 0, 1, out);
    Allocation d = allocation_of_row(out, 4, 3, 2, 1);
    CHECK(fabs(d.answer - 1.75) < 1e-6 && fabs(d.bos + 0.25) < 1e-6 && fabs(d.noise + 0.25) < 1e-6 &&
          fabs(d.question + 0.25) < 1e-6 && fabs(d.answer + d.bos + d.noise + d.question - 1.0) < 1e-6,
          "DIFF row (1 - 0.5 x 0.25) / 0.5 on the answer: %.3f, the row sums to 1", d.answer);
    // the noise metrics: a softmax row has no negative mass and the entropy of its weights
    // (-sum p ln p of the row above, worked out apart: 1.9448254); the DIFF row's |w| / 2.5 is
    // (0.1, 0.1, 0.7, 0.1), entropy -(3 x 0.1 ln 0.1 + 0.7 ln 0.7) = 0.9404480, and 3 x 0.25 lies below zero
    CHECK(a.negative == 0 && fabs(a.entropy - 1.9448254) < 1e-6, "softmax row: negative mass %g, entropy %.7f", a.negative, a.entropy);
    CHECK(fabs(d.negative - 0.75) < 1e-6 && fabs(d.entropy - 0.9404480) < 1e-6, "DIFF row: negative mass %.4f (0.75), entropy %.7f (0.9404480)",
          d.negative, d.entropy);
    // over sum |w|: the softmax row's shares as they are; the DIFF row's 1.75 and -0.25 over 2.5
    CHECK(fabs(a.answer_abs - 0.35) < 1e-6 && fabs(a.noise_abs - 0.25) < 1e-6 && fabs(d.answer_abs - 0.7) < 1e-6 &&
          fabs(d.noise_abs + 0.1) < 1e-6, "over sum |w|: softmax answer %.3f noise %.3f (0.35, 0.25), DIFF answer %.3f noise %.3f (0.7, -0.1)",
          a.answer_abs, a.noise_abs, d.answer_abs, d.noise_abs);
    // lambda near 1: w = (-0.24975, -0.24975, 0.75025, -0.24975) sums to 1 - lambda = 0.001, so the
    // answer's share is 750 (0.999f is 0.99900001, hence 750.26), while over sum |w| = 1.4995 it
    // is 0.75025 / 1.4995 = 0.5003334 and the noise -0.24975 / 1.4995 = -0.1665555
    lam = 0.999f;
    head_maps_combined_row(&maps, 0, 1, out);
    Allocation near = allocation_of_row(out, 4, 3, 2, 1);
    CHECK(fabs(near.answer - 750.26) < 0.01 && fabs(near.answer_abs - 0.5003334) < 1e-5 && fabs(near.noise_abs + 0.1665555) < 1e-5,
          "lambda 0.999: answer %.2f (750.26), over sum |w| answer %.7f (0.5003334) noise %.7f (-0.1665555)", near.answer,
          near.answer_abs, near.noise_abs);
}

static int count_of(const char* text, const char* what) {
    int n = 0;
    for (const char* p = strstr(text, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

// The needle mix: after the text blocks, every third block is a single training episode that
// fills it (BOS first, no other separator), so its needles can sit a whole block before their
// questions; every needle is asked and answered, the questions come last.
static void test_training_mix(const char* mix, const char* data_dir, const Tokenizer* tok, size_t text_tokens) {
    // the fixture's 327-id tokenizer spends about 90 tokens on a needle, its question and
    // answer, so the shortest episodes (160 tokens) hold one needle
    const int T = 512;
    char path[300];
    needle_prepare(mix, data_dir, "data/cities.txt", T, 1, 11);
    Shard s;
    snprintf(path, sizeof(path), "%s/train.bin", mix);
    shard_load(&s, path);
    size_t text_blocks = text_tokens / T, blocks = s.n_tokens / T;
    CHECK(s.block == T && blocks == text_blocks * (1 + NEEDLE_EPISODES_PER_BLOCK), "mix: %zu blocks of %d after %zu of text",
          blocks, s.block, text_blocks);
    int ids[512], single = 1, asked = 1, last = 1, checked = 0;
    char text[512 * 64];
    for (size_t b = text_blocks; b < blocks; b += 3) {
        int separators = 0;
        for (int t = 0; t < T; t++) separators += (ids[t] = s.tokens[b * T + t]) == TOKEN_EOT;
        single &= ids[0] == TOKEN_EOT && separators == 1;
        text[tokenizer_decode(tok, ids, T, text)] = '\0';
        int questions = count_of(text, "What is the special magic");
        asked &= questions >= 1 && count_of(text, " number is: ") == 2 * questions;
        const char* first = strstr(text, " What is");
        last &= first && first - text > (long)strlen(text) / 2 && text[strlen(text) - 1] == '.';
        checked++;
    }
    CHECK(checked > 10 && single, "mix: %d single-episode blocks, each one episode from BOS to its end", checked);
    CHECK(asked, "mix: in every single-episode block each needle is asked and answered once");
    CHECK(last, "mix: the questions close each single-episode block, its answer last");
    shard_free(&s);
}

int main(void) {
    const char* dir = "build/needle_fixture";
    char corpus[128], data[128], cities[128];
    snprintf(corpus, sizeof(corpus), "%s/corpus", dir);
    snprintf(data, sizeof(data), "%s/data", dir);
    snprintf(cities, sizeof(cities), "%s/cities.txt", dir);
    write_test_corpus(corpus, 40);
    const char* inputs[] = {corpus};
    prepare_corpus(data, inputs, 1, 400);
    Tokenizer tok;
    char path[512];
    snprintf(path, sizeof(path), "%s/tokenizer.bin", data);
    tokenizer_load(&tok, path);
    Shard val, train;
    snprintf(path, sizeof(path), "%s/val.bin", data);
    shard_load(&val, path);
    snprintf(path, sizeof(path), "%s/train.bin", data);
    shard_load(&train, path);
    NeedleSource eval_src, train_src;
    needle_source_init(&eval_src, &tok, &val, "data/cities.txt", NEEDLE_EVAL);
    needle_source_init(&train_src, &tok, &train, "data/cities.txt", NEEDLE_TRAIN);

    // the real list with three evaluation cities repeated, padded with blanks: same split
    char* list = read_text_file("data/cities.txt", NULL);
    FILE* f = fopenCheck(cities, "w");
    fprintf(f, "%s\n%s\n  %s \n# comment\n\n%s\n", list, eval_src.cities[0], eval_src.cities[1], eval_src.cities[0]);
    fcloseCheck(f, cities);
    free(list);
    NeedleSource dup_src;
    needle_source_init(&dup_src, &tok, &val, cities, NEEDLE_EVAL);
    int same = dup_src.n_cities == eval_src.n_cities;
    for (int i = 0; same && i < dup_src.n_cities; i++) same = strcmp(dup_src.cities[i], eval_src.cities[i]) == 0;
    CHECK(same, "duplicates are dropped: %d evaluation cities with them, %d without", dup_src.n_cities, eval_src.n_cities);
    test_split(&train_src, &dup_src);
    needle_source_free(&dup_src);
    test_scorer();
    test_episodes(&eval_src, &train_src, &tok);
    test_sentence_ends(&eval_src, &tok);
    test_allocation();
    test_copy_score();
    char mix[128];
    snprintf(mix, sizeof(mix), "%s/mix", dir);
    test_training_mix(mix, data, &tok, train.n_tokens);
    needle_source_free(&eval_src);
    needle_source_free(&train_src);
    shard_free(&val);
    shard_free(&train);
    tokenizer_free(&tok);
    return check_summary();
}
