// Finite-difference checks of every layer's backward pass (matmul, RMSNorm with its output scale,
// RoPE, SwiGLU, cross-entropy, attention for standard, DIFF, DIFF V2 and its halves pairing across
// query-block boundaries, dλ) and of every parameter tensor of the whole model for standard and
// DIFF with head norm on and off and λ_init scheduled or constant, DIFF V2 with and without head
// norm, and DIFF V2 with the halves pairing.
//
// Tolerance: fp32 central differences with step h = 1e-2 (layers) or 1e-3 (whole model, whose
// loss is a mean). The loss is summed in double, so the numeric gradient's rounding error is
// about 1e-7 |loss| / h and its truncation error about h^2 |f'''|; with losses of order 1-10 both
// stay below the atol = 1e-3 (layers) / 2e-4 (model) used with rtol = 1e-2. A sign or factor
// error in a backward pass misses these bounds by orders of magnitude; the worst observed is a
// third of them.
#include <string.h>

#include "../model/cpu/cpu.h"
#include "../model/model.h"
#include "../base/util.h"
#include "check.h"
#include "fixtures.h"

static uint64_t rng_state = 42;
static const Backend* be;  // the CPU backend: finite differences perturb its host memory
static const HookSite NO_HOOK = {NULL, 0};

// cos_sin (T, D/2, 2) of RoPE's angles t * theta^(-2j/D)
static void rope_table(float* cos_sin, int T, int D, float theta) {
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < D / 2; j++) {
            double angle = t * pow(theta, -2.0 * j / D);
            cos_sin[(t * (D / 2) + j) * 2] = (float)cos(angle);
            cos_sin[(t * (D / 2) + j) * 2 + 1] = (float)sin(angle);
        }
    }
}

static float* random_array(size_t n, float std) {
    float* a = mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = std * rng_normal(&rng_state);
    return a;
}

static double weighted_sum(const float* out, const float* R, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)out[i] * R[i];
    return s;
}

// ---- matmul ----
typedef struct { float *inp, *w, *out, *R; int N, IC, OC; } MatmulCase;
static double matmul_loss(void* p) {
    MatmulCase* c = p;
    be->matmul_forward(c->out, c->inp, c->w, c->N, c->IC, c->OC, 0);
    return weighted_sum(c->out, c->R, (size_t)c->N * c->OC);
}
static void test_matmul(void) {
    MatmulCase c = {random_array(5 * 7, 1), random_array(6 * 7, 1), random_array(5 * 6, 1), random_array(5 * 6, 1), 5, 7, 6};
    float* dinp = random_array(5 * 7, 1);  // overwritten by backward
    float* dw = calloc(6 * 7, sizeof(float));
    be->matmul_backward(dinp, dw, c.R, c.inp, c.w, 5, 7, 6);
    grad_check("matmul d_inp", matmul_loss, &c, c.inp, dinp, 35, 100, 1e-2, 1e-2, 1e-3);
    grad_check("matmul d_w", matmul_loss, &c, c.w, dw, 42, 100, 1e-2, 1e-2, 1e-3);
    // accumulate adds to what out held
    float* base = random_array(5 * 6, 1);
    memcpy(c.out, base, sizeof(float) * 30);
    be->matmul_forward(c.out, c.inp, c.w, 5, 7, 6, 1);
    double expect = base[7];
    for (int i = 0; i < 7; i++) expect += (double)c.inp[1 * 7 + i] * c.w[1 * 7 + i];
    CHECK(fabs(c.out[7] - expect) < 1e-5, "matmul accumulate: %g vs %g", c.out[7], expect);
    free(c.inp); free(c.w); free(c.out); free(c.R); free(dinp); free(dw); free(base);
}

