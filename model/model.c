#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/util.h"

// Tensors of one layer at most: Shared DIFF's (norms 3, projections 7 and wo, lambda 4,
// feed-forward 3)
#define MAX_LAYER_TENSORS 18

// Appends one tensor to the layout; returns its place in base (NULL while only counting)
static float* add_tensor(Model* m, float* base, const char* name, int d0, int d1, ParamInit init) {
    if (m->n_tensors == MAX_LAYER_TENSORS * m->L + 3) die("model layout: more than %d tensors per layer", MAX_LAYER_TENSORS);
    ParamTensor* t = &m->tensors[m->n_tensors++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->size = (size_t)d0 * (d1 ? d1 : 1);
    t->offset = m->n_params;
    t->init = init;
    m->n_params += t->size;
    return base ? base + t->offset : NULL;
}

// The one place that fixes the order of the parameter block. Run with base = NULL to count,
// then once per block (parameters, gradients) to point p into it.
static void layout(Model* m, float* base, Params* p) {
    int L = m->L, C = m->C, HDv = m->H * m->Dv, QK = attention_query_heads(&m->shape) * m->D, KW = m->KH * m->D;
    int VW = attention_value_heads(&m->shape) * m->Dv;  // the values' columns; HDv the heads' outputs'
    m->n_tensors = 0;
    m->n_params = 0;
    p->tok_embedding = add_tensor(m, base, "tok_embedding", m->V, C, INIT_MATRIX);
    char name[64];
    for (int l = 0; l < L; l++) {
        LayerParams* lp = &p->layers[l];
        memset(lp, 0, sizeof(*lp));
#define NAME(s) (snprintf(name, sizeof(name), "layer_%02d/%s", l, s), name)
        lp->attn_norm = add_tensor(m, base, NAME("attn_norm"), C, 0, INIT_GAIN);
        if (m->R) {
            int HD = m->H * m->D;
            lp->wqk_shared = add_tensor(m, base, NAME("wq_shared"), HD, C, INIT_MATRIX);
            add_tensor(m, base, NAME("wk_shared"), HD, C, INIT_MATRIX);
            add_tensor(m, base, NAME("wv"), HDv, C, INIT_MATRIX);
            lp->update_out = add_tensor(m, base, NAME("wq_update_out"), m->M * HD, m->R, INIT_MATRIX);
            add_tensor(m, base, NAME("wk_update_out"), m->M * HD, m->R, INIT_MATRIX);
            lp->update_in = add_tensor(m, base, NAME("wq_update_in"), m->M * C, m->R, INIT_MATRIX);
            add_tensor(m, base, NAME("wk_update_in"), m->M * C, m->R, INIT_MATRIX);
        } else {
            lp->wqkv = add_tensor(m, base, NAME("wq"), QK, C, INIT_MATRIX);
            add_tensor(m, base, NAME("wk"), KW, C, INIT_MATRIX);
            add_tensor(m, base, NAME("wv"), VW, C, INIT_MATRIX);
        }
        if (m->variant->lambda == LAMBDA_PER_TOKEN) add_tensor(m, base, NAME("w_lambda"), m->H, C, INIT_MATRIX);
        lp->wo = add_tensor(m, base, NAME("wo"), C, HDv, INIT_MATRIX);
        if (m->variant->lambda == LAMBDA_PER_LAYER) {
            lp->lambda = add_tensor(m, base, NAME("lambda_q1"), m->D, 0, INIT_LAMBDA);
            add_tensor(m, base, NAME("lambda_k1"), m->D, 0, INIT_LAMBDA);
            add_tensor(m, base, NAME("lambda_q2"), m->D, 0, INIT_LAMBDA);
            add_tensor(m, base, NAME("lambda_k2"), m->D, 0, INIT_LAMBDA);
        }
        if (m->head_norm) lp->head_norm = add_tensor(m, base, NAME("head_norm"), m->Dv, 0, INIT_GAIN);
        lp->ffn_norm = add_tensor(m, base, NAME("ffn_norm"), C, 0, INIT_GAIN);
        lp->w_gate_up = add_tensor(m, base, NAME("w_gate"), m->F, C, INIT_MATRIX);
        add_tensor(m, base, NAME("w_up"), m->F, C, INIT_MATRIX);
        lp->w_down = add_tensor(m, base, NAME("w_down"), C, m->F, INIT_MATRIX);
#undef NAME
    }
    p->final_norm = add_tensor(m, base, "final_norm", C, 0, INIT_GAIN);
    p->lm_head = add_tensor(m, base, "lm_head", m->V, C, INIT_MATRIX);
}

// Shapes from the config; no parameter memory yet
static void model_shape(Model* m, const ModelConfig* cfg, int vocab_size) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    m->variant = config_variant(cfg);
    m->V = vocab_size;
    m->L = cfg->n_layer;
    m->C = cfg->d_model;
    m->D = config_head_dim(cfg);
    m->head_norm = config_head_norm(cfg);
    m->shape = attention_shape(m->variant, cfg->n_head, m->D, cfg->noise_group);
    m->H = m->shape.H;
    m->M = m->shape.M;
    m->KH = attention_key_heads(&m->shape);
    m->Dv = attention_value_width(&m->shape);
    m->F = config_ffn_hidden(cfg);
    m->QKV = attention_qkv_width(&m->shape);
    m->R = cfg->update_rank;
    m->loss = NAN;
    m->tensors = callocCheck(MAX_LAYER_TENSORS * (size_t)m->L + 3, sizeof(ParamTensor));
    m->params.layers = callocCheck(m->L, sizeof(LayerParams));
    m->grads.layers = callocCheck(m->L, sizeof(LayerParams));
    layout(m, NULL, &m->params);
}

