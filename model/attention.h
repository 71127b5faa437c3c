// Attention variants and the layout of their projections: the one place that says what a
// variant is. A new variant is a row of ATTN_VARIANTS plus whatever its kernel needs.
//
// M is the number of softmax maps per head: M = 1 is standard attention, M = 2 differential
// attention, head_h = A_{h,0} V_{h,0} - lambda A_{h,1} V_{h,1}. Three flavours of M = 2:
//   DIFF (paper Eq. 1-3): each map has its own key sub-head; both maps use value head h,
//     Dv = 2D wide; one lambda per layer, exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init.
//   DIFF V2 (shared_kv): 2H query heads of width D on H key/value heads; V is Dv = D wide;
//     lambda is per token and head, sigmoid(x W_lambda), held in the qkv row. The official
//     pairing: query heads 2h and 2h + 1 are the maps of head h, both on key/value head h.
//   DIFF V2 "halves" (shared_kv and halves, an ablation the official code's README calls
//     wrong): query heads h and h + H are the maps of head h, each on its own key/value head
//     (the grouped-query owner of that query head, (m H + h) / 2), so the two maps of a head
//     use different keys and values, and heads 2g and 2g + 1 share their key/value heads.
//   Grouped DIFF (noise_group = G, grouped differential attention): DIFF with H signal
//     sub-heads and H / G noise sub-heads; signal heads gG .. gG + G - 1 share noise sub-head
//     g (query and key), each keeps its own signal sub-head and its own 2D-wide values.
//   DINT (integral): DIFF plus an integral term that brings back each key's global importance,
//     head_h,i = (A_1 - lambda A_2 + lambda G)_i V, G_i = mean over rows j <= i of A_1's rows
//     (the causal column mean of map 0); rows of A_1, A_2 and G each sum to one, so the one
//     lambda keeps every row of the combined map summing to one. G V is the running mean of
//     map 0's output A_1 V over the rows up to i, so the kernel hands out A_1 V (o1) and takes
//     back an extra output gradient for map 0 (dy0); the running mean is integral_forward's.
//   Shared DIFF (lowrank_qk, update_rank = r): DIFF whose two maps' query (and key)
//     projections are one shared matrix plus a rank-r update per map, W_m = W + U_m V_m^T. The
//     model composes W_m before the projection (model.c), so the attention is DIFF's, in the
//     grouped layout with G = 1: each map's sub-heads are one block of columns, which is
//     what lets a map's composed projection be one contiguous matrix.
// Layout of one token's row of qkv (N, QKV):
//   [ q: QH sub-heads of width D | k: KH heads of width D | v: H heads of width Dv | lambda: H ]
// with QH = M*H (H + H/G when grouped), KH = QH (H when shared_kv) and the lambda columns only
// for per-token lambda. Query sub-head h*M + m is map m of head h (the official code's pairing
// 2i, 2i+1), except with halves (m*H + h) and grouped or Shared DIFF (h, and H + h/G for the
// noise map);
// without shared_kv, the key sub-head of the same index pairs with it.
#ifndef ATTENTION_H
#define ATTENTION_H

typedef enum { ATTN_STANDARD = 0, ATTN_DIFF = 1, ATTN_DIFF2 = 2, ATTN_DIFF2_HALVES = 3, ATTN_DIFF_GROUPED = 4, ATTN_DIFF_SHARED = 5, ATTN_DINT = 6, ATTN_VARIANT_COUNT } AttentionKind;

typedef enum {
    LAMBDA_NONE,       // one map
    LAMBDA_PER_LAYER,  // the four reparameterisation vectors lambda_{q1,k1,q2,k2} (D) of a layer
    LAMBDA_PER_TOKEN,  // sigmoid of a projection W_lambda (H, C), one per token and head
} LambdaKind;

typedef struct {
    const char* name;       // the recipe's `attention` value
    int maps;               // M
    int shared_kv;          // key/value heads of width D shared by query heads (DIFF V2)
    int halves;             // DIFF V2's "halves" pairing (above); needs an even head count
    int grouped;            // noise sub-heads shared by groups of signal heads (the recipe key noise_group)
    int lowrank_qk;         // one query (key) projection shared by the maps, plus a low-rank update per map (update_rank)
    int integral;           // DINT's integral term (above)
    LambdaKind lambda;
    int head_norm;          // default of the `head_norm` key: the paper's GroupNorm
    int head_norm_scaled;   // the head norm's output is multiplied by (1 - lambda_init)
    const char* label;      // in the figures' legends
    int colour;             // 0xRRGGBB in every figure; none of them yellow, told apart in greyscale too
} AttnVariant;

extern const AttnVariant ATTN_VARIANTS[ATTN_VARIANT_COUNT];

// Dynamic absmax quantization of the attention logits S (the paper's Figure 8), applied
// before each softmax on every forward (and on the backward's recomputation): for b bits,
// Q = 2^(b-1) - 1, s = max|S| / Q over the scope's causal entries, recomputed every call,
// and S_hat = s * clamp(round(S / s), -Q, Q), rounding half to even as torch.round does.
// Each map of a head is its own tensor, so DIFF's two maps are quantized separately.
//   QUANT_PER_TENSOR  one scale per (sequence, head, map) over the call's query rows
//   QUANT_PER_ROW     one scale per query row
// bits = 0 (or 16, the paper's unquantized setting) leaves the logits as they are.
typedef enum { QUANT_PER_TENSOR, QUANT_PER_ROW } QuantScope;
typedef struct {
    int bits;
    QuantScope scope;
} LogitQuant;

