// The CUDA backend's matmuls (cuBLAS) and row and element kernels. Every reduction has a fixed
// order (a warp's shuffle tree, a block's tree, partials summed in index order), so results are
// bitwise repeatable on one GPU; no float atomics anywhere.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"

extern "C" {
#include "../../base/util.h"
#include "../weight_copies.h"
}

// ---- matmuls: row-major (N, IC) . (OC, IC)^T is column-major (OC, N) = W^T X ----
// Timed for matmul_spent (backend.h) once it has been called, on the GPU's clock: an event
// before and after each call, read back when asked or when the pairs run out (then the host
// waits for the last product, once in MATMUL_EVENT_PAIRS calls). Training, which never asks,
// records no events and never waits.
#define MATMUL_EVENT_PAIRS 1024
static cudaEvent_t matmul_events[2 * MATMUL_EVENT_PAIRS];  // start, stop of each call since the last read
static int matmul_timing, matmul_calls, matmul_created;
static double matmul_ms, matmul_flops;

// Adds the recorded calls' times to matmul_ms and frees their events for reuse
static void matmul_fold(void) {
    if (matmul_calls) cudaCheck(cudaEventSynchronize(matmul_events[2 * matmul_calls - 1]));
    for (int i = 0; i < matmul_calls; i++) {
        float call_ms;
        cudaCheck(cudaEventElapsedTime(&call_ms, matmul_events[2 * i], matmul_events[2 * i + 1]));
        matmul_ms += call_ms;
    }
    matmul_calls = 0;
}

static void matmul_begin(void) {
    if (!matmul_timing) return;
    if (matmul_calls == MATMUL_EVENT_PAIRS) matmul_fold();
    if (matmul_calls == matmul_created) {
        cudaCheck(cudaEventCreate(&matmul_events[2 * matmul_calls]));
        cudaCheck(cudaEventCreate(&matmul_events[2 * matmul_calls + 1]));
        matmul_created++;
    }
    cudaCheck(cudaEventRecord(matmul_events[2 * matmul_calls], 0));
}

static void matmul_end(double flops) {
    if (!matmul_timing) return;
    cudaCheck(cudaEventRecord(matmul_events[2 * matmul_calls + 1], 0));
    matmul_calls++;
    matmul_flops += flops;
}

void cuda_matmul_spent(double* seconds, double* flops) {
    matmul_fold();
    *seconds = matmul_ms / 1e3;
    *flops = matmul_flops;
    matmul_ms = matmul_flops = 0.0;
    matmul_timing = 1;
}

void cuda_matmul_forward(const Backend* be, float* out, const float* inp, const float* w, int N, int IC, int OC, int accumulate) {
    matmul_begin();
    if (be->precision == PRECISION_BF16) cuda_bf16_matmul_forward(be->copies, out, inp, w, N, IC, OC, accumulate);
    else cuda_sgemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, 1.0f, w, IC, inp, IC, accumulate ? 1.0f : 0.0f, out, OC);
    matmul_end(2.0 * N * IC * (double)OC);
}

void cuda_matmul_backward(const Backend* be, float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int IC,
                          int OC) {
    matmul_begin();
    if (be->precision == PRECISION_BF16) {
        cuda_bf16_matmul_backward(be->copies, dinp, dw, dout, inp, w, N, IC, OC);
    } else {
        cuda_sgemm(CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, 1.0f, w, IC, dout, OC, 0.0f, dinp, IC);
        cuda_sgemm(CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, 1.0f, inp, IC, dout, OC, 1.0f, dw, IC);
    }
    matmul_end(4.0 * N * IC * (double)OC);
}

// A block's sum or max of one value per thread, the same tree every time; every thread gets it
template <bool MAX>
__device__ float block_reduce(float x) {
    __shared__ float part[32];
    __syncthreads();  // part may still be read by a previous call
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    x = MAX ? warp_max(x) : warp_sum(x);
    if (lane == 0) part[warp] = x;
    __syncthreads();
    float y = lane < warps ? part[lane] : (MAX ? -INFINITY : 0.0f);
    return MAX ? warp_max(y) : warp_sum(y);
}

