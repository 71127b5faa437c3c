// The CPU backend: OpenBLAS for matmuls, OpenMP loops for the rest, host memory. Its
// operations are those of the backend table (model/backend.h), where each is specified.
#ifndef CPU_H
#define CPU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../backend.h"

const Backend* backend_cpu(void);

// layers.c
// what a ulimit (-v, -d) leaves this process past OpenBLAS's buffers, -1 where none is set
double cpu_limit_bytes(void);
void cpu_matmul_spent(double* seconds, double* flops);
void cpu_matmul_forward(const Backend* be, float* out, const float* inp, const float* w, int N, int IC, int OC, int accumulate);
void cpu_matmul_backward(const Backend* be, float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int IC, int OC);
void cpu_rmsnorm_forward(const Backend* be, float* out, float* rstd, const float* inp, const float* weight, float out_scale, int rows,
                         int W);
void cpu_rmsnorm_backward(const Backend* be, float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                          const float* rstd, float out_scale, int rows, int W);
void cpu_rope_apply(float* x, const float* cos_sin, int rows, int T, int heads, int D, int stride, int inverse);
void cpu_swiglu_forward(const Backend* be, float* h, const float* gate_up, int N, int F);
void cpu_swiglu_backward(const Backend* be, float* dgate_up, const float* dh, const float* gate_up, int N, int F);
void cpu_embedding_forward(float* x, const int* tokens, const float* tok_embedding, int N, int C);
void cpu_embedding_backward(float* dtok_embedding, const float* dx, const int* tokens, int N, int C);
double cpu_crossentropy_forward(const float* logits, float* row_stats, float* row_loss, const int* targets, int N, int V);
void cpu_crossentropy_backward(const Backend* be, float* logits_inout, const float* row_stats, const int* targets, float dloss, int N,
                               int V);
// The calling thread's scratch of at least `floats` floats, kept between calls: freeing it
// each call would hand the pages back to the kernel and fault them in again on every layer
// (several percent of a training step). One buffer a thread: valid until its next call.
float* cpu_thread_scratch(size_t floats);
// x (n) turned into softmax(x) in place; returns log(sum(exp(x))), the log-sum-exp
float cpu_softmax_inplace(float* x, int n);

// attention.c
void cpu_attention_forward(const Backend* be, float* y, float* o1, float* lse, const float* qkv, const float* lambda, const AttnShape* s, HookSite hook);
void cpu_attention_backward(const Backend* be, float* dqkv, float* dlambda, const float* dy, const float* dy0, const float* qkv, const float* lse,
                            const float* lambda, const AttnShape* s, HookSite hook);
void cpu_attention_maps(const Backend* be, float* P, const float* qkv, const AttnShape* s, int h, HookSite hook);
void cpu_integral_forward(float* y, float* o1, const float* prior, const float* lambda, int B, int T, int H, int Dv, int pos);
void cpu_integral_backward(float* dy0, float* dlambda, const float* dy, const float* sums, const float* lambda, int B, int T, int H,
                           int Dv);
void cpu_lambda_forward(float* lambda, const float* lam, float lambda_init, int D);
void cpu_lambda_backward(float* dlam, const float* dlambda, const float* lam, int D);
void cpu_token_lambda_forward(float* qkv, int N, const AttnShape* s);
void cpu_token_lambda_backward(float* dqkv, const float* qkv, int N, const AttnShape* s);

// optim.c
double cpu_sum_squares(const float* x, size_t n);
void cpu_scale(float* x, size_t n, float factor);
void cpu_add(float* y, const float* x, size_t n);
int cpu_adamw_update(const Backend* be, float* p, const float* g, float* m, float* v, size_t n, const AdamWStep* step);

