// Attention with its T x T maps written out (llm.c's route), for every variant (model/attention.h):
// the default CUDA path of training wherever a layer's maps fit a memory budget. Each product is
// one batched cuBLAS call with fp32 accumulation (fp32 operands with TF32 off, or bf16 operands on
// the tensor cores where precision = bf16) whose operands are read in place by pointer arrays, one
// entry per (sequence, head, map), so that every layout is the same few lines (attention_q_col and
// its neighbours say where each entry's sub-heads are):
//   forward:  S_m = scale Q_m K_m^T for every map of every head; quantization and the hook on S;
//             one row kernel forms each map's softmax and log-sum-exp and what the values take:
//             P_0 - lambda P_1 where the maps share values (DINT keeps P_0 too, for o1 = P_0 V),
//             P_0 and -lambda P_1 for DIFF V2's halves; y = the sum of those products with V.
//   backward: S again, quantized and hooked as in the forward (the straight-through estimator);
//             P_m = exp(S_m - lse_m); each map's output gradient G_0 = dy (+ DINT's dy0) and
//             G_1 = -lambda dy; dV += P_m^T G_m; dP = dy V^T once per head (and dy V_1^T for the
//             halves, dy0 V^T for DINT); a row kernel forms dS_m = scale P_m (dP_m - D_m) with
//             D_m = rowsum(P_m dP_m), dP_0 = dy V^T (+ dy0 V^T), dP_1 = -lambda dy V_1^T, and
//             lambda's gradient -rowsum(P_1 dy V_1^T); then dQ += dS K and dK += dS^T Q.
// Deterministic without atomics: dqkv starts at zero and every gradient product accumulates into
// it (beta = 1) in calls whose entries write disjoint sub-heads: one call per map and per position
// of a head in its group (attention_head_group), so a sub-head the heads of a group share takes
// their terms in head order, one call after another.
// Memory: B H M T^2 floats of maps and, in the backward, B H T^2 (two of them for the halves and
// DINT) of their gradients, plus bf16 copies where precision = bf16; written_attention_budget says
// what a call may take (DIFFTX_ATTENTION_MIB, default an eighth of the device's memory). Past it,
// and for decoding, attention.cu's memory-linear kernels run; DIFFTX_ATTENTION_PATH = kernels or
// written forces a path where it can run, to compare them. Causal rows are products over all T
// keys with the entries past the diagonal zero: twice the arithmetic of the triangle, on the
// tensor cores' rate rather than the kernels'.
// attention_maps is this path for one head of sequence 0.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "cuda.h"

extern "C" {
#include "../../base/util.h"
}

// One call's geometry, passed to the kernels by value: `units` (sequence, head) pairs u = b H + h
// of R = T - q0 query rows each, the query r of a row being q0 + r
struct Wgeo {
    int B, T, H, M, R, q0, units;
    int Dv, QKV, HDv, lam;
    int halves;    // the maps multiply different values (DIFF V2's halves pairing)
    int integral;  // DINT: map 0's own output and gradient besides the combined one
    int slots;     // map-gradient products per head in the backward: 1, or 2 (halves, DINT)
    float scale;
};

static Wgeo wgeo(const AttnShape* s) {
    Wgeo g;
    g.B = s->B, g.T = s->T, g.H = s->H, g.M = s->M, g.q0 = s->q0, g.R = s->T - s->q0, g.units = s->B * s->H;
    g.Dv = attention_value_width(s), g.QKV = attention_qkv_width(s), g.HDv = s->H * g.Dv, g.lam = attention_lambda_offset(s);
    g.halves = s->M == 2 && !attention_maps_share_values(s);
    g.integral = s->integral;
    g.slots = g.halves || g.integral ? 2 : 1;
    g.scale = 1.0f / sqrtf((float)s->D);
    return g;
}

// ---- the path's choice ----
int cuda_attention_forced(void) {
    const char* v = getenv("DIFFTX_ATTENTION_PATH");
    if (!v || !*v || strcmp(v, "auto") == 0) return ATTENTION_FORCE_NONE;
    if (strcmp(v, "kernels") == 0) return ATTENTION_FORCE_KERNELS;
    if (strcmp(v, "written") == 0) return ATTENTION_FORCE_WRITTEN;
    die("DIFFTX_ATTENTION_PATH is '%s': it takes auto, kernels or written", v);
}

