// Causal attention for every variant in one kernel (the variants and the qkv layout are in
// model/attention.h), memory-linear in T.
//
// Queries are processed in blocks of ATTN_BLOCK rows against all the keys they can see; the
// probabilities of one block live in per-thread scratch (ATTN_BLOCK x T per map) and are
// recomputed in the backward pass from the saved log-sum-exp, so nothing T x T is kept.
// Where both maps of a head use the same values they are combined, P = P_0 - lambda P_1, before
// the single product with the V block, so differential attention costs the same matmul FLOPs as
// standard attention of equal width; DIFF V2's "halves" pairing multiplies each map by its own.
// A thread takes a group of heads (attention_head_group) query block by query block, so that a
// map the group's heads share (GDA's noise map) is formed once per block and not once per head.
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/util.h"
#include "cpu.h"
#include "lanes.h"
#include "vecmath.h"

#define ATTN_BLOCK 64

// Shapes and strides of one attention call, derived once.
typedef struct {
    const AttnShape* s;
    int B, T, H, D, M, q0;
    int share_v;  // both maps multiply the same values
    int Vm;       // value products per head: 1, or M when the maps' values differ
    int group;    // heads that share key/value heads (attention.h)
    int Dv;       // value width per head
    int HDv;      // output columns
    int lam;      // lambda columns offset, -1 without
    int QKV;      // row width
    float scale;
} Dims;

static Dims dims_of(const AttnShape* s) {
    Dims d;
    d.s = s;
    d.B = s->B; d.T = s->T; d.H = s->H; d.D = s->D; d.M = s->M; d.q0 = s->q0;
    if (s->H % attention_head_group(s)) die("attention: %d heads do not split into groups of %d", s->H, attention_head_group(s));
    d.share_v = attention_maps_share_values(s);
    d.Vm = d.share_v ? 1 : s->M;
    d.group = attention_head_group(s);
    d.Dv = attention_value_width(s);
    d.HDv = s->H * d.Dv;
    d.lam = attention_lambda_offset(s);
    d.QKV = attention_qkv_width(s);
    d.scale = 1.0f / sqrtf((float)s->D);
    return d;
}

static size_t q_col(const Dims* d, int h, int m) { return (size_t)attention_q_col(d->s, h, m); }
static size_t k_col(const Dims* d, int h, int m) { return (size_t)attention_k_col(d->s, h, m); }
static size_t v_col(const Dims* d, int h, int m) { return (size_t)attention_v_col(d->s, h, m); }

// lambda of query row t of sequence b, head h: the token's, or the layer's
static float row_lambda(const Dims* d, const float* qkv, const float* lambda, int b, int h, int t) {
    return d->lam < 0 ? *lambda : qkv[((size_t)b * d->T + t) * d->QKV + d->lam + h];
}

// Hands a block of logits S (rows, cols), ld floats apart, to the hook: the thread's own
// scratch, one thread at a time (the hook contract of backend.h)
static void show_logits(HookSite site, float* S, int b, int h, int m, int row0, int rows, int cols, int ld, int recompute) {
    Activation act = {ACT_ATTN_LOGITS, site.layer, b, h, m, row0, rows, cols, ld, recompute, S};
    #pragma omp critical(difftx_activation_hook)
    site.hook->fn(site.hook->ctx, &act);
}

// Kt (M, D, T): the keys of every map of head h in sequence b, transposed once per head, so the
// scores' products read a row-major right operand: OpenBLAS's small-matrix kernels multiply that
// half again as fast as a transposed one at these shapes (a query block against at most T keys,
// D deep; the attention kernel measured 7% faster at the bench shape). Transposing V for the
// backward's dy V^T the same way gained nothing measurable.
static void keys_transposed(float* Kt, const float* qkv, const Dims* d, int b, int h) {
    for (int m = 0; m < d->M; m++) {
        cblas_somatcopy(CblasRowMajor, CblasTrans, d->T, d->D, 1.0f, qkv + (size_t)b * d->T * d->QKV + k_col(d, h, m), d->QKV,
                        Kt + (size_t)m * d->D * d->T, d->T);
    }
}

