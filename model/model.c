#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "layers.h"
#include "util.h"

static int is_diff2(const Model* m) { return m->cfg.attention == ATTN_DIFF2; }

// Appends one tensor to the layout; returns its place in base (NULL while only counting)
static float* add_tensor(Model* m, float* base, const char* name, int d0, int d1, int decay) {
    ParamTensor* t = &m->tensors[m->n_tensors++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->size = (size_t)d0 * (d1 ? d1 : 1);
    t->offset = m->n_params;
    t->decay = decay;
    m->n_params += t->size;
    return base ? base + t->offset : NULL;
}

// The one place that fixes the order of the parameter block. Run with base = NULL to count,
// then once per block (parameters, gradients) to point p into it.
static void layout(Model* m, float* base, Params* p) {
    int L = m->L, C = m->C, HDv = m->H * m->Dv, QK = m->M * m->H * m->D, KW = m->KH * m->D;
    m->n_tensors = 0;
    m->n_params = 0;
    p->tok_embedding = add_tensor(m, base, "tok_embedding", m->V, C, 1);
    char name[64];
    for (int l = 0; l < L; l++) {
        LayerParams* lp = &p->layers[l];
        memset(lp, 0, sizeof(*lp));
#define NAME(s) (snprintf(name, sizeof(name), "layer_%02d/%s", l, s), name)
        lp->attn_norm = add_tensor(m, base, NAME("attn_norm"), C, 0, 0);
        lp->wqkv = add_tensor(m, base, NAME("wq"), QK, C, 1);
        add_tensor(m, base, NAME("wk"), KW, C, 1);
        add_tensor(m, base, NAME("wv"), HDv, C, 1);
        if (is_diff2(m)) add_tensor(m, base, NAME("w_lambda"), m->H, C, 1);
        lp->wo = add_tensor(m, base, NAME("wo"), C, HDv, 1);
        if (m->cfg.attention == ATTN_DIFF) {
            lp->lambda = add_tensor(m, base, NAME("lambda_q1"), m->D, 0, 0);
            add_tensor(m, base, NAME("lambda_k1"), m->D, 0, 0);
            add_tensor(m, base, NAME("lambda_q2"), m->D, 0, 0);
            add_tensor(m, base, NAME("lambda_k2"), m->D, 0, 0);
        }
        if (m->cfg.head_norm) lp->head_norm = add_tensor(m, base, NAME("head_norm"), m->Dv, 0, 0);
        lp->ffn_norm = add_tensor(m, base, NAME("ffn_norm"), C, 0, 0);
        lp->w_gate_up = add_tensor(m, base, NAME("w_gate"), m->F, C, 1);
        add_tensor(m, base, NAME("w_up"), m->F, C, 1);
        lp->w_down = add_tensor(m, base, NAME("w_down"), C, m->F, 1);
#undef NAME
    }
    p->final_norm = add_tensor(m, base, "final_norm", C, 0, 0);
    p->lm_head = add_tensor(m, base, "lm_head", m->V, C, 1);
}

// Shapes from the config; no parameter memory yet
static void model_shape(Model* m, const Config* cfg, int vocab_size) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    m->V = vocab_size;
    m->L = cfg->n_layer;
    m->C = cfg->d_model;
    m->H = cfg->n_head;
    m->D = config_head_dim(cfg);
    m->M = config_maps(cfg);
    m->KH = is_diff2(m) ? m->H : m->M * m->H;
    m->Dv = is_diff2(m) ? m->D : m->M * m->D;
    m->F = config_ffn_hidden(cfg);
    AttnShape shape = {0, 0, m->H, m->D, m->M, is_diff2(m), 0};
    m->shape = shape;
    m->QKV = attention_qkv_width(&shape);
    m->loss = NAN;
    m->tensors = callocCheck(17 * (size_t)m->L + 3, sizeof(ParamTensor));
    m->params.layers = callocCheck(m->L, sizeof(LayerParams));
    m->grads.layers = callocCheck(m->L, sizeof(LayerParams));
    layout(m, NULL, &m->params);
}

