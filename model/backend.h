// The compute boundary: every operation the model needs, as one table of functions (ggml's
// backends are the model). A backend owns its memory: buffers come from its alloc and are read
// and written only by its operations; upload and download cross the boundary. Nothing outside
// a backend calls BLAS or loops over a backend's buffers.
//
// Shapes use N rows (B*T tokens), C model width, F SwiGLU width, V vocabulary, and the
// attention shapes of attention.h. Backward operations accumulate (+=) into parameter
// gradients; what they do to input gradients is stated per operation. Every reduction a
// backend writes runs in a fixed order, so a run is bitwise repeatable on one machine with the
// same thread count; the BLAS libraries' matmuls may split their sums by thread count, so runs
// on 1 and 2 threads agree to float32 rounding (about 1e-8 in the loss), not bitwise.
#ifndef BACKEND_H
#define BACKEND_H

#include <stddef.h>

#include "attention.h"

#define RMSNORM_EPS 1e-5f

typedef struct Backend Backend;
typedef struct WeightCopies WeightCopies;  // weight_copies.h

// ---- activation hook ----
// A caller reads and may overwrite named activations of a forward pass in place:
//   ACT_ATTN_LOGITS   scale * q k^T of one map as its softmax gets it (quantized when the
//                     shape's quant asks), in blocks of query rows:
//                     rows row0..row0+rows-1 of sequence b, head, map; row r sees keys
//                     0..row0+r (entries past that are not used), `ld` floats apart. How the
//                     rows are cut into blocks is the backend's choice. The backward pass
//                     recomputes these logits and calls the hook again with recompute = 1:
//                     everything after the softmax gets the gradient of the replaced logits,
//                     and q and k get it as if the replacement were the identity (the
//                     straight-through estimator of quantized training).
//   ACT_LAYER_OUTPUT  a layer's output after both residual additions, rows x C (rows = B*T).
// The contract, for every backend: data is host memory, and the hook is called from one
// thread at a time (never concurrently), in an order that may vary, so a hook needs no locks
// and what it accumulates must not depend on the order of blocks. A backend whose buffers are
// host memory (host_memory) shows its own buffers (no copy); any other stages a host copy and
// uploads it back after the call, since the hook may write.
typedef enum { ACT_ATTN_LOGITS, ACT_LAYER_OUTPUT } ActivationKind;

typedef struct {
    ActivationKind kind;
    int layer;
    int b, head, map;   // attention logits only
    int row0, rows, cols, ld;
    int recompute;
    float* data;  // host memory
} Activation;

typedef struct {
    void (*fn)(void* ctx, const Activation* act);
    void* ctx;
} ActivationHook;

// Attention's hook site: which hook, and the layer it reports
typedef struct {
    const ActivationHook* hook;  // NULL: none, and no cost
    int layer;
} HookSite;

// supports' `hooked`: no hook; a hooked forward-only call; a hooked training call (its forward
// keeping the statistics, and its backward)
enum { HOOKED_NONE, HOOKED_FORWARD, HOOKED_TRAINING };

// One AdamW update's constants, computed once per step on the host (torch.optim.AdamW's
// arithmetic: p *= decay; m, v moments; p -= step_size * m / (sqrt(v) / bc2_sqrt + eps))
typedef struct {
    float decay, beta1, beta2, step_size, bc2_sqrt, eps;
} AdamWStep;

// A backend instance (backend_open): the operations of one implementation, and what they compute
// in, fixed when it opens. Operations whose result depends on the instance (its precision, its
// weights' copies) take it first; the rest are the implementation's alone.
struct Backend {
    const char* name;    // the implementation: "cpu", "cuda", "cuda-emulated" (the CUDA kernels under tests/cuda_emulation)
    const char* device;  // what the `device` key names to get it: "cpu", "cuda"
    int host_memory;   // buffers are host memory: the hook sees them without a copy

    // Makes the implementation usable in this process (a device context, library handles) and
    // returns NULL, or says why it cannot be used on this machine (static storage); called once,
    // before any other operation, by the first backend_open of its device
    const char* (*init)(void);
    // Makes an instance's own state for be->precision (the weights' copies, its description) and
    // returns NULL, or says why this machine cannot compute in that precision (static storage)
    const char* (*open)(Backend* be);
    // releases what open made
    void (*close)(Backend* be);
    // what this instance runs on, for provenance: "cpu (OpenBLAS Cooperlake)", "cuda NVIDIA H100
    // 80GB HBM3 (sm_90); bf16 weight products: cuBLAS tensor cores" (a bf16 run's numbers are not
    // an fp32 run's)
    const char* (*device_name)(const Backend* be);
    // bytes of memory its buffers can take: the machine's RAM, or the device's memory
    double (*memory_bytes)(void);
    // the most memory this process has held so far: the peak resident set on the host, the
    // high-water mark of live buffers on a device
    double (*peak_memory_bytes)(void);
    // returns once every operation issued so far has finished: timings are honest only after it
    void (*synchronize)(void);