// S (nq, kn) = scale * Q_blk K^T for map m of head h, rows i0.. of sequence b; Kt: keys_transposed
static void block_scores(float* S, const float* qkv, const float* Kt, const Dims* d, int b, int h, int m, int i0, int nq, int kn) {
    const float* q = qkv + ((size_t)b * d->T + i0) * d->QKV + q_col(d, h, m);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, kn, d->D, d->scale, q, d->QKV, Kt + (size_t)m * d->D * d->T, d->T, 0.0f,
                S, kn);
}

// The largest |logit| of one row over the keys it sees
static float row_absmax(const float* sr, int visible) {
    float m = 0.0f;
    for (int j = 0; j < visible; j++) m = fmaxf(m, fabsf(sr[j]));
    return m;
}

// The per-tensor scale's input: the largest causal |logit| of map m of head h over every
// query row of this call, from a pass over the blocks (S: block x T scratch)
static float tensor_absmax(float* S, const float* qkv, const float* Kt, const Dims* d, int b, int h, int m, int block) {
    float amax = 0.0f;
    for (int i0 = d->q0; i0 < d->T; i0 += block) {
        int nq = d->T - i0 < block ? d->T - i0 : block, kn = i0 + nq;
        block_scores(S, qkv, Kt, d, b, h, m, i0, nq, kn);
        for (int r = 0; r < nq; r++) amax = fmaxf(amax, row_absmax(S + (size_t)r * kn, i0 + r + 1));
    }
    return amax;
}

// Whether quantize_block needs the tensor's largest |logit| (per row finds each row's own)
static int needs_tensor_absmax(const LogitQuant* q) { return logit_quant_levels(q->bits) && q->scope == QUANT_PER_TENSOR; }

// The scale inputs of head h for every map, from a pass over the blocks when needed
static void tensor_absmax_maps(float* amax, float* S, const float* qkv, const float* Kt, const Dims* d, const LogitQuant* q, int b, int h,
                               int block) {
    for (int m = 0; m < d->M; m++) amax[m] = needs_tensor_absmax(q) ? tensor_absmax(S, qkv, Kt, d, b, h, m, block) : 0.0f;
}

// Quantizes the causal entries of a block S (nq, kn) of query rows i0.. in place (attention.h);
// amax is the tensor's largest |logit| when the scope is per tensor
static void quantize_block(float* S, int i0, int nq, int kn, const LogitQuant* q, float amax) {
    int Q = logit_quant_levels(q->bits);
    if (!Q) return;
    for (int r = 0; r < nq; r++) {
        float* sr = S + (size_t)r * kn;
        int visible = i0 + r + 1;
        float s = (q->scope == QUANT_PER_ROW ? row_absmax(sr, visible) : amax) / (float)Q;
        for (int j = 0; j < visible; j++) sr[j] = absmax_quantize(sr[j], s, Q);
    }
}

// Softmax of each row of S (nq, kn) over the keys row i0 + r can see; the rest zeroed.
// Saves the log-sum-exp at row_lse[i0 + r] unless row_lse is NULL.
static void causal_softmax(float* S, int i0, int nq, int kn, float* row_lse) {
    for (int r = 0; r < nq; r++) {
        float* sr = S + (size_t)r * kn;
        int visible = i0 + r + 1;
        float l = cpu_softmax_inplace(sr, visible);
        if (row_lse) row_lse[i0 + r] = l;
        for (int j = visible; j < kn; j++) sr[j] = 0.0f;
    }
}

// Whether map m of a group's heads is one map: the same query and key sub-heads (the noise map of
// GDA and of shared noise maps), where both maps take one value product, which leaves the map as
// it is. Its dS is summed over the heads before the products with its query and key.
static int map_shared(const Dims* d, int m) {
    if (d->group == 1 || !d->share_v) return 0;
    const AttnShape* s = d->s;
    return attention_query_head(s, 0, m) == attention_query_head(s, 1, m) && attention_key_head(s, 0, m) == attention_key_head(s, 1, m);
}

// Whether a shared map's probabilities are formed once per query block for the group rather
// than once per head: not with a hook, which may rewrite each head's logits (backend.h). Both
// give the same bits where the hook only reads.
static int map_formed_once(const Dims* d, int m, HookSite hook) { return !hook.hook && map_shared(d, m); }

