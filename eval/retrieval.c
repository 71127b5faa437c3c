#include "retrieval.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/util.h"

int episode_cache_need(const Episode* e) {
    int longest = 0;
    for (int r = 0; r < e->n_queries; r++) longest = e->question_len[r] > longest ? e->question_len[r] : longest;
    return e->n_context + longest + ANSWER_TOKENS;
}

// The most likely next token after row n - 1 of the last forward; logits (V) is scratch
static int argmax_last_row(const Model* m, int n, float* logits) {
    model_logits(m, n - 1, logits);
    int best = 0;
    for (int v = 1; v < m->V; v++) best = logits[v] > logits[best] ? v : best;
    return best;
}

// A digit run followed by something else: the number is complete
static int has_complete_number(const char* s) {
    for (; *s; s++) {
        if (isdigit((unsigned char)s[0]) && s[1] && !isdigit((unsigned char)s[1])) return 1;
    }
    return 0;
}

int episode_answer(Model* m, const Tokenizer* tok, const Episode* e, char (*text)[ANSWER_TEXT], int* correct) {
    if (model_cache_size(m) < episode_cache_need(e)) die("episode needs a cache of %d positions, the model has %d", episode_cache_need(e), model_cache_size(m));
    model_forward_cached(m, e->tokens, e->n_context, 0);
    float* logits = mallocCheck((size_t)m->V * sizeof(float));
    int right = 0;
    for (int r = 0; r < e->n_queries; r++) {
        int pos = e->n_context;
        model_forward_cached(m, e->question[r], e->question_len[r], pos);
        pos += e->question_len[r];
        size_t len = 0;
        text[r][0] = 0;
        for (int k = 0; k < ANSWER_TOKENS; k++) {
            int next = argmax_last_row(m, k == 0 ? e->question_len[r] : 1, logits);
            if (next == TOKEN_EOT || len + tok->length[next] >= ANSWER_TEXT) break;
            len += tokenizer_decode(tok, &next, 1, text[r] + len);
            text[r][len] = 0;
            if (has_complete_number(text[r]) || k + 1 == ANSWER_TOKENS) break;
            model_forward_cached(m, &next, 1, pos++);
        }
        correct[r] = needle_answer_correct(text[r], e->number[e->query[r]]);
        right += correct[r];
    }
    free(logits);
    return right;
}

CopyScore copy_score(Model* m, const Shard* text, int half, int sequences, uint64_t seed) {
    int T = 2 * half + 1, right[2] = {0, 0}, total = 0;
    if (text->n_tokens <= (size_t)half) die("copying check: a text of %zu tokens has no span of %d", text->n_tokens, half);
    int* tokens = mallocCheck(T * sizeof(int));
    float* logits = mallocCheck((size_t)m->V * sizeof(float));
    uint64_t rng = hash64(seed);
    for (int s = 0; s < sequences; s++) {
        size_t from = rng_next(&rng) % (text->n_tokens - half);
        tokens[0] = TOKEN_EOT;
        for (int i = 1; i <= half; i++) tokens[i] = tokens[i + half] = text->tokens[from + i - 1];
        model_forward(m, tokens, NULL, 1, T, 0);
        for (int i = 1; i < half; i++) {  // row c*half + i predicts token i + 1 of copy c
            for (int c = 0; c < 2; c++) right[c] += argmax_last_row(m, c * half + i + 1, logits) == tokens[c * half + i + 1];
            total++;
        }
    }
    free(tokens);
    free(logits);
    CopyScore score = {(double)right[0] / total, (double)right[1] / total};
    return score;
}