    // buffers: alloc returns zeroed memory; release(NULL) does nothing. upload and download
    // return once the host buffer may be reused or read. copy's ranges must not overlap.
    void* (*alloc)(size_t bytes);
    void (*release)(void* buf);
    void (*zero)(void* buf, size_t bytes);
    void (*copy)(void* dst, const void* src, size_t bytes);
    void (*upload)(void* dst, const void* host, size_t bytes);
    void (*download)(void* host, const void* src, size_t bytes);

    // out (N, OC) = inp (N, IC) . w (OC, IC)^T, plus out's old value when accumulate is set
    void (*matmul_forward)(const Backend* be, float* out, const float* inp, const float* w, int N, int IC, int OC, int accumulate);
    // dinp (N, IC) = dout . w (overwritten); dw (OC, IC) += dout^T . inp
    void (*matmul_backward)(const Backend* be, float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N,
                            int IC, int OC);
    // out = inp / rms(inp) * weight * out_scale, per row of width W; rstd (rows) kept for
    // backward. out_scale carries DIFF's (1 - lambda_init) factor of the per-head norm. On an
    // instance whose products round their operands (bf16), where out lies inside a block of
    // activations, out's rounding is written too, kept for the products that read out next
    // (the forward product then rounds nothing: weight_copies_write).
    void (*rmsnorm_forward)(const Backend* be, float* out, float* rstd, const float* inp, const float* weight, float out_scale, int rows,
                            int W);
    // dinp (rows, W) += ...; dweight (W) += ... (bf16: dinp's rounding written too, as
    // rmsnorm_forward's out's, for the backward products that read it as their dout)
    void (*rmsnorm_backward)(const Backend* be, float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                             const float* rstd, float out_scale, int rows, int W);
    // RoPE with interleaved channel pairs (2j, 2j+1), in place on `heads` sub-heads of width D
    // from column 0 of each row of x (rows, stride); row n is at position n % T. cos_sin
    // (T, D/2, 2). inverse rotates backwards, which is the backward pass.
    void (*rope_apply)(float* x, const float* cos_sin, int rows, int T, int heads, int D, int stride, int inverse);
    // gate_up (N, 2F) = [gate | up] per row; h (N, F) = silu(gate) * up
    // (bf16: h's rounding written too, as rmsnorm_forward's out's)
    void (*swiglu_forward)(const Backend* be, float* h, const float* gate_up, int N, int F);
    // dgate_up (N, 2F) overwritten; bf16, where dgate_up lies inside a block of activations: its
    // rounding kept for the backward product that reads it as its dout, dgate_up itself left as it
    // was on CUDA (as cross-entropy's backward)
    void (*swiglu_backward)(const Backend* be, float* dgate_up, const float* dh, const float* gate_up, int N, int F);
    // x (N, C) = tok_embedding (V, C)[tokens (N)]
    void (*embedding_forward)(float* x, const int* tokens, const float* tok_embedding, int N, int C);
    // dtok_embedding (V, C) += scatter of dx (N, C)
    void (*embedding_backward)(float* dtok_embedding, const float* dx, const int* tokens, int N, int C);
    // Each row of logits (N, V), only read, against its target (N): row_loss (N) its
    // cross-entropy, row_stats (N, 2) its max and 1 / sum(exp(logit - max)); returns the sum of
    // row_loss, in double. One pass over the logits: no probabilities are written.
    double (*crossentropy_forward)(const float* logits, float* row_stats, float* row_loss, const int* targets, int N, int V);
    // logits (N, V) become dlogits = (softmax - onehot) * dloss in place, the softmax
    // exp(logit - max) * (1 / sum) from the forward's row_stats. On an instance whose products
    // round their operands (bf16), where the logits lie inside a block of activations
    // (activations_changed), dlogits are also kept rounded for the backward product that reads
    // these rows as its dout, and the logits may be left as they were (CUDA writes the rounding
    // alone: the fp32 dlogits would be written and read once more only to be rounded).
    void (*crossentropy_backward)(const Backend* be, float* logits_inout, const float* row_stats, const int* targets, float dloss, int N,
                                  int V);

