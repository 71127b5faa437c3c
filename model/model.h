// The decoder-only model: token embedding, L pre-RMSNorm layers of attention (any variant of
// attention.h) and SwiGLU, final RMSNorm, untied LM head. No biases. Parameters, gradients and
// activations live in its backend's memory; host code reads the model through the functions
// below, never through its buffers.
#ifndef MODEL_H
#define MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "attention.h"
#include "backend.h"
#include "model_config.h"

// One named parameter tensor inside the contiguous parameter block; the names are the HDF5
// dataset paths of docs/checkpoint.md.
// How a tensor starts: weight matrices from N(0, init_std) (and only they get AdamW's weight
// decay), gains at 1, DIFF's lambda vectors from N(0, 0.1)
typedef enum { INIT_MATRIX, INIT_GAIN, INIT_LAMBDA } ParamInit;

typedef struct {
    char name[64];
    int ndim;
    int shape[2];
    size_t offset, size;
    ParamInit init;
} ParamTensor;

// Pointers of one layer into the parameter (or gradient) block. wq, wk, wv (and DIFF V2's
// w_lambda) are stored back to back so that wqkv is one (QKV, C) matrix; w_gate and w_up
// likewise form one (2F, C) matrix. Shared DIFF stores its query and key projections as a
// shared matrix and a rank-r update per map; wqkv is then composed from them, outside the block
// (Model.composed), and its gradient is a scratch matrix that backward splits among them.
typedef struct {
    float* attn_norm;   // (C)
    float* wqkv;        // (QKV, C) = [wq (QH*D, C); wk (KH*D, C); wv (H*Dv, C); per-token lambda: w_lambda (H, C)]
    float* wqk_shared;  // (2, H*D, C) = [wq_shared; wk_shared], followed by wv; Shared DIFF only
    float* update_out;  // (2, M, H*D, r) = wq_update_out, wk_update_out; Shared DIFF only
    float* update_in;   // (2, M, C, r) = wq_update_in, wk_update_in: map m's projection is
                        // shared + update_out[m] . update_in[m]^T; Shared DIFF only
    float* wo;          // (C, H*Dv)
    float* lambda;      // (4, D) = lambda_q1, lambda_k1, lambda_q2, lambda_k2; per-layer lambda only
    float* head_norm;   // (Dv); only with head_norm
    float* ffn_norm;    // (C)
    float* w_gate_up;   // (2F, C) = [w_gate (F, C); w_up (F, C)]
    float* w_down;      // (C, F)
} LayerParams;

typedef struct {
    float* tok_embedding;  // (V, C)
    LayerParams* layers;   // (L)
    float* final_norm;     // (C)
    float* lm_head;        // (V, C)
} Params;

// Saved activations of one layer, all for N = B*T rows.
typedef struct {
    float* x;          // (N, C) layer input (residual stream)
    float* ln1;        // (N, C)
    float* ln1_rstd;   // (N)
    float* qkv;        // (N, QKV), q and k after RoPE, per-token lambda after its sigmoid
    float* lse;        // (B, H, M, T)
    float* y;          // (N, H*Dv) attention output before the head norm
    float* o1;         // (N, H*Dv) DINT: the running sums of map 0's output (attention.h); else NULL
    float* hn;         // (N, H*Dv) after the head norm; aliases y without head_norm
    float* hn_rstd;    // (N*H)
    float* mid;        // (N, C) residual after attention
    float* ln2;        // (N, C)
    float* ln2_rstd;   // (N)
    float* gate_up;    // (N, 2F)
    float* h;          // (N, F)
} LayerActs;

// Model.weights_stale: nothing is out of date; Shared DIFF's composed wqkv (and its twins); that
// and the backend's twins of the parameters
enum { WEIGHTS_READY, WEIGHTS_COMPOSE, WEIGHTS_ALL };