size_t model_param_count(const ModelConfig* cfg, int vocab_size) {
    Model m;
    model_shape(&m, cfg, vocab_size);
    size_t n = m.n_params;
    model_free(&m);
    return n;
}

// Dies unless the backend runs this model's attention at B sequences of T tokens: before
// anything of that size is allocated
static void require_support(const Model* m, int B, int T) {
    AttnShape s = m->shape;
    s.B = B;
    s.T = T;
    s.q0 = 0;
    const char* why;
    if (!m->be->supports(m->be, &s, HOOKED_NONE, &why)) die("device '%s' cannot run this model (batch %d x context %d): %s", m->be->device, B, T, why);
}

void model_build(Model* m, const ModelConfig* cfg, const Backend* be, int vocab_size, int batch_size) {
    model_shape(m, cfg, vocab_size);
    m->be = be;
    m->layer_now = -1;
    require_support(m, batch_size, cfg->seq_len);
    m->lambda_init = mallocCheck(m->L * sizeof(float));
    for (int l = 0; l < m->L; l++) m->lambda_init[l] = config_lambda_init(cfg, l);
    m->lambda = m->be->alloc(m->L * sizeof(float));
    m->dlambda = m->be->alloc(sizeof(float));
    m->dlambda_integral = m->shape.integral ? m->be->alloc(sizeof(float)) : NULL;
    m->params_memory = m->be->alloc(m->n_params * sizeof(float));
    m->grads_memory = m->be->alloc(m->n_params * sizeof(float));
    layout(m, m->params_memory, &m->params);
    layout(m, m->grads_memory, &m->grads);
    if (m->R) {
        size_t per_layer = (size_t)m->QKV * m->C;
        m->composed = m->be->alloc(m->L * per_layer * sizeof(float));
        m->dwqkv = m->be->alloc(per_layer * sizeof(float));
        m->dupdate_out = m->be->alloc((size_t)m->H * m->D * m->R * sizeof(float));
        for (int l = 0; l < m->L; l++) {
            m->params.layers[l].wqkv = m->composed + l * per_layer;
            m->grads.layers[l].wqkv = m->dwqkv;
        }
    }
    m->weights_stale = WEIGHTS_ALL;
}

void model_params_changed(Model* m, int twins_current) {
    // a change the twins missed earlier is still missed
    m->weights_stale = twins_current && m->weights_stale != WEIGHTS_ALL ? WEIGHTS_COMPOSE : WEIGHTS_ALL;
}

// Shared DIFF: every layer's wqkv, whose block b = j M + m (j = 0 queries, 1 keys; map m) is
// shared matrix j plus update_out[b] . update_in[b]^T, then wv. Made again only after the
// parameters changed: a decoding step would otherwise pay for it at every token.
static void compose_wqkv(Model* m) {
    const Backend* be = m->be;
    size_t HD = (size_t)m->H * m->D, C = m->C, R = m->R;
    for (int l = 0; l < m->L; l++) {
        const LayerParams* p = &m->params.layers[l];
        for (int b = 0; b < 2 * m->M; b++) {
            be->copy(p->wqkv + b * HD * C, p->wqk_shared + (b / m->M) * HD * C, HD * C * sizeof(float));
            be->matmul_forward(be, p->wqkv + b * HD * C, p->update_out + b * HD * R, p->update_in + b * C * R, (int)HD, (int)R, (int)C, 1);
        }
        be->copy(p->wqkv + 2 * m->M * HD * C, p->wqk_shared + 2 * HD * C, (size_t)m->H * m->Dv * C * sizeof(float));
    }
}

// After the parameters changed: the backend's copies of the weights (bf16 products; not where
// the optimizer wrote them) and Shared DIFF's composed wqkv, made again once, not at every
// forward pass of a decoding loop
static void weights_ready(Model* m) {
    if (m->weights_stale == WEIGHTS_ALL) m->be->weights_changed(m->be, m->params_memory, m->n_params);
    if (m->R) {
        compose_wqkv(m);
        m->be->weights_changed(m->be, m->composed, (size_t)m->L * m->QKV * m->C);
    }
    m->weights_stale = WEIGHTS_READY;
}

// Shared DIFF: the gradient of layer l's composed wqkv (m->dwqkv) added to its parameters'
static void split_wqkv_grad(Model* m, int l) {
    const Backend* be = m->be;
    const LayerParams* p = &m->params.layers[l];
    LayerParams* g = &m->grads.layers[l];
    size_t HD = (size_t)m->H * m->D, C = m->C, R = m->R;
    for (int b = 0; b < 2 * m->M; b++) {
        const float* dblock = m->dwqkv + b * HD * C;  // (H*D, C)
        be->add(g->wqk_shared + (b / m->M) * HD * C, dblock, HD * C);
        be->matmul_backward(be, m->dupdate_out, g->update_in + b * C * R, dblock, p->update_out + b * HD * R, p->update_in + b * C * R,
                            (int)HD, (int)R, (int)C);
        be->add(g->update_out + b * HD * R, m->dupdate_out, HD * R);
    }
    be->add(g->wqk_shared + 2 * HD * C, m->dwqkv + 2 * m->M * HD * C, (size_t)m->H * m->Dv * C);
}