    // Whether attention of shape s (its B and T included) runs on this backend, with an
    // activation hook where `hooked` says which call (HOOKED_*): 1, or 0 and why not (static
    // storage) in *why (ggml's supports_op). Asked without a hook before anything of that shape
    // is allocated, so a device's limits (head dim, grid, shared memory) refuse a run at its
    // start; asked with one before each hooked call, which the model places on a CPU instance
    // where the answer is 0.
    int (*supports)(const Backend* be, const AttnShape* s, int hooked, const char** why);
    // The path attention of shape s takes on this instance, for the logs and the tests: its
    // kernels, or a library's, and where a faster path was refused, why (static storage)
    const char* (*attention_path)(const Backend* be, const AttnShape* s);
    // Attention over qkv (B*T, QKV), memory-linear in T. y (B*(T-q0), H*Dv); lse (B, H, M, T)
    // saved for backward, or NULL. lambda (1): the layer's lambda (LAMBDA_PER_LAYER), else NULL.
    // o1 (B*(T-q0), H*Dv): map 0's own output A_0 V where s->integral (DINT), else NULL.
    void (*attention_forward)(const Backend* be, float* y, float* o1, float* lse, const float* qkv, const float* lambda, const AttnShape* s,
                              HookSite hook);
    // q0 = 0 only. dqkv (N, QKV) overwritten, its lambda columns with dloss/dlambda
    // (LAMBDA_PER_TOKEN); dlambda (1) gets dloss/dlambda of the layer's lambda (LAMBDA_PER_LAYER).
    // dy0 (N, H*Dv): a gradient of map 0's own output A_0 V besides dy's, where s->integral, else NULL.
    void (*attention_backward)(const Backend* be, float* dqkv, float* dlambda, const float* dy, const float* dy0, const float* qkv,
                               const float* lse, const float* lambda, const AttnShape* s, HookSite hook);
    // DINT's integral term. Per sequence b and head h, o1's rows (B*T, H*Dv) become their running
    // sums, starting from prior (H*Dv: the sum over the rows before position pos; NULL: zero, which
    // B > 1 needs), and y's row t gets lambda * sum_t / (pos + t + 1) added: the running mean of
    // map 0's output, lambda (1) the layer's.
    void (*integral_forward)(float* y, float* o1, const float* prior, const float* lambda, int B, int T, int H, int Dv, int pos);
    // From position 0: dy0 (B*T, H*Dv) = lambda * sum over t' >= t of dy_t' / (t' + 1), map 0's extra
    // output gradient; dlambda (1) = the sum of dy_t . sums_t / (t + 1), sums the forward's running
    // sums. Both overwritten.
    void (*integral_backward)(float* dy0, float* dlambda, const float* dy, const float* sums, const float* lambda, int B, int T, int H,
                              int Dv);
    // The softmax maps of head h for query rows q0..T-1 of sequence 0, each row zero beyond
    // its position: P (M, T-q0, T). Row i of the fused output is (P_0 - lambda_i P_1) V_h.
    void (*attention_maps)(const Backend* be, float* P, const float* qkv, const AttnShape* s, int h, HookSite hook);
    // LAMBDA_PER_LAYER: lambda (1) = exp(lam_q1 . lam_k1) - exp(lam_q2 . lam_k2) + lambda_init,
    // lam (4, D) = q1, k1, q2, k2
    void (*lambda_forward)(float* lambda, const float* lam, float lambda_init, int D);
    // dlam (4, D) += dlambda (1) * dlambda/dlam
    void (*lambda_backward)(float* dlam, const float* dlambda, const float* lam, int D);
    // LAMBDA_PER_TOKEN: the lambda columns of qkv (N rows) turned into their sigmoid in place
    void (*token_lambda_forward)(float* qkv, int N, const AttnShape* s);
    // dqkv's lambda columns multiplied by sigma (1 - sigma), sigma from qkv
    void (*token_lambda_backward)(float* dqkv, const float* qkv, int N, const AttnShape* s);

    // sum of x[i]^2 over n, in double
    double (*sum_squares)(const float* x, size_t n);
    // x (n) *= factor
    void (*scale)(float* x, size_t n, float factor);
    // y (n) += x (n)
    void (*add)(float* y, const float* x, size_t n);
    // x (n) becomes its sum over the data-parallel ranks (dist.h), the same on every rank
    void (*sum_across_ranks)(float* x, size_t n);
    // one AdamW update of n parameters p with gradients g and moments m, v; where the instance
    // keeps a bf16 twin of p (weights_changed), p's rounding is written into it as p is written,
    // and 1 is returned (the twin is current), else 0
    int (*adamw_update)(const Backend* be, float* p, const float* g, float* m, float* v, size_t n, const AdamWStep* step);