// Offset in lse (B, H, M, T) of map m of head h in sequence b
static size_t lse_at(const Dims* d, int b, int h, int m) { return (((size_t)b * d->H + h) * d->M + m) * d->T; }

// Block i0's probabilities of map m of head h (S: block x T), as the softmax gives them, its
// log-sum-exp saved for every head that shares the map (n_heads from h on) unless lse is NULL
static void block_probabilities(float* S, float* lse, const float* qkv, const float* Kt, const Dims* d, int b, int h, int m, int n_heads,
                                int i0, int nq, int kn, float amax, HookSite hook) {
    block_scores(S, qkv, Kt, d, b, h, m, i0, nq, kn);
    quantize_block(S, i0, nq, kn, &d->s->quant, amax);
    if (hook.hook) show_logits(hook, S, b, h, m, i0, nq, kn, kn, 0);
    float* first = lse ? lse + lse_at(d, b, h, m) : NULL;
    causal_softmax(S, i0, nq, kn, first);
    for (int k = 1; first && k < n_heads; k++) memcpy(lse + lse_at(d, b, h + k, m) + i0, first + i0, nq * sizeof(float));
}

// Kt (group, M, D, T) for the heads of group g in sequence b, then amax (group, 2), each head's
// tensor_absmax_maps (scratch: block x T)
static void group_keys(float* Kt, float* amax, float* scratch, const float* qkv, const Dims* d, int b, int g, int block) {
    size_t head_keys = (size_t)d->M * d->D * d->T;
    for (int k = 0; k < d->group; k++) {
        keys_transposed(Kt + k * head_keys, qkv, d, b, g * d->group + k);
        tensor_absmax_maps(amax + 2 * k, scratch, qkv, Kt + k * head_keys, d, &d->s->quant, b, g * d->group + k, block);
    }
}

// Floats of group_keys' Kt and amax
static size_t group_keys_floats(const Dims* d) { return (size_t)d->group * ((size_t)d->M * d->D * d->T + 2); }

// The forward of the heads of group g in sequence b, query block by query block. P: the thread's
// scratch, P_m (M, block, T), then group_keys' Kt and amax
static void group_forward(float* y, float* o1, float* lse, const float* qkv, const float* lambda, const Dims* d, int b, int g, int block,
                          float* P, HookSite hook) {
    int T = d->T, M = d->M, h0 = g * d->group, once[2] = {map_formed_once(d, 0, hook), map_formed_once(d, 1, hook)};
    size_t rows = (size_t)(T - d->q0), head_keys = (size_t)M * d->D * T;
    float* Kt = P + (size_t)M * block * T;
    float* amax = Kt + d->group * head_keys;
    group_keys(Kt, amax, P, qkv, d, b, g, block);
    for (int i0 = d->q0; i0 < T; i0 += block) {
        int nq = T - i0 < block ? T - i0 : block, kn = i0 + nq;
        for (int k = 0; k < d->group; k++) {
            int h = h0 + k;
            for (int m = 0; m < M; m++) {
                if (once[m] && k) continue;  // the group's first head formed it
                block_probabilities(P + (size_t)m * block * T, lse, qkv, Kt + k * head_keys, d, b, h, m, once[m] ? d->group : 1, i0, nq,
                                    kn, amax[2 * k + m], hook);
            }
            if (o1) {  // DINT: map 0's own output, before the maps are combined
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, d->Dv, kn, 1.0f, P, kn, qkv + (size_t)b * T * d->QKV + v_col(d, h, 0),
                            d->QKV, 0.0f, o1 + ((size_t)b * rows + i0 - d->q0) * d->HDv + (size_t)h * d->Dv, d->HDv);
            }
            // P_1 becomes -lambda P_1, added to P_0 where the maps share values (P_1 itself kept)
            float* P1 = P + (size_t)block * T;
            for (int r = 0; M == 2 && r < nq; r++) {
                float lam = row_lambda(d, qkv, lambda, b, h, i0 + r);
                float* p0 = P + (size_t)r * kn;
                float* p1 = P1 + (size_t)r * kn;
                if (d->share_v) {
                    for (int j = 0; j < kn; j++) p0[j] -= lam * p1[j];
                } else {
                    for (int j = 0; j < kn; j++) p1[j] *= -lam;
                }
            }
            float* out = y + ((size_t)b * rows + i0 - d->q0) * d->HDv + (size_t)h * d->Dv;
            for (int m = 0; m < d->Vm; m++) {
                const float* v = qkv + (size_t)b * T * d->QKV + v_col(d, h, m);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, d->Dv, kn, 1.0f, P + (size_t)m * block * T, kn, v, d->QKV,
                            m ? 1.0f : 0.0f, out, d->HDv);
            }
        }
    }
}