void model_init_params(Model* m, uint64_t seed) {
    float* host = mallocCheck(m->n_params * sizeof(float));
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamTensor* t = &m->tensors[i];
        float* w = host + t->offset;
        uint64_t rng = hash64(fnv1a(hash64(seed), t->name, strlen(t->name)));
        float std = t->init == INIT_LAMBDA ? 0.1f : m->cfg.init_std;
        for (size_t j = 0; j < t->size; j++) w[j] = t->init == INIT_GAIN ? 1.0f : std * rng_normal(&rng);
    }
    model_set_params(m, host);
    free(host);
}

static void free_acts(Model* m) {
    const Backend* be = m->be;
    free(m->acts);
    m->acts = NULL;
    free(m->hook_staging);
    m->hook_staging = NULL;
    if (!be) return;  // a shape only (model_param_count): nothing allocated
    if (m->acts_memory) be->activations_changed(be, m->acts_memory, 0);
    if (m->grad_scratch) be->activations_changed(be, m->grad_scratch, 0);
    be->release(m->acts_memory);
    be->release(m->grad_scratch);
    be->release(m->targets);
    be->release(m->tokens);
    be->release(m->rope);
    m->acts_memory = m->grad_scratch = m->rope = NULL;
    m->targets = m->tokens = NULL;
}

void model_free(Model* m) {
    const Backend* be = m->be;
    free_acts(m);
    if (be) {
        if (m->params_memory) be->weights_changed(be, m->params_memory, 0);
        if (m->composed) be->weights_changed(be, m->composed, 0);
        be->release(m->params_memory);
        be->release(m->grads_memory);
        be->release(m->lambda);
        be->release(m->dlambda);
        be->release(m->dlambda_integral);
        be->release(m->cache_sums);
        be->release(m->cache);
        be->release(m->cache_rope);
        be->release(m->maps_scratch);
        be->release(m->composed);
        be->release(m->dwqkv);
        be->release(m->dupdate_out);
    }
    backend_close(m->host_be);
    m->host_be = NULL;
    free(m->params.layers);
    free(m->grads.layers);
    free(m->tensors);
    free(m->lambda_init);
}

// cos_sin (T, D/2, 2) of RoPE's angles t * theta^(-2j/D), computed on the host
static float* rope_table(const Model* m, int T) {
    int D = m->D;
    float* host = mallocCheck((size_t)T * D * sizeof(float));
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < D / 2; j++) {
            double angle = t * pow(m->cfg.rope_theta, -2.0 * j / D);
            host[((size_t)t * (D / 2) + j) * 2 + 0] = (float)cos(angle);
            host[((size_t)t * (D / 2) + j) * 2 + 1] = (float)sin(angle);
        }
    }
    float* table = m->be->alloc((size_t)T * D * sizeof(float));
    m->be->upload(table, host, (size_t)T * D * sizeof(float));
    free(host);
    return table;
}

// The backward's buffers for one layer, reused by every layer
typedef struct {
    float* dres;      // (N, C) gradient of the residual stream, carried down the layers
    float* dln;       // (N, C)
    float* dgate_up;  // (N, 2F)
    float* dh;        // (N, F)
    float* dhn;       // (N, H*Dv)
    float* dy;        // (N, H*Dv)
    float* dqkv;      // (N, QKV)
    float* dy0;       // (N, H*Dv) DINT's; NULL for the other variants
} GradScratch;

// The one place that lays out the grad scratch of N rows from base, as place_acts lays out the
// activations; with base NULL it only counts. Returns the floats taken.
static size_t place_grad_scratch(const Model* m, float* base, size_t N, GradScratch* g) {
    size_t used = 0, HDv = (size_t)m->H * m->Dv;
#define TAKE(n) (used += (n), base ? base + used - (n) : NULL)
    g->dres = TAKE(N * m->C);
    g->dln = TAKE(N * m->C);
    g->dgate_up = TAKE(N * 2 * m->F);
    g->dh = TAKE(N * m->F);
    g->dhn = TAKE(N * HDv);
    g->dy = TAKE(N * HDv);
    g->dqkv = TAKE(N * m->QKV);
    g->dy0 = m->shape.integral ? TAKE(N * HDv) : NULL;
#undef TAKE
    return used;
}

// The one place that lays out the activations of N rows: a LayerActs per slot, then the final
// norm, logits and row losses. With base NULL it only counts (into scratch structs); returns
// the floats taken.
static size_t place_acts(Model* m, float* base, size_t N, int slots) {
    size_t C = m->C, HDv = (size_t)m->H * m->Dv, used = 0;
    int hn = m->head_norm;
    LayerActs scratch;
    float *x_final, *lnf, *lnf_rstd, *logits, *row_stats, *row_loss;
#define TAKE(n) (used += (n), base ? base + used - (n) : NULL)
    for (int s = 0; s < slots; s++) {
        LayerActs* a = base ? &m->acts[s] : &scratch;
        a->x = TAKE(N * C);
        a->ln1 = TAKE(N * C);
        a->ln1_rstd = TAKE(N);
        a->qkv = TAKE(N * m->QKV);
        a->lse = TAKE(N * m->H * m->M);
        a->y = TAKE(N * HDv);
        a->o1 = m->shape.integral ? TAKE(N * HDv) : NULL;
        a->hn = hn ? TAKE(N * HDv) : a->y;
        a->hn_rstd = TAKE(N * m->H * hn);
        a->mid = TAKE(N * C);
        a->ln2 = TAKE(N * C);
        a->ln2_rstd = TAKE(N);
        a->gate_up = TAKE(N * 2 * m->F);
        a->h = TAKE(N * m->F);
    }
    x_final = TAKE(N * C);
    lnf = TAKE(N * C);
    lnf_rstd = TAKE(N);
    logits = TAKE(N * m->V);
    row_stats = TAKE(2 * N);
    row_loss = TAKE(N);
#undef TAKE
    if (base) {
        m->x_final = x_final;
        m->lnf = lnf;
        m->lnf_rstd = lnf_rstd;
        m->logits = logits;
        m->row_stats = row_stats;
        m->row_loss = row_loss;
    }
    return used;
}