double written_attention_budget(const char** how) {
    const char* v = getenv("DIFFTX_ATTENTION_MIB");
    if (!v || !*v) {
        *how = "an eighth of the device's memory";
        return backend_cuda()->memory_bytes() / 8;
    }
    char* end;
    double mib = strtod(v, &end);
    if (*end || !(mib >= 0) || !isfinite(mib)) die("DIFFTX_ATTENTION_MIB is '%s': it takes a number of MiB, 0 or more", v);
    *how = "DIFFTX_ATTENTION_MIB";
    return mib * 1048576.0;
}

// Bytes a call of shape s writes out: the maps (and their bf16 copies), in the backward their
// gradients too
static double workspace_bytes(const AttnShape* s, int backward, int bf16) {
    Wgeo g = wgeo(s);
    double maps = (double)g.units * g.M * g.R * g.T, grads = backward ? (double)g.units * g.slots * g.T * g.T : 0;
    return maps * (4 + (bf16 ? 2 : 0)) + grads * 4;
}

const char* written_attention_refusal(const AttnShape* s, int backward, int bf16) {
    static char why[200];
    const char* how;
    if (cuda_attention_forced() == ATTENTION_FORCE_KERNELS) return "DIFFTX_ATTENTION_PATH = kernels";
    if (s->q0) return "decoding after cached rows";
    double need = workspace_bytes(s, backward, bf16), budget = written_attention_budget(&how);
    if (need > budget && cuda_attention_forced() != ATTENTION_FORCE_WRITTEN) {
        snprintf(why, sizeof(why), "its maps take %.0f MiB, over the budget of %.0f MiB (%s)", need / 1048576.0, budget / 1048576.0, how);
        return why;
    }
    return NULL;
}

// ---- batched products on pointer arrays ----
// A batch's pointer arrays in device memory, kept by their contents: a layer's calls name the
// same buffers step after step, so each array is uploaded once (a bounded number are kept)
static const void* const* device_array(const std::vector<const void*>& host) {
    static std::unordered_map<std::string, void*> kept;
    std::string key((const char*)host.data(), host.size() * sizeof(void*));
    auto found = kept.find(key);
    if (found != kept.end()) return (const void* const*)found->second;
    if (kept.size() >= 4096) {
        for (auto& e : kept) cuda_release(e.second);
        kept.clear();
    }
    void* d = cuda_alloc(key.size());
    cuda_upload(d, host.data(), key.size());
    kept[key] = d;
    return (const void* const*)d;
}

// The entries of one batched product: C_i = alpha op(A_i) op(B_i) + beta C_i, column-major
struct Batch {
    std::vector<const void*> A, B, C;
    void add(const void* a, const void* b, const float* c) { A.push_back(a), B.push_back(b), C.push_back(c); }
};

