// Attention variants and the layout of their projections: the one place that says what a
// variant is. A new variant is a row of ATTN_VARIANTS; a new mechanism is a HeadLayout (its
// case in the layout functions below, which every backend's kernels read) or an extension.
//
// M is the number of softmax maps per head: M = 1 is standard attention, M = 2 differential
// attention, head_h = A_{h,0} V_{h,0} - lambda A_{h,1} V_{h,1}. The flavours of M = 2:
//   DIFF (paper Eq. 1-3): each map has its own key sub-head; both maps use value head h,
//     Dv = 2D wide; one lambda per layer, exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init.
//   DIFF V2 (LAYOUT_SHARED_KV): 2H query heads of width D on H key/value heads; V is Dv = D wide;
//     lambda is per token and head, sigmoid(x W_lambda), held in the qkv row. The official
//     pairing: query heads 2h and 2h + 1 are the maps of head h, both on key/value head h.
//   DIFF V2 "halves" (LAYOUT_SHARED_KV_HALVES, an ablation the official code's README calls
//     wrong): query heads h and h + H are the maps of head h, each on its own key/value head
//     (the grouped-query owner of that query head, (m H + h) / 2), so the two maps of a head
//     use different keys and values, and heads 2g and 2g + 1 share their key/value heads.
//   DIFF with shared noise maps (noise_group = G): DIFF with H signal sub-heads and H / G noise
//     sub-heads; signal heads gG .. gG + G - 1 share noise sub-head g (query and key), each
//     keeps its own signal sub-head and its own 2D-wide values.
//   Grouped differential attention, GDA (noise_group = G; Lim et al. 2025, as Motif's code
//     has it): n_head query heads of width D against one budget, G signal heads and one noise
//     head per group, striped [Q1 x G, Q2] group after group, so H = n_head G / (G + 1)
//     signal heads give the outputs. Keys and values are grouped-query shared: each group has
//     one signal key, one noise key and one value head of width 2D; the noise map of group g
//     is subtracted (times lambda) from each of its G signal maps.
//   DINT (integral): DIFF plus an integral term that brings back each key's global importance,
//     head_h,i = (A_1 - lambda A_2 + lambda G)_i V, G_i = mean over rows j <= i of A_1's rows
//     (the causal column mean of map 0); rows of A_1, A_2 and G each sum to one, so the one
//     lambda keeps every row of the combined map summing to one. G V is the running mean of
//     map 0's output A_1 V over the rows up to i, so the kernel hands out A_1 V (o1) and takes
//     back an extra output gradient for map 0 (dy0); the running mean is integral_forward's.
//   Shared DIFF (update_rank = r): DIFF whose two maps' query (and key) projections are one
//     shared matrix plus a rank-r update per map, W_m = W + U_m V_m^T. The model composes W_m
//     before the projection (model.c), so the attention is DIFF's, in the map-blocks layout
//     with G = 1: each map's sub-heads are one block of columns, which is what lets a map's
//     composed projection be one contiguous matrix.
// Layout of one token's row of qkv (N, QKV):
//   [ q: QH sub-heads of width D | k: KH heads of width D | v: VH heads of width Dv | lambda: H ]
// with the lambda columns only for per-token lambda; HeadLayout below says which sub-heads a
// head's maps take.
#ifndef ATTENTION_H
#define ATTENTION_H

typedef enum {
    ATTN_STANDARD, ATTN_DIFF, ATTN_DIFF2, ATTN_DIFF2_HALVES, ATTN_DIFF_SHARED_NOISE, ATTN_DIFF_SHARED, ATTN_DINT, ATTN_GDA, ATTN_VARIANT_COUNT
} AttentionKind;

typedef enum {
    LAMBDA_NONE,       // one map
    LAMBDA_PER_LAYER,  // the four reparameterisation vectors lambda_{q1,k1,q2,k2} (D) of a layer
    LAMBDA_PER_TOKEN,  // sigmoid of a projection W_lambda (H, C), one per token and head
} LambdaKind;