double model_training_bytes(const ModelConfig* cfg, int vocab_size, int batch_size, int precision, double* activation_bytes) {
    Model m;
    model_shape(&m, cfg, vocab_size);
    size_t N = (size_t)batch_size * cfg->seq_len;
    GradScratch g;
    double activations = 4.0 * ((double)place_acts(&m, NULL, N, m.L) + (double)place_grad_scratch(&m, NULL, N, &g));
    double params = 4.0 * 4.0 * m.n_params;  // parameters, gradients, AdamW m and v
    if (precision == PRECISION_BF16) {
        // the weights' twins (Shared DIFF's composed wqkv too), the rounding of each weight
        // product's input a forward keeps for its backward (per layer ln1, hn, ln2, h; then
        // lnf), the logits' gradient's, dres's and dgate_up's
        params += 2.0 * ((double)m.n_params + (m.R ? (double)m.L * m.QKV * m.C : 0.0));
        activations += 2.0 * (double)N * ((double)m.L * (2.0 * m.C + (double)m.H * m.Dv + m.F) + 2.0 * m.C + m.V + 2.0 * m.F);
    }
    model_free(&m);
    if (activation_bytes) *activation_bytes = activations;
    return params + activations;
}

static void alloc_acts(Model* m, int B, int T, int training) {
    require_support(m, B, T);
    free_acts(m);
    m->B = B;
    m->T = T;
    m->shape.B = B;
    m->shape.T = T;
    m->training = training;
    size_t N = (size_t)B * T;
    int slots = training ? m->L : 1;
    m->acts = callocCheck(slots, sizeof(LayerActs));
    size_t n_acts = place_acts(m, NULL, N, slots);
    m->acts_memory = m->be->alloc(n_acts * sizeof(float));
    place_acts(m, m->acts_memory, N, slots);
    m->be->activations_changed(m->be, m->acts_memory, n_acts);
    if (training) {
        GradScratch g;
        m->grad_scratch = m->be->alloc(place_grad_scratch(m, NULL, N, &g) * sizeof(float));
        place_grad_scratch(m, m->grad_scratch, N, &g);
        // dres, dln, dgate_up: the RMSNorms' and SwiGLU's backward write the roundings of dres and
        // dgate_up there for the products that read them (bf16); the rest (the head norm's dy among
        // them, which no product reads) outside
        m->be->activations_changed(m->be, m->grad_scratch, (size_t)(g.dh - g.dres));
    }
    m->targets = m->be->alloc(N * sizeof(int));
    m->tokens = m->be->alloc(N * sizeof(int));
    m->rope = rope_table(m, T);
}

// DIFF scales the head norm's output by (1 - lambda_init); the other variants do not
static float head_norm_scale(const Model* m, int l) { return m->variant->head_norm_scaled ? 1.0f - m->lambda_init[l] : 1.0f; }

static HookSite hook_site(const Model* m, int l) {
    HookSite site = {m->hook, l};
    return site;
}

// The hook sees host memory (backend.h): the buffer itself on a host backend, else a copy
// that goes back once the hook may have written it
static void show_layer_output(Model* m, int l, float* out, int row0, int N) {
    size_t bytes = (size_t)N * m->C * sizeof(float);
    float* data = out;
    if (!m->be->host_memory) {
        if (!m->hook_staging) m->hook_staging = mallocCheck(bytes);  // freed with the activations
        data = m->hook_staging;
        m->be->download(data, out, bytes);
    }
    Activation act = {ACT_LAYER_OUTPUT, l, 0, 0, 0, row0, N, m->C, m->C, 0, data};
    m->hook->fn(m->hook->ctx, &act);
    if (data != out) m->be->upload(out, data, bytes);
}

// ---- attention with a hook its backend does not serve: placed on a CPU instance ----
// The backend answers through supports; the CPU's kernels then run on host copies of the
// operands, and the results go back. lambda (1) is the layer's where given.
static const Backend* hooked_host(Model* m, const AttnShape* s, int hooked) {
    const char* why;
    if (!m->hook || m->be->supports(m->be, s, hooked, &why)) return NULL;
    if (!m->host_be) {
        const char* refused;
        m->host_be = backend_open(0, PRECISION_FP32, &refused);  // BACKEND_DEVICES[0], the CPU: fp32, as its attention always is
        if (!m->host_be) die("attention with a hook: %s cannot run it (%s), and the CPU cannot either: %s", m->be->device, why, refused);
        fprintf(stderr, "attention with a hook at B=%d T=%d: on the CPU on host copies, as %s does not run it (%s)\n", s->B, s->T,
                m->be->name, why);
    }
    return m->host_be;
}

static float* host_copy(const Model* m, const float* buf, size_t n) {
    float* h = mallocCheck(n * sizeof(float) + 1);
    if (buf && n) m->be->download(h, buf, n * sizeof(float));
    return h;
}