// A and B in fp32 (TF32 off) or bf16 (the tensor cores), C fp32
template <typename TP>
static void run(const Batch& e, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, int lda, int ldb, float beta,
                int ldc) {
    if (e.A.empty()) return;
    const void* const* A = device_array(e.A);
    const void* const* B = device_array(e.B);
    void* const* C = (void* const*)device_array(e.C);
    int count = (int)e.A.size();
    if (sizeof(TP) == sizeof(float)) {
        cublasCheck(cublasSgemmBatched(cuda_cublas(), ta, tb, m, n, k, &alpha, (const float* const*)A, lda, (const float* const*)B, ldb, &beta,
                                       (float* const*)C, ldc, count));
    } else {
        cublasCheck(cublasGemmBatchedEx(cuda_bf16_cublas(), ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &beta, C,
                                        CUDA_R_32F, ldc, count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
}

// ---- the row kernels: one warp per query row of a (sequence, head) ----
template <typename TP>
__device__ __forceinline__ TP narrow(float x);
template <>
__device__ __forceinline__ float narrow<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// lambda of the query row of row r in unit u: the token's (qkv's column) or the layer's
__device__ __forceinline__ float unit_lambda(const Wgeo& g, const float* qkv, const float* lambda, int u, int r) {
    if (g.lam < 0) return *lambda;
    return qkv[((size_t)(u / g.H) * g.T + g.q0 + r) * g.QKV + g.lam + u % g.H];
}

// amax (rows): the largest |S| of each row's causal entries; S (rows, T), row n the query
// q0 + n % R of its tensor
__global__ void rows_absmax_kernel(float* amax, const float* S, size_t rows, int R, int T, int q0) {
    size_t n = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (n >= rows) return;
    int visible = q0 + (int)(n % R) + 1;
    float mx = 0.0f;
    for (int j = lane; j < visible; j += 32) mx = fmaxf(mx, fabsf(S[n * T + j]));
    mx = warp_max(mx);
    if (lane == 0) amax[n] = mx;
}

// S's causal entries quantized with their row's step
__global__ void quantize_rows_kernel(float* S, const float* step, size_t rows, int R, int T, int q0, int Q) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * T) return;
    size_t n = idx / T;
    int j = (int)(idx % T);
    if (j <= q0 + (int)(n % R)) S[idx] = quantize(S[idx], step[n], Q);
}

// Each map's softmax of the row's causal logits in S (units, M, R, T), zero past them. Statistics
// from lse_in (B, H, M, T) where given (the backward), else found and written to lse (where not
// NULL). With combine (a training forward) P gets what the value products take (the file's
// comment); without, P_m and the fp32 S get each map's probabilities.
template <typename TP>
__global__ void softmax_rows_kernel(TP* P, float* S, float* lse, const float* lse_in, const float* qkv, const float* lambda, Wgeo g,
                                    int combine) {
    size_t n = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (n >= (size_t)g.units * g.R) return;
    int u = (int)(n / g.R), r = (int)(n % g.R), visible = g.q0 + r + 1, T = g.T;
    float l[2];
    for (int m = 0; m < g.M; m++) {
        const float* row = S + (((size_t)u * g.M + m) * g.R + r) * T;
        size_t stat = ((size_t)u * g.M + m) * T + g.q0 + r;
        if (lse_in) {
            l[m] = lse_in[stat];
            continue;
        }
        float mx = -INFINITY;
        for (int j = lane; j < visible; j += 32) mx = fmaxf(mx, row[j]);
        mx = warp_max(mx);
        float sum = 0.0f;
        for (int j = lane; j < visible; j += 32) sum += expf(row[j] - mx);
        l[m] = mx + logf(warp_sum(sum));
        if (lse && lane == 0) lse[stat] = l[m];
    }
    float lam = combine && g.M == 2 ? unit_lambda(g, qkv, lambda, u, r) : 0.0f;
    size_t at0 = (((size_t)u * g.M) * g.R + r) * T, at1 = at0 + (size_t)g.R * T;
    for (int j = lane; j < T; j += 32) {
        float p0 = j < visible ? expf(S[at0 + j] - l[0]) : 0.0f;
        float p1 = g.M == 2 && j < visible ? expf(S[at1 + j] - l[1]) : 0.0f;
        if (!combine || g.M == 1) {
            S[at0 + j] = p0, P[at0 + j] = narrow<TP>(p0);
            if (g.M == 2) S[at1 + j] = p1, P[at1 + j] = narrow<TP>(p1);
        } else if (g.halves) {
            P[at0 + j] = narrow<TP>(p0), P[at1 + j] = narrow<TP>(-lam * p1);
        } else if (g.integral) {
            P[at0 + j] = narrow<TP>(p0), P[at1 + j] = narrow<TP>(p0 - lam * p1);
        } else {
            P[at0 + j] = narrow<TP>(p0 - lam * p1);
        }
    }
}

// G (M, B T, H Dv): map 0's output gradient dy (+ dy0), map 1's -lambda dy
template <typename TP>
__global__ void map_grads_kernel(TP* G, const float* dy, const float* dy0, const float* qkv, const float* lambda, Wgeo g) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)g.B * g.T * g.HDv;
    if (i >= n) return;
    G[i] = narrow<TP>(dy0 ? dy[i] + dy0[i] : dy[i]);
    if (g.M == 2) {
        size_t row = i / g.HDv;
        int h = (int)(i / g.Dv % g.H);
        float lam = g.lam < 0 ? *lambda : qkv[row * g.QKV + g.lam + h];
        G[n + i] = narrow<TP>(-lam * dy[i]);
    }
}

