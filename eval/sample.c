// Text from a trained model: the prompt after <|endoftext|>, then up to n_tokens sampled one
// at a time through the decoding cache (sample.h)
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/util.h"

void sample_text(Model* model, const Tokenizer* tok, const char* prompt, int n_tokens, float temperature, uint64_t seed,
                 FILE* out) {
    int T = model->cfg.seq_len;
    size_t plen = strlen(prompt);
    int* prompt_ids = mallocCheck((plen + 1) * sizeof(int));
    prompt_ids[0] = tok->eot;  // documents start with <|endoftext|> in training
    int n = 1 + (plen ? (int)tokenizer_encode(tok, prompt, plen, prompt_ids + 1) : 0);
    int* history = mallocCheck(((size_t)n + n_tokens) * sizeof(int));
    memcpy(history, prompt_ids, n * sizeof(int));
    uint64_t rng = hash64(seed);
    int longest = 0;
    for (int v = 0; v < tok->vocab_size; v++) longest = tok->length[v] > longest ? tok->length[v] : longest;
    char* text = mallocCheck((size_t)longest + 1);
    float* logits = mallocCheck((size_t)model->V * sizeof(float));
    fwrite(prompt, 1, plen, out);
    model_cache_init(model, T);
    for (int i = 0; i < n_tokens; i++) {
        // the window is the last T tokens; once it slides, every cached position moves, so the
        // whole window is run again
        int start = n > T ? n - T : 0, len = n - start;
        if (i == 0 || start > 0) model_forward_cached(model, history + start, len, 0);
        else model_forward_cached(model, history + n - 1, 1, n - 1);
        model_logits(model, (i == 0 || start > 0 ? len : 1) - 1, logits);
        int next = 0;
        if (temperature == 0.0f) {
            for (int v = 1; v < model->V; v++) next = logits[v] > logits[next] ? v : next;
        } else {
            float maxv = logits[0];  // float: gcc 12 for arm64 crashes vectorising a double fmax over floats
            double sum = 0.0;
            for (int v = 1; v < model->V; v++) maxv = fmaxf(maxv, logits[v]);
            for (int v = 0; v < model->V; v++) sum += exp((logits[v] - maxv) / temperature);
            double u = rng_uniform(&rng) * sum, acc = 0.0;
            for (next = 0; next < model->V - 1; next++) {
                acc += exp((logits[next] - maxv) / temperature);
                if (acc > u) break;
            }
        }
        if (next == tok->eot) break;
        history[n++] = next;
        size_t bytes = tokenizer_decode(tok, &next, 1, text);
        fwrite(text, 1, bytes, out);
        fflush(out);
    }
    fputc('\n', out);
    free(text);
    free(logits);
    free(history);
    free(prompt_ids);
}