static void attention_forward_placed(Model* m, float* y, float* o1, float* lse, const float* qkv, const float* lambda, const AttnShape* s,
                                     HookSite hook) {
    const Backend* host = hooked_host(m, s, lse ? HOOKED_TRAINING : HOOKED_FORWARD);
    if (!host) {
        m->be->attention_forward(m->be, y, o1, lse, qkv, lambda, s, hook);
        return;
    }
    size_t n_qkv = (size_t)s->B * s->T * attention_qkv_width(s), n_y = (size_t)s->B * (s->T - s->q0) * s->H * attention_value_width(s);
    size_t n_lse = (size_t)s->B * s->H * s->M * s->T;
    float *h_qkv = host_copy(m, qkv, n_qkv), *h_y = host_copy(m, NULL, n_y), *h_o1 = o1 ? host_copy(m, NULL, n_y) : NULL;
    float *h_lse = lse ? host_copy(m, NULL, n_lse) : NULL, h_lambda = 0.0f;
    if (lambda) m->be->download(&h_lambda, lambda, sizeof(float));
    host->attention_forward(host, h_y, h_o1, h_lse, h_qkv, lambda ? &h_lambda : NULL, s, hook);
    m->be->upload(y, h_y, n_y * sizeof(float));
    if (o1) m->be->upload(o1, h_o1, n_y * sizeof(float));
    if (lse) m->be->upload(lse, h_lse, n_lse * sizeof(float));
    free(h_qkv), free(h_y), free(h_o1), free(h_lse);
}

static void attention_backward_placed(Model* m, float* dqkv, float* dlambda, const float* dy, const float* dy0, const float* qkv,
                                      const float* lse, const float* lambda, const AttnShape* s, HookSite hook) {
    const Backend* host = hooked_host(m, s, HOOKED_TRAINING);
    if (!host) {
        m->be->attention_backward(m->be, dqkv, dlambda, dy, dy0, qkv, lse, lambda, s, hook);
        return;
    }
    size_t n_qkv = (size_t)s->B * s->T * attention_qkv_width(s), n_y = (size_t)s->B * s->T * s->H * attention_value_width(s);
    size_t n_lse = (size_t)s->B * s->H * s->M * s->T;
    float *h_qkv = host_copy(m, qkv, n_qkv), *h_lse = host_copy(m, lse, n_lse), *h_dy = host_copy(m, dy, n_y);
    float *h_dy0 = dy0 ? host_copy(m, dy0, n_y) : NULL, *h_dqkv = host_copy(m, NULL, n_qkv), h_lambda = 0.0f, h_dlambda = 0.0f;
    if (lambda) m->be->download(&h_lambda, lambda, sizeof(float));
    host->attention_backward(host, h_dqkv, dlambda ? &h_dlambda : NULL, h_dy, h_dy0, h_qkv, h_lse, lambda ? &h_lambda : NULL, s, hook);
    m->be->upload(dqkv, h_dqkv, n_qkv * sizeof(float));
    if (dlambda) m->be->upload(dlambda, &h_dlambda, sizeof(float));
    free(h_qkv), free(h_lse), free(h_dy), free(h_dy0), free(h_dqkv);
}

// pos < 0: a plain forward over B x T rows with qkv in the layer's activations. pos >= 0:
// T new rows of one sequence at positions pos.., their qkv written into the cache after the
// pos cached rows, attending to all of them.
static void layer_forward(Model* m, int l, LayerActs* a, float* out, int pos) {
    const Backend* be = m->be;
    m->layer_now = l;
    const LayerParams* p = &m->params.layers[l];
    int N = m->B * m->T, C = m->C, HDv = m->H * m->Dv;
    float* cache = m->cache + (size_t)l * m->cache_T * m->QKV;  // (cache_T, QKV)
    float* qkv = pos < 0 ? a->qkv : cache + (size_t)pos * m->QKV;
    const float* rope = pos < 0 ? m->rope : m->cache_rope + (size_t)pos * m->D;
    be->rmsnorm_forward(be, a->ln1, a->ln1_rstd, a->x, p->attn_norm, 1.0f, N, C);
    be->matmul_forward(be, qkv, a->ln1, p->wqkv, N, C, m->QKV, 0);
    be->rope_apply(qkv, rope, N, m->T, attention_rope_heads(&m->shape), m->D, m->QKV, 0);
    if (m->variant->lambda == LAMBDA_PER_TOKEN) be->token_lambda_forward(qkv, N, &m->shape);
    if (m->variant->lambda == LAMBDA_PER_LAYER) be->lambda_forward(m->lambda + l, p->lambda, m->lambda_init[l], m->D);
    if (pos < 0) {
        attention_forward_placed(m, a->y, a->o1, a->lse, qkv, m->lambda + l, &m->shape, hook_site(m, l));
    } else {
        AttnShape shape = m->shape;
        shape.T = pos + m->T;
        shape.q0 = pos;
        attention_forward_placed(m, a->y, a->o1, NULL, cache, m->lambda + l, &shape, hook_site(m, l));
    }
    if (m->shape.integral) {
        // decoding continues the running sums of the positions before pos, kept per position
        // so that a later call may start again from any of them
        float* sums = pos < 0 ? NULL : m->cache_sums + (size_t)l * m->cache_T * HDv;
        be->integral_forward(a->y, a->o1, pos > 0 ? sums + (size_t)(pos - 1) * HDv : NULL, m->lambda + l, m->B, m->T, m->H, m->Dv,
                             pos < 0 ? 0 : pos);
        if (sums) be->copy(sums + (size_t)pos * HDv, a->o1, (size_t)N * HDv * sizeof(float));
    }
    if (m->head_norm) be->rmsnorm_forward(be, a->hn, a->hn_rstd, a->y, p->head_norm, head_norm_scale(m, l), N * m->H, m->Dv);
    be->copy(a->mid, a->x, (size_t)N * C * sizeof(float));
    be->matmul_forward(be, a->mid, a->hn, p->wo, N, HDv, C, 1);
    be->rmsnorm_forward(be, a->ln2, a->ln2_rstd, a->mid, p->ffn_norm, 1.0f, N, C);
    be->matmul_forward(be, a->gate_up, a->ln2, p->w_gate_up, N, C, 2 * m->F, 0);
    be->swiglu_forward(be, a->h, a->gate_up, N, m->F);
    be->copy(out, a->mid, (size_t)N * C * sizeof(float));  // out may alias a->x at inference
    be->matmul_forward(be, out, a->h, p->w_down, N, m->F, C, 1);
    if (m->hook) show_layer_output(m, l, out, pos < 0 ? 0 : pos, N);
}

