// The activation hook (one call at a time, host memory: no locks in the test). A hook that only
// reads leaves every training loss and the final parameters bitwise unchanged (3 AdamW steps, all
// three variants) and is called for every logit block of the forward and of the backward's
// recomputation and every layer output; a hook that doubles the attention logits gives the loss of
// the model with W_q doubled (within 1e-5) and, straight through, its gradients (within 1e-4 of the
// largest); a hook that zeroes the last layer's output gives loss log V; cached decoding reports
// its positions; a removed hook is not called.
#include <math.h>
#include <string.h>

#include "../model/model.h"
#include "../model/optim.h"
#include "../base/util.h"
#include "check.h"
#include "model_fixtures.h"
#include "instances.h"

typedef struct {
    long logits_forward, logits_recompute, layer_outputs;  // logit rows shown, layer outputs shown
    double max_abs;          // over every visible logit shown
    float scale;             // != 1: multiply the logits by it
    int zero_layer;          // >= 0: zero this layer's output
    int last_row0;           // row0 of the last layer output shown
} Probe;

static void probe(void* ctx, const Activation* a) {
    Probe* p = ctx;
    if (a->kind == ACT_LAYER_OUTPUT) {
        p->layer_outputs++;
        p->last_row0 = a->row0;
        if (a->layer == p->zero_layer) memset(a->data, 0, (size_t)a->rows * a->ld * sizeof(float));
        return;
    }
    double local = 0;
    for (int r = 0; r < a->rows; r++) {
        float* row = a->data + (size_t)r * a->ld;
        for (int j = 0; j <= a->row0 + r; j++) {  // only the keys the row sees
            local = fmax(local, fabs(row[j]));
            if (p->scale != 1.0f) row[j] *= p->scale;
        }
    }
    // one call at a time (the hook contract): no lock
    if (a->recompute) p->logits_recompute += a->rows;
    else p->logits_forward += a->rows;
    p->max_abs = fmax(p->max_abs, local);
}

static void random_tokens(int* tokens, int n, int V, uint64_t seed) {
    for (int i = 0; i < n; i++) tokens[i] = (int)(hash64(seed + i) % (uint64_t)V);
}

// Training steps with and without a reading hook: every loss and the final parameters equal bitwise
static void test_noop_hook(AttentionKind kind) {
    TestModel cfg = tiny_model(kind);
    int V = 64, B = cfg.batch_size, T = cfg.model.seq_len, steps = 3;
    Model a, b;
    AdamW oa, ob;
    model_build(&a, &cfg.model, backend_named("cpu"), V, cfg.batch_size);
    model_build(&b, &cfg.model, backend_named("cpu"), V, cfg.batch_size);
    model_init_params(&a, 5);
    model_init_params(&b, 5);
    adamw_alloc(&oa, &a, &cfg.optim);
    adamw_alloc(&ob, &b, &cfg.optim);
    Probe p = {0, 0, 0, 0, 1.0f, -1, -1};
    ActivationHook hook = {probe, &p};
    model_set_hook(&b, &hook);
    int tokens[2 * 70], targets[2 * 70], same = 1;
    for (int s = 0; s < steps; s++) {
        random_tokens(tokens, B * T, V, 100 * s);
        random_tokens(targets, B * T, V, 100 * s + 7);
        Model* models[2] = {&a, &b};
        AdamW* opts[2] = {&oa, &ob};
        double loss[2];
        for (int k = 0; k < 2; k++) {
            model_zero_grad(models[k]);
            model_forward(models[k], tokens, targets, B, T, 1);
            loss[k] = model_loss(models[k]);
            model_backward(models[k], 1.0f);
            clip_grad_norm(models[k], cfg.optim.grad_clip);
            adamw_update(opts[k], models[k], 1e-2f, s + 1);
        }
        same &= memcmp(&loss[0], &loss[1], sizeof(double)) == 0;
    }
    float *pa = mallocCheck(a.n_params * sizeof(float)), *pb = mallocCheck(b.n_params * sizeof(float));
    model_get_params(&a, pa);
    model_get_params(&b, pb);
    CHECK(same && memcmp(pa, pb, a.n_params * sizeof(float)) == 0,
          "%s: a reading hook leaves every loss and parameter bitwise unchanged", config_attention_name(&cfg.model));
    // every query row of every sequence, layer, head and map, however the backend cuts them
    long rows = (long)steps * cfg.model.n_layer * B * a.H * a.M * T;
    CHECK(p.logits_forward == rows && p.logits_recompute == rows && p.layer_outputs == (long)steps * cfg.model.n_layer,
          "%s: the hook sees %ld forward + %ld recomputed logit rows (expected %ld each), %ld layer outputs", config_attention_name(&cfg.model),
          p.logits_forward, p.logits_recompute, rows, p.layer_outputs);
    CHECK(p.max_abs > 0.1 && isfinite(p.max_abs), "%s: the hook sees the logits (max |logit| %.3f)", config_attention_name(&cfg.model), p.max_abs);
    free(pa);
    free(pb);
    adamw_free(&oa);
    adamw_free(&ob);
    model_free(&a);
    model_free(&b);
}