// ---- sums across a tensor: thread t of one block of SUM_THREADS sums the elements whose flat
// index r * len + i is t modulo SUM_THREADS, in increasing order, then the threads' sums meet in
// a tree (a layer's dlambda at T 1,024 sums 49,152 values) ----
#define SUM_THREADS 1024
template <typename Real>
__global__ void __launch_bounds__(SUM_THREADS) sum_fixed_order_kernel(Real* out, const Real* x, size_t rows, size_t len, size_t stride,
                                                                        Real scale) {
    __shared__ Real part[SUM_THREADS];
    Real acc = 0;
    for (size_t k = threadIdx.x; k < rows * len; k += SUM_THREADS) acc += x[k / len * stride + k % len];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = SUM_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = scale * part[0];
}

void cuda_sum_fixed_order(float* out, const float* x, size_t rows, size_t len, size_t stride, float scale) {
    sum_fixed_order_kernel<float><<<1, SUM_THREADS>>>(out, x, rows, len, stride, scale);
    cudaCheckLaunch();
}

void cuda_sum_fixed_order(double* out, const double* x, size_t rows, size_t len, size_t stride, double scale) {
    sum_fixed_order_kernel<double><<<1, SUM_THREADS>>>(out, x, rows, len, stride, scale);
    cudaCheckLaunch();
}

// ---- RMSNorm: one warp per row ----
// bf16: where rows x (n) lie in a block of activations, the twin the kernel writing them writes
// their rounding into (weight_copies_write); else NULL
static __nv_bfloat16* written_rounding(const Backend* be, const float* x, size_t n) {
    return be->copies ? (__nv_bfloat16*)weight_copies_write(be->copies, x, n) : NULL;
}

// out (rows, W), and its rounding into `rounded` unless NULL
__global__ void rmsnorm_forward_kernel(float* out, __nv_bfloat16* rounded, float* rstd, const float* inp, const float* weight,
                                       float out_scale, int rows, int W) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* x = inp + (size_t)row * W;
    float ss = 0.0f;
    for (int i = lane; i < W; i += 32) ss += x[i] * x[i];
    float s = 1.0f / sqrtf(warp_sum(ss) / W + RMSNORM_EPS);
    if (lane == 0) rstd[row] = s;
    float* o = out + (size_t)row * W;
    for (int i = lane; i < W; i += 32) {
        float v = x[i] * s * weight[i] * out_scale;
        o[i] = v;
        if (rounded) rounded[(size_t)row * W + i] = __float2bfloat16_rn(v);
    }
}

void cuda_rmsnorm_forward(const Backend* be, float* out, float* rstd, const float* inp, const float* weight, float out_scale, int rows,
                          int W) {
    __nv_bfloat16* rounded = written_rounding(be, out, (size_t)rows * W);
    rmsnorm_forward_kernel<<<cuda_blocks(rows, CUDA_THREADS / 32), CUDA_THREADS>>>(out, rounded, rstd, inp, weight, out_scale, rows, W);
    cudaCheckLaunch();
}

// dinp += ..., and its rounding into `rounded` unless NULL
__global__ void rmsnorm_backward_dx_kernel(float* dinp, __nv_bfloat16* rounded, const float* dout, const float* inp, const float* weight,
                                           const float* rstd, float out_scale, int rows, int W) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float *x = inp + (size_t)row * W, *d = dout + (size_t)row * W;
    float* dx = dinp + (size_t)row * W;
    float s = rstd[row], dot = 0.0f;  // sum_i dxhat_i * xhat_i
    for (int i = lane; i < W; i += 32) dot += d[i] * weight[i] * out_scale * x[i] * s;
    dot = warp_sum(dot) / W;
    for (int i = lane; i < W; i += 32) {
        float v = dx[i] + s * (d[i] * weight[i] * out_scale - x[i] * s * dot);
        dx[i] = v;
        if (rounded) rounded[(size_t)row * W + i] = __float2bfloat16_rn(v);
    }
}