// Embedding and layers over the allocated B x T rows, the final norm and LM head over rows
// first_logit..N-1; pos as in layer_forward
static void forward_rows(Model* m, const int* tokens, int pos, int first_logit) {
    const Backend* be = m->be;
    int N = m->B * m->T, C = m->C;
    for (int n = 0; n < N; n++) {
        if (tokens[n] < 0 || tokens[n] >= m->V) die("token id %d at position %d is outside the vocabulary (%d)", tokens[n], n, m->V);
    }
    if (m->weights_stale) weights_ready(m);
    be->upload(m->tokens, tokens, (size_t)N * sizeof(int));
    be->embedding_forward(m->acts[0].x, m->tokens, m->params.tok_embedding, N, C);
    for (int l = 0; l < m->L; l++) {
        LayerActs* a = &m->acts[m->training ? l : 0];
        float* out = l + 1 == m->L ? m->x_final : m->training ? m->acts[l + 1].x : a->x;
        layer_forward(m, l, a, out, pos);
    }
    m->layer_now = -1;
    size_t r0 = (size_t)first_logit;
    be->rmsnorm_forward(be, m->lnf + r0 * C, m->lnf_rstd + r0, m->x_final + r0 * C, m->params.final_norm, 1.0f, N - first_logit, C);
    be->matmul_forward(be, m->logits + r0 * m->V, m->lnf + r0 * C, m->params.lm_head, N - first_logit, C, m->V, 0);
    m->first_logit = first_logit;
}

void model_forward(Model* m, const int* tokens, const int* targets, int B, int T, int training) {
    if (!m->acts || m->B != B || m->T != T || m->training != training) alloc_acts(m, B, T, training);
    forward_rows(m, tokens, -1, 0);
    int N = B * T;
    m->loss = NAN;
    m->have_targets = targets != NULL;
    m->logits_are_gradients = 0;
    if (targets) {
        m->be->upload(m->targets, targets, (size_t)N * sizeof(int));
        m->loss = m->be->crossentropy_forward(m->logits, m->row_stats, m->row_loss, m->targets, N, m->V) / N;
    }
}

void model_cache_init(Model* m, int max_T) {
    m->be->release(m->cache);
    m->be->release(m->cache_rope);
    m->cache_T = max_T;
    m->cache = m->be->alloc((size_t)m->L * max_T * m->QKV * sizeof(float));
    m->cache_rope = rope_table(m, max_T);
    m->be->release(m->cache_sums);
    m->cache_sums = m->shape.integral ? m->be->alloc((size_t)m->L * max_T * m->H * m->Dv * sizeof(float)) : NULL;
}

int model_cache_size(const Model* m) { return m->cache ? m->cache_T : 0; }

void model_forward_cached(Model* m, const int* tokens, int n, int pos) {
    if (!m->cache) die("model_forward_cached: call model_cache_init first");
    if (pos < 0 || n < 1 || pos + n > m->cache_T) die("positions %d..%d do not fit the cache of %d", pos, pos + n - 1, m->cache_T);
    if (!m->acts || m->B != 1 || m->T != n || m->training) alloc_acts(m, 1, n, 0);
    // decoding reads the last row's logits only: the LM head over all rows was a fifth of a
    // 1,024-token prefill's time
    forward_rows(m, tokens, pos, n - 1);
    m->loss = NAN;
    m->have_targets = 0;
    m->logits_are_gradients = 0;
}