// ---- rmsnorm ----
typedef struct { float *inp, *w, *out, *rstd, *R; float scale; int rows, W; } NormCase;
static double norm_loss(void* p) {
    NormCase* c = p;
    be->rmsnorm_forward(c->out, c->rstd, c->inp, c->w, c->scale, c->rows, c->W);
    return weighted_sum(c->out, c->R, (size_t)c->rows * c->W);
}
static void test_rmsnorm(void) {
    NormCase c = {random_array(6 * 8, 1), random_array(8, 1), random_array(48, 1), random_array(6, 1), random_array(48, 1), 0.7f, 6, 8};
    norm_loss(&c);
    float* dinp = calloc(48, sizeof(float));
    float* dw = calloc(8, sizeof(float));
    be->rmsnorm_backward(dinp, dw, c.R, c.inp, c.w, c.rstd, c.scale, 6, 8);
    grad_check("rmsnorm d_inp (out_scale 0.7)", norm_loss, &c, c.inp, dinp, 48, 100, 1e-2, 1e-2, 1e-3);
    grad_check("rmsnorm d_weight", norm_loss, &c, c.w, dw, 8, 100, 1e-2, 1e-2, 1e-3);
    // hand case: x = (3, 4), weight 1: rms = sqrt(12.5 + eps)
    float x[2] = {3, 4}, one[2] = {1, 1}, out[2], rstd;
    be->rmsnorm_forward(out, &rstd, x, one, 1.0f, 1, 2);
    CHECK(fabsf(out[0] - 3.0f / sqrtf(12.5f + RMSNORM_EPS)) < 1e-6f, "rmsnorm hand case: %g", out[0]);
    free(c.inp); free(c.w); free(c.out); free(c.rstd); free(c.R); free(dinp); free(dw);
}

// ---- rope ----
typedef struct { float *x, *work, *cs, *R; int rows, T, heads, D, stride; } RopeCase;
static double rope_loss(void* p) {
    RopeCase* c = p;
    memcpy(c->work, c->x, sizeof(float) * c->rows * c->stride);
    be->rope_apply(c->work, c->cs, c->rows, c->T, c->heads, c->D, c->stride, 0);
    return weighted_sum(c->work, c->R, (size_t)c->rows * c->stride);
}
static void test_rope(void) {
    int rows = 6, T = 3, heads = 2, D = 4, stride = 10;  // 2 columns past the heads stay untouched
    float cs[3 * 4];
    rope_table(cs, T, D, 10000.0f);
    RopeCase c = {random_array(60, 1), random_array(60, 1), cs, random_array(60, 1), rows, T, heads, D, stride};
    float* grad = mallocCheck(60 * sizeof(float));
    memcpy(grad, c.R, 60 * sizeof(float));
    be->rope_apply(grad, cs, rows, T, heads, D, stride, 1);
    grad_check("rope d_x (inverse rotation)", rope_loss, &c, c.x, grad, 60, 100, 1e-2, 1e-2, 1e-3);
    // hand case: position 1, pair j=1 of D=4 turns by angle 1 * 10000^(-1/2) = 0.01 rad
    float cs2[2 * 4];
    rope_table(cs2, 2, 4, 10000.0f);
    float row2[8] = {0, 0, 0, 0, 0, 0, 1, 0};
    be->rope_apply(row2, cs2, 2, 2, 1, 4, 4, 0);
    CHECK(fabsf(row2[6] - cosf(0.01f)) < 1e-6f && fabsf(row2[7] - sinf(0.01f)) < 1e-6f, "rope hand case: %g %g", row2[6], row2[7]);
    free(c.x); free(c.work); free(c.R); free(grad);
}

// ---- swiglu ----
typedef struct { float *gu, *h, *R; int N, F; } SwigluCase;
static double swiglu_loss(void* p) {
    SwigluCase* c = p;
    be->swiglu_forward(c->h, c->gu, c->N, c->F);
    return weighted_sum(c->h, c->R, (size_t)c->N * c->F);
}
static void test_swiglu(void) {
    SwigluCase c = {random_array(4 * 10, 2), random_array(20, 1), random_array(20, 1), 4, 5};
    float* dgu = mallocCheck(40 * sizeof(float));
    be->swiglu_backward(dgu, c.R, c.gu, 4, 5);
    grad_check("swiglu d_gate_up", swiglu_loss, &c, c.gu, dgu, 40, 100, 1e-2, 1e-2, 1e-3);
    free(c.gu); free(c.h); free(c.R); free(dgu);
}

// ---- cross-entropy ----
typedef struct { float *logits, *work, *row; int* targets; int N, V; } CeCase;
static double ce_loss(void* p) {
    CeCase* c = p;
    memcpy(c->work, c->logits, sizeof(float) * c->N * c->V);
    return be->crossentropy_forward(c->work, c->row, c->targets, c->N, c->V);
}
static void test_crossentropy(void) {
    int targets[3] = {0, 4, 2};
    CeCase c = {random_array(15, 2), random_array(15, 1), random_array(3, 1), targets, 3, 5};
    ce_loss(&c);
    be->crossentropy_backward(c.work, targets, 1.0f, 3, 5);
    float* grad = mallocCheck(15 * sizeof(float));
    memcpy(grad, c.work, 15 * sizeof(float));
    grad_check("crossentropy d_logits", ce_loss, &c, c.logits, grad, 15, 100, 1e-2, 1e-2, 1e-3);
    float uniform[4] = {0, 0, 0, 0}, row;
    int t = 1;
    CHECK(fabs(be->crossentropy_forward(uniform, &row, &t, 1, 4) - log(4.0)) < 1e-6, "uniform logits give log V");
    free(c.logits); free(c.work); free(c.row); free(grad);
}