// Which query, key and value sub-heads map m of head h takes (attention_query_head and its
// neighbours below); G is the shape's noise_group
typedef enum {
    LAYOUT_PAIRED,            // query sub-head h M + m (the official code's pairing 2i, 2i + 1), the key sub-head of
                              // the same index, value head h of width M D: standard, DIFF, DINT
    LAYOUT_MAP_BLOCKS,        // H signal sub-heads, then H / G noise sub-heads (head h's is H + h / G), keys alike,
                              // value head h of width 2D: DIFF with shared noise maps, Shared DIFF (G = 1)
    LAYOUT_SHARED_KV,         // 2H query heads of width D (h M + m) on H key/value heads of width D: DIFF V2
    LAYOUT_SHARED_KV_HALVES,  // DIFF V2's halves: query head m H + h on key/value head (m H + h) / 2
    LAYOUT_GROUPED_KV,        // GDA: group g = h / G holds query heads g (G + 1) .. g (G + 1) + G, the last its
                              // noise head; key heads 2g (signal) and 2g + 1 (noise), value head g of width 2D
} HeadLayout;

// What a variant adds outside the layout of its attention call
typedef enum {
    EXTENSION_NONE,
    EXTENSION_INTEGRAL,    // DINT's integral term: the kernels hand out map 0's output o1 and take back dy0
    EXTENSION_LOWRANK_QK,  // Shared DIFF: the model composes each map's query and key projections (model.c)
} VariantExtension;

// An integer recipe key some variants need (ModelConfig's noise_group, update_rank): stated for
// the variants whose row names it, 0 for every other
typedef enum { SWITCH_NONE, SWITCH_NOISE_GROUP, SWITCH_UPDATE_RANK, SWITCH_COUNT } VariantSwitch;
typedef struct {
    const char* key;      // the recipe key
    const char* meaning;  // what `difftx keys` says of it, before the variants that need it
} SwitchInfo;
extern const SwitchInfo VARIANT_SWITCHES[SWITCH_COUNT];

typedef struct {
    const char* name;       // the recipe's `attention` value
    int maps;               // M
    HeadLayout layout;
    VariantExtension extension;
    VariantSwitch needs;    // the switch the variant needs, SWITCH_NONE for none
    int test_switch;        // its value in the tests (attention_test_heads)
    LambdaKind lambda;
    int head_norm;          // default of the `head_norm` key: the paper's GroupNorm
    int head_norm_scaled;   // the head norm's output is multiplied by (1 - lambda_init)
    const char* label;      // in the figures' legends
    int colour;             // 0xRRGGBB in every figure; none of them yellow, told apart in greyscale too
} AttnVariant;

extern const AttnVariant ATTN_VARIANTS[ATTN_VARIANT_COUNT];
// The row of that name, NULL where no variant has it
const AttnVariant* attention_variant_named(const char* name);

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
    int B, T, H, D;    // H: the heads that give an output (GDA's signal heads)
    int M;             // maps per head: 1 or 2
    HeadLayout layout;
    int token_lambda;  // lambda columns in qkv (LAMBDA_PER_TOKEN)
    int q0;            // first query row: rows q0..T-1 attend to keys 0..row (decoding on a
                       // cache of T - q0 new rows after q0 cached ones); 0 in training
    LogitQuant quant;  // of the logits before the softmax; bits 0: none
    int noise_group;   // G of LAYOUT_MAP_BLOCKS and LAYOUT_GROUPED_KV (G divides H); 0 otherwise
    int integral;      // DINT: the kernels' o1 and dy0 (backend.h) are in use
} AttnShape;

// The shape of a variant's attention for n_head heads of width D (B, T, q0 zero); noise_group
// is the recipe's, read only where the row needs SWITCH_NOISE_GROUP. GDA's n_head counts its
// signal and noise query heads: the shape's H is its n_head G / (G + 1) signal heads.
AttnShape attention_shape(const AttnVariant* v, int n_head, int D, int noise_group);

// Sub-heads of width D per unit of n_head, so d_model = this x n_head x head_dim: the maps where
// every head has its own query sub-heads (DIFF: 2, so its queries are d_model wide as the
// Transformer's are); 1 where n_head counts query heads (DIFF V2 on shared key/value heads,
// GDA's signal and noise heads)
int variant_sub_heads_per_head(const AttnVariant* v);

// The n_head that gives a variant `groups` groups of heads (attention_head_group) in the tests,
// with its switch at test_switch
int attention_test_heads(const AttnVariant* v, int groups);

// The qkv layout, compiled into every backend's code, the GPU's kernels included, so that it
// is stated once
#ifdef __CUDACC__
#define ATTN_LAYOUT __host__ __device__ static inline
#else
#define ATTN_LAYOUT static inline
#endif