static void layer_backward(Model* m, int l, const GradScratch* d) {
    const Backend* be = m->be;
    m->layer_now = l;
    const LayerParams* p = &m->params.layers[l];
    LayerParams* g = &m->grads.layers[l];
    const LayerActs* a = &m->acts[l];
    size_t N = (size_t)m->B * m->T, C = m->C, HDv = (size_t)m->H * m->Dv;
    float *dres = d->dres, *dln = d->dln, *dgate_up = d->dgate_up, *dh = d->dh, *dhn = d->dhn, *dqkv = d->dqkv, *dy0 = d->dy0;
    float* dy = m->head_norm ? d->dy : dhn;  // without a head norm the output projection reads y itself

    be->matmul_backward(be, dh, g->w_down, dres, a->h, p->w_down, N, m->F, C);
    be->swiglu_backward(be, dgate_up, dh, a->gate_up, N, m->F);
    be->matmul_backward(be, dln, g->w_gate_up, dgate_up, a->ln2, p->w_gate_up, N, C, 2 * m->F);
    be->rmsnorm_backward(be, dres, g->ffn_norm, dln, a->mid, p->ffn_norm, a->ln2_rstd, 1.0f, N, C);
    be->matmul_backward(be, dhn, g->wo, dres, a->hn, p->wo, N, HDv, C);
    if (m->head_norm) {
        be->zero(dy, N * HDv * sizeof(float));
        be->rmsnorm_backward(be, dy, g->head_norm, dhn, a->y, p->head_norm, a->hn_rstd, head_norm_scale(m, l), N * m->H, m->Dv);
    }
    int per_layer = m->variant->lambda == LAMBDA_PER_LAYER;
    if (dy0) be->integral_backward(dy0, m->dlambda_integral, dy, a->o1, m->lambda + l, m->B, m->T, m->H, m->Dv);
    attention_backward_placed(m, dqkv, per_layer ? m->dlambda : NULL, dy, dy0, a->qkv, a->lse, m->lambda + l, &m->shape, hook_site(m, l));
    if (dy0) be->add(m->dlambda, m->dlambda_integral, 1);
    if (m->variant->lambda == LAMBDA_PER_TOKEN) be->token_lambda_backward(dqkv, a->qkv, N, &m->shape);
    if (per_layer) be->lambda_backward(g->lambda, m->dlambda, p->lambda, m->D);
    be->rope_apply(dqkv, m->rope, N, m->T, attention_rope_heads(&m->shape), m->D, m->QKV, 1);
    if (m->R) be->zero(g->wqkv, (size_t)m->QKV * C * sizeof(float));
    be->matmul_backward(be, dln, g->wqkv, dqkv, a->ln1, p->wqkv, N, C, m->QKV);
    if (m->R) split_wqkv_grad(m, l);
    be->rmsnorm_backward(be, dres, g->attn_norm, dln, a->x, p->attn_norm, a->ln1_rstd, 1.0f, N, C);
}

void model_backward(Model* m, float dloss_scale) {
    if (!m->training || !m->have_targets) die("model_backward needs a training forward pass with targets first");
    if (m->logits_are_gradients) die("model_backward: the last forward's logits went into a backward already; run a forward first");
    const Backend* be = m->be;
    size_t N = (size_t)m->B * m->T, C = m->C;
    GradScratch d;
    place_grad_scratch(m, m->grad_scratch, N, &d);
    float *dres = d.dres, *dln = d.dln;
    be->crossentropy_backward(be, m->logits, m->row_stats, m->targets, dloss_scale / (float)N, N, m->V);
    m->logits_are_gradients = 1;
    be->matmul_backward(be, dln, m->grads.lm_head, m->logits, m->lnf, m->params.lm_head, N, C, m->V);
    be->zero(dres, N * C * sizeof(float));
    be->rmsnorm_backward(be, dres, m->grads.final_norm, dln, m->x_final, m->params.final_norm, m->lnf_rstd, 1.0f, N, C);
    for (int l = m->L - 1; l >= 0; l--) layer_backward(m, l, &d);
    m->layer_now = -1;
    be->embedding_backward(m->grads.tok_embedding, dres, m->tokens, N, C);
}

void model_zero_grad(Model* m) { m->be->zero(m->grads_memory, m->n_params * sizeof(float)); }

void model_sum_grads_across_ranks(Model* m) { m->be->sum_across_ranks(m->grads_memory, m->n_params); }

void model_set_hook(Model* m, const ActivationHook* hook) { m->hook = hook; }

void model_set_logit_quant(Model* m, LogitQuant quant) {
    if (quant.bits < 0 || quant.bits == 1 || quant.bits > LOGIT_QUANT_UNQUANTIZED) {
        die("logit quantization to %d bits: expected 2..%d, or 0 for none", quant.bits, LOGIT_QUANT_UNQUANTIZED);
    }
    if (quant.scope != QUANT_PER_TENSOR && quant.scope != QUANT_PER_ROW) die("logit quantization: unknown scope %d", (int)quant.scope);
    m->shape.quant = quant;
}

double model_loss(const Model* m) { return m->loss; }

void model_logits(const Model* m, int n, float* logits) {
    if (!m->acts || m->logits_are_gradients) die("model_logits: a backward pass has turned the last forward's logits into their gradient");
    if (n < 0 || n >= m->B * m->T) die("model_logits: row %d of a forward of %d rows", n, m->B * m->T);
    if (n < m->first_logit) die("model_logits: row %d of a cached forward, which computes the logits of its last row (%d) only", n, m->first_logit);
    m->be->download(logits, m->logits + (size_t)n * m->V, (size_t)m->V * sizeof(float));
}

void model_row_losses(const Model* m, float* row_loss) {
    if (!m->acts || !m->have_targets) die("model_row_losses: the last forward had no targets");
    m->be->download(row_loss, m->row_loss, (size_t)m->B * m->T * sizeof(float));
}

float model_lambda(const Model* m, int l, int h, int pos) {
    float lambda = 0.0f;
    if (m->variant->lambda == LAMBDA_PER_LAYER) m->be->download(&lambda, m->lambda + l, sizeof(float));
    if (m->variant->lambda == LAMBDA_PER_TOKEN) {
        if (!m->cache || pos < 0 || pos >= m->cache_T) die("model_lambda: position %d is not in the decoding cache", pos);
        size_t at = ((size_t)l * m->cache_T + pos) * m->QKV + attention_lambda_offset(&m->shape) + h;
        m->be->download(&lambda, m->cache + at, sizeof(float));
    }
    return lambda;
}