size_t model_param_count(const Config* cfg, int vocab_size) {
    Model m;
    model_shape(&m, cfg, vocab_size);
    size_t n = m.n_params;
    model_free(&m);
    return n;
}

void model_build(Model* m, const Config* cfg, int vocab_size) {
    model_shape(m, cfg, vocab_size);
    m->lambda_init = mallocCheck(m->L * sizeof(float));
    m->lambda = callocCheck(m->L, sizeof(float));
    for (int l = 0; l < m->L; l++) m->lambda_init[l] = config_lambda_init(cfg, l);
    m->params_memory = callocCheck(m->n_params, sizeof(float));
    m->grads_memory = callocCheck(m->n_params, sizeof(float));
    layout(m, m->params_memory, &m->params);
    layout(m, m->grads_memory, &m->grads);
}

void model_init_params(Model* m, uint64_t seed) {
    uint64_t rng = hash64(seed);
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamTensor* t = &m->tensors[i];
        float* w = m->params_memory + t->offset;
        const char* leaf = strrchr(t->name, '/');
        leaf = leaf ? leaf + 1 : t->name;
        int is_gain = strstr(leaf, "norm") != NULL;
        float std = strncmp(leaf, "lambda_", 7) == 0 ? 0.1f : m->cfg.init_std;
        for (size_t j = 0; j < t->size; j++) w[j] = is_gain ? 1.0f : std * rng_normal(&rng);
    }
}

static void free_acts(Model* m) {
    free(m->acts_memory);
    free(m->acts);
    free(m->grad_scratch);
    free(m->targets);
    free(m->tokens);
    m->acts_memory = m->grad_scratch = NULL;
    m->acts = NULL;
    m->targets = m->tokens = NULL;
}

void model_free(Model* m) {
    free_acts(m);
    free(m->params_memory);
    free(m->grads_memory);
    free(m->params.layers);
    free(m->grads.layers);
    free(m->tensors);
    free(m->lambda_init);
    free(m->lambda);
    free(m->rope);
    free(m->cache);
    free(m->cache_rope);
}

// Sizes of the grad scratch: dres, dln (N, C); dgate_up (N, 2F); dh (N, F); dhn, dy (N, H*Dv); dqkv (N, QKV)
static size_t grad_scratch_floats(const Model* m, size_t N) {
    return N * (2 * (size_t)m->C + 3 * (size_t)m->F + 2 * (size_t)m->H * m->Dv + m->QKV);
}

static void alloc_acts(Model* m, int B, int T, int training) {
    free_acts(m);
    m->B = B;
    m->T = T;
    m->shape.B = B;
    m->shape.T = T;
    m->training = training;
    size_t N = (size_t)B * T, C = m->C, HDv = (size_t)m->H * m->Dv;
    int slots = training ? m->L : 1;
    int hn = m->cfg.head_norm;
    size_t per_layer = N * (4 * C + 3 + m->QKV + (size_t)m->H * m->M + HDv * (1 + hn) + (size_t)m->H * hn + 3 * (size_t)m->F);
    size_t total = slots * per_layer + N * (2 * C + 2 + (size_t)m->V);
    m->acts_memory = mallocCheck(total * sizeof(float));
    m->acts = callocCheck(slots, sizeof(LayerActs));
    float* p = m->acts_memory;
#define TAKE(n) (p += (n), p - (n))
    for (int s = 0; s < slots; s++) {
        LayerActs* a = &m->acts[s];
        a->x = TAKE(N * C);
        a->ln1 = TAKE(N * C);
        a->ln1_rstd = TAKE(N);
        a->qkv = TAKE(N * m->QKV);
        a->lse = TAKE(N * m->H * m->M);
        a->y = TAKE(N * HDv);
        a->hn = hn ? TAKE(N * HDv) : a->y;
        a->hn_rstd = TAKE(N * m->H * hn);
        a->mid = TAKE(N * C);
        a->ln2 = TAKE(N * C);
        a->ln2_rstd = TAKE(N);
        a->gate_up = TAKE(N * 2 * m->F);
        a->h = TAKE(N * m->F);
    }
    m->x_final = TAKE(N * C);
    m->lnf = TAKE(N * C);
    m->lnf_rstd = TAKE(N);
    m->logits = TAKE(N * m->V);
    m->row_loss = TAKE(N);
#undef TAKE
    m->grad_scratch = training ? mallocCheck(grad_scratch_floats(m, N) * sizeof(float)) : NULL;
    m->targets = mallocCheck(N * sizeof(int));
    m->tokens = mallocCheck(N * sizeof(int));
    free(m->rope);
    m->rope = mallocCheck((size_t)T * m->D * sizeof(float));
    rope_precompute(m->rope, T, m->D, m->cfg.rope_theta);
}

