// Causal attention on the GPU for every variant (model/attention.h), memory-linear in T.
//
// Forward: a block takes ATT_BQ query rows of one (sequence, head) and walks the key/value
// tiles of ATT_BK keys; each map keeps its own online-softmax state (running max, sum and
// output) and both maps use the same V tile where they share values, so V is read once for
// DIFF's two maps (DIFF V2's "halves" pairing loads one V tile per map). The epilogue writes
// y = O_0 / l_0 - lambda O_1 / l_1 and the log-sum-exp of each map (and DINT's o1 = O_0 / l_0).
// Backward, deterministic and without atomics, both kernels over a group of heads (those sharing
// sub-heads, attention.h): one over query tiles forms each row's D_m = dy . O_m and dQ; one over
// key tiles forms dK and dV, each key's sums owned by one warp and added in a fixed order;
// lambda's gradient is -D_1 per row, summed in order per layer.
// GDA's noise map is the same map with the same values for each head of a group (noise_once):
// the forward forms it once per group, before the group's signal maps, and the backward once
// with the sum of the group's output gradients (its dS, D_1 and value products are linear in them).
// The logits are computed by one function everywhere (dot products in the same order), so the
// backward's recomputation and the quantization scales see exactly the forward's logits.
//
// A warp handles a row with one key per lane for the logits and shuffles the probabilities to
// accumulate P V with lanes over output columns. Head widths up to ATT_MAX_D (Dv up to
// 2 ATT_MAX_D) fit the registers.
//
// These kernels run what the maps written out (attention_written.cu) cannot: decoding, and maps
// over that path's memory budget. With a hook there, the call runs staged through the host on the
// CPU backend's table entry, so the hook sees host memory, one block at a time (backend.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "cuda.h"

extern "C" {
#include "../../base/util.h"
}

#define ATT_WARPS 4
#define ATT_RPW 4                        // query rows per warp, forward and dQ
#define ATT_BQ (ATT_WARPS * ATT_RPW)     // query rows per block
#define ATT_BK 32                        // keys per tile: one per lane
#define ATT_KPW 4                        // keys per warp, dK/dV
#define ATT_BKB (ATT_WARPS * ATT_KPW)    // keys per block, dK/dV
#define ATT_MAX_D 128
#define D_SLOTS (ATT_MAX_D / 32)         // columns of D per lane
#define DV_SLOTS (2 * ATT_MAX_D / 32)    // columns of Dv per lane

// Whether the heads of a group have one map 1 with one output A_1 V: the same query, key and
// value heads, and the layer's lambda (GDA's noise map). The kernels then form it once per group
// and not once per head. Shared noise maps keep each head's own values: their outputs differ.
static int noise_output_shared(const AttnShape* s) {
    if (s->M != 2 || attention_head_group(s) == 1 || s->token_lambda || !attention_maps_share_values(s)) return 0;
    return attention_q_col(s, 0, 1) == attention_q_col(s, 1, 1) && attention_k_col(s, 0, 1) == attention_k_col(s, 1, 1) &&
           attention_v_col(s, 0, 1) == attention_v_col(s, 1, 1);
}

// One call's geometry, passed to the kernels by value
struct Geo {
    AttnShape s;     // B, T, H, D, M, q0 and the qkv layout of attention.h
    int Dv, QKV, HDv;
    int lam;         // per-token lambda columns, -1 without
    int Vm;          // value heads per head: 1, or M when the maps' values differ
    int group;       // heads sharing key/value heads
    int noise_once;  // GDA: every head of a group has the same map 1 and output A_1 V, formed once per group
    int quant_levels;  // Q, 0: unquantized
    float scale;     // 1 / sqrt(D)
};

static Geo geo_fields(const AttnShape* s) {
    Geo g;
    g.s = *s;
    g.Dv = attention_value_width(s);
    g.QKV = attention_qkv_width(s);
    g.HDv = s->H * g.Dv;
    g.lam = attention_lambda_offset(s);
    g.Vm = attention_maps_share_values(s) ? 1 : s->M;
    g.group = attention_head_group(s);
    g.noise_once = noise_output_shared(s);
    g.quant_levels = logit_quant_levels(s->quant.bits);
    g.scale = 1.0f / sqrtf((float)s->D);
    return g;
}

static size_t forward_smem(const Geo& g);
static size_t dq_smem(const Geo& g);
static size_t dkv_smem(const Geo& g);

static const char* kernels_refusal(const AttnShape* s);

// The geometry of a shape this backend supports (cuda_attention_supports, asked when a model is
// built); any other reaching a kernel is a caller's error
static Geo geo_of(const AttnShape* s) {
    const char* why = kernels_refusal(s);
    if (why) die("%s", why);
    return geo_fields(s);
}

// the qkv column offsets of attention.h
__device__ __forceinline__ int q_col(const Geo& g, int h, int m) { return attention_q_col(&g.s, h, m); }
__device__ __forceinline__ int k_col(const Geo& g, int h, int m) { return attention_k_col(&g.s, h, m); }
__device__ __forceinline__ int v_col(const Geo& g, int h, int m) { return attention_v_col(&g.s, h, m); }


// The one logit: scale * (q . k), summed from d = 0 up
__device__ __forceinline__ float logit(const float* q, const float* k, int D, float scale) {
    float acc = 0.0f;
    for (int d = 0; d < D; d++) acc = fmaf(q[d], k[d], acc);
    return scale * acc;
}

__device__ __forceinline__ float dotv(const float* a, const float* b, int n) {
    float acc = 0.0f;
    for (int c = 0; c < n; c++) acc = fmaf(a[c], b[c], acc);
    return acc;
}


// The logit of the block's query row r (query row i) in Qs (BQ, M, D) and the key tile's key
// `lane` in Ks (M, BK, D + 1), map m of (sequence, head) bh, quantized where qstep is given: what
// the forward and the query-gradient kernels both recompute
__device__ __forceinline__ float tile_logit(const Geo& g, const float* Qs, const float* Ks, const float* qstep, int bh, int m, int r, int i,
                                            int lane) {
    const int D = g.s.D, M = g.s.M;
    float s = logit(Qs + (r * M + m) * D, Ks + (m * ATT_BK + lane) * (D + 1), D, g.scale);
    return qstep ? quantize(s, qstep[((size_t)bh * M + m) * g.s.T + i], g.quant_levels) : s;
}

// lambda of query row i of sequence b, head h: the token's or the layer's
__device__ __forceinline__ float row_lambda(const Geo& g, const float* base, const float* lambda, int h, int i) {
    return g.lam < 0 ? *lambda : base[(size_t)i * g.QKV + g.lam + h];
}