// blas_kernel.c: OpenBLAS's kernel chosen by the CPU's instructions
// The instruction sets that decide which OpenBLAS kernels and vector widths this CPU runs
// (avx512: F, VL, BW and DQ together, as OpenBLAS's AVX-512 kernels need; each with the OS
// saving the registers)
typedef struct {
    int sse3, avx, avx2, fma, avx512, avx512_bf16, amx_bf16;
} CpuFeatures;
CpuFeatures cpu_features(void);
// The fastest OpenBLAS x86 kernel for sgemm that these instructions run, or NULL
const char* blas_kernel_for(CpuFeatures f);
// An OpenBLAS kernel name's rank by the vector width of its sgemm (case as OpenBLAS ignores
// it); -1 for a name the table does not know
int blas_kernel_rank(const char* name);
// The instructions the kernel `name` executes that these features lack ("AVX-512 BF16", say), or
// NULL when it runs here or the table does not know the name
const char* blas_kernel_missing(const char* name, CpuFeatures f);
// The kernel to run instead of OpenBLAS's own choice `current`, or NULL to keep it: only when
// the user named none (user_choice, OPENBLAS_CORETYPE, NULL or empty) and these instructions
// allow a kernel of a higher rank than a known `current`
const char* blas_kernel_upgrade(const char* user_choice, const char* current, CpuFeatures f);
// Row-major C (M, N) = alpha op(A) op(B) + beta C, op a transpose when trans_* is set
typedef void (*SgemmFn)(int trans_a, int trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                        const float* B, int ldb, float beta, float* C, int ldc);
// The worst error of sgemm over a few products against a double-precision reference, as a
// multiple of the fp32 error bound of their sums: a kernel passes at <= 1
double blas_self_check(SgemmFn sgemm);
// backend_select_blas_kernel and backend_blas_kernel_note (backend.h)
void cpu_select_blas_kernel(char** argv);
const char* cpu_blas_kernel_note(void);

// matmul_bf16.c: the weights' products with bf16 operands and fp32 accumulation and output
// (oneDNN), for precision = bf16. cpu_bf16_refusal says why this CPU cannot run them fast
// (static storage), or NULL; cpu_bf16_init makes oneDNN ready, so that the products below may
// also be called directly (the tests do, on any CPU).
const char* cpu_bf16_refusal(void);
// Why a CPU of these instruction sets does not run bf16 products fast (no AVX-512 BF16, no AMX),
// or NULL
const char* cpu_bf16_missing(CpuFeatures f);
void cpu_bf16_init(void);
// Whether oneDNN has a bf16 matmul for this CPU at all: natively, or emulated on AVX-512 (oneDNN
// 2.6 has none for AVX2-only CPUs)
int cpu_bf16_runs(void);
// GFLOP/s of a 2048^3 bf16 product (the best of a few)
double cpu_bf16_matmul_rate(void);
// oneDNN's implementation for the weights' products, e.g. "brg:avx512_core_amx_bf16"
const char* cpu_bf16_kernel(void);
// x rounded to bf16 (to nearest, ties to even), as its 16 bits; inline, so that the loops
// rounding rows as they write them (layers.c) vectorize
static inline uint16_t cpu_bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40);  // a NaN stays a NaN
    u += 0x7FFFu + ((u >> 16) & 1u);  // to nearest, ties to even
    return (uint16_t)(u >> 16);
}
// An instance's bf16 twins of its weights, in host memory (weight_copies.h)
WeightCopies* cpu_bf16_copies_open(void);
// matmul_forward and matmul_backward's contracts (backend.h), in bf16 operands: a weight found in
// copies (NULL: none) is read from its twin; the forward's input, where it lies in a block of
// activations, is rounded into a twin kept there that the backward reads for the same rows;
// every other operand is rounded once per product
void cpu_bf16_matmul_forward(WeightCopies* copies, float* out, const float* inp, const float* w, int N, int IC, int OC,
                             int accumulate);
void cpu_bf16_matmul_backward(WeightCopies* copies, float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                              int N, int IC, int OC);

// peak.c: GFLOP/s this CPU's `threads` threads could reach at most in fp32, with how it was found
// (how, n bytes); 0 where no peak model exists for this architecture
double cpu_peak_rate(int threads, char* how, size_t n);

#endif