static float dot(const float* a, const float* b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init
static float layer_lambda(const Model* m, int l) {
    const float* lam = m->params.layers[l].lambda;
    int D = m->D;
    return expf(dot(lam, lam + D, D)) - expf(dot(lam + 2 * D, lam + 3 * D, D)) + m->lambda_init[l];
}

// DIFF scales the head norm's output by (1 - lambda_init); standard attention and DIFF V2 do not
static float head_norm_scale(const Model* m, int l) { return m->cfg.attention == ATTN_DIFF ? 1.0f - m->lambda_init[l] : 1.0f; }

// DIFF V2: lambda = sigmoid(x W_lambda) per token and head, in place on the qkv columns that
// held the projection
static void lambda_sigmoid(Model* m, float* qkv) {
    int lam = attention_lambda_offset(&m->shape), N = m->B * m->T;
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* x = qkv + (size_t)n * m->QKV + lam;
        for (int h = 0; h < m->H; h++) x[h] = 1.0f / (1.0f + expf(-x[h]));
    }
}

// dlogit = dlambda * sigma (1 - sigma), in place on dqkv's lambda columns
static void lambda_sigmoid_backward(Model* m, float* dqkv, const float* qkv) {
    int lam = attention_lambda_offset(&m->shape), N = m->B * m->T;
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* sig = qkv + (size_t)n * m->QKV + lam;
        float* d = dqkv + (size_t)n * m->QKV + lam;
        for (int h = 0; h < m->H; h++) d[h] *= sig[h] * (1.0f - sig[h]);
    }
}

// pos < 0: a plain forward over B x T rows with qkv in the layer's activations. pos >= 0:
// T new rows of one sequence at positions pos.., their qkv written into the cache after the
// pos cached rows, attending to all of them.
static void layer_forward(Model* m, int l, LayerActs* a, float* out, int pos) {
    const LayerParams* p = &m->params.layers[l];
    int N = m->B * m->T, C = m->C, HDv = m->H * m->Dv;
    float* cache = m->cache + (size_t)l * m->cache_T * m->QKV;  // (cache_T, QKV)
    float* qkv = pos < 0 ? a->qkv : cache + (size_t)pos * m->QKV;
    const float* rope = pos < 0 ? m->rope : m->cache_rope + (size_t)pos * m->D;
    rmsnorm_forward(a->ln1, a->ln1_rstd, a->x, p->attn_norm, 1.0f, N, C);
    matmul_forward(qkv, a->ln1, p->wqkv, N, C, m->QKV, 0);
    rope_apply(qkv, rope, N, m->T, m->M * m->H + m->KH, m->D, m->QKV, 0);
    if (is_diff2(m)) lambda_sigmoid(m, qkv);
    m->lambda[l] = m->cfg.attention == ATTN_DIFF ? layer_lambda(m, l) : 0.0f;
    if (pos < 0) {
        attention_forward(a->y, a->lse, qkv, m->lambda[l], &m->shape);
    } else {
        AttnShape shape = m->shape;
        shape.T = pos + m->T;
        shape.q0 = pos;
        attention_forward(a->y, NULL, cache, m->lambda[l], &shape);
    }
    if (m->cfg.head_norm) rmsnorm_forward(a->hn, a->hn_rstd, a->y, p->head_norm, head_norm_scale(m, l), N * m->H, m->Dv);
    memcpy(a->mid, a->x, (size_t)N * C * sizeof(float));
    matmul_forward(a->mid, a->hn, p->wo, N, HDv, C, 1);
    rmsnorm_forward(a->ln2, a->ln2_rstd, a->mid, p->ffn_norm, 1.0f, N, C);
    matmul_forward(a->gate_up, a->ln2, p->w_gate_up, N, C, 2 * m->F, 0);
    swiglu_forward(a->h, a->gate_up, N, m->F);
    memcpy(out, a->mid, (size_t)N * C * sizeof(float));  // out may alias a->x at inference
    matmul_forward(out, a->h, p->w_down, N, m->F, C, 1);
}

