// The CUDA backend: cuBLAS for matmuls (fp32 with TF32 off, or bf16 operands on the tensor
// cores for precision = bf16), kernels of its own for the rest,
// device memory, NCCL across ranks. Its operations are those of the backend table
// (model/backend.h), where each is specified; this header is shared by its .cu files.
#ifndef DIFFTX_CUDA_H
#define DIFFTX_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "../backend.h"

const Backend* backend_cuda(void);
// Without a GPU: the engine configurations cuDNN's heuristics offer for the forward (backward)
// attention graphs of shape s (cudnn_attention.cu) on the GPU device_json describes (cuDNN's
// device properties as JSON), the fewest over its maps; -1 with why where a graph does not build
// or s takes no graph, -2 where libcudnn cannot be opened
int cudnn_attention_engines(const AttnShape* s, int backward, const char* device_json, const char** why);
// the cuDNN version loaded (e.g. 91900), 0 where libcudnn cannot be opened
size_t cudnn_version(void);
#ifdef __cplusplus
}

// The table's name; the build of these sources under the CPU emulation of a GPU
// (tests/cuda_emulation) names itself cuda-emulated
#ifndef CUDA_BACKEND_NAME
#define CUDA_BACKEND_NAME "cuda"
#endif

#include <math.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

// ---- backend_cuda.cu: errors, memory, handles ----
void cuda_check_at(cudaError_t err, const char* what, const char* src, int line);
void cublas_check_at(cublasStatus_t status, const char* what, const char* src, int line);
#define cudaCheck(call) cuda_check_at((call), #call, __FILE__, __LINE__)
#define cublasCheck(call) cublas_check_at((call), #call, __FILE__, __LINE__)
// after a kernel launch: a bad launch configuration is reported where it happened
#define cudaCheckLaunch() cuda_check_at(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
cublasHandle_t cuda_cublas(void);
// the most shared memory one block of a kernel may use on this device (with the opt-in)
size_t cuda_shared_memory_limit(void);
// Device scratch of at least `bytes`, valid until the next cuda_scratch call with the same slot;
// every operation runs on one stream in order, so reuse across operations is safe
enum {
    SCRATCH_A, SCRATCH_B, SCRATCH_C, SCRATCH_BF16_A, SCRATCH_BF16_B, SCRATCH_BF16_C,
    SCRATCH_CUDNN_QKV, SCRATCH_CUDNN_O, SCRATCH_CUDNN_ROWS, SCRATCH_CUDNN_DO, SCRATCH_CUDNN_GRADS, SCRATCH_CUDNN_WORK,
    SCRATCH_MAPS, SCRATCH_MAP_GRADS, SCRATCH_MAPS_BF16, SCRATCH_OPERANDS_BF16, SCRATCH_MAP_ROWS, SCRATCH_SLOTS
};
void* cuda_scratch(int slot, size_t bytes);
void* cuda_alloc(size_t bytes);
void cuda_release(void* buf);
void cuda_upload(void* dst, const void* host, size_t bytes);
void cuda_download(void* host, const void* src, size_t bytes);
// column-major sgemm on the backend's handle: C (m, n) = alpha op(A) op(B) + beta C
void cuda_sgemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const float* A, int lda,
                const float* B, int ldb, float beta, float* C, int ldc);
// x (n) filled with values uniform in [-1, 1) from a hash of (seed, index): inputs for timing
// products (a GPU multiplying zeros draws less power and clocks higher than on real data) and for
// checking one path against another
void cuda_fill(float* x, size_t n, uint32_t seed);
// The best time in ms of a few calls of call(ctx) on the GPU's clock (the first, which loads
// its kernel, not counted): how the matmul rates are measured, on square products of side
// CUDA_RATE_N (the emulation's build sets a smaller side: its rate is the CPU's, and a GPU's
// product takes it seconds a call)
#ifndef CUDA_RATE_N
#define CUDA_RATE_N 4096
#endif
float cuda_best_ms(void (*call)(void* ctx), void* ctx);