// From the probabilities in S (units, M, T, T) and dP (units, slots, T, T): dS_m = scale P_m (dP_m
// - D_m) into S and P (P's precision), and lambda's gradient -rowsum(P_1 dy V_1^T) of each row:
// into dqkv's lambda column (per token), else dlam_rows (units, T)
template <typename TP>
__global__ void grad_rows_kernel(TP* P, float* S, const float* dP, float* dqkv, float* dlam_rows, const float* qkv, const float* lambda,
                                 Wgeo g) {
    size_t n = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (n >= (size_t)g.units * g.T) return;
    int u = (int)(n / g.T), r = (int)(n % g.T), T = g.T, visible = r + 1;
    size_t at0 = ((size_t)u * g.M * T + r) * T, at1 = at0 + (size_t)T * T;
    const float* d0 = dP + ((size_t)u * g.slots * T + r) * T;
    const float* d1 = g.slots == 2 ? d0 + (size_t)T * T : d0;
    const float* base1 = g.halves ? d1 : d0;  // dy V_1^T
    float lam = g.M == 2 ? unit_lambda(g, qkv, lambda, u, r) : 0.0f;
    float D0 = 0.0f, e1 = 0.0f;
    for (int j = lane; j < visible; j += 32) {
        D0 += S[at0 + j] * (g.integral ? d0[j] + d1[j] : d0[j]);
        if (g.M == 2) e1 += S[at1 + j] * base1[j];
    }
    D0 = warp_sum(D0);
    e1 = warp_sum(e1);
    float D1 = -lam * e1;
    for (int j = lane; j < T; j += 32) {
        float ds0 = j < visible ? g.scale * S[at0 + j] * ((g.integral ? d0[j] + d1[j] : d0[j]) - D0) : 0.0f;
        S[at0 + j] = ds0, P[at0 + j] = narrow<TP>(ds0);
        if (g.M == 2) {
            float ds1 = j < visible ? g.scale * S[at1 + j] * (-lam * base1[j] - D1) : 0.0f;
            S[at1 + j] = ds1, P[at1 + j] = narrow<TP>(ds1);
        }
    }
    if (g.M == 2 && lane == 0) {
        if (g.lam >= 0) dqkv[((size_t)(u / g.H) * T + r) * g.QKV + g.lam + u % g.H] = -e1;
        else dlam_rows[(size_t)u * T + r] = -e1;
    }
}

static unsigned row_blocks(size_t rows) { return cuda_blocks(rows, CUDA_THREADS / 32); }

// ---- the steps of a call ----
// qkv in the products' precision: itself, or a bf16 copy
template <typename TP>
static const TP* operand_copy(const float* x, size_t n, TP* room) {
    if (sizeof(TP) == sizeof(float)) return (const TP*)x;
    cuda_round_bf16((__nv_bfloat16*)room, x, n);
    return room;
}

