// The episode generator (answer needle at the requested depth, moved back to the nearest sentence
// end; every needle after BOS, a sentence end or another needle; distinct cities and numbers; the
// city list de-duplicated; training and evaluation cities and numbers disjoint; same seed, same
// episode; training blocks end with the last answer), the scorer on hand cases, decoding on the KV
// cache (prefill in pieces across a query block, then single tokens, then stepping back) equal to
// the full forward pass for standard, DIFF and DIFF V2 (within 2e-4 on logits of peaked attention),
// the analysis maps times V equal to the fused attention output (within 1e-4) with rows summing to
// 1, allocation on hand-made rows, and the training mix (its single-episode blocks start at BOS,
// hold one episode, ask every needle and end with the questions and answers).
#define _DEFAULT_SOURCE
#include <math.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../data/needle.h"
#include "../eval/retrieval.h"
#include "../model/cpu/cpu.h"
#include "../base/util.h"
#include "check.h"
#include "fixtures.h"

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

static Config tiny(int attention) {
    Config cfg;
    config_defaults(&cfg);
    cfg.model.attention = attention;
    cfg.model.n_layer = 2;
    cfg.model.d_model = 32;
    cfg.model.n_head = ATTN_VARIANTS[attention].maps == 2 && !ATTN_VARIANTS[attention].shared_kv ? 2 : 4;  // DIFF's heads are two maps wide
    cfg.model.head_dim = 8;
    cfg.model.seq_len = 96;
    config_validate(&cfg);
    return cfg;
}

// DINT's maps over a filled cache of T positions: map 1 less the integral term, so each row of
// A_0 - lambda A_1 sums to one, A_1's rows to zero, row 0 is all on token 0 (its integral term
// is map 0's one row), and rows asked from first_row on are those asked from row 0
static void test_integral_maps(Model* m, int T) {
    int first = 40, rows = T - first;
    float *A = mallocCheck((size_t)2 * T * T * sizeof(float)), *lambda = mallocCheck(T * sizeof(float));
    float *later = mallocCheck((size_t)2 * rows * T * sizeof(float)), *later_lambda = mallocCheck(rows * sizeof(float));
    model_attention_maps(m, 1, 1, 0, T, A, lambda);
    model_attention_maps(m, 1, 1, first, T, later, later_lambda);
    double worst_sum = 0, worst_noise = 0, worst_later = 0;
    for (int i = 0; i < T; i++) {
        double sum = 0, noise = 0;
        for (int k = 0; k < T; k++) {
            sum += A[(size_t)i * T + k] - lambda[i] * A[((size_t)T + i) * T + k];
            noise += A[((size_t)T + i) * T + k];
        }
        worst_sum = fmax(worst_sum, fabs(sum - 1));
        worst_noise = fmax(worst_noise, fabs(noise));
    }
    for (int r = 0; r < rows; r++) {
        for (int k = 0; k < T; k++) {
            worst_later = fmax(worst_later, fabs(later[(size_t)r * T + k] - A[(size_t)(first + r) * T + k]));
            worst_later = fmax(worst_later, fabs(later[((size_t)rows + r) * T + k] - A[((size_t)T + first + r) * T + k]));
        }
    }
    CHECK(worst_sum < 1e-5 && worst_noise < 1e-5, "dint maps: rows of A_0 - lambda A_1 sum to one (worst %.1e), of A_1 to zero (%.1e)",
          worst_sum, worst_noise);
    CHECK(A[0] == 1.0f && A[(size_t)T * T] == 0.0f, "dint maps: row 0 is all on token 0 (A_0 %g, A_1 %g)", A[0], A[(size_t)T * T]);
    CHECK(worst_later == 0, "dint maps: rows asked from %d on are those asked from 0 (max |diff| %.1e)", first, worst_later);
    free(A);
    free(lambda);
    free(later);
    free(later_lambda);
}

// Prefill in pieces, then one token at a time, gives the full forward pass's logits; a cached
// forward has its last row's logits only
static void test_cache(int attention) {
    Config cfg = tiny(attention);
    Model m;
    model_build(&m, &cfg.model, backend_of_device(cfg.device), 300, cfg.batch_size);
    model_init_params(&m, 11);
    float* params = mallocCheck(m.n_params * sizeof(float));
    model_get_params(&m, params);
    for (size_t i = 0; i < m.n_params; i++) params[i] *= 6.0f;  // peaked attention
    model_set_params(&m, params);
    int T = 90, tokens[90];
    uint64_t rng = 3;
    for (int t = 0; t < T; t++) tokens[t] = (int)(rng_next(&rng) % 300);
    model_forward(&m, tokens, NULL, 1, T, 0);
    float* full = mallocCheck((size_t)T * m.V * sizeof(float));
    float* row = mallocCheck((size_t)m.V * sizeof(float));
    for (int t = 0; t < T; t++) model_logits(&m, t, full + (size_t)t * m.V);
    model_cache_init(&m, 128);
    double worst = 0;
    int pieces[] = {70, 13, 1, 1, 1, 4};  // 70 > the kernel's 64-row query block: the prefill crosses a block
    int pos = 0;
    for (int k = 0; k < 6; k++) {
        model_forward_cached(&m, tokens + pos, pieces[k], pos);
        pos += pieces[k];
        model_logits(&m, pieces[k] - 1, row);
        for (int v = 0; v < m.V; v++) worst = fmax(worst, fabs(row[v] - full[(size_t)(pos - 1) * m.V + v]));
    }
    CHECK(pos == T && worst < 2e-4, "%s: cached decoding matches the full forward (max |diff| %.2e)", config_attention_name(&cfg.model), worst);
    // stepping back reuses the prefix, rows from pos on are replaced: every row from 70 on as
    // the last of a piece that starts at 70, so each one's logits depend on the piece's rows before it
    double back = 0;
    for (int end = 71; end <= T; end++) {
        model_forward_cached(&m, tokens + 70, end - 70, 70);
        model_logits(&m, end - 71, row);
        for (int v = 0; v < m.V; v++) back = fmax(back, fabs(row[v] - full[(size_t)(end - 1) * m.V + v]));
    }
    CHECK(back < 2e-4, "%s: stepping the cache back gives the same logits (%.2e)", config_attention_name(&cfg.model), back);
    pid_t child = fork();
    if (child == 0) {
        freopen("/dev/null", "w", stderr);
        model_logits(&m, 0, row);  // row 0 of the last 20-row cached forward
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0, "%s: a cached forward's other rows have no logits to read",
          config_attention_name(&cfg.model));
    if (m.shape.integral) test_integral_maps(&m, T);
    free(full);
    free(row);
    free(params);
    model_free(&m);
}