// ---- matmul_bf16.cu: the weights' products in bf16 (precision = bf16) ----
// An instance's bf16 twins of its weights, in device memory (weight_copies.h); every GPU this
// backend runs on has bf16 tensor cores
WeightCopies* cuda_bf16_copies_open(void);
// out (n) = x (n) rounded to bf16 (to nearest, ties to even)
void cuda_round_bf16(__nv_bfloat16* out, const float* x, size_t n);
// the tensor cores' cuBLAS handle (default math mode) of the bf16 products, made on first use
cublasHandle_t cuda_bf16_cublas(void);
// matmul_forward and matmul_backward in bf16 operands: a weight found in copies (NULL: none) is
// read from its twin; the forward's input, where it lies in a block of activations, is rounded
// into a twin kept there that the backward reads for the same rows; every other operand is
// rounded once per product
void cuda_bf16_matmul_forward(WeightCopies* copies, float* out, const float* inp, const float* w, int N, int IC, int OC,
                              int accumulate);
void cuda_bf16_matmul_backward(WeightCopies* copies, float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                               int N, int IC, int OC);
// GFLOP/s of a bf16 product of side CUDA_RATE_N
double cuda_bf16_matmul_rate(void);

// ---- layers.cu ----
// *out = scale * the sum of x[r * stride + i] over rows r < rows and i < len, in a fixed order
// on the GPU (one block; the same bits on every run): the sums layers.cu and attention.cu need
// across a whole tensor, without a serial loop on one thread
void cuda_sum_fixed_order(float* out, const float* x, size_t rows, size_t len, size_t stride, float scale);
void cuda_sum_fixed_order(double* out, const double* x, size_t rows, size_t len, size_t stride, double scale);
void cuda_matmul_spent(double* seconds, double* flops);
void cuda_matmul_forward(const Backend* be, float* out, const float* inp, const float* w, int N, int IC, int OC, int accumulate);
void cuda_matmul_backward(const Backend* be, float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int IC, int OC);
void cuda_rmsnorm_forward(const Backend* be, float* out, float* rstd, const float* inp, const float* weight, float out_scale, int rows,
                          int W);
void cuda_rmsnorm_backward(const Backend* be, float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                           const float* rstd, float out_scale, int rows, int W);
void cuda_rope_apply(float* x, const float* cos_sin, int rows, int T, int heads, int D, int stride, int inverse);
void cuda_swiglu_forward(const Backend* be, float* h, const float* gate_up, int N, int F);
void cuda_swiglu_backward(const Backend* be, float* dgate_up, const float* dh, const float* gate_up, int N, int F);
void cuda_embedding_forward(float* x, const int* tokens, const float* tok_embedding, int N, int C);
void cuda_embedding_backward(float* dtok_embedding, const float* dx, const int* tokens, int N, int C);
double cuda_crossentropy_forward(const float* logits, float* row_stats, float* row_loss, const int* targets, int N, int V);
void cuda_crossentropy_backward(const Backend* be, float* logits_inout, const float* row_stats, const int* targets, float dloss, int N,
                                int V);
double cuda_sum_squares(const float* x, size_t n);
void cuda_scale(float* x, size_t n, float factor);
void cuda_add(float* y, const float* x, size_t n);
int cuda_adamw_update(const Backend* be, float* p, const float* g, float* m, float* v, size_t n, const AdamWStep* step);

// ---- cudnn_attention.cu: attention on cuDNN's fused graphs in precision = bf16 ----
// Called in bf16 only. Each runs the call where the shape allows and returns 1, or returns 0 for
// another path
int cudnn_attention_forward(float* y, float* lse, const float* qkv, const float* lambda, const AttnShape* s);
int cudnn_attention_backward(float* dqkv, float* dlambda, const float* dy, const float* qkv, const float* lambda, const AttnShape* s);
// NULL where a training call of shape s takes the graphs (bf16, plans made, in agreement with the
// kernels), else why not (static storage); says the graphs' engines once per shape when taken
const char* cudnn_attention_refusal(const AttnShape* s);