// S (units, M, R, T) = scale Q K^T of heads h0 .. h0 + heads - 1 of sequences 0 .. B - 1 (units
// = B heads), quantized where s asks, then shown to the hook
template <typename TP>
static void logits(float* S, const TP* x, const AttnShape* s, const Wgeo& g, int h0, int heads, HookSite hook, int recompute) {
    Batch e;
    size_t tile = (size_t)g.R * g.T;
    for (int b = 0; b < g.B; b++) {
        for (int h = h0; h < h0 + heads; h++) {
            for (int m = 0; m < g.M; m++) {
                const TP* base = x + (size_t)b * g.T * g.QKV;
                e.add(base + attention_k_col(s, h, m), base + (size_t)g.q0 * g.QKV + attention_q_col(s, h, m),
                      S + (((size_t)b * heads + h - h0) * g.M + m) * tile);
            }
        }
    }
    // column-major S^T (T, R) = K Q^T: row r, key j at S[r T + j]
    run<TP>(e, CUBLAS_OP_T, CUBLAS_OP_N, g.T, g.R, s->D, g.scale, g.QKV, g.QKV, 0.0f, g.T);
    size_t rows = (size_t)g.B * heads * g.M * g.R;
    int Q = logit_quant_levels(s->quant.bits);
    if (Q) {
        float* amax = (float*)cuda_scratch(SCRATCH_MAP_ROWS, 2 * rows * sizeof(float));
        rows_absmax_kernel<<<row_blocks(rows), CUDA_THREADS>>>(amax, S, rows, g.R, g.T, g.q0);
        cudaCheckLaunch();
        cuda_quant_steps(amax + rows, amax, (int)(rows / g.R), g.R, s->quant.scope == QUANT_PER_ROW, Q);
        quantize_rows_kernel<<<cuda_blocks(rows * g.T, CUDA_THREADS), CUDA_THREADS>>>(S, amax + rows, rows, g.R, g.T, g.q0, Q);
        cudaCheckLaunch();
    }
    if (hook.hook) {  // the hook sees a host copy, which goes back since it may write
        float* host = (float*)mallocCheck(rows * g.T * sizeof(float));
        cuda_download(host, S, rows * g.T * sizeof(float));
        for (int b = 0; b < g.B; b++) {
            for (int h = h0; h < h0 + heads; h++) {
                for (int m = 0; m < g.M; m++) {
                    float* block = host + (((size_t)b * heads + h - h0) * g.M + m) * tile;
                    Activation act = {ACT_ATTN_LOGITS, hook.layer, b, h, m, g.q0, g.R, g.T, g.T, recompute, block};
                    hook.hook->fn(hook.hook->ctx, &act);
                }
            }
        }
        cuda_upload(S, host, rows * g.T * sizeof(float));
        free(host);
    }
}

// out (B T, H Dv) (+)= P slot `slot` times the values of map vm, per head
template <typename TP>
static void values_product(float* out, const TP* P, int slot, int vm, const TP* x, const AttnShape* s, const Wgeo& g, float beta) {
    Batch e;
    for (int b = 0; b < g.B; b++) {
        for (int h = 0; h < g.H; h++) {
            e.add(x + (size_t)b * g.T * g.QKV + attention_v_col(s, h, vm), P + (((size_t)b * g.H + h) * g.M + slot) * g.T * g.T,
                  out + (size_t)b * g.T * g.HDv + (size_t)h * g.Dv);
        }
    }
    // column-major out^T (Dv, T) = V^T P^T
    run<TP>(e, CUBLAS_OP_N, CUBLAS_OP_N, g.Dv, g.T, g.T, 1.0f, g.QKV, g.T, beta, g.HDv);
}

template <typename TP>
static void forward(float* y, float* o1, float* lse, const float* qkv, const float* lambda, const AttnShape* s, HookSite hook) {
    Wgeo g = wgeo(s);
    size_t N = (size_t)g.B * g.T, maps = (size_t)g.units * g.M * g.T * g.T;
    TP* room = sizeof(TP) == sizeof(float) ? NULL : (TP*)cuda_scratch(SCRATCH_OPERANDS_BF16, N * g.QKV * sizeof(TP));
    const TP* x = operand_copy<TP>(qkv, N * g.QKV, room);
    float* S = (float*)cuda_scratch(SCRATCH_MAPS, maps * sizeof(float));
    logits<TP>(S, x, s, g, 0, g.H, hook, 0);
    TP* P = sizeof(TP) == sizeof(float) ? (TP*)S : (TP*)cuda_scratch(SCRATCH_MAPS_BF16, maps * sizeof(TP));
    softmax_rows_kernel<TP><<<row_blocks((size_t)g.units * g.T), CUDA_THREADS>>>(P, S, lse, NULL, qkv, lambda, g, 1);
    cudaCheckLaunch();
    if (g.halves) {
        values_product<TP>(y, P, 0, 0, x, s, g, 0.0f);
        values_product<TP>(y, P, 1, 1, x, s, g, 1.0f);
    } else {
        values_product<TP>(y, P, g.integral, 0, x, s, g, 0.0f);
        if (o1) values_product<TP>(o1, P, 0, 0, x, s, g, 0.0f);
    }
}