// dweight in two passes without atomics: each (chunk of rows, channel) sums its rows in order,
// then each channel sums its chunks in order. Chunks of at least NORM_CHUNK rows, more when the
// chunk count would pass the grid's 65535 in y.
#define NORM_CHUNK 256
__global__ void rmsnorm_dweight_partial_kernel(float* partial, const float* dout, const float* inp, const float* rstd, float out_scale,
                                               int rows, int W, int chunk_rows) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (i >= W) return;
    int r0 = chunk * chunk_rows, r1 = min(rows, r0 + chunk_rows);
    float acc = 0.0f;
    for (int r = r0; r < r1; r++) acc += dout[(size_t)r * W + i] * inp[(size_t)r * W + i] * (rstd[r] * out_scale);
    partial[(size_t)chunk * W + i] = acc;
}

__global__ void sum_chunks_kernel(float* dst, const float* partial, int chunks, int W) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= W) return;
    float acc = 0.0f;
    for (int c = 0; c < chunks; c++) acc += partial[(size_t)c * W + i];
    dst[i] += acc;
}

void cuda_rmsnorm_backward(const Backend* be, float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                           const float* rstd, float out_scale, int rows, int W) {
    __nv_bfloat16* rounded = written_rounding(be, dinp, (size_t)rows * W);
    rmsnorm_backward_dx_kernel<<<cuda_blocks(rows, CUDA_THREADS / 32), CUDA_THREADS>>>(dinp, rounded, dout, inp, weight, rstd, out_scale,
                                                                                       rows, W);
    cudaCheckLaunch();
    int chunk_rows = max(NORM_CHUNK, (rows + 65534) / 65535), chunks = (rows + chunk_rows - 1) / chunk_rows;
    float* partial = (float*)cuda_scratch(SCRATCH_A, (size_t)chunks * W * sizeof(float));
    dim3 grid(cuda_blocks(W, 128), chunks);
    rmsnorm_dweight_partial_kernel<<<grid, 128>>>(partial, dout, inp, rstd, out_scale, rows, W, chunk_rows);
    cudaCheckLaunch();
    sum_chunks_kernel<<<cuda_blocks(W, 128), 128>>>(dweight, partial, chunks, W);
    cudaCheckLaunch();
}

// ---- RoPE: one thread per channel pair ----
__global__ void rope_kernel(float* x, const float* cos_sin, int rows, int T, int heads, int D, int stride, float sign) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x, pairs = (size_t)rows * heads * (D / 2);
    if (idx >= pairs) return;
    int j = (int)(idx % (D / 2));
    int h = (int)(idx / (D / 2) % heads);
    int r = (int)(idx / ((size_t)(D / 2) * heads));
    const float* cs = cos_sin + (size_t)(r % T) * D;
    float c = cs[2 * j], s = sign * cs[2 * j + 1];
    float* v = x + (size_t)r * stride + (size_t)h * D;
    float a = v[2 * j], b = v[2 * j + 1];
    v[2 * j] = a * c - b * s;
    v[2 * j + 1] = a * s + b * c;
}

void cuda_rope_apply(float* x, const float* cos_sin, int rows, int T, int heads, int D, int stride, int inverse) {
    size_t pairs = (size_t)rows * heads * (D / 2);
    rope_kernel<<<cuda_blocks(pairs, CUDA_THREADS), CUDA_THREADS>>>(x, cos_sin, rows, T, heads, D, stride, inverse ? -1.0f : 1.0f);
    cudaCheckLaunch();
}