// ---- quantization scales: per (sequence, head, map, query row), the step s = absmax / Q ----
// amax (B, H, M, T): the largest causal |logit| of each row, one warp per row
__global__ void row_absmax_kernel(float* amax, const float* qkv, Geo g) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, bhm = blockIdx.y;
    int m = bhm % g.s.M, h = bhm / g.s.M % g.s.H, b = bhm / (g.s.M * g.s.H);
    int i = g.s.q0 + blockIdx.x * ATT_WARPS + warp;
    if (i >= g.s.T) return;
    const float* base = qkv + (size_t)b * g.s.T * g.QKV;
    const float* q = base + (size_t)i * g.QKV + q_col(g, h, m);
    float mx = 0.0f;
    for (int j = lane; j <= i; j += 32) mx = fmaxf(mx, fabsf(logit(q, base + (size_t)j * g.QKV + k_col(g, h, m), g.s.D, g.scale)));
    mx = warp_max(mx);
    if (lane == 0) amax[(size_t)bhm * g.s.T + i] = mx;
}

// rows first..first+count-1 of block b's row set (stride floats apart): the step of each row,
// from its own absmax (per row) or the largest of the rows' (per tensor)
__global__ void quant_steps_kernel(float* step, const float* amax, int first, int count, int stride, int per_row, int Q) {
    __shared__ float part[32];
    const float* a = amax + (size_t)blockIdx.x * stride + first;
    float* s = step + (size_t)blockIdx.x * stride + first;
    float mx = 0.0f;
    for (int r = threadIdx.x; r < count; r += blockDim.x) mx = fmaxf(mx, a[r]);
    mx = warp_max(mx);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = mx;
    __syncthreads();
    if (threadIdx.x < 32) {
        float y = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0f;
        y = warp_max(y);
        if (threadIdx.x == 0) part[0] = y;
    }
    __syncthreads();
    float tensor_max = part[0];
    for (int r = threadIdx.x; r < count; r += blockDim.x) s[r] = (per_row ? a[r] : tensor_max) / (float)Q;
}

void cuda_quant_steps(float* step, const float* amax, int tensors, int rows, int per_row, int Q) {
    quant_steps_kernel<<<tensors, CUDA_THREADS>>>(step, amax, 0, rows, rows, per_row, Q);
    cudaCheckLaunch();
}

// The steps (B, H, M, T) of a quantized call, or NULL when the logits are not quantized
static const float* quant_steps(const float* qkv, const Geo& g, const AttnShape* s) {
    if (!g.quant_levels) return NULL;
    size_t n = (size_t)g.s.B * g.s.H * g.s.M * g.s.T;
    float* amax = (float*)cuda_scratch(SCRATCH_B, 2 * n * sizeof(float));
    float* step = amax + n;
    int rows = g.s.T - g.s.q0;
    dim3 grid(cuda_blocks(rows, ATT_WARPS), g.s.B * g.s.H * g.s.M);
    row_absmax_kernel<<<grid, 32 * ATT_WARPS>>>(amax, qkv, g);
    cudaCheckLaunch();
    quant_steps_kernel<<<g.s.B * g.s.H * g.s.M, CUDA_THREADS>>>(step, amax, g.s.q0, rows, g.s.T, s->quant.scope == QUANT_PER_ROW, g.quant_levels);
    cudaCheckLaunch();
    return step;
}

// The maps a pass over the keys forms, [lo, hi)
struct Maps {
    int lo, hi;
};

// A block's passes over the keys for its heads h0, h0 + 1, ..: with the noise map once per group
// (ONCE, g.noise_once; a template argument, so that the other variants' kernels carry none of
// it), pass -1 forms the group's map 1 (on head h0's sub-heads) and pass k map 0 of head h0 + k;
// else pass k forms each map of head h0 + k
template <bool ONCE>
__device__ __forceinline__ Maps pass_maps(const Geo& g, int pass) { return pass < 0 ? Maps{1, 2} : Maps{0, ONCE ? 1 : g.s.M}; }

// Qs (BQ, M, D): the block's query rows i0.. of head h, maps mp, zero past T
__device__ void load_query_rows(float* Qs, const float* base, const Geo& g, int h, Maps mp, int i0) {
    for (int idx = threadIdx.x; idx < ATT_BQ * g.s.M * g.s.D; idx += blockDim.x) {
        int d = idx % g.s.D, m = idx / g.s.D % g.s.M, i = i0 + idx / (g.s.D * g.s.M);
        if (m >= mp.lo && m < mp.hi) Qs[idx] = i < g.s.T ? base[(size_t)i * g.QKV + q_col(g, h, m) + d] : 0.0f;
    }
}

// Ks (M, BK, D + 1) and Vs (Vm, BK, Dv + 1): head h's keys of maps mp and values j0 .. j0 + BK - 1,
// zero past T; rows padded by one float so that a warp reading a column hits 32 banks
__device__ void load_key_tile(float* Ks, float* Vs, const float* base, const Geo& g, int h, Maps mp, int j0) {
    const int D = g.s.D, Dv = g.Dv;
    for (int idx = threadIdx.x; idx < g.s.M * ATT_BK * D; idx += blockDim.x) {
        int d = idx % D, jj = idx / D % ATT_BK, m = idx / (D * ATT_BK), j = j0 + jj;
        if (m < mp.lo || m >= mp.hi) continue;
        Ks[(m * ATT_BK + jj) * (D + 1) + d] = j < g.s.T ? base[(size_t)j * g.QKV + k_col(g, h, m) + d] : 0.0f;
    }
    for (int idx = threadIdx.x; idx < g.Vm * ATT_BK * Dv; idx += blockDim.x) {
        int c = idx % Dv, jj = idx / Dv % ATT_BK, m = idx / (Dv * ATT_BK), j = j0 + jj;
        Vs[(m * ATT_BK + jj) * (Dv + 1) + c] = j < g.s.T ? base[(size_t)j * g.QKV + v_col(g, h, m) + c] : 0.0f;
    }
}