    // Seconds and FLOPs of the matmul_forward and matmul_backward calls since the last call,
    // which starts the count again: the weights' products, where most of a step's FLOPs are.
    // The time each product took on the device (a GPU's own clock, not the host's wait).
    // Counting begins at the first call (which returns zeros): a run that never asks is not
    // timed at all.
    void (*matmul_spent)(double* seconds, double* flops);
    // GFLOP/s of a large matmul in the precision of the weights' products (the instance's),
    // measured on this backend: what MFU is measured against
    double (*matmul_rate)(const Backend* be);
    // GFLOP/s the device could reach at most in the precision of the weights' products (on the
    // CPU, with the threads in use), and how that was found, in how (n bytes); 0 where the
    // backend has no model of that peak (the CPU's bf16 products)
    double (*peak_rate)(const Backend* be, char* how, size_t n);

    // w (n floats) is a block of a model's weights (its parameters, or weights composed from
    // them) that a model registered or changed (built, loaded, after an optimizer step): an
    // instance that keeps copies of its weights in another precision makes that block's again;
    // n = 0 forgets the block (its model is freed)
    void (*weights_changed)(const Backend* be, const float* w, size_t n);
    // x (n floats) is a block of a model's activations (or of its backward's gradients), just
    // allocated, or n = 0: about to be freed. An instance whose products round their operands
    // (bf16) keeps a forward product's rounding of rows inside the block for the backward product
    // that reads the same rows (which then reads them as they were at that forward product), and
    // the roundings the operations above write with their rows, and forgets the block's roundings
    // here.
    void (*activations_changed)(const Backend* be, const float* x, size_t n);

    // Timing a sequence of operations on the device's own clock (profiles, model/profile.h):
    // timer_mark(i) records mark i (0, 1, ... in order) at the point everything issued before it
    // has run; timer_read(seconds, n) waits for marks 0..n-1 and gives each one's time after
    // mark 0. The next sequence reuses the marks.
    void (*timer_mark)(int i);
    void (*timer_read)(double* seconds, int n);

    // ---- the instance's own, set by backend_open: what the operations above read from `be` ----
    // the precision of the weights' products (matmul_forward and matmul_backward, and on CUDA
    // attention's written-out maps and cuDNN's graphs); everything else computes in fp32
    int precision;
    WeightCopies* copies;   // the weights' bf16 twins (precision = bf16), else NULL
    char description[240];  // what device_name says
};

enum { PRECISION_FP32, PRECISION_BF16, PRECISION_COUNT };
extern const char* const PRECISIONS[PRECISION_COUNT];  // "fp32", "bf16": the `precision` key's values

// Called first in main, with main's argv: where OPENBLAS_CORETYPE is unset and OpenBLAS chose a
// kernel narrower than this CPU's instructions allow, runs the program again (the same process
// and arguments) on the better kernel once it passes a numeric self-check; otherwise returns
void backend_select_blas_kernel(char** argv);
// Where the user's OPENBLAS_CORETYPE names a kernel narrower than this CPU's instructions
// allow, a sentence saying so (static storage); else NULL
const char* backend_blas_kernel_note(void);

// The first operation of b's table that is missing (its name), or NULL when the table is whole;
// backend_open refuses a backend with a missing operation
const char* backend_missing_entry(const Backend* b);

// The backends this program was built with (their implementations' tables, not instances); the
// first ("cpu") is the default
int backend_count(void);
const Backend* backend_at(int i);
// Every device this project has a backend for, built into this program or not: the `device`
// key's choices (Config.device is an index into it); each built backend's table names one
#define BACKEND_DEVICE_COUNT 2
extern const char* const BACKEND_DEVICES[BACKEND_DEVICE_COUNT];
// NULL where device BACKEND_DEVICES[device] can run here (its implementation initialised on
// first use), else "device 'cuda' cannot run here: " and why (static storage); never dies
const char* backend_device_refusal(int device);
// A new instance of device BACKEND_DEVICES[device] computing in `precision` (PRECISION_*); NULL
// with why not (static storage) in *why when the device cannot run here (backend_device_refusal)
// or cannot compute in that precision, never dies. A run's instance is opened in one place,
// run/device.h.
Backend* backend_open(int device, int precision, const char** why);
// Releases an instance (its weights' copies); the models computing on it are freed before. NULL
// does nothing.
void backend_close(Backend* be);
// What every implementation's instance does alike, its table's entries: device_name (the
// description its open wrote), weights_changed (remakes the block's bf16 twins where the instance
// keeps them), activations_changed (forgets a block's kept roundings) and close (releases them)
const char* backend_description(const Backend* be);
void backend_weights_changed(const Backend* be, const float* w, size_t n);
void backend_activations_changed(const Backend* be, const float* x, size_t n);
void backend_release_copies(Backend* be);
// The index in BACKEND_DEVICES of the device named `name`, or -1
int backend_device_index(const char* name);

#endif