// Embedding, layers and LM head over the allocated B x T rows; pos as in layer_forward
static void forward_rows(Model* m, const int* tokens, int pos) {
    int N = m->B * m->T, C = m->C;
    for (int n = 0; n < N; n++) {
        if (tokens[n] < 0 || tokens[n] >= m->V) die("token id %d at position %d is outside the vocabulary (%d)", tokens[n], n, m->V);
    }
    memcpy(m->tokens, tokens, (size_t)N * sizeof(int));
    embedding_forward(m->acts[0].x, tokens, m->params.tok_embedding, N, C);
    for (int l = 0; l < m->L; l++) {
        LayerActs* a = &m->acts[m->training ? l : 0];
        float* out = l + 1 == m->L ? m->x_final : m->training ? m->acts[l + 1].x : a->x;
        layer_forward(m, l, a, out, pos);
    }
    rmsnorm_forward(m->lnf, m->lnf_rstd, m->x_final, m->params.final_norm, 1.0f, N, C);
    matmul_forward(m->logits, m->lnf, m->params.lm_head, N, C, m->V, 0);
}

void model_forward(Model* m, const int* tokens, const int* targets, int B, int T, int training) {
    if (!m->acts || m->B != B || m->T != T || m->training != training) alloc_acts(m, B, T, training);
    forward_rows(m, tokens, -1);
    int N = B * T;
    m->loss = NAN;
    m->have_targets = targets != NULL;
    if (targets) {
        memcpy(m->targets, targets, (size_t)N * sizeof(int));
        m->loss = crossentropy_forward(m->logits, m->row_loss, targets, N, m->V) / N;
    }
}

void model_cache_init(Model* m, int max_T) {
    free(m->cache);
    free(m->cache_rope);
    m->cache_T = max_T;
    m->cache = mallocCheck((size_t)m->L * max_T * m->QKV * sizeof(float));
    m->cache_rope = mallocCheck((size_t)max_T * m->D * sizeof(float));
    rope_precompute(m->cache_rope, max_T, m->D, m->cfg.rope_theta);
}

void model_forward_cached(Model* m, const int* tokens, int n, int pos) {
    if (!m->cache) die("model_forward_cached: call model_cache_init first");
    if (pos < 0 || n < 1 || pos + n > m->cache_T) die("positions %d..%d do not fit the cache of %d", pos, pos + n - 1, m->cache_T);
    if (!m->acts || m->B != 1 || m->T != n || m->training) alloc_acts(m, 1, n, 0);
    forward_rows(m, tokens, pos);
    m->loss = NAN;
    m->have_targets = 0;
}