// ---- forward ----
// A block takes ATT_BQ query rows of one head, or with noise_once of a group's heads: the group's
// map 1 first, its output O_1 / l_1 kept in shared memory for each head's map 0 after it
template <bool ONCE>
__global__ void __launch_bounds__(32 * ATT_WARPS) attention_forward_kernel(float* y, float* o1, float* lse, const float* qkv,
                                                                           const float* lambda, const float* qstep, Geo g) {
    extern __shared__ float smem[];
    const int D = g.s.D, Dv = g.Dv, M = g.s.M, T = g.s.T, heads = ONCE ? g.group : 1, blocks = g.s.H / heads;
    const int b = blockIdx.y / blocks, h0 = blockIdx.y % blocks * heads;
    const int i0 = g.s.q0 + blockIdx.x * ATT_BQ, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* Qs = smem;                          // (BQ, M, D)
    float* Ks = Qs + ATT_BQ * M * D;           // (M, BK, D + 1)
    float* Vs = Ks + M * ATT_BK * (D + 1);     // (Vm, BK, Dv + 1)
    float* Ns = Vs + g.Vm * ATT_BK * (Dv + 1);  // (BQ, Dv) the group's O_1 / l_1, with noise_once
    const float* base = qkv + (size_t)b * T * g.QKV;
    int last = min(T - 1, i0 + ATT_BQ - 1);  // the last key any row of the block sees
    int rows = T - g.s.q0;
    for (int pass = ONCE ? -1 : 0; pass < heads; pass++) {
        const int h = h0 + max(pass, 0), bh = b * g.s.H + h;
        const Maps mp = pass_maps<ONCE>(g, pass);
        __syncthreads();  // no warp reads the previous pass's rows any more
        load_query_rows(Qs, base, g, h, mp, i0);
        // each map's online-softmax state; with ONCE a pass forms one map, so one slot (registers)
        constexpr int SLOTS = ONCE ? 1 : 2;
        float run_max[ATT_RPW][SLOTS], run_sum[ATT_RPW][SLOTS], acc[ATT_RPW][SLOTS][DV_SLOTS];
#pragma unroll
        for (int k = 0; k < ATT_RPW; k++) {
#pragma unroll
            for (int sl = 0; sl < SLOTS; sl++) {
                run_max[k][sl] = -INFINITY;
                run_sum[k][sl] = 0.0f;
#pragma unroll
                for (int t = 0; t < DV_SLOTS; t++) acc[k][sl][t] = 0.0f;
            }
        }
        for (int j0 = 0; j0 <= last; j0 += ATT_BK) {
            __syncthreads();
            load_key_tile(Ks, Vs, base, g, h, mp, j0);
            __syncthreads();
#pragma unroll
            for (int k = 0; k < ATT_RPW; k++) {
                int r = warp * ATT_RPW + k, i = i0 + r;
                if (i >= T || j0 > i) continue;  // the same for the whole warp
                int j = j0 + lane;
                bool visible = j <= i;
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    if (m < mp.lo || m >= mp.hi) continue;
                    const int sl = ONCE ? 0 : m;
                    float s = tile_logit(g, Qs, Ks, qstep, bh, m, r, i, lane);
                    s = visible ? s : -INFINITY;
                    float new_max = fmaxf(run_max[k][sl], warp_max(s));
                    float p = visible ? expf(s - new_max) : 0.0f;
                    float correction = expf(run_max[k][sl] - new_max);
                    run_sum[k][sl] = run_sum[k][sl] * correction + warp_sum(p);
                    run_max[k][sl] = new_max;
#pragma unroll
                    for (int t = 0; t < DV_SLOTS; t++) acc[k][sl][t] *= correction;
                    const float* Vmap = Vs + (g.Vm > 1 ? m : 0) * ATT_BK * (Dv + 1);
                    for (int jj = 0; jj < ATT_BK; jj++) {
                        float pj = __shfl_sync(FULL_WARP, p, jj);
                        const float* v = Vmap + jj * (Dv + 1);
#pragma unroll
                        for (int t = 0; t < DV_SLOTS; t++) {
                            int c = lane + 32 * t;
                            if (c < Dv) acc[k][sl][t] = fmaf(pj, v[c], acc[k][sl][t]);
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int k = 0; k < ATT_RPW; k++) {
            int r = warp * ATT_RPW + k, i = i0 + r;
            if (i >= T) continue;
            if (lse && lane == 0) {
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    if (m < mp.lo || m >= mp.hi) continue;
                    const int sl = ONCE ? 0 : m;
                    // the group's map 1 is each of its heads'
                    for (int hh = h; hh < (pass < 0 ? h0 + heads : h + 1); hh++) {
                        lse[(((size_t)b * g.s.H + hh) * M + m) * T + i] = run_max[k][sl] + logf(run_sum[k][sl]);
                    }
                }
            }
            if (pass < 0) {  // a lane's columns of its warp's rows, read back by the same lane
#pragma unroll
                for (int t = 0; t < DV_SLOTS; t++) {
                    int c = lane + 32 * t;
                    if (c < Dv) Ns[r * Dv + c] = acc[k][0][t] / run_sum[k][0];
                }
                continue;
            }
            float lam = M == 2 ? row_lambda(g, base, lambda, h, i) : 0.0f;
            size_t at = ((size_t)b * rows + i - g.s.q0) * g.HDv + (size_t)h * Dv;
#pragma unroll
            for (int t = 0; t < DV_SLOTS; t++) {
                int c = lane + 32 * t;
                if (c >= Dv) continue;
                float o = acc[k][0][t] / run_sum[k][0];
                if (o1) o1[at + c] = o;
                if (M == 2) o -= lam * (ONCE ? Ns[r * Dv + c] : acc[k][SLOTS - 1][t] / run_sum[k][SLOTS - 1]);
                y[at + c] = o;
            }
        }
    }
}

static size_t forward_smem(const Geo& g) {
    return sizeof(float) * ((size_t)ATT_BQ * g.s.M * g.s.D + (size_t)g.s.M * ATT_BK * (g.s.D + 1) + (size_t)g.Vm * ATT_BK * (g.Dv + 1) +
                            (g.noise_once ? (size_t)ATT_BQ * g.Dv : 0));
}

// Kernels whose shared memory may pass the default 48 KiB say so once
template <typename Kernel>
static void allow_smem(Kernel kernel, size_t bytes) {
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <bool ONCE>
static void forward_launch(float* y, float* o1, float* lse, const float* qkv, const float* lambda, const float* qstep, const Geo& g) {
    size_t smem = forward_smem(g);
    static size_t allowed;  // one per instance
    if (smem > allowed) {
        allow_smem(attention_forward_kernel<ONCE>, smem);
        allowed = smem;
    }
    dim3 grid(cuda_blocks(g.s.T - g.s.q0, ATT_BQ), g.s.B * (g.s.H / (ONCE ? g.group : 1)));
    attention_forward_kernel<ONCE><<<grid, 32 * ATT_WARPS, smem>>>(y, o1, lse, qkv, lambda, qstep, g);
    cudaCheckLaunch();
}

// ---- the path of a call ----
// A call of shape s takes, in order: cuDNN's graphs (precision = bf16, cudnn_attention.cu), the
// maps written out (attention_written.cu), this file's kernels; with a hook, the written-out maps,
// which supports answers for, so that the model places a hooked call they refuse on a CPU
// instance. Each shape's path is said once per kind of call on stderr.
static void say_path(const AttnShape* s, int training, const char* path) {
    static std::vector<std::pair<AttnShape, int>> said;
    for (const auto& k : said) {
        if (memcmp(&k.first, s, sizeof(*s)) == 0 && k.second == training) return;
    }
    said.push_back({*s, training});
    fprintf(stderr, "attention B=%d T=%d H=%d D=%d, %d map(s), %s: %s\n", s->B, s->T, s->H, s->D, s->M, training ? "training" : "forward only",
            path);
}

// The written-out path's description, or why not (NULL: it does not run s)
static const char* written_path(int bf16, const AttnShape* s, int training, const char** why) {
    static char path[240];
    *why = written_attention_refusal(s, training, bf16);
    if (*why) return NULL;
    const char* how;
    double budget = written_attention_budget(&how);
    snprintf(path, sizeof(path), "maps written out through cuBLAS in %s (within a budget of %.0f MiB: %s)", bf16 ? "bf16" : "fp32",
             budget / 1048576.0, how);
    return path;
}

static const char* kernels_path(const char* why_not_written) {
    static char path[400];
    snprintf(path, sizeof(path), "this backend's fp32 kernels (maps not written out: %s)", why_not_written);
    return path;
}

const char* cuda_attention_path(const Backend* be, const AttnShape* s) {
    static char path[1400];
    int bf16 = be->precision == PRECISION_BF16;
    const char* graphs_why = !bf16 ? "precision = fp32"
                             : cuda_attention_forced() ? "DIFFTX_ATTENTION_PATH is set"
                                                       : cudnn_attention_refusal(s);
    if (!graphs_why) {
        snprintf(path, sizeof(path), "cuDNN %zu fused graphs", cudnn_version());
        return path;
    }
    const char *why, *written = written_path(bf16, s, 1, &why);
    snprintf(path, sizeof(path), "%s", written ? written : kernels_path(why));
    if (bf16) snprintf(path + strlen(path), sizeof(path) - strlen(path), "; not cuDNN's graphs: %s", graphs_why);
    return path;
}

// A hooked call the written-out maps refuse is the model's to place (supports says so): one
// reaching here is a caller's error
static void refuse_hooked(const AttnShape* s, const char* why) {
    die("attention with a hook at B=%d T=%d on the CUDA backend, which does not support it (%s): the model places such a call on a "
        "CPU instance", s->B, s->T, why);
}

void cuda_attention_forward(const Backend* be, float* y, float* o1, float* lse, const float* qkv, const float* lambda, const AttnShape* s,
                            HookSite hook) {
    int bf16 = be->precision == PRECISION_BF16;
    if (bf16 && !hook.hook && !o1 && !cuda_attention_forced() && cudnn_attention_forward(y, lse, qkv, lambda, s)) return;
    int training = lse != NULL;
    const char *why, *written = written_path(bf16, s, training, &why);
    if (written) {
        say_path(s, training, written);
        written_attention_forward(bf16, y, o1, lse, qkv, lambda, s, hook);
    } else if (hook.hook) {
        refuse_hooked(s, why);
    } else {
        say_path(s, training, kernels_path(why));
        cuda_attention_forward_kernels(y, o1, lse, qkv, lambda, s);
    }
}

void cuda_attention_forward_kernels(float* y, float* o1, float* lse, const float* qkv, const float* lambda, const AttnShape* s) {
    Geo g = geo_of(s);
    const float* qstep = quant_steps(qkv, g, s);
    if (g.noise_once) forward_launch<true>(y, o1, lse, qkv, lambda, qstep, g);
    else forward_launch<false>(y, o1, lse, qkv, lambda, qstep, g);
}

// ---- backward ----
// Column c of row i's output gradient summed over heads h .. h + n - 1 in head order (one head's
// own, or the group's for its map 1 with noise_once), zero past T
__device__ __forceinline__ float heads_dy(const float* dy, const Geo& g, int b, int i, int h, int n, int c) {
    float sum = 0.0f;
    for (int hh = h; hh < h + n && i < g.s.T; hh++) sum += dy[((size_t)b * g.s.T + i) * g.HDv + (size_t)hh * g.Dv + c];
    return sum;
}
// Whether head h's sum for the sub-head at column col is complete: h is the last head of its
// group, or the group's next head reads another sub-head there, next_col (attention_head_group:
// shared sub-heads are the same for every head of a group, so a sub-head's heads are
// consecutive). After the last head next_col is a column of no head: compared, never read.
__device__ __forceinline__ bool sum_complete(int col, int next_col, bool last_head) { return last_head || next_col != col; }

// Query tiles of a group of heads: D_m (B, H, M, T) and dQ, in two sweeps over the keys per head
// (the first finds D_m, which the second's dS needs); the lambda columns of dqkv get -D_1 per
// token. A query sub-head the group's heads share (the noise query of shared noise maps) sums
// their dQ in head order before it is written; GDA's is formed once (noise_once).
template <bool ONCE>
__global__ void __launch_bounds__(32 * ATT_WARPS) attention_backward_dq_kernel(float* dqkv, float* Drow, const float* dy, const float* dy0,
                                                                               const float* qkv, const float* lse, const float* lambda,
                                                                               const float* qstep, Geo g) {
    extern __shared__ float smem[];
    const int D = g.s.D, Dv = g.Dv, M = g.s.M, T = g.s.T, groups = g.s.H / g.group;
    const int b = blockIdx.y / groups, h0 = blockIdx.y % groups * g.group;
    const int i0 = blockIdx.x * ATT_BQ, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* Qs = smem;                          // (BQ, M, D)
    float* DYs = Qs + ATT_BQ * M * D;          // (BQ, Dv)
    float* DY0s = DYs + ATT_BQ * Dv;           // (BQ, Dv) DINT's dy0, when given
    float* Ks = DY0s + (dy0 ? ATT_BQ * Dv : 0);  // (M, BK, D + 1)
    float* Vs = Ks + M * ATT_BK * (D + 1);     // (Vm, BK, Dv + 1)
    const float* base = qkv + (size_t)b * T * g.QKV;
    float* dbase = dqkv + (size_t)b * T * g.QKV;
    // each map's sums; with ONCE a pass forms one map, whose dQ is whole at the pass's end, so one
    // slot (registers)
    constexpr int SLOTS = ONCE ? 1 : 2;
    float dq[ATT_RPW][SLOTS][D_SLOTS];
#pragma unroll
    for (int k = 0; k < ATT_RPW; k++) {
#pragma unroll
        for (int sl = 0; sl < SLOTS; sl++) {
#pragma unroll
            for (int t = 0; t < D_SLOTS; t++) dq[k][sl][t] = 0.0f;
        }
    }
    for (int pass = ONCE ? -1 : 0; pass < g.group; pass++) {
        const int h = h0 + max(pass, 0), bh = b * g.s.H + h, dy_heads = pass < 0 ? g.group : 1;
        const Maps mp = pass_maps<ONCE>(g, pass);
        __syncthreads();  // no warp reads the previous pass's rows any more
        load_query_rows(Qs, base, g, h, mp, i0);
        for (int idx = threadIdx.x; idx < ATT_BQ * Dv; idx += blockDim.x) {
            int c = idx % Dv, i = i0 + idx / Dv;
            DYs[idx] = heads_dy(dy, g, b, i, h, dy_heads, c);
            if (dy0) DY0s[idx] = i < T ? dy0[((size_t)b * T + i) * g.HDv + (size_t)h * Dv + c] : 0.0f;
        }
        float Dsum[ATT_RPW][SLOTS], lam[ATT_RPW], row_lse[ATT_RPW][SLOTS];
#pragma unroll
        for (int k = 0; k < ATT_RPW; k++) {
            int i = min(i0 + warp * ATT_RPW + k, T - 1);
            lam[k] = M == 2 ? row_lambda(g, base, lambda, h, i) : 0.0f;
#pragma unroll
            for (int sl = 0; sl < SLOTS; sl++) {
                int m = ONCE ? mp.lo : sl;
                Dsum[k][sl] = 0.0f;
                row_lse[k][sl] = m < M ? lse[((size_t)bh * M + m) * T + i] : 0.0f;
            }
        }
        int last = min(T - 1, i0 + ATT_BQ - 1);
        for (int sweep = 0; sweep < 2; sweep++) {
            for (int j0 = 0; j0 <= last; j0 += ATT_BK) {
                __syncthreads();
                load_key_tile(Ks, Vs, base, g, h, mp, j0);
                __syncthreads();
#pragma unroll
                for (int k = 0; k < ATT_RPW; k++) {
                    int r = warp * ATT_RPW + k, i = i0 + r;
                    if (i >= T || j0 > i) continue;
                    bool visible = j0 + lane <= i;
                    // dy_i . v_j, for each map's values, and dy0_i . v_j for map 0 where given
                    float gv[2];
                    gv[0] = dotv(DYs + r * Dv, Vs + lane * (Dv + 1), Dv);
                    gv[1] = g.Vm > 1 ? dotv(DYs + r * Dv, Vs + (ATT_BK + lane) * (Dv + 1), Dv) : gv[0];
                    if (dy0) gv[0] += dotv(DY0s + r * Dv, Vs + lane * (Dv + 1), Dv);
#pragma unroll
                    for (int m = 0; m < 2; m++) {
                        if (m < mp.lo || m >= mp.hi) continue;
                        const int sl = ONCE ? 0 : m;
                        float s = tile_logit(g, Qs, Ks, qstep, bh, m, r, i, lane);
                        float p = visible ? expf(s - row_lse[k][sl]) : 0.0f;
                        if (sweep == 0) {
                            Dsum[k][sl] = fmaf(p, gv[m], Dsum[k][sl]);
                            continue;
                        }
                        float c = m == 0 ? 1.0f : -lam[k];
                        float dS = c * p * (gv[m] - Dsum[k][sl]);
                        for (int jj = 0; jj < ATT_BK; jj++) {
                            float ds = __shfl_sync(FULL_WARP, dS, jj);
                            const float* kr = Ks + (m * ATT_BK + jj) * (D + 1);
#pragma unroll
                            for (int t = 0; t < D_SLOTS; t++) {
                                int d = lane + 32 * t;
                                if (d < D) dq[k][sl][t] = fmaf(ds, kr[d], dq[k][sl][t]);
                            }
                        }
                    }
                }
            }
            if (sweep == 0) {
#pragma unroll
                for (int k = 0; k < ATT_RPW; k++) {
#pragma unroll
                    for (int sl = 0; sl < SLOTS; sl++) Dsum[k][sl] = warp_sum(Dsum[k][sl]);
                }
            }
        }
        // a map's query gradient is whole after this pass where the pass formed it for good: with
        // noise_once the group's map 1 and each head's own map 0, else when no later head adds to it
        bool last_head = h + 1 == h0 + g.group, done[2];
#pragma unroll
        for (int m = 0; m < 2; m++) {
            done[m] = m >= mp.lo && m < mp.hi && (ONCE || sum_complete(q_col(g, h, m), q_col(g, h + 1, m), last_head));
        }
#pragma unroll
        for (int k = 0; k < ATT_RPW; k++) {
            int i = i0 + warp * ATT_RPW + k;
#pragma unroll
            for (int m = 0; m < 2; m++) {
                if (!done[m]) continue;
                const int sl = ONCE ? 0 : m;
                float* out = dbase + (size_t)i * g.QKV + q_col(g, h, m);
#pragma unroll
                for (int t = 0; t < D_SLOTS; t++) {
                    int d = lane + 32 * t;
                    if (d < D && i < T) out[d] = g.scale * dq[k][sl][t];
                    dq[k][sl][t] = 0.0f;
                }
            }
            if (i >= T) continue;
#pragma unroll
            for (int m = 0; m < 2; m++) {
                if (m >= mp.lo && m < mp.hi && lane == 0) Drow[((size_t)bh * M + m) * T + i] = Dsum[k][ONCE ? 0 : m];
            }
            // the group's D_1 is counted once, at head h0, where the dK/dV kernel reads it; lambda's
            // gradient sums every head's
            for (int hh = h + 1; pass < 0 && hh < h0 + g.group && lane == 0; hh++) Drow[(((size_t)b * g.s.H + hh) * M + 1) * T + i] = 0.0f;
            if (!ONCE && M == 2 && g.lam >= 0 && lane == 0) dbase[(size_t)i * g.QKV + g.lam + h] = -Dsum[k][SLOTS - 1];
        }
    }
}

// Key tiles of a group of heads: each warp owns ATT_KPW keys and sums dK, dV over the group's
// heads and query rows in order, 32 rows (one per lane) at a time; a sum is written once the
// last head reading its sub-head is in. The value gradient's columns are those of the Vm value
// heads side by side, VW = Vm Dv wide.
template <bool ONCE>
__global__ void __launch_bounds__(32 * ATT_WARPS) attention_backward_dkv_kernel(float* dqkv, const float* Drow, const float* dy,
                                                                                const float* dy0, const float* qkv, const float* lse,
                                                                                const float* lambda, const float* qstep, Geo g) {
    extern __shared__ float smem[];
    const int D = g.s.D, Dv = g.Dv, M = g.s.M, T = g.s.T, VW = g.Vm * Dv, groups = g.s.H / g.group;
    const int b = blockIdx.y / groups, h0 = blockIdx.y % groups * g.group;
    const int j0 = blockIdx.x * ATT_BKB, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* Kb = smem;                            // (BKB, M, D)
    float* Vb = Kb + ATT_BKB * M * D;            // (BKB, VW)
    float* Qt = Vb + ATT_BKB * VW;               // (M, 32, D + 1)
    float* DYt = Qt + M * 32 * (D + 1);          // (32, Dv + 1)
    float* DY0t = DYt + 32 * (Dv + 1);           // (32, Dv + 1) DINT's dy0, when given
    float* rowv = DY0t + (dy0 ? 32 * (Dv + 1) : 0);  // (3 M + 1, 32): lse, D and step of each map, lambda
    const float* base = qkv + (size_t)b * T * g.QKV;
    float* dbase = dqkv + (size_t)b * T * g.QKV;
    float dv[ATT_KPW][DV_SLOTS], dk[ATT_KPW][2][D_SLOTS];
#pragma unroll
    for (int kk = 0; kk < ATT_KPW; kk++) {
#pragma unroll
        for (int t = 0; t < DV_SLOTS; t++) dv[kk][t] = 0.0f;
#pragma unroll
        for (int m = 0; m < 2; m++) {
#pragma unroll
            for (int t = 0; t < D_SLOTS; t++) dk[kk][m][t] = 0.0f;
        }
    }
    for (int pass = ONCE ? -1 : 0; pass < g.group; pass++) {
        const int h = h0 + max(pass, 0), bh = b * g.s.H + h, dy_heads = pass < 0 ? g.group : 1;
        const Maps mp = pass_maps<ONCE>(g, pass);
        __syncthreads();  // no warp reads the previous pass's keys and values any more
        for (int idx = threadIdx.x; idx < ATT_BKB * M * D; idx += blockDim.x) {
            int d = idx % D, m = idx / D % M, j = j0 + idx / (D * M);
            if (m >= mp.lo && m < mp.hi) Kb[idx] = j < T ? base[(size_t)j * g.QKV + k_col(g, h, m) + d] : 0.0f;
        }
        for (int idx = threadIdx.x; idx < ATT_BKB * VW; idx += blockDim.x) {
            int c = idx % Dv, m = idx / Dv % g.Vm, j = j0 + idx / VW;
            Vb[idx] = j < T ? base[(size_t)j * g.QKV + v_col(g, h, m) + c] : 0.0f;
        }
        for (int r0 = j0; r0 < T; r0 += 32) {  // rows before the first key see none of the block's keys
            __syncthreads();
            for (int idx = threadIdx.x; idx < M * 32 * D; idx += blockDim.x) {
                int d = idx % D, rr = idx / D % 32, m = idx / (D * 32), i = r0 + rr;
                if (m >= mp.lo && m < mp.hi) Qt[(m * 32 + rr) * (D + 1) + d] = i < T ? base[(size_t)i * g.QKV + q_col(g, h, m) + d] : 0.0f;
            }
            for (int idx = threadIdx.x; idx < 32 * Dv; idx += blockDim.x) {
                int c = idx % Dv, rr = idx / Dv, i = r0 + rr;
                DYt[rr * (Dv + 1) + c] = heads_dy(dy, g, b, i, h, dy_heads, c);
                if (dy0) DY0t[rr * (Dv + 1) + c] = i < T ? dy0[((size_t)b * T + i) * g.HDv + (size_t)h * Dv + c] : 0.0f;
            }
            for (int idx = threadIdx.x; idx < 32; idx += blockDim.x) {
                int i = min(r0 + idx, T - 1);
                for (int m = 0; m < M; m++) {
                    rowv[(0 * M + m) * 32 + idx] = lse[((size_t)bh * M + m) * T + i];
                    rowv[(1 * M + m) * 32 + idx] = Drow[((size_t)bh * M + m) * T + i];
                    rowv[(2 * M + m) * 32 + idx] = qstep ? qstep[((size_t)bh * M + m) * T + i] : 0.0f;
                }
                rowv[3 * M * 32 + idx] = M == 2 ? row_lambda(g, base, lambda, h, i) : 0.0f;
            }
            __syncthreads();
            int i = r0 + lane;
            float lam = rowv[3 * M * 32 + lane];
#pragma unroll
            for (int kk = 0; kk < ATT_KPW; kk++) {
                int key = warp * ATT_KPW + kk, j = j0 + key;
                if (j >= T) continue;
                bool visible = i >= j && i < T;
                // dy_i . v_j for each map's values, and dy0_i . v_j for map 0 where given
                float gv[2];
                gv[0] = dotv(DYt + lane * (Dv + 1), Vb + key * VW, Dv);
                gv[1] = g.Vm > 1 ? dotv(DYt + lane * (Dv + 1), Vb + key * VW + Dv, Dv) : gv[0];
                if (dy0) gv[0] += dotv(DY0t + lane * (Dv + 1), Vb + key * VW, Dv);
                float p[2] = {0.0f, 0.0f}, dS[2] = {0.0f, 0.0f};
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    if (m < mp.lo || m >= mp.hi) continue;
                    float s = logit(Qt + (m * 32 + lane) * (D + 1), Kb + (key * M + m) * D, D, g.scale);
                    if (qstep) s = quantize(s, rowv[(2 * M + m) * 32 + lane], g.quant_levels);
                    p[m] = visible ? expf(s - rowv[m * 32 + lane]) : 0.0f;
                    dS[m] = (m == 0 ? 1.0f : -lam) * p[m] * (gv[m] - rowv[(M + m) * 32 + lane]);
                }
                // the weight of each value column: P_0 - lambda P_1 on shared values, else P_0 on the
                // first value head's columns and -lambda P_1 on the second's; P_0 on dy0 besides (a
                // map this pass does not form has P = 0)
                float w0 = M == 2 && g.Vm == 1 ? p[0] - lam * p[1] : p[0], w1 = -lam * p[1];
                for (int rr = 0; rr < 32; rr++) {
                    float w0r = __shfl_sync(FULL_WARP, w0, rr), w1r = __shfl_sync(FULL_WARP, w1, rr);
                    float p0r = dy0 ? __shfl_sync(FULL_WARP, p[0], rr) : 0.0f;  // dy0 is the same for the whole warp
                    const float* dyr = DYt + rr * (Dv + 1);
                    const float* dy0r = DY0t + rr * (Dv + 1);
#pragma unroll
                    for (int t = 0; t < DV_SLOTS; t++) {
                        int c = lane + 32 * t;
                        if (c < Dv) dv[kk][t] = fmaf(w0r, dyr[c], dv[kk][t]);
                        else if (c < VW) dv[kk][t] = fmaf(w1r, dyr[c - Dv], dv[kk][t]);
                        if (dy0 && c < Dv) dv[kk][t] = fmaf(p0r, dy0r[c], dv[kk][t]);
                    }
#pragma unroll
                    for (int m = 0; m < 2; m++) {
                        if (m < mp.lo || m >= mp.hi) continue;
                        float dsr = __shfl_sync(FULL_WARP, dS[m], rr);
                        const float* qr = Qt + (m * 32 + rr) * (D + 1);
#pragma unroll
                        for (int t = 0; t < D_SLOTS; t++) {
                            int d = lane + 32 * t;
                            if (d < D) dk[kk][m][t] = fmaf(dsr, qr[d], dk[kk][m][t]);
                        }
                    }
                }
            }
        }
        bool last_head = h + 1 == h0 + g.group;
        // both maps' key gradients meet where they share a key head (DIFF V2's official pairing)
        bool one_key_head = M == 2 && k_col(g, h, 0) == k_col(g, h, 1);
        bool key_done[2], value_done[2];
#pragma unroll
        for (int m = 0; m < 2; m++) {
            key_done[m] = m < M && sum_complete(k_col(g, h, m), k_col(g, h + 1, m), last_head);
            value_done[m] = m < g.Vm && sum_complete(v_col(g, h, m), v_col(g, h + 1, m), last_head);
        }
#pragma unroll
        for (int kk = 0; kk < ATT_KPW; kk++) {
            int j = j0 + warp * ATT_KPW + kk;
            float* row = dbase + (size_t)j * g.QKV;
#pragma unroll
            for (int t = 0; t < DV_SLOTS; t++) {
                int c = lane + 32 * t;
                if (c >= VW || !value_done[c / Dv]) continue;
                if (j < T) row[v_col(g, h, c / Dv) + c % Dv] = dv[kk][t];
                dv[kk][t] = 0.0f;
            }
#pragma unroll
            for (int t = 0; t < D_SLOTS; t++) {
                int d = lane + 32 * t;
                if (d >= D) continue;
                if (one_key_head) {
                    if (!key_done[0]) continue;
                    if (j < T) row[k_col(g, h, 0) + d] = g.scale * (dk[kk][0][t] + dk[kk][1][t]);
                    dk[kk][0][t] = dk[kk][1][t] = 0.0f;
                    continue;
                }
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    if (!key_done[m]) continue;
                    if (j < T) row[k_col(g, h, m) + d] = g.scale * dk[kk][m][t];
                    dk[kk][m][t] = 0.0f;
                }
            }
        }
    }
}

// The layer's dlambda = -sum of D_1 over every row, per (sequence, head) in row order, then
// over them in order (the CPU kernel's order)
// DINT's dy0 takes a tile beside dy's
static size_t dq_smem(const Geo& g) {
    return sizeof(float) * ((size_t)ATT_BQ * g.s.M * g.s.D + (size_t)(1 + g.s.integral) * ATT_BQ * g.Dv +
                            (size_t)g.s.M * ATT_BK * (g.s.D + 1) + (size_t)g.Vm * ATT_BK * (g.Dv + 1));
}
static size_t dkv_smem(const Geo& g) {
    return sizeof(float) * ((size_t)ATT_BKB * g.s.M * g.s.D + (size_t)ATT_BKB * g.Vm * g.Dv + (size_t)g.s.M * 32 * (g.s.D + 1) +
                            (size_t)(1 + g.s.integral) * 32 * (g.Dv + 1) + (size_t)(3 * g.s.M + 1) * 32);
}

// The kernels' limits: head widths up to ATT_MAX_D (registers), sequences x heads x maps up to
// the grid's 65535 in y, and the shared memory of the largest kernel within the device's: NULL,
// or why not (static storage)
static const char* kernels_refusal(const AttnShape* s) {
    static char msg[256];
    Geo g = geo_fields(s);
    size_t smem = std::max(forward_smem(g), std::max(dq_smem(g), dkv_smem(g)));
    if (g.s.H % g.group) {
        snprintf(msg, sizeof(msg), "the CUDA attention kernels take heads in groups of %d, not %d heads", g.group, g.s.H);
    } else if (g.s.D > ATT_MAX_D) {
        snprintf(msg, sizeof(msg), "the CUDA attention kernels take head_dim up to %d, not %d", ATT_MAX_D, g.s.D);
    } else if ((long)g.s.B * g.s.H * g.s.M > 65535) {
        snprintf(msg, sizeof(msg), "the CUDA attention kernels take up to 65535 sequences x heads x maps per call, not %ld: "
                 "lower batch_size", (long)g.s.B * g.s.H * g.s.M);
    } else if (smem > cuda_shared_memory_limit()) {
        snprintf(msg, sizeof(msg), "the CUDA attention kernels need %zu bytes of shared memory per block at head_dim %d, the "
                 "device has %zu", smem, g.s.D, cuda_shared_memory_limit());
    } else {
        return NULL;
    }
    return msg;
}

// The kernels' limits without a hook; with one, where the maps are written out (on the device,
// where the hook reads the logits)
int cuda_attention_supports(const Backend* be, const AttnShape* s, int hooked, const char** why) {
    static char msg[320];
    if (hooked) {
        const char* refused = written_attention_refusal(s, hooked == HOOKED_TRAINING, be->precision == PRECISION_BF16);
        if (!refused) return 1;
        snprintf(msg, sizeof(msg), "a hook reads attention's logits where its maps are written out, and they are not: %s", refused);
        *why = msg;
        return 0;
    }
    *why = kernels_refusal(s);
    return *why == NULL;
}

template <bool ONCE>
static void backward_launch(float* dqkv, float* Drow, const float* dy, const float* dy0, const float* qkv, const float* lse,
                            const float* lambda, const float* qstep, const Geo& g) {
    static size_t allowed_dq, allowed_dkv;  // one per instance
    size_t smem = dq_smem(g);
    if (smem > allowed_dq) {
        allow_smem(attention_backward_dq_kernel<ONCE>, smem);
        allowed_dq = smem;
    }
    dim3 grid_q(cuda_blocks(g.s.T, ATT_BQ), g.s.B * (g.s.H / g.group));
    attention_backward_dq_kernel<ONCE><<<grid_q, 32 * ATT_WARPS, smem>>>(dqkv, Drow, dy, dy0, qkv, lse, lambda, qstep, g);
    cudaCheckLaunch();
    smem = dkv_smem(g);
    if (smem > allowed_dkv) {
        allow_smem(attention_backward_dkv_kernel<ONCE>, smem);
        allowed_dkv = smem;
    }
    dim3 grid_k(cuda_blocks(g.s.T, ATT_BKB), g.s.B * (g.s.H / g.group));
    attention_backward_dkv_kernel<ONCE><<<grid_k, 32 * ATT_WARPS, smem>>>(dqkv, Drow, dy, dy0, qkv, lse, lambda, qstep, g);
    cudaCheckLaunch();
}

void cuda_attention_backward(const Backend* be, float* dqkv, float* dlambda, const float* dy, const float* dy0, const float* qkv,
                             const float* lse, const float* lambda, const AttnShape* s, HookSite hook) {
    if (s->q0 != 0) die("attention_backward: training attends from row 0 (q0 = %d)", s->q0);
    if (!dy0 != !s->integral) die("attention_backward: dy0 is given exactly for DINT's integral term");
    int bf16 = be->precision == PRECISION_BF16;
    if (bf16 && !hook.hook && !dy0 && !cuda_attention_forced() && cudnn_attention_backward(dqkv, dlambda, dy, qkv, lambda, s)) return;
    const char* why = written_attention_refusal(s, 1, bf16);
    if (!why) written_attention_backward(bf16, dqkv, dlambda, dy, dy0, qkv, lse, lambda, s, hook);
    else if (hook.hook) refuse_hooked(s, why);
    else cuda_attention_backward_kernels(dqkv, dlambda, dy, dy0, qkv, lse, lambda, s);
}

void cuda_attention_backward_kernels(float* dqkv, float* dlambda, const float* dy, const float* dy0, const float* qkv, const float* lse,
                                     const float* lambda, const AttnShape* s) {
    Geo g = geo_of(s);
    const float* qstep = quant_steps(qkv, g, s);
    float* Drow = (float*)cuda_scratch(SCRATCH_C, (size_t)g.s.B * g.s.H * g.s.M * g.s.T * sizeof(float));
    // columns no kernel writes (DIFF V2's lambda columns get theirs from the dQ kernel)
    if (g.noise_once) backward_launch<true>(dqkv, Drow, dy, dy0, qkv, lse, lambda, qstep, g);
    else backward_launch<false>(dqkv, Drow, dy, dy0, qkv, lse, lambda, qstep, g);
    if (dlambda && g.s.M == 2 && g.lam < 0) {
        // -sum of map 1's D rows, Drow (B*H, 2, T)
        cuda_sum_fixed_order(dlambda, Drow + g.s.T, (size_t)g.s.B * g.s.H, g.s.T, 2 * (size_t)g.s.T, -1.0f);
    }
}

// ---- lambda ----
__global__ void lambda_forward_kernel(float* lambda, const float* lam, float lambda_init, int D) {
    float d1 = 0.0f, d2 = 0.0f;
    for (int i = 0; i < D; i++) {
        d1 += lam[i] * lam[D + i];
        d2 += lam[2 * D + i] * lam[3 * D + i];
    }
    *lambda = expf(d1) - expf(d2) + lambda_init;
}

__global__ void lambda_backward_kernel(float* dlam, const float* dlambda_in, const float* lam, int D) {
    __shared__ float e[2];
    if (threadIdx.x == 0) {
        float d1 = 0.0f, d2 = 0.0f;
        for (int i = 0; i < D; i++) {
            d1 += lam[i] * lam[D + i];
            d2 += lam[2 * D + i] * lam[3 * D + i];
        }
        e[0] = expf(d1);
        e[1] = expf(d2);
    }
    __syncthreads();
    float dl = *dlambda_in;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        dlam[i] += dl * e[0] * lam[D + i];
        dlam[D + i] += dl * e[0] * lam[i];
        dlam[2 * D + i] -= dl * e[1] * lam[3 * D + i];
        dlam[3 * D + i] -= dl * e[1] * lam[2 * D + i];
    }
}