// ---- SwiGLU ----
// h (N, F), and its rounding into `rounded` unless NULL
__global__ void swiglu_forward_kernel(float* h, __nv_bfloat16* rounded, const float* gate_up, int N, int F) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * F) return;
    size_t n = idx / F, i = idx % F;
    float g = gate_up[n * 2 * F + i], u = gate_up[n * 2 * F + F + i];
    float v = g / (1.0f + expf(-g)) * u;
    h[idx] = v;
    if (rounded) rounded[idx] = __float2bfloat16_rn(v);
}

// dgate_up (N, 2F) into dgate_up (rounded NULL), or rounded to bf16 into `rounded` alone
__global__ void swiglu_backward_kernel(float* dgate_up, __nv_bfloat16* rounded, const float* dh, const float* gate_up, int N, int F) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * F) return;
    size_t n = idx / F, i = idx % F;
    float g = gate_up[n * 2 * F + i], u = gate_up[n * 2 * F + F + i], d = dh[idx];
    float sig = 1.0f / (1.0f + expf(-g));
    float dup = d * g * sig, dgate = d * u * sig * (1.0f + g * (1.0f - sig));
    if (rounded) {
        rounded[n * 2 * F + F + i] = __float2bfloat16_rn(dup);
        rounded[n * 2 * F + i] = __float2bfloat16_rn(dgate);
    } else {
        dgate_up[n * 2 * F + F + i] = dup;
        dgate_up[n * 2 * F + i] = dgate;
    }
}

void cuda_swiglu_forward(const Backend* be, float* h, const float* gate_up, int N, int F) {
    __nv_bfloat16* rounded = written_rounding(be, h, (size_t)N * F);
    swiglu_forward_kernel<<<cuda_blocks((size_t)N * F, CUDA_THREADS), CUDA_THREADS>>>(h, rounded, gate_up, N, F);
    cudaCheckLaunch();
}

void cuda_swiglu_backward(const Backend* be, float* dgate_up, const float* dh, const float* gate_up, int N, int F) {
    // bf16: the gate_up product's backward reads dgate_up from the kept rounding alone
    __nv_bfloat16* rounded = written_rounding(be, dgate_up, (size_t)N * 2 * F);
    swiglu_backward_kernel<<<cuda_blocks((size_t)N * F, CUDA_THREADS), CUDA_THREADS>>>(dgate_up, rounded, dh, gate_up, N, F);
    cudaCheckLaunch();
}

// ---- embedding ----
__global__ void embedding_forward_kernel(float* x, const int* tokens, const float* table, int N, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * C) return;
    x[idx] = table[(size_t)tokens[idx / C] * C + idx % C];
}

void cuda_embedding_forward(float* x, const int* tokens, const float* tok_embedding, int N, int C) {
    embedding_forward_kernel<<<cuda_blocks((size_t)N * C, CUDA_THREADS), CUDA_THREADS>>>(x, tokens, tok_embedding, N, C);
    cudaCheckLaunch();
}

// The backward gathers instead of scattering: the positions of each distinct token, in
// position order (a counting sort on the host), are summed by one block per token into its
// row, so the sum's order is fixed and no two blocks touch one row.
__global__ void embedding_backward_kernel(float* dtable, const float* dx, const int* order, const int* start, const int* token_of,
                                          int C) {
    int u = blockIdx.x;
    float* dst = dtable + (size_t)token_of[u] * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float acc = dst[i];
        for (int k = start[u]; k < start[u + 1]; k++) acc += dx[(size_t)order[k] * C + i];
        dst[i] = acc;
    }
}