// ---- attention_written.cu: attention with its T x T maps written out, through cuBLAS ----
// NULL where a call of shape s (backward: a training call) takes the written-out path, else why
// not (static storage): decoding, maps over the memory budget, or DIFFTX_ATTENTION_PATH
const char* written_attention_refusal(const AttnShape* s, int backward, int bf16);
// the budget in bytes and how it was set, for the path's description
double written_attention_budget(const char** how);
// bf16: the maps' products in bf16 operands with fp32 accumulation (precision = bf16), else fp32
void written_attention_forward(int bf16, float* y, float* o1, float* lse, const float* qkv, const float* lambda, const AttnShape* s,
                               HookSite hook);
void written_attention_backward(int bf16, float* dqkv, float* dlambda, const float* dy, const float* dy0, const float* qkv,
                                const float* lse, const float* lambda, const AttnShape* s, HookSite hook);
// The path the user forces with DIFFTX_ATTENTION_PATH: 0 none (unset or "auto"), else one of
enum { ATTENTION_FORCE_NONE, ATTENTION_FORCE_KERNELS, ATTENTION_FORCE_WRITTEN };
int cuda_attention_forced(void);
// the path attention of shape s takes (the backend table's attention_path)
const char* cuda_attention_path(const Backend* be, const AttnShape* s);
// steps (tensors, rows) = the quantization step of each row of amax (tensors, rows): its own
// absmax (per_row) or its tensor's largest, over Q levels
void cuda_quant_steps(float* step, const float* amax, int tensors, int rows, int per_row, int Q);

// ---- attention.cu ----
int cuda_attention_supports(const Backend* be, const AttnShape* s, int hooked, const char** why);
void cuda_attention_forward(const Backend* be, float* y, float* o1, float* lse, const float* qkv, const float* lambda, const AttnShape* s,
                            HookSite hook);
void cuda_attention_backward(const Backend* be, float* dqkv, float* dlambda, const float* dy, const float* dy0, const float* qkv,
                             const float* lse, const float* lambda, const AttnShape* s, HookSite hook);
// the same on this backend's kernels alone, never cuDNN's graphs (which cudnn_attention.cu holds to them)
void cuda_attention_forward_kernels(float* y, float* o1, float* lse, const float* qkv, const float* lambda, const AttnShape* s);
void cuda_attention_backward_kernels(float* dqkv, float* dlambda, const float* dy, const float* dy0, const float* qkv, const float* lse,
                                     const float* lambda, const AttnShape* s);
void cuda_integral_forward(float* y, float* o1, const float* prior, const float* lambda, int B, int T, int H, int Dv, int pos);
void cuda_integral_backward(float* dy0, float* dlambda, const float* dy, const float* sums, const float* lambda, int B, int T, int H,
                            int Dv);
void cuda_attention_maps(const Backend* be, float* P, const float* qkv, const AttnShape* s, int h, HookSite hook);
void cuda_lambda_forward(float* lambda, const float* lam, float lambda_init, int D);
void cuda_lambda_backward(float* dlam, const float* dlambda, const float* lam, int D);
void cuda_token_lambda_forward(float* qkv, int N, const AttnShape* s);
void cuda_token_lambda_backward(float* dqkv, const float* qkv, int N, const AttnShape* s);

// threads per block of the row and element kernels
#define CUDA_THREADS 256
#define FULL_WARP 0xffffffffu
__device__ __forceinline__ static float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(FULL_WARP, x, o);
    return x;
}
__device__ __forceinline__ static float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(FULL_WARP, x, o));
    return x;
}
// absmax_quantize of attention.c
__device__ __forceinline__ static float quantize(float x, float s, int Q) {
    if (s == 0.0f) return x;
    float level = rintf(x / s);
    return s * fminf(fmaxf(level, (float)-Q), (float)Q);
}
static inline unsigned cuda_blocks(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }
#endif

#endif