void cuda_lambda_forward(float* lambda, const float* lam, float lambda_init, int D) {
    lambda_forward_kernel<<<1, 1>>>(lambda, lam, lambda_init, D);
    cudaCheckLaunch();
}

void cuda_lambda_backward(float* dlam, const float* dlambda, const float* lam, int D) {
    lambda_backward_kernel<<<1, 128>>>(dlam, dlambda, lam, D);
    cudaCheckLaunch();
}

__global__ void token_lambda_kernel(float* qkv, const float* sig_src, int N, int H, int QKV, int lam, int backward) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * H) return;
    size_t at = idx / H * QKV + lam + idx % H;
    if (backward) {
        float sig = sig_src[at];
        qkv[at] *= sig * (1.0f - sig);
    } else {
        qkv[at] = 1.0f / (1.0f + expf(-qkv[at]));
    }
}

void cuda_token_lambda_forward(float* qkv, int N, const AttnShape* s) {
    token_lambda_kernel<<<cuda_blocks((size_t)N * s->H, CUDA_THREADS), CUDA_THREADS>>>(qkv, NULL, N, s->H, attention_qkv_width(s),
                                                                                      attention_lambda_offset(s), 0);
    cudaCheckLaunch();
}

void cuda_token_lambda_backward(float* dqkv, const float* qkv, int N, const AttnShape* s) {
    token_lambda_kernel<<<cuda_blocks((size_t)N * s->H, CUDA_THREADS), CUDA_THREADS>>>(dqkv, qkv, N, s->H, attention_qkv_width(s),
                                                                                      attention_lambda_offset(s), 1);
    cudaCheckLaunch();
}