int model_lambda_stats(const Model* m, double* mean, double* std) {
    int L = m->L, H = m->H;
    if (m->variant->lambda == LAMBDA_PER_LAYER) {
        float* lambda = mallocCheck(L * sizeof(float));
        m->be->download(lambda, m->lambda, L * sizeof(float));
        for (int i = 0; i < L * H; i++) {
            mean[i] = lambda[i / H];
            std[i] = 0;
        }
        free(lambda);
        return 1;
    }
    if (m->variant->lambda != LAMBDA_PER_TOKEN) return 0;
    if (!m->acts || !m->training) die("model_lambda_stats: per-token lambda needs a training forward first");
    size_t N = (size_t)m->B * m->T;
    float* qkv = mallocCheck(N * m->QKV * sizeof(float));  // (N, QKV), lambda (H) at attention_lambda_offset
    size_t at = attention_lambda_offset(&m->shape);
    for (int l = 0; l < L; l++) {
        m->be->download(qkv, m->acts[l].qkv, N * m->QKV * sizeof(float));
        for (int h = 0; h < H; h++) {
            double sum = 0, sq = 0;
            for (size_t n = 0; n < N; n++) sum += qkv[n * m->QKV + at + h];
            double mu = sum / N;
            for (size_t n = 0; n < N; n++) sq += (qkv[n * m->QKV + at + h] - mu) * (qkv[n * m->QKV + at + h] - mu);
            mean[l * H + h] = mu;
            std[l * H + h] = sqrt(sq / N);
        }
    }
    free(qkv);
    return 1;
}

// DINT: the maps of rows first_row..T-1 from those of every row (M, T, T), map 1 less the
// integral term, G_i = the mean of map 0's rows 0..i
static void fold_integral(float* A, const float* all, int first_row, int T) {
    int rows = T - first_row;
    double* column_sum = callocCheck(T, sizeof(double));
    for (int i = 0; i < T; i++) {
        const float* p0 = all + (size_t)i * T;
        const float* p1 = all + ((size_t)T + i) * T;
        for (int k = 0; k <= i; k++) column_sum[k] += p0[k];
        if (i < first_row) continue;
        float* a0 = A + (size_t)(i - first_row) * T;
        float* a1 = A + ((size_t)rows + i - first_row) * T;
        memcpy(a0, p0, T * sizeof(float));
        for (int k = 0; k < T; k++) a1[k] = k <= i ? p1[k] - (float)(column_sum[k] / (i + 1)) : 0.0f;
    }
    free(column_sum);
}

void model_attention_maps(Model* m, int l, int h, int first_row, int T, float* A, float* lambda) {
    if (!m->cache || T > m->cache_T || first_row < 0 || first_row >= T) die("model_attention_maps: rows %d..%d of a cache of %d", first_row, T - 1, m->cache_T);
    int from = m->shape.integral ? 0 : first_row;  // DINT's integral term takes map 0's rows from 0
    AttnShape shape = m->shape;
    shape.B = 1;
    shape.T = T;
    shape.q0 = from;
    int rows = T - first_row;
    size_t bytes = (size_t)m->M * (T - from) * T * sizeof(float);
    if (bytes > m->maps_capacity) {
        m->be->release(m->maps_scratch);
        m->maps_scratch = m->be->alloc(bytes);
        m->maps_capacity = bytes;
    }
    m->be->attention_maps(m->be, m->maps_scratch, m->cache + (size_t)l * m->cache_T * m->QKV, &shape, h, hook_site(m, l));
    if (m->shape.integral) {
        float* all = mallocCheck(bytes);
        m->be->download(all, m->maps_scratch, bytes);
        fold_integral(A, all, first_row, T);
        free(all);
    } else {
        m->be->download(A, m->maps_scratch, bytes);
    }
    for (int r = 0; r < rows; r++) lambda[r] = model_lambda(m, l, h, first_row + r);
}

void model_get_params(const Model* m, float* params) { m->be->download(params, m->params_memory, m->n_params * sizeof(float)); }
void model_set_params(Model* m, const float* params) {
    m->be->upload(m->params_memory, params, m->n_params * sizeof(float));
    model_params_changed(m, 0);
}
void model_copy_params(Model* dst, const Model* src) {
    if (dst->n_params != src->n_params) die("model_copy_params: the models differ in layout");
    size_t bytes = dst->n_params * sizeof(float);
    if (dst->be == src->be) {
        dst->be->copy(dst->params_memory, src->params_memory, bytes);
        model_params_changed(dst, 0);
        return;
    }
    float* host = mallocCheck(bytes);  // across backends: through the host
    model_get_params(src, host);
    model_set_params(dst, host);
    free(host);
}

void model_get_grads(const Model* m, float* grads) { m->be->download(grads, m->grads_memory, m->n_params * sizeof(float)); }
void model_set_grads(Model* m, const float* grads) { m->be->upload(m->grads_memory, grads, m->n_params * sizeof(float)); }

// Shared DIFF's wqkv counts as the one matrix the projection multiplies by; composing it is a
// per-step cost, not a per-token one, and is left out
size_t model_matmul_params(const Model* m) {
    size_t per_layer = (size_t)m->QKV * m->C + (size_t)m->C * m->H * m->Dv + 3 * (size_t)m->F * m->C;
    return m->L * per_layer + (size_t)m->V * m->C;
}

double model_flops_per_token(const Model* m, int T) {
    // causal attention: a query at position t meets t+1 keys, (T+1)/2 on average, once for
    // the scores of each query sub-head (width QH*D: M*H, or a noise map once for the heads
    // that share it) and once for the product with V (width H*Dv); x2 multiply-add, x3 forward
    // plus backward
    double attention = 6.0 * m->L * ((double)attention_query_heads(&m->shape) * m->D + (double)m->H * m->Dv) * (T + 1) / 2.0;
    return 6.0 * (double)model_matmul_params(m) + attention;
}