#define LOGIT_QUANT_UNQUANTIZED 16
// Q of b bits (2..15), 0 when b means unquantized
int logit_quant_levels(int bits);
// s * clamp(round(x / s), -Q, Q); x itself when s = 0 (an all-zero tensor)
float absmax_quantize(float x, float s, int Q);

// Shape of one attention call. lambda_init is not needed: it only enters through lambda.
typedef struct {
    int B, T, H, D;
    int M;          // maps per head: 1 or 2
    int shared_kv;
    int token_lambda;  // lambda columns in qkv (LAMBDA_PER_TOKEN)
    int q0;         // first query row: rows q0..T-1 attend to keys 0..row (decoding on a
                    // cache of T - q0 new rows after q0 cached ones); 0 in training
    LogitQuant quant;  // of the logits before the softmax; bits 0: none
    int halves;     // DIFF V2's "halves" pairing (with shared_kv)
    int noise_group;  // grouped: G signal heads per noise sub-head (G divides H); 1 for Shared DIFF; 0 otherwise
    int integral;     // DINT: the kernels' o1 and dy0 (backend.h) are in use
} AttnShape;

// The shape of a variant's attention for H heads of width D (B, T, q0 zero); noise_group is
// the grouped variant's G and must be 0 for the others (Shared DIFF's layout takes G = 1 itself)
AttnShape attention_shape(const AttnVariant* v, int H, int D, int noise_group);

// The qkv layout, compiled into every backend's code, the GPU's kernels included, so that it
// is stated once
#ifdef __CUDACC__
#define ATTN_LAYOUT __host__ __device__ static inline
#else
#define ATTN_LAYOUT static inline
#endif
ATTN_LAYOUT int attention_value_width(const AttnShape* s) { return s->shared_kv ? s->D : s->M * s->D; }  // Dv
ATTN_LAYOUT int attention_query_heads(const AttnShape* s) { return s->noise_group ? s->H + s->H / s->noise_group : s->M * s->H; }  // QH
ATTN_LAYOUT int attention_key_heads(const AttnShape* s) { return s->shared_kv ? s->H : attention_query_heads(s); }  // KH
// Sub-heads RoPE rotates: the queries and the keys, from column 0 on
ATTN_LAYOUT int attention_rope_heads(const AttnShape* s) { return attention_query_heads(s) + attention_key_heads(s); }
// Query sub-head of map m of head h (and its key sub-head without shared_kv)
ATTN_LAYOUT int attention_query_head(const AttnShape* s, int h, int m) {
    if (s->noise_group) return m ? s->H + h / s->noise_group : h;
    return s->halves ? m * s->H + h : h * s->M + m;
}
// Key/value head of map m of head h when shared_kv: head h's own, or with halves the one of
// query head m H + h under grouped-query sharing
ATTN_LAYOUT int attention_kv_head(const AttnShape* s, int h, int m) { return s->halves ? (m * s->H + h) / 2 : h; }
// Column offsets in a qkv row: query sub-head of map m of head h, its key sub-head, its value
// columns (one value head for both maps unless halves)
ATTN_LAYOUT int attention_q_col(const AttnShape* s, int h, int m) { return attention_query_head(s, h, m) * s->D; }
ATTN_LAYOUT int attention_k_col(const AttnShape* s, int h, int m) {
    return (attention_query_heads(s) + (s->shared_kv ? attention_kv_head(s, h, m) : attention_query_head(s, h, m))) * s->D;
}
ATTN_LAYOUT int attention_v_col(const AttnShape* s, int h, int m) {
    return attention_rope_heads(s) * s->D + (s->shared_kv ? attention_kv_head(s, h, m) : h) * attention_value_width(s);
}
// Whether both maps of a head multiply the same values: then the kernels combine the maps
// first, P = P_0 - lambda P_1, and make one product with V
ATTN_LAYOUT int attention_maps_share_values(const AttnShape* s) { return !s->halves; }
// Heads in a group: consecutive heads that no head outside the group shares a query, key or
// value sub-head with; the gradient of a sub-head its heads share is summed in one place, over
// the group's heads in order. Within a group, a map's sub-heads are either the same for every
// head (halves: keys and values; grouped: the noise query and key) or each head's own.
ATTN_LAYOUT int attention_head_group(const AttnShape* s) { return s->noise_group ? s->noise_group : s->halves ? 2 : 1; }
// First column after the value heads
ATTN_LAYOUT int attention_values_end(const AttnShape* s) { return attention_rope_heads(s) * s->D + s->H * attention_value_width(s); }
// Offset of the per-token lambda columns in a qkv row, -1 without them
ATTN_LAYOUT int attention_lambda_offset(const AttnShape* s) { return s->token_lambda ? attention_values_end(s) : -1; }
// columns of one qkv row
ATTN_LAYOUT int attention_qkv_width(const AttnShape* s) { return attention_values_end(s) + (s->token_lambda ? s->H : 0); }

#endif