// ---- attention ----
// o1: DINT's map-0 output, which its integral term turns into running sums
typedef struct { float *qkv, *y, *o1, *lse, *R; float lambda; AttnShape shape; size_t ny; } AttnCase;
static double attn_loss(void* p) {
    AttnCase* c = p;
    be->attention_forward(c->y, c->o1, c->lse, c->qkv, &c->lambda, &c->shape, NO_HOOK);
    if (c->o1) be->integral_forward(c->y, c->o1, NULL, &c->lambda, c->shape.B, c->shape.T, c->shape.H, attention_value_width(&c->shape), 0);
    return weighted_sum(c->y, c->R, c->ny);
}

// A variant over 2 sequences of 2 groups of heads of width 4 (attention_test_heads; DIFF V2's
// per-token lambda columns are part of qkv and so are checked with the rest of d_qkv; DINT's
// attention with its integral term, the two backward operations together)
static void test_attention(AttentionKind kind, int T) {
    const AttnVariant* variant = &ATTN_VARIANTS[kind];
    AttnShape shape = attention_shape(variant, attention_test_heads(variant, 2), 4, variant->test_switch);
    shape.B = 2;
    shape.T = T;
    int M = shape.M;
    int QKV = attention_qkv_width(&shape), Dv = attention_value_width(&shape), lam = attention_lambda_offset(&shape);
    size_t N = (size_t)shape.B * T, ny = N * shape.H * Dv;
    AttnCase c = {random_array(N * QKV, 1), random_array(ny, 1), shape.integral ? random_array(ny, 1) : NULL, random_array(N * shape.H * M, 1),
                  random_array(ny, 1), 0.6f, shape, ny};
    for (size_t n = 0; lam >= 0 && n < N; n++) {
        for (int h = 0; h < shape.H; h++) c.qkv[n * QKV + lam + h] = 0.2f + 0.6f * rng_uniform(&rng_state);
    }
    attn_loss(&c);
    float* dqkv = random_array(N * QKV, 1);  // must be overwritten entirely
    float dlambda, dlambda_integral = 0.0f;
    float* dy0 = shape.integral ? random_array(ny, 1) : NULL;  // must be overwritten entirely
    if (dy0) be->integral_backward(dy0, &dlambda_integral, c.R, c.o1, &c.lambda, shape.B, T, shape.H, Dv);
    be->attention_backward(dqkv, &dlambda, c.R, dy0, c.qkv, c.lse, &c.lambda, &shape, NO_HOOK);
    dlambda += dlambda_integral;
    char what[96];
    const char* name = ATTN_VARIANTS[kind].name;
    snprintf(what, sizeof(what), "attention %s T=%d d_qkv", name, T);
    grad_check(what, attn_loss, &c, c.qkv, dqkv, N * QKV, 400, 1e-2, 1e-2, 1e-3);
    if (M == 2 && lam < 0) {
        snprintf(what, sizeof(what), "attention %s T=%d d_lambda", name, T);
        grad_check(what, attn_loss, &c, &c.lambda, &dlambda, 1, 1, 1e-2, 1e-2, 1e-3);
    }
    // hand case: the first query sees only the first key, so y[0] = v[0] (M=1) or v[0] - lambda v'[0],
    // v' the value head of head 0's second map: head 0's own, or another where the halves
    // pairing puts its second query head on another key/value group; DINT's integral term, the
    // mean of map 0's one row, gives lambda v[0] back
    attn_loss(&c);
    float lambda0 = lam >= 0 ? c.qkv[lam] : c.lambda;
    const float* v = c.qkv + attention_v_col(&shape, 0, 0);  // value head 0 of token 0
    const float* v_second = c.qkv + attention_v_col(&shape, 0, M - 1);
    float expect = M == 2 && !shape.integral ? v[0] - lambda0 * v_second[0] : v[0];
    CHECK(fabsf(c.y[0] - expect) < 1e-5f, "attention %s position 0: %g vs %g", name, c.y[0], expect);
    free(c.qkv); free(c.y); free(c.o1); free(c.lse); free(c.R); free(dqkv); free(dy0);
}