// ---- DINT's integral term: one thread per (sequence, column of H*Dv), down or up the rows ----
__global__ void integral_forward_kernel(float* y, float* o1, const float* prior, const float* lambda, int B, int T, int HDv, int pos) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * HDv) return;
    int b = (int)(idx / HDv), col = (int)(idx % HDv);
    float lam = *lambda, sum = prior ? prior[col] : 0.0f;
    for (int t = 0; t < T; t++) {
        size_t at = ((size_t)b * T + t) * HDv + col;
        sum += o1[at];
        o1[at] = sum;
        y[at] += lam / (float)(pos + t + 1) * sum;
    }
}

void cuda_integral_forward(float* y, float* o1, const float* prior, const float* lambda, int B, int T, int H, int Dv, int pos) {
    integral_forward_kernel<<<cuda_blocks((size_t)B * H * Dv, CUDA_THREADS), CUDA_THREADS>>>(y, o1, prior, lambda, B, T, H * Dv, pos);
    cudaCheckLaunch();
}

// part (B, H*Dv): each column's share of dlambda
__global__ void integral_backward_kernel(float* dy0, float* part, const float* dy, const float* sums, const float* lambda, int B, int T,
                                         int HDv) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * HDv) return;
    int b = (int)(idx / HDv), col = (int)(idx % HDv);
    float lam = *lambda, later = 0.0f, acc = 0.0f;
    for (int t = T - 1; t >= 0; t--) {
        size_t at = ((size_t)b * T + t) * HDv + col;
        float inv = 1.0f / (float)(t + 1);
        later += lam * inv * dy[at];
        dy0[at] = later;
        acc += inv * dy[at] * sums[at];
    }
    part[idx] = acc;
}

void cuda_integral_backward(float* dy0, float* dlambda, const float* dy, const float* sums, const float* lambda, int B, int T, int H,
                            int Dv) {
    size_t n = (size_t)B * H * Dv;
    float* part = (float*)cuda_scratch(SCRATCH_C, n * sizeof(float));
    integral_backward_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS>>>(dy0, part, dy, sums, lambda, B, T, H * Dv);
    cudaCheckLaunch();
    cuda_sum_fixed_order(dlambda, part, 1, n, n, 1.0f);  // the columns' shares, as the layer's dlambda
}