void cuda_embedding_backward(float* dtok_embedding, const float* dx, const int* tokens, int N, int C) {
    int* host = (int*)mallocCheck((size_t)N * sizeof(int));
    cuda_download(host, tokens, (size_t)N * sizeof(int));
    int max_token = 0;
    for (int n = 0; n < N; n++) max_token = host[n] > max_token ? host[n] : max_token;
    int* count = (int*)callocCheck((size_t)max_token + 2, sizeof(int));
    for (int n = 0; n < N; n++) count[host[n] + 1]++;
    // plan: order (N) positions grouped by token, start (U + 1), token_of (U)
    int* plan = (int*)mallocCheck(((size_t)2 * N + 1 + N) * sizeof(int));
    int *order = plan, *start = plan + N, U = 0;
    for (int t = 0; t <= max_token; t++) {
        count[t + 1] += count[t];  // count[t]: first slot of token t
    }
    int* fill = (int*)mallocCheck(((size_t)max_token + 1) * sizeof(int));
    memcpy(fill, count, ((size_t)max_token + 1) * sizeof(int));
    for (int n = 0; n < N; n++) order[fill[host[n]]++] = n;
    int* token_of = start + N + 1;
    for (int t = 0; t <= max_token; t++) {
        if (count[t + 1] > count[t]) {
            start[U] = count[t];
            token_of[U++] = t;
        }
    }
    start[U] = N;
    // order, then start (U + 1), then token_of (U), packed for one upload
    memmove(start + U + 1, token_of, (size_t)U * sizeof(int));
    size_t plan_ints = (size_t)N + U + 1 + U;
    int* d_plan = (int*)cuda_scratch(SCRATCH_A, plan_ints * sizeof(int));
    cuda_upload(d_plan, plan, plan_ints * sizeof(int));
    embedding_backward_kernel<<<U, 128>>>(dtok_embedding, dx, d_plan, d_plan + N, d_plan + N + U + 1, C);
    cudaCheckLaunch();
    free(host);
    free(count);
    free(plan);
    free(fill);
}

// ---- cross-entropy: one block per row, the logits read once ----
// Each thread keeps a running max and its sum of exp(x - max), rescaled when the max grows (the
// online softmax), so the row is read once; the block then brings every thread's sum to the
// row's max and adds them. No probabilities are written: the backward computes them from the
// row's max and 1 / sum.
__global__ void crossentropy_forward_kernel(const float* logits, float* row_stats, float* row_loss, const int* targets, int V) {
    const float* l = logits + (size_t)blockIdx.x * V;
    float mx = -INFINITY, sum = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float x = l[i];
        if (x > mx) {
            sum = sum * expf(mx - x) + 1.0f;
            mx = x;
        } else {
            sum += expf(x - mx);
        }
    }
    float row_max = block_reduce<true>(mx);
    sum = block_reduce<false>(sum > 0.0f ? sum * expf(mx - row_max) : 0.0f);  // a thread with no element adds nothing
    if (threadIdx.x == 0) {
        row_stats[2 * blockIdx.x] = row_max;
        row_stats[2 * blockIdx.x + 1] = 1.0f / sum;
        row_loss[blockIdx.x] = row_max + logf(sum) - l[targets[blockIdx.x]];
    }
}

// sum of x (n) in double, one block, fixed order: thread t takes t, t + 1024, ..., then the tree
__global__ void sum_double_kernel(double* out, const float* x, size_t n) {
    __shared__ double part[1024];
    double acc = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) acc += (double)x[i];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = part[0];
}

double cuda_crossentropy_forward(const float* logits, float* row_stats, float* row_loss, const int* targets, int N, int V) {
    crossentropy_forward_kernel<<<N, 1024>>>(logits, row_stats, row_loss, targets, V);
    cudaCheckLaunch();
    double* d_total = (double*)cuda_scratch(SCRATCH_A, sizeof(double));
    sum_double_kernel<<<1, 1024>>>(d_total, row_loss, (size_t)N);
    cudaCheckLaunch();
    double total;
    cuda_download(&total, d_total, sizeof(double));
    return total;
}

// dlogits into the logits (rounded NULL), or rounded to bf16 into `rounded` alone
__global__ void crossentropy_backward_kernel(float* logits, __nv_bfloat16* rounded, const float* row_stats, const int* targets, float dloss,
                                             int N, int V) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * V) return;
    size_t n = idx / V;
    float prob = expf(logits[idx] - row_stats[2 * n]) * row_stats[2 * n + 1];
    float g = prob * dloss;
    if ((int)(idx % V) == targets[n]) g -= dloss;
    if (rounded) rounded[idx] = __float2bfloat16_rn(g);
    else logits[idx] = g;
}