typedef struct {
    ModelConfig cfg;
    const AttnVariant* variant;
    const Backend* be;   // the instance the model computes on (the caller's: it outlives the model)
    Backend* host_be;    // a CPU instance of the model's own for hooked attention its backend does not run, or NULL
    int layer_now;       // the layer whose operations the model is issuing, -1 outside the layers: what a profile credits
    int V, L, C, H, D, M, Dv, F, QKV;
    int KH;              // key heads: M*H, or H when the maps share key/value heads
    int head_norm;       // the config's, resolved
    AttnShape shape;     // of the allocated activations
    float* lambda_init;  // (L) host
    float* lambda;       // (L) this forward's lambda per layer (per-layer lambda)
    float* dlambda;      // (1) backward scratch
    float* dlambda_integral;  // (1) DINT: backward scratch, the integral term's part of dlambda
    int R;               // Shared DIFF's update rank r, else 0
    float* composed;     // (L, QKV, C) Shared DIFF's wqkv of every layer, composed from its parameters
    int weights_stale;   // WEIGHTS_*: what derives from the parameters and is out of date
    float* dwqkv;        // (QKV, C) Shared DIFF: backward's gradient of one layer's composed wqkv
    float* dupdate_out;  // (H*D, r) Shared DIFF: backward scratch

    ParamTensor* tensors;
    int n_tensors;
    size_t n_params;
    float* params_memory;
    float* grads_memory;
    Params params, grads;

    // activations, sized for B x T; inference keeps one layer's worth and reuses it
    int B, T, training;
    float* acts_memory;
    LayerActs* acts;      // (L) or (1)
    float* x_final;       // (N, C)
    float* lnf;           // (N, C)
    float* lnf_rstd;      // (N)
    float* logits;        // (N, V) logits, then (model_backward) dlogits
    int logits_are_gradients;  // a backward has turned the last forward's logits into dlogits
    int first_logit;      // rows first_logit..N-1 of the last forward have logits
    float* row_stats;     // (N, 2) each row's max logit and 1 / sum of exp(logit - max)
    float* row_loss;      // (N)
    float* rope;          // (T, D/2, 2)
    float* grad_scratch;  // backward-only buffers for one layer
    int* targets;         // (N) copy of the last forward's targets
    int* tokens;          // (N)
    // decoding cache: every layer's qkv rows (queries too, which the attention maps are
    // computed from) for positions 0..cache_T-1 of one sequence
    int cache_T;
    float* cache;         // (L, cache_T, QKV)
    float* cache_rope;    // (cache_T, D/2, 2)
    float* cache_sums;    // (L, cache_T, H*Dv) DINT: the running sums of map 0's output (its o1) per position
    float* maps_scratch;  // (M, rows, T) of the last model_attention_maps
    size_t maps_capacity;
    double loss;          // mean loss of the last forward, NaN without targets
    int have_targets;     // the last forward had targets, so backward may run
    const ActivationHook* hook;
    float* hook_staging;  // (N, C) host copy of a layer output for a backend without host memory
} Model;

// Shapes and parameter layout from a validated config, on backend be (dying with the reason
// when be cannot run batches of batch_size sequences of cfg's seq_len); parameters allocated,
// not initialised.
void model_build(Model* model, const ModelConfig* cfg, const Backend* be, int vocab_size, int batch_size);
// Each tensor draws from its own stream, a function of (seed, tensor name): two models of one
// seed start from the same numbers wherever their tensors coincide (the embedding, the LM head,
// the norms, a feed-forward of one width), so the rows of a table are paired at initialisation.
void model_init_params(Model* model, uint64_t seed);
// Parameter count of a config without allocating anything
size_t model_param_count(const ModelConfig* cfg, int vocab_size);
// Bytes a training run of cfg in `precision` (PRECISION_*) holds at its peak: parameters,
// gradients, AdamW moments and one micro-batch's activations (batch_size sequences); in bf16 also
// the weights' bf16 twins and the products' inputs' kept roundings. The activations (with their
// roundings) also in *activation_bytes unless NULL (in double: never overflows).
double model_training_bytes(const ModelConfig* cfg, int vocab_size, int batch_size, int precision, double* activation_bytes);
void model_free(Model* model);