void cpu_attention_forward(const Backend* be, float* y, float* o1, float* lse, const float* qkv, const float* lambda, const AttnShape* s,
                           HookSite hook) {
    (void)be;  // fp32 in every precision
    Dims d = dims_of(s);
    int T = d.T, groups = d.H / d.group;
    int block = T < ATTN_BLOCK ? T : ATTN_BLOCK;
    #pragma omp parallel
    {
        float* P = cpu_thread_scratch((size_t)d.M * block * T + group_keys_floats(&d));  // P (M, block, T), then group_keys' Kt and amax
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < d.B; b++) {
            for (int g = 0; g < groups; g++) group_forward(y, o1, lse, qkv, lambda, &d, b, g, block, P, hook);
        }
    }
}

void cpu_attention_maps(const Backend* be, float* P, const float* qkv, const AttnShape* s, int h, HookSite hook) {
    (void)be;
    Dims d = dims_of(s);
    int T = d.T, rows = T - d.q0;
    float* Kt = mallocCheck((size_t)d.M * d.D * T * sizeof(float));
    keys_transposed(Kt, qkv, &d, 0, h);
    for (int m = 0; m < d.M; m++) {
        float* Pm = P + (size_t)m * rows * T;
        block_scores(Pm, qkv, Kt, &d, 0, h, m, d.q0, rows, T);
        float amax = 0.0f;  // the whole tensor is at hand: no second pass
        for (int r = 0; needs_tensor_absmax(&s->quant) && r < rows; r++) amax = fmaxf(amax, row_absmax(Pm + (size_t)r * T, d.q0 + r + 1));
        quantize_block(Pm, d.q0, rows, T, &s->quant, amax);
        if (hook.hook) show_logits(hook, Pm, 0, h, m, d.q0, rows, T, T, 1);
        causal_softmax(Pm, d.q0, rows, T, NULL);
    }
    free(Kt);
}

// Zeroes the query, key and value gradients of the heads of group g in sequence b (dbase: its
// rows of dqkv): a sub-head the group's heads share gathers every head's contribution
static void zero_group_grads(float* dbase, const Dims* d, int g) {
    for (int h = g * d->group; h < (g + 1) * d->group; h++) {
        for (int t = 0; t < d->T; t++) {
            float* row = dbase + (size_t)t * d->QKV;
            for (int m = 0; m < d->M; m++) {
                memset(row + q_col(d, h, m), 0, d->D * sizeof(float));
                memset(row + k_col(d, h, m), 0, d->D * sizeof(float));
            }
            for (int m = 0; m < d->Vm; m++) memset(row + v_col(d, h, m), 0, d->Dv * sizeof(float));
        }
    }
}

// dP_m = dy V_m^T takes one slot per value head, and one per map where map 0's output has its
// own extra gradient dy0 (DINT)
static int dpv_slots(const Dims* d, const float* dy0) { return dy0 ? d->M : d->Vm; }

// The backward's per-thread scratch, cut from one buffer of backward_floats floats
typedef struct {
    float* P;         // P_m (M, block, T): a head's probabilities of map m, then its dS_m
    float* dPV;       // dPV_m = dy V_m^T (dpv_slots, block, T; map 0's with dy + dy0)
    float* Pc;        // the map a value product takes (block, T)
    float* Pshared;   // a shared map's probabilities, formed once for the group's heads (block, T)
    float* dSshared;  // a shared map's dS, summed over the group's heads (block, T)
    float* Kt;        // group_keys' Kt (group, M, D, T)
    float* amax;      // group_keys' amax (group, 2)
} BackwardScratch;

static size_t backward_floats(const Dims* d, const float* dy0, int block) {
    return (size_t)(d->M + dpv_slots(d, dy0) + 3) * block * d->T + group_keys_floats(d);
}