static void layer_backward(Model* m, int l, float* dres) {
    const LayerParams* p = &m->params.layers[l];
    LayerParams* g = &m->grads.layers[l];
    const LayerActs* a = &m->acts[l];
    size_t N = (size_t)m->B * m->T, C = m->C, HDv = (size_t)m->H * m->Dv;
    float* dln = dres + N * C;         // (N, C)
    float* dgate_up = dln + N * C;     // (N, 2F)
    float* dh = dgate_up + N * 2 * m->F;  // (N, F)
    float* dhn = dh + N * m->F;        // (N, H*Dv)
    float* dy = dhn + N * HDv;         // (N, H*Dv)
    float* dqkv = dy + N * HDv;        // (N, QKV)

    matmul_backward(dh, g->w_down, dres, a->h, p->w_down, N, m->F, C);
    swiglu_backward(dgate_up, dh, a->gate_up, N, m->F);
    matmul_backward(dln, g->w_gate_up, dgate_up, a->ln2, p->w_gate_up, N, C, 2 * m->F);
    rmsnorm_backward(dres, g->ffn_norm, dln, a->mid, p->ffn_norm, a->ln2_rstd, 1.0f, N, C);
    matmul_backward(dhn, g->wo, dres, a->hn, p->wo, N, HDv, C);
    if (m->cfg.head_norm) {
        memset(dy, 0, N * HDv * sizeof(float));
        rmsnorm_backward(dy, g->head_norm, dhn, a->y, p->head_norm, a->hn_rstd, head_norm_scale(m, l), N * m->H, m->Dv);
    } else {
        dy = dhn;
    }
    float dlambda = attention_backward(dqkv, dy, a->qkv, a->lse, m->lambda[l], &m->shape);
    if (is_diff2(m)) lambda_sigmoid_backward(m, dqkv, a->qkv);
    if (m->cfg.attention == ATTN_DIFF) {
        int D = m->D;
        const float* lam = p->lambda;  // q1, k1, q2, k2
        float e1 = expf(dot(lam, lam + D, D)), e2 = expf(dot(lam + 2 * D, lam + 3 * D, D));
        for (int i = 0; i < D; i++) {
            g->lambda[i] += dlambda * e1 * lam[D + i];
            g->lambda[D + i] += dlambda * e1 * lam[i];
            g->lambda[2 * D + i] -= dlambda * e2 * lam[3 * D + i];
            g->lambda[3 * D + i] -= dlambda * e2 * lam[2 * D + i];
        }
    }
    rope_apply(dqkv, m->rope, N, m->T, m->M * m->H + m->KH, m->D, m->QKV, 1);
    matmul_backward(dln, g->wqkv, dqkv, a->ln1, p->wqkv, N, C, m->QKV);
    rmsnorm_backward(dres, g->attn_norm, dln, a->x, p->attn_norm, a->ln1_rstd, 1.0f, N, C);
}

void model_backward(Model* m, float dloss_scale) {
    if (!m->training || !m->have_targets) die("model_backward needs a training forward pass with targets first");
    size_t N = (size_t)m->B * m->T, C = m->C;
    float* dres = m->grad_scratch;  // (N, C) gradient of the residual stream
    float* dln = dres + N * C;
    crossentropy_backward(m->logits, m->targets, dloss_scale / (float)N, N, m->V);
    matmul_backward(dln, m->grads.lm_head, m->logits, m->lnf, m->params.lm_head, N, C, m->V);
    memset(dres, 0, N * C * sizeof(float));
    rmsnorm_backward(dres, m->grads.final_norm, dln, m->x_final, m->params.final_norm, m->lnf_rstd, 1.0f, N, C);
    for (int l = m->L - 1; l >= 0; l--) layer_backward(m, l, dres);
    embedding_backward(m->grads.tok_embedding, dres, m->tokens, N, C);
}

void model_zero_grad(Model* m) { memset(m->grads_memory, 0, m->n_params * sizeof(float)); }

size_t model_matmul_params(const Model* m) {
    size_t per_layer = (size_t)m->QKV * m->C + (size_t)m->C * m->H * m->Dv + 3 * (size_t)m->F * m->C;
    return m->L * per_layer + (size_t)m->V * m->C;
}

double model_flops_per_token(const Model* m, int T) {
    // causal attention: a query at position t meets t+1 keys, (T+1)/2 on average, once for
    // the scores (width M*H*D) and once for the product with V (width H*Dv); x2 multiply-add,
    // x3 forward plus backward
    double attention = 6.0 * m->L * ((double)m->M * m->H * m->D + (double)m->H * m->Dv) * (T + 1) / 2.0;
    return 6.0 * (double)model_matmul_params(m) + attention;
}