// Multiplying every attention logit by 2 is multiplying W_q by 2 (RoPE is linear): the same
// loss. Gradients: after the softmax both models are the same function, so the last layer's
// value, output, lambda, norm and FFN weights, the final norm and the LM head get the same
// gradients; straight-through, the hooked model's q gets the scaled model's dq (dW_q equal)
// and its k half the scaled model's dk (dS reaches k through q, which the hook did not double).
// Earlier layers mix both paths and are not compared.
static void test_replacing_hook(AttentionKind kind) {
    TestModel cfg = tiny_model(kind);
    int V = 64, B = cfg.batch_size, T = cfg.model.seq_len;
    Model hooked, scaled;
    model_build(&hooked, &cfg.model, backend_named("cpu"), V, cfg.batch_size);
    model_build(&scaled, &cfg.model, backend_named("cpu"), V, cfg.batch_size);
    model_init_params(&hooked, 9);
    float* params = mallocCheck(hooked.n_params * sizeof(float));
    model_get_params(&hooked, params);
    // W_q: wq, or Shared DIFF's wq_shared + wq_update_out . wq_update_in^T (doubling the first two)
    for (int i = 0; i < hooked.n_tensors; i++) {
        const ParamTensor* t = &hooked.tensors[i];
        const char* leaf = strchr(t->name, '/');
        if (leaf && (!strcmp(leaf, "/wq") || !strcmp(leaf, "/wq_shared") || !strcmp(leaf, "/wq_update_out"))) {
            for (size_t j = 0; j < t->size; j++) params[t->offset + j] *= 2.0f;
        }
    }
    model_set_params(&scaled, params);
    Probe p = {0, 0, 0, 0, 2.0f, -1, -1};
    ActivationHook hook = {probe, &p};
    model_set_hook(&hooked, &hook);
    int tokens[2 * 70], targets[2 * 70];
    random_tokens(tokens, B * T, V, 1);
    random_tokens(targets, B * T, V, 2);
    Model* models[2] = {&hooked, &scaled};
    float* grads[2];
    for (int k = 0; k < 2; k++) {
        model_zero_grad(models[k]);
        model_forward(models[k], tokens, targets, B, T, 1);
        model_backward(models[k], 1.0f);
        grads[k] = mallocCheck(hooked.n_params * sizeof(float));
        model_get_grads(models[k], grads[k]);
    }
    double dloss = fabs(model_loss(&hooked) - model_loss(&scaled)), worst = 0, largest = 0;
    char last[32];
    snprintf(last, sizeof(last), "layer_%02d/", cfg.model.n_layer - 1);
    int compared = 0;
    for (int i = 0; i < hooked.n_tensors; i++) {
        const ParamTensor* t = &hooked.tensors[i];
        if (strncmp(t->name, "layer_", 6) == 0 && strncmp(t->name, last, strlen(last)) != 0) continue;
        if (strcmp(t->name, "tok_embedding") == 0 || strstr(t->name, "attn_norm")) continue;
        // wq_update_in's gradient goes through wq_update_out, which the scaled model doubled
        double factor = strstr(t->name, "/wk") || strstr(t->name, "/wq_update_in") ? 0.5 : 1.0;
        for (size_t j = 0; j < t->size; j++) {
            double g = grads[0][t->offset + j], want = factor * grads[1][t->offset + j];
            worst = fmax(worst, fabs(g - want));
            largest = fmax(largest, fabs(want));
        }
        compared++;
    }
    CHECK(dloss < 1e-5, "%s: logits x 2 by the hook give the loss of W_q x 2 (|diff| %.2e)", config_attention_name(&cfg.model), dloss);
    CHECK(compared >= 9 && worst < 1e-4 * largest, "%s: and, straight-through, its gradients of %d tensors (max |diff| %.2e of %.2e)",
          config_attention_name(&cfg.model), compared, worst, largest);
    free(params);
    free(grads[0]);
    free(grads[1]);
    model_free(&hooked);
    model_free(&scaled);
}

// Zeroing the last layer's output: the final norm and LM head see zeros, every logit is 0
static void test_layer_output(void) {
    TestModel cfg = tiny_model(ATTN_DIFF);
    int V = 64, T = 20;
    Model m;
    model_build(&m, &cfg.model, backend_named("cpu"), V, cfg.batch_size);
    model_init_params(&m, 3);
    Probe p = {0, 0, 0, 0, 1.0f, cfg.model.n_layer - 1, -1};
    ActivationHook hook = {probe, &p};
    model_set_hook(&m, &hook);
    int tokens[20], targets[20];
    random_tokens(tokens, T, V, 4);
    random_tokens(targets, T, V, 5);
    model_forward(&m, tokens, targets, 1, T, 0);
    CHECK(fabs(model_loss(&m) - log((double)V)) < 1e-6, "a zeroed last layer output gives loss log V: %.7f vs %.7f", model_loss(&m),
          log((double)V));
    model_cache_init(&m, 32);
    model_forward_cached(&m, tokens, 5, 0);
    model_forward_cached(&m, tokens + 5, 3, 5);
    CHECK(p.last_row0 == 5, "cached decoding reports its first position as row0 (%d)", p.last_row0);
    model_set_hook(&m, NULL);
    long before = p.layer_outputs;
    model_forward(&m, tokens, targets, 1, T, 0);
    CHECK(p.layer_outputs == before && model_loss(&m) != log((double)V), "a removed hook is not called");
    model_free(&m);
}

int main(void) {
    for (AttentionKind k = 0; k < ATTN_VARIANT_COUNT; k++) {
        test_noop_hook(k);
        test_replacing_hook(k);
    }
    test_layer_output();
    return check_summary();
}