// ---- whole model ----
// params: a host copy the finite differences perturb, uploaded before each loss
typedef struct { Model* model; int* tokens; int* targets; int B, T; float* params; } ModelCase;
static double model_case_loss(void* p) {
    ModelCase* c = p;
    model_set_params(c->model, c->params);
    model_forward(c->model, c->tokens, c->targets, c->B, c->T, 1);
    return model_loss(c->model);
}

// A variant's whole model, 2 layers of 2 groups of heads of width 4 (attention_test_heads)
static void test_model(int attention, int head_norm, const char* lambda_init) {
    const AttnVariant* v = &ATTN_VARIANTS[attention];
    int n_head = attention_test_heads(v, 2);
    // init_std large enough that attention is far from uniform
    ModelConfig cfg = {.attention = attention, .n_layer = 2, .d_model = variant_sub_heads_per_head(v) * n_head * 4, .n_head = n_head,
                       .head_dim = 4, .head_norm = head_norm, .rope_theta = 10000.0f, .seq_len = 256, .init_std = 0.3f};
    set_variant_switches(&cfg);
    snprintf(cfg.lambda_init, sizeof(cfg.lambda_init), "%s", lambda_init);
    model_config_validate(&cfg);
    Model model;
    model_build(&model, &cfg, backend_named("cpu"), 32, 2);
    model_init_params(&model, 7);
    int B = 2, T = 70;  // two query blocks
    int tokens[2 * 70], targets[2 * 70];
    for (int i = 0; i < B * T; i++) {
        tokens[i] = (int)(rng_next(&rng_state) % 32);
        targets[i] = (int)(rng_next(&rng_state) % 32);
    }
    float* params = mallocCheck(model.n_params * sizeof(float));
    model_get_params(&model, params);
    ModelCase c = {&model, tokens, targets, B, T, params};
    model_zero_grad(&model);
    model_case_loss(&c);
    model_backward(&model, 1.0f);
    float* grads = mallocCheck(model.n_params * sizeof(float));
    model_get_grads(&model, grads);
    // backward adds to the gradients (gradient accumulation): the same pass again doubles every one,
    // up to the rounding of sums that accumulate row by row (an overwrite would leave it single)
    float* twice = mallocCheck(model.n_params * sizeof(float));
    model_case_loss(&c);
    model_backward(&model, 1.0f);
    model_get_grads(&model, twice);
    for (int i = 0; i < model.n_tensors; i++) {
        const ParamTensor* t = &model.tensors[i];
        double worst = 0, largest = 0;
        for (size_t j = 0; j < t->size; j++) {
            worst = fmax(worst, fabs(twice[t->offset + j] - 2.0 * grads[t->offset + j]));
            largest = fmax(largest, fabs(2.0 * grads[t->offset + j]));
        }
        CHECK(worst <= 1e-5 * largest, "%s: a second backward doubles the gradient of %s (off by %g of %g)", config_attention_name(&cfg),
              t->name, worst, largest);
    }
    free(twice);
    printf(" model %s head_norm=%d lambda_init=%s, loss %.4f\n", config_attention_name(&cfg), head_norm, lambda_init, model_loss(&model));
    for (int i = 0; i < model.n_tensors; i++) {
        const ParamTensor* t = &model.tensors[i];
        grad_check(t->name, model_case_loss, &c, params + t->offset, grads + t->offset, t->size, 12, 1e-3, 1e-2, 2e-4);
    }
    free(grads);
    free(params);
    model_free(&model);
}

int main(void) {
    be = backend_cpu();
    printf("layer gradients (finite differences)\n");
    test_matmul();
    test_rmsnorm();
    test_rope();
    test_swiglu();
    test_crossentropy();
    for (int k = 0; k < ATTN_VARIANT_COUNT; k++) {
        test_attention(k, 5);
        test_attention(k, 130);  // three query blocks, the last partial
    }
    test_attention(ATTN_STANDARD, 70);
    test_attention(ATTN_DIFF, 70);
    printf("model gradients (finite differences)\n");
    for (int k = 0; k < ATTN_VARIANT_COUNT; k++) test_model(k, ATTN_VARIANTS[k].head_norm, "schedule");
    test_model(ATTN_STANDARD, 1, "schedule");
    test_model(ATTN_DIFF, 0, "schedule");
    test_model(ATTN_DIFF, 1, "0.5");
    test_model(ATTN_DIFF2, 1, "schedule");
    return check_summary();
}