void cuda_crossentropy_backward(const Backend* be, float* logits, const float* row_stats, const int* targets, float dloss, int N, int V) {
    // bf16: the LM head's backward product reads dlogits from the kept rounding alone
    __nv_bfloat16* rounded = written_rounding(be, logits, (size_t)N * V);
    crossentropy_backward_kernel<<<cuda_blocks((size_t)N * V, CUDA_THREADS), CUDA_THREADS>>>(logits, rounded, row_stats, targets, dloss,
                                                                                            N, V);
    cudaCheckLaunch();
}

// ---- optimizer ----
// squared sum in double: each block one chunk of SQ_CHUNK in a fixed tree, then the chunks' sums in another
#define SQ_CHUNK 65536
__global__ void sum_squares_partial_kernel(double* partial, const float* x, size_t n) {
    __shared__ double part[CUDA_THREADS];
    size_t c0 = (size_t)blockIdx.x * SQ_CHUNK, c1 = c0 + SQ_CHUNK < n ? c0 + SQ_CHUNK : n;
    double acc = 0.0;
    for (size_t i = c0 + threadIdx.x; i < c1; i += blockDim.x) acc += (double)x[i] * x[i];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = part[0];
}

double cuda_sum_squares(const float* x, size_t n) {
    size_t chunks = (n + SQ_CHUNK - 1) / SQ_CHUNK;
    double* partial = (double*)cuda_scratch(SCRATCH_A, (chunks + 1) * sizeof(double));
    if (chunks) {
        sum_squares_partial_kernel<<<(unsigned)chunks, CUDA_THREADS>>>(partial + 1, x, n);
        cudaCheckLaunch();
    }
    cuda_sum_fixed_order(partial, partial + 1, 1, chunks, chunks, 1.0);
    double sum;
    cuda_download(&sum, partial, sizeof(double));
    return sum;
}

__global__ void scale_kernel(float* x, size_t n, float factor) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}

void cuda_scale(float* x, size_t n, float factor) {
    if (!n) return;
    scale_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS>>>(x, n, factor);
    cudaCheckLaunch();
}

__global__ void add_kernel(float* y, const float* x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

void cuda_add(float* y, const float* x, size_t n) {
    if (!n) return;
    add_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS>>>(y, x, n);
    cudaCheckLaunch();
}

// The CPU backend's arithmetic operation by operation, each rounded on its own (the _rn
// intrinsics are never fused into multiply-adds), so an update equals the CPU's bitwise
// p's rounding into `twin` too unless NULL
__global__ void adamw_kernel(float* p, __nv_bfloat16* twin, const float* g, float* m, float* v, size_t n, AdamWStep st) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i];
    float pi = __fmul_rn(p[i], st.decay);
    float mi = __fadd_rn(__fmul_rn(st.beta1, m[i]), __fmul_rn(__fsub_rn(1.0f, st.beta1), gi));
    float vi = __fadd_rn(__fmul_rn(st.beta2, v[i]), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, st.beta2), gi), gi));
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), st.bc2_sqrt), st.eps);
    float updated = __fsub_rn(pi, __fdiv_rn(__fmul_rn(st.step_size, mi), denom));
    p[i] = updated;
    if (twin) twin[i] = __float2bfloat16_rn(updated);
    m[i] = mi;
    v[i] = vi;
}

int cuda_adamw_update(const Backend* be, float* p, const float* g, float* m, float* v, size_t n, const AdamWStep* step) {
    // bf16: the weights' twins written with them, not rounded again by a pass of their own
    __nv_bfloat16* twin = be->copies ? (__nv_bfloat16*)weight_copies_weights_twin(be->copies, p, n) : NULL;
    if (!n) return twin != NULL;
    adamw_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS>>>(p, twin, g, m, v, n, *step);
    cudaCheckLaunch();
    return twin != NULL;
}