// attention_maps' rows combined with lambda and multiplied by V equal attention_forward's
// output for the same rows, q0 > 0 included
static void test_maps_times_v(int M, int shared_kv) {
    AttnShape s = {1, 80, 2, 8, M, shared_kv, shared_kv, 30, {0, QUANT_PER_TENSOR}, 0, 0, 0};
    const Backend* be = backend_cpu();
    HookSite no_hook = {NULL, 0};
    int QKV = attention_qkv_width(&s), lam = attention_lambda_offset(&s);
    int Dv = shared_kv ? s.D : M * s.D, HDv = s.H * Dv, rows = s.T - s.q0;
    float* qkv = mallocCheck((size_t)s.T * QKV * sizeof(float));
    uint64_t rng = 17 + M + shared_kv;
    for (int i = 0; i < s.T * QKV; i++) qkv[i] = 1.5f * rng_normal(&rng);
    if (lam >= 0) {
        for (int t = 0; t < s.T; t++) for (int h = 0; h < s.H; h++) qkv[(size_t)t * QKV + lam + h] = rng_uniform(&rng);
    }
    float lambda = 0.37f;
    size_t qkv_bytes = (size_t)s.T * QKV * sizeof(float), y_bytes = (size_t)rows * HDv * sizeof(float);
    size_t P_bytes = (size_t)M * rows * s.T * sizeof(float);
    float *d_qkv = be->alloc(qkv_bytes), *d_lambda = be->alloc(sizeof(float)), *d_y = be->alloc(y_bytes), *d_P = be->alloc(P_bytes);
    be->upload(d_qkv, qkv, qkv_bytes);
    be->upload(d_lambda, &lambda, sizeof(float));
    float* y = mallocCheck(y_bytes);
    be->attention_forward(d_y, NULL, NULL, d_qkv, d_lambda, &s, no_hook);
    be->download(y, d_y, y_bytes);
    float* P = mallocCheck(P_bytes);
    double worst = 0, row_sum_err = 0;
    for (int h = 0; h < s.H; h++) {
        be->attention_maps(d_P, d_qkv, &s, h, no_hook);
        be->download(P, d_P, P_bytes);
        int v_col = attention_v_col(&s, h, 0);
        for (int r = 0; r < rows; r++) {
            int t = s.q0 + r;
            float lam_r = M == 1 ? 0.0f : lam >= 0 ? qkv[(size_t)t * QKV + lam + h] : lambda;
            for (int m = 0; m < M; m++) {
                double sum = 0;
                for (int j = 0; j < s.T; j++) sum += P[((size_t)m * rows + r) * s.T + j];
                row_sum_err = fmax(row_sum_err, fabs(sum - 1.0));
            }
            for (int c = 0; c < Dv; c++) {
                double acc = 0;
                for (int j = 0; j <= t; j++) {
                    double p = P[(size_t)r * s.T + j] - (M == 2 ? lam_r * P[((size_t)rows + r) * s.T + j] : 0.0);
                    acc += p * qkv[(size_t)j * QKV + v_col + c];
                }
                worst = fmax(worst, fabs(acc - y[(size_t)r * HDv + h * Dv + c]));
            }
        }
    }
    CHECK(worst < 1e-4, "M=%d shared_kv=%d: maps x V equal the fused output (max |diff| %.2e)", M, shared_kv, worst);
    CHECK(row_sum_err < 1e-5, "M=%d shared_kv=%d: every map row sums to 1 (%.2e)", M, shared_kv, row_sum_err);
    free(qkv);
    free(y);
    free(P);
    be->release(d_qkv);
    be->release(d_lambda);
    be->release(d_y);
    be->release(d_P);
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
    Config cfg = tiny(ATTN_STANDARD);
    Model m;
    model_build(&m, &cfg.model, backend_of_device(cfg.device), 258, cfg.batch_size);
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
    for (int a = 0; a < 3; a++) test_cache(a);
    test_cache(ATTN_DINT);
    test_maps_times_v(1, 0);
    test_maps_times_v(2, 0);
    test_maps_times_v(2, 1);
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