ATTN_LAYOUT int attention_shares_kv(const AttnShape* s) { return s->layout == LAYOUT_SHARED_KV || s->layout == LAYOUT_SHARED_KV_HALVES; }
ATTN_LAYOUT int attention_value_width(const AttnShape* s) { return attention_shares_kv(s) ? s->D : s->M * s->D; }  // Dv
ATTN_LAYOUT int attention_has_noise_heads(const AttnShape* s) { return s->layout == LAYOUT_MAP_BLOCKS || s->layout == LAYOUT_GROUPED_KV; }
// QH
ATTN_LAYOUT int attention_query_heads(const AttnShape* s) { return attention_has_noise_heads(s) ? s->H + s->H / s->noise_group : s->M * s->H; }
// KH
ATTN_LAYOUT int attention_key_heads(const AttnShape* s) {
    if (attention_shares_kv(s)) return s->H;
    return s->layout == LAYOUT_GROUPED_KV ? 2 * (s->H / s->noise_group) : attention_query_heads(s);
}
// VH, of width Dv each
ATTN_LAYOUT int attention_value_heads(const AttnShape* s) { return s->layout == LAYOUT_GROUPED_KV ? s->H / s->noise_group : s->H; }
// Sub-heads RoPE rotates: the queries and the keys, from column 0 on
ATTN_LAYOUT int attention_rope_heads(const AttnShape* s) { return attention_query_heads(s) + attention_key_heads(s); }
// Query sub-head of map m of head h
ATTN_LAYOUT int attention_query_head(const AttnShape* s, int h, int m) {
    int G = s->noise_group;
    switch (s->layout) {
    case LAYOUT_MAP_BLOCKS: return m ? s->H + h / G : h;
    case LAYOUT_SHARED_KV_HALVES: return m * s->H + h;
    case LAYOUT_GROUPED_KV: return h / G * (G + 1) + (m ? G : h % G);
    default: return h * s->M + m;
    }
}
// Key head of map m of head h
ATTN_LAYOUT int attention_key_head(const AttnShape* s, int h, int m) {
    switch (s->layout) {
    case LAYOUT_SHARED_KV: return h;
    case LAYOUT_SHARED_KV_HALVES: return (m * s->H + h) / 2;  // the grouped-query owner of query head m H + h
    case LAYOUT_GROUPED_KV: return 2 * (h / s->noise_group) + m;
    default: return attention_query_head(s, h, m);
    }
}
// Value head of map m of head h
ATTN_LAYOUT int attention_value_head(const AttnShape* s, int h, int m) {
    switch (s->layout) {
    case LAYOUT_SHARED_KV_HALVES: return (m * s->H + h) / 2;
    case LAYOUT_GROUPED_KV: return h / s->noise_group;
    default: return h;
    }
}
// Column offsets in a qkv row of map m of head h: its query sub-head, key head and value head
ATTN_LAYOUT int attention_q_col(const AttnShape* s, int h, int m) { return attention_query_head(s, h, m) * s->D; }
ATTN_LAYOUT int attention_k_col(const AttnShape* s, int h, int m) { return (attention_query_heads(s) + attention_key_head(s, h, m)) * s->D; }
ATTN_LAYOUT int attention_v_col(const AttnShape* s, int h, int m) {
    return attention_rope_heads(s) * s->D + attention_value_head(s, h, m) * attention_value_width(s);
}
// Whether both maps of a head multiply the same values: then the kernels combine the maps
// first, P = P_0 - lambda P_1, and make one product with V
ATTN_LAYOUT int attention_maps_share_values(const AttnShape* s) { return s->layout != LAYOUT_SHARED_KV_HALVES; }
// Heads in a group: consecutive heads that no head outside the group shares a query, key or
// value sub-head with; the gradient of a sub-head its heads share is summed in one place, over
// the group's heads in order. Within a group, a map's sub-heads are either the same for every
// head (halves: keys and values; shared noise maps: the noise query and key; GDA: keys, values
// and the noise query) or each head's own.
ATTN_LAYOUT int attention_head_group(const AttnShape* s) {
    return attention_has_noise_heads(s) ? s->noise_group : s->layout == LAYOUT_SHARED_KV_HALVES ? 2 : 1;
}
// First column after the value heads
ATTN_LAYOUT int attention_values_end(const AttnShape* s) {
    return attention_rope_heads(s) * s->D + attention_value_heads(s) * attention_value_width(s);
}
// Offset of the per-token lambda columns in a qkv row, -1 without them
ATTN_LAYOUT int attention_lambda_offset(const AttnShape* s) { return s->token_lambda ? attention_values_end(s) : -1; }
// columns of one qkv row
ATTN_LAYOUT int attention_qkv_width(const AttnShape* s) { return attention_values_end(s) + (s->token_lambda ? s->H : 0); }

#endif