// tokens, targets (B, T) host arrays; targets may be NULL (no loss). training keeps every
// layer's activations for backward.
void model_forward(Model* model, const int* tokens, const int* targets, int B, int T, int training);
// Decoding with a cache of up to max_T positions of one sequence
void model_cache_init(Model* model, int max_T);
int model_cache_size(const Model* model);  // max_T, 0 before model_cache_init
// tokens (n) at positions pos..pos+n-1 of the cached sequence, whose rows 0..pos-1 hold an
// earlier call's tokens (rows from pos on are overwritten, so pos may step back to reuse a
// prefix); the logits of the last row, n - 1, from model_logits (the other rows have none).
void model_forward_cached(Model* model, const int* tokens, int n, int pos);
// Accumulates (+=) dloss/dparams into the gradients; dloss_scale multiplies the mean loss
// gradient (1 / grad_accum for gradient accumulation).
void model_backward(Model* model, float dloss_scale);
void model_zero_grad(Model* model);
// Each gradient becomes its sum over the data-parallel ranks
void model_sum_grads_across_ranks(Model* model);
// Every later forward (and the backward's recomputation) shows its activations to hook;
// NULL removes it. The hook must outlive its use.
void model_set_hook(Model* model, const ActivationHook* hook);
// Every later forward, decoding step, attention map and backward quantizes the attention
// logits as quant says (model/attention.h); bits 0 or 16 turns it off. Dies on other widths
// outside 2..15.
void model_set_logit_quant(Model* model, LogitQuant quant);

// ---- reading the model ----
// The shape fields (V, L, C, H, D, M, Dv, F) and cfg may be read directly; buffers only here.
double model_loss(const Model* model);  // mean loss of the last forward, NaN without targets
// logits (V) of row n of the last forward, with or without targets, until a backward pass
void model_logits(const Model* model, int n, float* logits);
// row_loss (B*T) of the last forward, which had targets
void model_row_losses(const Model* model, float* row_loss);
// lambda of layer l: per-layer lambda of the last forward; per-token lambda of head h at
// cache position pos; 0 with one map
float model_lambda(const Model* model, int l, int h, int pos);
// Each layer's and head's lambda over the tokens of the last forward: mean and std (L, H) host.
// Per-layer lambda (diff): the layer's lambda for every head, std 0. Per-token lambda (diff2):
// over the N tokens of the last forward, which must have been a training one (it keeps every
// layer's activations). Returns 0, writing nothing, for a variant without lambda.
int model_lambda_stats(const Model* model, double* mean, double* std);
// The softmax maps of layer l, head h over cache positions 0..T-1 for query rows
// first_row..T-1: A (M, T - first_row, T) host, each row zero beyond its position; lambda
// (T - first_row) each row's lambda (0 with one map). The fused attention output of row i is
// (A_0 - lambda_i A_1) V: for DINT, A_1 is the noise map less the integral term G (attention.h),
// so its rows sum to zero.
void model_attention_maps(Model* model, int l, int h, int first_row, int T, float* A, float* lambda);
// The parameter (or gradient) block as host floats (n_params)
void model_get_params(const Model* model, float* params);
void model_set_params(Model* model, const float* params);
void model_get_grads(const Model* model, float* grads);
// grads (n_params) become the model's gradients: one optimizer step from the same gradients on two devices
void model_set_grads(Model* model, const float* grads);
// Whoever writes the parameter block other than through this file (the optimizer) says so here,
// so that what the model derives from its parameters is made again before it is used;
// twins_current: the backend wrote the whole block's bf16 twins as it wrote the block (AdamW),
// so only Shared DIFF's composition is made again
void model_params_changed(Model* model, int twins_current);
// dst's parameters become src's (same layout; the backends may differ: a CPU and a CUDA model
// side by side)
void model_copy_params(Model* dst, const Model* src);

size_t model_matmul_params(const Model* model);  // every weight used in a matmul, LM head too
double model_flops_per_token(const Model* model, int T);  // training: 6 N_matmul + attention

#endif