// dqkv's columns (col(h) of sequence b) += for each head h of the entries, op(A_h) op(B_h): one call
// per position of a head in its group, so that sub-heads the group shares take their heads' terms
// in head order (the file's comment)
template <typename TP, typename Entry>
static void gradient_product(float* dqkv, const AttnShape* s, const Wgeo& g, Entry entry, cublasOperation_t ta, cublasOperation_t tb, int m,
                             int k, int lda, int ldb) {
    int group = attention_head_group(s);
    for (int j = 0; j < group; j++) {
        Batch e;
        for (int b = 0; b < g.B; b++) {
            for (int h = j; h < g.H; h += group) {
                const void *A, *B;
                int col = entry(b, h, &A, &B);
                e.add(A, B, dqkv + (size_t)b * g.T * g.QKV + col);
            }
        }
        run<TP>(e, ta, tb, m, g.T, k, 1.0f, lda, ldb, 1.0f, g.QKV);
    }
}

template <typename TP>
static void backward(float* dqkv, float* dlambda, const float* dy, const float* dy0, const float* qkv, const float* lse, const float* lambda,
                     const AttnShape* s, HookSite hook) {
    Wgeo g = wgeo(s);
    size_t N = (size_t)g.B * g.T, TT = (size_t)g.T * g.T, maps = (size_t)g.units * g.M * TT, ny = N * g.HDv;
    // operands: qkv in bf16, the maps' output gradients G (M), and in bf16 dy and dy0 themselves for DINT
    size_t operands = (sizeof(TP) == sizeof(float) ? 0 : N * g.QKV + 2 * ny) + g.M * ny;
    TP* room = (TP*)cuda_scratch(SCRATCH_OPERANDS_BF16, operands * sizeof(TP));
    const TP* x = operand_copy<TP>(qkv, N * g.QKV, room);
    TP* G = sizeof(TP) == sizeof(float) ? room : room + N * g.QKV;
    float* S = (float*)cuda_scratch(SCRATCH_MAPS, maps * sizeof(float));
    logits<TP>(S, x, s, g, 0, g.H, hook, 1);
    TP* P = sizeof(TP) == sizeof(float) ? (TP*)S : (TP*)cuda_scratch(SCRATCH_MAPS_BF16, maps * sizeof(TP));
    softmax_rows_kernel<TP><<<row_blocks((size_t)g.units * g.T), CUDA_THREADS>>>(P, S, NULL, lse, qkv, lambda, g, 0);
    cudaCheckLaunch();
    if (sizeof(TP) == sizeof(float) && !dy0 && g.M == 1) {
        G = (TP*)dy;  // map 0's gradient is dy itself
    } else {
        map_grads_kernel<TP><<<cuda_blocks(ny, CUDA_THREADS), CUDA_THREADS>>>(G, dy, dy0, qkv, lambda, g);
        cudaCheckLaunch();
    }
    // dy (and dy0) as the dP products read them: G_0 where it is dy, else copies
    const TP* dy_op = dy0 ? operand_copy<TP>(dy, ny, G + g.M * ny) : G;
    const TP* dy0_op = dy0 ? operand_copy<TP>(dy0, ny, G + (g.M + 1) * ny) : NULL;
    cudaCheck(cudaMemsetAsync(dqkv, 0, N * g.QKV * sizeof(float), 0));
    // dV += P_m^T G_m: column-major dV^T (Dv, T) = G^T P
    for (int m = 0; m < g.M; m++) {
        gradient_product<TP>(dqkv, s, g, [&](int b, int h, const void** A, const void** B) {
            *A = G + (size_t)m * ny + (size_t)b * g.T * g.HDv + (size_t)h * g.Dv;
            *B = P + (((size_t)b * g.H + h) * g.M + m) * TT;
            return attention_v_col(s, h, m);
        }, CUBLAS_OP_N, CUBLAS_OP_T, g.Dv, g.T, g.HDv, g.T);
    }
    // dP (units, slots, T, T): dy V_0^T, and dy V_1^T (halves) or dy0 V_0^T (DINT); column-major
    // dP^T (T, T) = V dy^T
    float* dP = (float*)cuda_scratch(SCRATCH_MAP_GRADS, (size_t)g.units * g.slots * TT * sizeof(float));
    for (int slot = 0; slot < g.slots; slot++) {
        Batch e;
        for (int b = 0; b < g.B; b++) {
            for (int h = 0; h < g.H; h++) {
                const TP* grad = slot == 1 && g.integral ? dy0_op : dy_op;
                e.add(x + (size_t)b * g.T * g.QKV + attention_v_col(s, h, slot == 1 && g.halves), grad + (size_t)b * g.T * g.HDv + (size_t)h * g.Dv,
                      dP + (((size_t)b * g.H + h) * g.slots + slot) * TT);
            }
        }
        run<TP>(e, CUBLAS_OP_T, CUBLAS_OP_N, g.T, g.T, g.Dv, 1.0f, g.QKV, g.HDv, 0.0f, g.T);
    }
    float* dlam_rows = (float*)cuda_scratch(SCRATCH_MAP_ROWS, (size_t)g.units * g.T * sizeof(float));
    grad_rows_kernel<TP><<<row_blocks((size_t)g.units * g.T), CUDA_THREADS>>>(P, S, dP, dqkv, dlam_rows, qkv, lambda, g);
    cudaCheckLaunch();
    for (int m = 0; m < g.M; m++) {
        // dQ += dS K: column-major dQ^T (D, T) = K^T dS^T
        gradient_product<TP>(dqkv, s, g, [&](int b, int h, const void** A, const void** B) {
            *A = x + (size_t)b * g.T * g.QKV + attention_k_col(s, h, m);
            *B = P + (((size_t)b * g.H + h) * g.M + m) * TT;
            return attention_q_col(s, h, m);
        }, CUBLAS_OP_N, CUBLAS_OP_N, s->D, g.T, g.QKV, g.T);
        // dK += dS^T Q: column-major dK^T (D, T) = Q^T dS
        gradient_product<TP>(dqkv, s, g, [&](int b, int h, const void** A, const void** B) {
            *A = x + (size_t)b * g.T * g.QKV + attention_q_col(s, h, m);
            *B = P + (((size_t)b * g.H + h) * g.M + m) * TT;
            return attention_k_col(s, h, m);
        }, CUBLAS_OP_N, CUBLAS_OP_T, s->D, g.T, g.QKV, g.T);
    }
    if (dlambda && g.M == 2 && g.lam < 0) cuda_sum_fixed_order(dlambda, dlam_rows, 1, (size_t)g.units * g.T, (size_t)g.units * g.T, 1.0f);
}