Allocation allocation_of_row(const float* row, int visible, int context, int answer_start, int answer_len) {
    Allocation a = {0};
    double magnitude = 0;
    for (int j = 0; j < visible; j++) {
        if (j == 0) a.bos += row[j];
        else if (j >= context) a.question += row[j];
        else if (j >= answer_start && j < answer_start + answer_len) a.answer += row[j];
        else a.noise += row[j];
        if (row[j] < 0) a.negative -= row[j];
        magnitude += fabs(row[j]);
    }
    for (int j = 0; j < visible && magnitude > 0; j++) {
        double p = fabs(row[j]) / magnitude;
        if (p > 0) a.entropy -= p * log(p);
    }
    if (magnitude > 0) {
        a.answer_abs = a.answer / magnitude;
        a.noise_abs = a.noise / magnitude;
    }
    return a;
}

void allocation_add(Allocation* sum, const Allocation* a) {
    sum->answer += a->answer;
    sum->noise += a->noise;
    sum->question += a->question;
    sum->bos += a->bos;
    sum->entropy += a->entropy;
    sum->negative += a->negative;
    sum->answer_abs += a->answer_abs;
    sum->noise_abs += a->noise_abs;
}

Allocation allocation_divide(Allocation a, double n) {
    return (Allocation){a.answer / n, a.noise / n, a.question / n, a.bos / n, a.entropy / n, a.negative / n, a.answer_abs / n, a.noise_abs / n};
}

int head_maps_combined_row(const HeadMaps* maps, int row, int normalise, float* out) {
    const float* a0 = maps->A + (size_t)row * maps->T;
    if (maps->M == 1) {
        memcpy(out, a0, maps->T * sizeof(float));
        return 1;
    }
    const float* a1 = a0 + (size_t)maps->rows * maps->T;
    float lam = maps->lambda[row];
    int defined = !(normalise && !maps->integral && lam == 1.0f);
    float norm = normalise && !maps->integral && defined ? 1.0f / (1.0f - lam) : 1.0f;  // x * 1.0f is x exactly
    for (int j = 0; j < maps->T; j++) out[j] = (a0[j] - lam * a1[j]) * norm;
    return defined;
}

Allocation episode_allocation(Model* m, const Episode* e, int all_rows, Allocation* per_head, MapsCallback maps_cb, void* ctx) {
    int T = e->n_context + e->question_len[0];
    if (model_cache_size(m) < T) die("episode needs a cache of %d positions, the model has %d", T, model_cache_size(m));
    model_forward_cached(m, e->tokens, e->n_context, 0);
    model_forward_cached(m, e->question[0], e->question_len[0], e->n_context);
    HeadMaps maps;
    maps.T = T;
    maps.M = m->M;
    maps.integral = m->shape.integral;
    maps.first_row = all_rows ? 0 : e->n_context;
    maps.rows = T - maps.first_row;
    maps.A = mallocCheck((size_t)m->M * maps.rows * T * sizeof(float));
    maps.lambda = mallocCheck(maps.rows * sizeof(float));
    float* row = mallocCheck(T * sizeof(float));
    Allocation total = {0};
    int total_rows = 0;
    for (int l = 0; l < m->L; l++) {
        for (int h = 0; h < m->H; h++) {
            model_attention_maps(m, l, h, maps.first_row, T, maps.A, maps.lambda);
            Allocation head = {0};
            int head_rows = 0;
            for (int r = 0; r < maps.rows; r++) {
                int t = maps.first_row + r;
                if (t < e->n_context || !head_maps_combined_row(&maps, r, 1, row)) continue;
                Allocation a = allocation_of_row(row, t + 1, e->n_context, e->start[0], e->len[0]);
                if (per_head) allocation_add(&head, &a);
                allocation_add(&total, &a);
                head_rows++;
            }
            total_rows += head_rows;
            // a head whose every question row has lambda exactly 1 has no shares: NaN, not 0
            if (per_head) per_head[l * m->H + h] = allocation_divide(head, head_rows ? head_rows : NAN);
            if (maps_cb) maps_cb(ctx, l, h, &maps);
        }
    }
    free(row);
    free(maps.A);
    free(maps.lambda);
    return allocation_divide(total, total_rows ? total_rows : NAN);
}