static BackwardScratch backward_scratch(float* buffer, const Dims* d, const float* dy0, int block) {
    size_t slab = (size_t)block * d->T;
    BackwardScratch w;
    w.P = buffer;
    w.dPV = w.P + d->M * slab;
    w.Pc = w.dPV + dpv_slots(d, dy0) * slab;
    w.Pshared = w.Pc + slab;
    w.dSshared = w.Pshared + slab;
    w.Kt = w.dSshared + slab;
    w.amax = w.Kt + (size_t)d->group * d->M * d->D * d->T;
    return w;
}

// Query block i0 (nq rows seeing kn keys) of head h, the k-th of its group, in sequence b: its
// dV and its own maps' dQ and dK added, the per-token lambda columns written, its part of the
// layer lambda's gradient added to *dlambda. A map the group's heads share (map_shared) has its
// dS summed in w->dSshared, multiplied by its query and key after the group's last head, and its
// probabilities formed by the group's first head where map_formed_once.
static void head_block_backward(float* dbase, float* dlambda, const float* dy, const float* dy0, const float* qkv, const float* lse,
                                const float* lambda, const Dims* d, const BackwardScratch* w, int b, int h, int k, int i0, int nq,
                                int block, HookSite hook) {
    int T = d->T, M = d->M, D = d->D, slots = dpv_slots(d, dy0), kn = i0 + nq;
    const float* base = qkv + (size_t)b * T * d->QKV;
    float rowsum[ATTN_BLOCK], lam[ATTN_BLOCK];
    size_t at = ((size_t)b * T + i0) * d->HDv + (size_t)h * d->Dv;
    const float* dyb = dy + at;
    for (int m = 0; m < slots; m++) {
        float* dst = w->dPV + (size_t)m * block * T;
        if (m && d->share_v) {  // DINT: map 1's dy V^T is map 0's before dy0's part is added
            memcpy(dst, w->dPV, (size_t)nq * kn * sizeof(float));
            continue;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, kn, d->Dv, 1.0f, dyb, d->HDv, base + v_col(d, h, m), d->QKV, 0.0f, dst,
                    kn);
    }
    if (dy0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, kn, d->Dv, 1.0f, dy0 + at, d->HDv, base + v_col(d, h, 0), d->QKV, 1.0f,
                    w->dPV, kn);
    }
    for (int r = 0; M == 2 && r < nq; r++) lam[r] = row_lambda(d, qkv, lambda, b, h, i0 + r);
    for (int m = 0; m < M; m++) {
        int shared = map_shared(d, m), once = map_formed_once(d, m, hook);
        float* S = w->P + (size_t)m * block * T;  // this head's dS_m, and its P_m where it forms the map itself
        float* Pm = once ? w->Pshared : S;
        const float* G = w->dPV + (size_t)(slots == 1 ? 0 : m) * block * T;
        const float* row_lse = lse + lse_at(d, b, h, m);
        if (!once || k == 0) {
            block_scores(Pm, qkv, w->Kt + (size_t)k * M * D * T, d, b, h, m, i0, nq, kn);
            quantize_block(Pm, i0, nq, kn, &d->s->quant, w->amax[2 * k + m]);
            if (hook.hook) show_logits(hook, Pm, b, h, m, i0, nq, kn, kn, 1);
            for (int r = 0; r < nq; r++) {
                float* pr = Pm + (size_t)r * kn;
                int visible = i0 + r + 1;
                exp_shifted(pr, pr, visible, 1.0f, row_lse[i0 + r]);
                for (int j = visible; j < kn; j++) pr[j] = 0.0f;
            }
        }
        for (int r = 0; r < nq; r++) {
            rowsum[r] = dot_lanes(Pm + (size_t)r * kn, G + (size_t)r * kn, i0 + r + 1);
            if (m == 1) {
                // y = O_0 - lambda O_1, and rowsum = dy . O_1
                if (d->lam < 0) *dlambda -= rowsum[r];
                else dbase[(size_t)(i0 + r) * d->QKV + d->lam + h] = -rowsum[r];
            }
        }
        // the map a value product takes: c_m P_m, summed over the maps that share values
        for (int r = 0; r < nq; r++) {
            float c = m == 0 ? 1.0f : -lam[r];
            float* pr = w->Pc + (size_t)r * kn;
            const float* sr = Pm + (size_t)r * kn;
            if (m == 0) memcpy(pr, sr, kn * sizeof(float));
            else if (d->share_v) for (int j = 0; j < kn; j++) pr[j] -= lam[r] * sr[j];
            else for (int j = 0; j < kn; j++) pr[j] = c * sr[j];
        }
        if (dy0 && m == 0) {  // map 0's own output's gradient: P_0^T dy0
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, d->Dv, nq, 1.0f, Pm, kn, dy0 + at, d->HDv, 1.0f, dbase + v_col(d, h, 0),
                        d->QKV);
        }
        // dV once the last map on this value head is in
        if (!d->share_v || m == M - 1) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, d->Dv, nq, 1.0f, w->Pc, kn, dyb, d->HDv, 1.0f, dbase + v_col(d, h, m),
                        d->QKV);
        }
        // dS_m = c_m P_m (dPV_m - rowsum), c_0 = 1, c_1 = -lambda; a shared map's summed over the heads
        for (int r = 0; r < nq; r++) {
            float c = m == 0 ? 1.0f : -lam[r];
            const float* pr = Pm + (size_t)r * kn;
            const float* gr = G + (size_t)r * kn;
            float* sr = (shared ? w->dSshared : S) + (size_t)r * kn;
            if (shared && k) for (int j = 0; j < kn; j++) sr[j] += c * pr[j] * (gr[j] - rowsum[r]);
            else for (int j = 0; j < kn; j++) sr[j] = c * pr[j] * (gr[j] - rowsum[r]);
        }
    }
    for (int m = 0; m < M; m++) {
        int shared = map_shared(d, m);
        if (shared && k < d->group - 1) continue;  // its dS is not whole until the group's last head
        const float* dS = shared ? w->dSshared : w->P + (size_t)m * block * T;
        float* dq = dbase + (size_t)i0 * d->QKV + q_col(d, h, m);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, D, kn, d->scale, dS, kn, base + k_col(d, h, m), d->QKV, 1.0f, dq, d->QKV);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, D, nq, d->scale, dS, kn, base + (size_t)i0 * d->QKV + q_col(d, h, m), d->QKV,
                    1.0f, dbase + k_col(d, h, m), d->QKV);
    }
}

