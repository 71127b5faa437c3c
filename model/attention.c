#include "attention.h"

#include <math.h>
#include <string.h>

const SwitchInfo VARIANT_SWITCHES[SWITCH_COUNT] = {
    [SWITCH_NOISE_GROUP] = {"noise_group", "G: signal heads per noise head (G:1); for `diff_shared_noise` a divisor of n_head, for `gda` "
                                           "G + 1 divides n_head (its query heads, signal and noise)"},
    [SWITCH_UPDATE_RANK] = {"update_rank", "r: the rank of each map's update of the shared query and key projections, 1 .. n_head x head_dim"},
};

const AttnVariant ATTN_VARIANTS[ATTN_VARIANT_COUNT] = {
    [ATTN_STANDARD] = {"standard", 1, LAYOUT_PAIRED, EXTENSION_NONE, SWITCH_NONE, 0, LAMBDA_NONE, 0, 0, "Transformer", 0x1f5fa8},
    [ATTN_DIFF] = {"diff", 2, LAYOUT_PAIRED, EXTENSION_NONE, SWITCH_NONE, 0, LAMBDA_PER_LAYER, 1, 1, "DIFF", 0xe07b00},
    [ATTN_DIFF2] = {"diff2", 2, LAYOUT_SHARED_KV, EXTENSION_NONE, SWITCH_NONE, 0, LAMBDA_PER_TOKEN, 0, 0, "DIFF V2", 0x2a9d3a},
    [ATTN_DIFF2_HALVES] = {"diff2_halves", 2, LAYOUT_SHARED_KV_HALVES, EXTENSION_NONE, SWITCH_NONE, 0, LAMBDA_PER_TOKEN, 0, 0,
                           "DIFF V2, halves pairing", 0x8c1c13},
    [ATTN_DIFF_SHARED_NOISE] = {"diff_shared_noise", 2, LAYOUT_MAP_BLOCKS, EXTENSION_NONE, SWITCH_NOISE_GROUP, 2, LAMBDA_PER_LAYER, 1, 1,
                                "DIFF, shared noise maps", 0x6a3d9a},
    [ATTN_DIFF_SHARED] = {"diff_shared", 2, LAYOUT_MAP_BLOCKS, EXTENSION_LOWRANK_QK, SWITCH_UPDATE_RANK, 3, LAMBDA_PER_LAYER, 1, 1, "Shared DIFF",
                          0x00838f},
    [ATTN_DINT] = {"dint", 2, LAYOUT_PAIRED, EXTENSION_INTEGRAL, SWITCH_NONE, 0, LAMBDA_PER_LAYER, 1, 1, "DINT", 0xc2185b},
    [ATTN_GDA] = {"gda", 2, LAYOUT_GROUPED_KV, EXTENSION_NONE, SWITCH_NOISE_GROUP, 3, LAMBDA_PER_LAYER, 1, 1, "GDA", 0x5d4037},
};

const AttnVariant* attention_variant_named(const char* name) {
    for (int k = 0; k < ATTN_VARIANT_COUNT; k++) {
        if (strcmp(ATTN_VARIANTS[k].name, name) == 0) return &ATTN_VARIANTS[k];
    }
    return NULL;
}

AttnShape attention_shape(const AttnVariant* v, int n_head, int D, int noise_group) {
    // Shared DIFF's map blocks are one signal and one noise sub-head per head
    int G = v->needs == SWITCH_NOISE_GROUP ? noise_group : v->layout == LAYOUT_MAP_BLOCKS ? 1 : 0;
    int H = v->layout == LAYOUT_GROUPED_KV ? n_head / (G + 1) * G : n_head;
    AttnShape s = {0, 0, H, D, v->maps, v->layout, v->lambda == LAMBDA_PER_TOKEN, 0, {0, QUANT_PER_TENSOR}, G,
                   v->extension == EXTENSION_INTEGRAL};
    return s;
}

int variant_sub_heads_per_head(const AttnVariant* v) {
    return v->layout == LAYOUT_SHARED_KV || v->layout == LAYOUT_SHARED_KV_HALVES || v->layout == LAYOUT_GROUPED_KV ? 1 : v->maps;
}

int attention_test_heads(const AttnVariant* v, int groups) {
    int G = v->test_switch;
    switch (v->layout) {
    case LAYOUT_SHARED_KV_HALVES: return 2 * groups;  // heads 2g and 2g + 1 share key/value heads
    case LAYOUT_MAP_BLOCKS: return v->needs == SWITCH_NOISE_GROUP ? G * groups : groups;
    case LAYOUT_GROUPED_KV: return (G + 1) * groups;  // G signal query heads and a noise one a group
    default: return groups;
    }
}

int logit_quant_levels(int bits) { return bits <= 0 || bits >= LOGIT_QUANT_UNQUANTIZED ? 0 : (1 << (bits - 1)) - 1; }

float absmax_quantize(float x, float s, int Q) {
    if (s == 0.0f) return x;
    float level = rintf(x / s);
    return s * fminf(fmaxf(level, (float)-Q), (float)Q);
}