void written_attention_forward(int bf16, float* y, float* o1, float* lse, const float* qkv, const float* lambda, const AttnShape* s,
                               HookSite hook) {
    if (bf16) forward<__nv_bfloat16>(y, o1, lse, qkv, lambda, s, hook);
    else forward<float>(y, o1, lse, qkv, lambda, s, hook);
}

void written_attention_backward(int bf16, float* dqkv, float* dlambda, const float* dy, const float* dy0, const float* qkv,
                                const float* lse, const float* lambda, const AttnShape* s, HookSite hook) {
    if (bf16) backward<__nv_bfloat16>(dqkv, dlambda, dy, dy0, qkv, lse, lambda, s, hook);
    else backward<float>(dqkv, dlambda, dy, dy0, qkv, lse, lambda, s, hook);
}

// ---- attention maps: head h of sequence 0, rows q0 .. T - 1, in fp32 ----
void cuda_attention_maps(const Backend* be, float* P, const float* qkv, const AttnShape* s, int h, HookSite hook) {
    (void)be;
    AttnShape one = *s;
    one.B = 1;
    Wgeo g = wgeo(&one);
    g.units = 1;
    logits<float>(P, qkv, &one, g, h, 1, hook, 1);
    softmax_rows_kernel<float><<<row_blocks(g.R), CUDA_THREADS>>>(P, P, NULL, NULL, qkv, NULL, g, 0);
    cudaCheckLaunch();
}