// The backward of the heads of group g in sequence b, query block by query block, each block's
// heads in order (head_block_backward); dlambda (H) gets each head's part of the layer lambda's
// gradient. buffer: the thread's scratch (backward_floats).
static void group_backward(float* dqkv, float* dlambda, const float* dy, const float* dy0, const float* qkv, const float* lse,
                           const float* lambda, const Dims* d, int b, int g, int block, float* buffer, HookSite hook) {
    BackwardScratch w = backward_scratch(buffer, d, dy0, block);
    float* dbase = dqkv + (size_t)b * d->T * d->QKV;
    zero_group_grads(dbase, d, g);
    group_keys(w.Kt, w.amax, w.P, qkv, d, b, g, block);
    for (int i0 = 0; i0 < d->T; i0 += block) {
        int nq = d->T - i0 < block ? d->T - i0 : block;
        for (int k = 0; k < d->group; k++) {
            int h = g * d->group + k;
            head_block_backward(dbase, dlambda + h, dy, dy0, qkv, lse, lambda, d, &w, b, h, k, i0, nq, block, hook);
        }
    }
}

void cpu_attention_backward(const Backend* be, float* dqkv, float* dlambda_out, const float* dy, const float* dy0, const float* qkv,
                            const float* lse, const float* lambda, const AttnShape* s, HookSite hook) {
    (void)be;
    Dims d = dims_of(s);
    if (d.q0 != 0) die("attention_backward: training attends from row 0 (q0 = %d)", d.q0);
    if (!dy0 != !s->integral) die("attention_backward: dy0 is given exactly for DINT's integral term");
    int T = d.T, H = d.H, groups = H / d.group;
    int block = T < ATTN_BLOCK ? T : ATTN_BLOCK;
    float* dlambda_part = callocCheck((size_t)d.B * H, sizeof(float));  // summed in fixed order below
    #pragma omp parallel
    {
        float* P = cpu_thread_scratch(backward_floats(&d, dy0, block));
        // a thread owns a group of heads: the gradients of sub-heads they share are summed here only
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < d.B; b++) {
            for (int g = 0; g < groups; g++) {
                group_backward(dqkv, dlambda_part + (size_t)b * H, dy, dy0, qkv, lse, lambda, &d, b, g, block, P, hook);
            }
        }
    }
    float dlambda = 0.0f;
    for (int i = 0; i < d.B * H; i++) dlambda += dlambda_part[i];
    free(dlambda_part);
    if (dlambda_out) *dlambda_out = dlambda;
}

