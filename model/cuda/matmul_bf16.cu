// The weights' products with bf16 operands, fp32 accumulation and fp32 output on the tensor
// cores, through cuBLAS's GemmEx (`precision = bf16`).
//
// The weights are rounded to bf16 once after each change (by AdamW as it writes them, by
// weights_changed after a load) into device copies every product reads; a forward product's
// input once a step, by the kernel that wrote it or by the product, into a twin kept for the
// backward product that reads the same rows (weight_copies.h); gradients once per product that
// reads them, into scratch, but for those their kernels write rounded (the logits' and
// dgate_up's, layers.cu). Everything else (the stored activations, norms,
// attention, softmax, cross-entropy, AdamW and its fp32 master weights) stays fp32. The
// products run on a cuBLAS handle of their own in the default math mode: the fp32 handle's
// pedantic mode is for fp32 (no TF32), and bf16 operands with fp32 compute are what the tensor
// cores do in any mode.
#include <cuda_bf16.h>

#include "cuda.h"

extern "C" {
#include "../../base/util.h"
#include "../weight_copies.h"
}

static cublasHandle_t tensor_cores;

__global__ void round_to_bf16_kernel(__nv_bfloat16* out, const float* x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16_rn(x[i]);
}

void cuda_round_bf16(__nv_bfloat16* out, const float* x, size_t n) {
    if (!n) return;
    round_to_bf16_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS>>>(out, x, n);
    cudaCheckLaunch();
}

// ---- the weights' bf16 copies and the kept roundings in device memory, every other operand rounded into scratch ----
static void* copy_alloc(size_t n) { return cuda_alloc(n * sizeof(__nv_bfloat16)); }
static void copy_round(void* copy, const float* w, size_t n) { cuda_round_bf16((__nv_bfloat16*)copy, w, n); }
static const WeightCopies KIND = {copy_alloc, cuda_release, copy_round, sizeof(__nv_bfloat16), {}, {}, NULL, 0};

WeightCopies* cuda_bf16_copies_open(void) {
    cuda_bf16_cublas();
    return weight_copies_open(&KIND);
}

// x (n) as bf16. A forward's input (keep) inside a block of activations: the twin kept for its
// backward, rounded into unless the kernel that wrote x wrote it. Otherwise its weights' copy, or
// the kept rounding of exactly these rows (a backward's input), else rounded into scratch.
static const __nv_bfloat16* operand(WeightCopies* copies, const float* x, size_t n, int slot, int keep) {
    int ready = 0;
    __nv_bfloat16* kept = copies && keep ? (__nv_bfloat16*)weight_copies_keep(copies, x, n, &ready) : NULL;
    if (kept) {
        if (!ready) cuda_round_bf16(kept, x, n);
        return kept;
    }
    const __nv_bfloat16* copy = copies ? (const __nv_bfloat16*)weight_copies_find(copies, x, n) : NULL;
    if (copy) return copy;
    __nv_bfloat16* out = (__nv_bfloat16*)cuda_scratch(slot, n * sizeof(__nv_bfloat16));
    cuda_round_bf16(out, x, n);
    return out;
}

// column-major C (m, n) = op(A) op(B) + beta C, A and B in bf16
static void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const __nv_bfloat16* A, int lda,
                 const __nv_bfloat16* B, int ldb, float beta, float* C, int ldc) {
    const float one = 1.0f;
    cublasCheck(cublasGemmEx(cuda_bf16_cublas(), ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &beta, C, CUDA_R_32F, ldc,
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// the fp32 products' layout (layers.cu): row-major (N, IC) . (OC, IC)^T is column-major (OC, N) = W^T X
void cuda_bf16_matmul_forward(WeightCopies* copies, float* out, const float* inp, const float* w, int N, int IC, int OC,
                              int accumulate) {
    const __nv_bfloat16* x = operand(copies, inp, (size_t)N * IC, SCRATCH_BF16_A, 1);
    const __nv_bfloat16* wt = operand(copies, w, (size_t)OC * IC, SCRATCH_BF16_B, 0);
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, wt, IC, x, IC, accumulate ? 1.0f : 0.0f, out, OC);
}

void cuda_bf16_matmul_backward(WeightCopies* copies, float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                               int N, int IC, int OC) {
    const __nv_bfloat16* d = operand(copies, dout, (size_t)N * OC, SCRATCH_BF16_A, 0);
    const __nv_bfloat16* wt = operand(copies, w, (size_t)OC * IC, SCRATCH_BF16_B, 0);
    const __nv_bfloat16* x = operand(copies, inp, (size_t)N * IC, SCRATCH_BF16_C, 0);
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, wt, IC, d, OC, 0.0f, dinp, IC);
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, x, IC, d, OC, 1.0f, dw, IC);
}

cublasHandle_t cuda_bf16_cublas(void) {
    if (!tensor_cores) {
        cublasCheck(cublasCreate(&tensor_cores));
        cublasCheck(cublasSetMathMode(tensor_cores, CUBLAS_DEFAULT_MATH));
    }
    return tensor_cores;
}

static void square_product(void* operands) {
    const int n = CUDA_RATE_N;
    void** ac = (void**)operands;
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, (const __nv_bfloat16*)ac[0], n, (const __nv_bfloat16*)ac[0], n, 0.0f, (float*)ac[1], n);
}

double cuda_bf16_matmul_rate(void) {
    const int n = CUDA_RATE_N;
    size_t count = (size_t)n * n;
    float* x = (float*)cuda_alloc(count * sizeof(float));
    cuda_fill(x, count, 1);
    void* ac[2] = {cuda_alloc(count * sizeof(__nv_bfloat16)), x};  // x is then the product's output
    cuda_round_bf16((__nv_bfloat16*)ac[0], x, count);
    float ms = cuda_best_ms(square_product, ac);
    cuda_release(ac[0]);
    cuda_release(x);
    return 2.0 * count * n / (ms / 1e3) / 1e9;
}