void cpu_integral_forward(float* y, float* o1, const float* prior, const float* lambda, int B, int T, int H, int Dv, int pos) {
    float lam = *lambda;
    size_t HDv = (size_t)H * Dv;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            for (int t = 0; t < T; t++) {
                float* sum = o1 + ((size_t)b * T + t) * HDv + (size_t)h * Dv;
                const float* before = t ? sum - HDv : prior ? prior + (size_t)h * Dv : NULL;
                float* out = y + ((size_t)b * T + t) * HDv + (size_t)h * Dv;
                float weight = lam / (float)(pos + t + 1);
                for (int c = 0; c < Dv; c++) {
                    if (before) sum[c] += before[c];
                    out[c] += weight * sum[c];
                }
            }
        }
    }
}

void cpu_integral_backward(float* dy0, float* dlambda, const float* dy, const float* sums, const float* lambda, int B, int T, int H,
                           int Dv) {
    float lam = *lambda;
    size_t HDv = (size_t)H * Dv;
    float* part = callocCheck((size_t)B * H, sizeof(float));  // summed in fixed order below
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            float acc = 0.0f;
            for (int t = T - 1; t >= 0; t--) {
                size_t at = ((size_t)b * T + t) * HDv + (size_t)h * Dv;
                float inv = 1.0f / (float)(t + 1);
                for (int c = 0; c < Dv; c++) {
                    dy0[at + c] = (t + 1 < T ? dy0[at + HDv + c] : 0.0f) + lam * inv * dy[at + c];  // the rows from t on
                    acc += inv * dy[at + c] * sums[at + c];
                }
            }
            part[b * H + h] = acc;
        }
    }
    float total = 0.0f;
    for (int i = 0; i < B * H; i++) total += part[i];
    free(part);
    *dlambda = total;
}

static float dot(const float* a, const float* b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

void cpu_lambda_forward(float* lambda, const float* lam, float lambda_init, int D) {
    *lambda = expf(dot(lam, lam + D, D)) - expf(dot(lam + 2 * D, lam + 3 * D, D)) + lambda_init;
}

void cpu_lambda_backward(float* dlam, const float* dlambda_in, const float* lam, int D) {
    float dlambda = *dlambda_in;
    float e1 = expf(dot(lam, lam + D, D)), e2 = expf(dot(lam + 2 * D, lam + 3 * D, D));
    for (int i = 0; i < D; i++) {
        dlam[i] += dlambda * e1 * lam[D + i];
        dlam[D + i] += dlambda * e1 * lam[i];
        dlam[2 * D + i] -= dlambda * e2 * lam[3 * D + i];
        dlam[3 * D + i] -= dlambda * e2 * lam[2 * D + i];
    }
}

void cpu_token_lambda_forward(float* qkv, int N, const AttnShape* s) {
    int lam = attention_lambda_offset(s), QKV = attention_qkv_width(s);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* x = qkv + (size_t)n * QKV + lam;
        for (int h = 0; h < s->H; h++) x[h] = 1.0f / (1.0f + expf(-x[h]));
    }
}

// dlogit = dlambda * sigma (1 - sigma)
void cpu_token_lambda_backward(float* dqkv, const float* qkv, int N, const AttnShape* s) {
    int lam = attention_lambda_offset(s), QKV = attention_qkv_width(s);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* sig = qkv + (size_t)n * QKV + lam;
        float* d = dqkv + (size_t)n * QKV + lam;
        for (int h = 0; h < s->H; h++) d[h] *= sig[h] * (1.0f - sig[h]);
    }
}
