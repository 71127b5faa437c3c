#include "attention.h"

#include <math.h>

const AttnVariant ATTN_VARIANTS[ATTN_VARIANT_COUNT] = {
    [ATTN_STANDARD] = {"standard", 1, 0, 0, 0, 0, 0, LAMBDA_NONE, 0, 0, "Transformer", 0x1f5fa8},
    [ATTN_DIFF] = {"diff", 2, 0, 0, 0, 0, 0, LAMBDA_PER_LAYER, 1, 1, "DIFF", 0xe07b00},
    [ATTN_DIFF2] = {"diff2", 2, 1, 0, 0, 0, 0, LAMBDA_PER_TOKEN, 0, 0, "DIFF V2", 0x2a9d3a},
    [ATTN_DIFF2_HALVES] = {"diff2_halves", 2, 1, 1, 0, 0, 0, LAMBDA_PER_TOKEN, 0, 0, "DIFF V2, halves pairing", 0x8c1c13},
    [ATTN_DIFF_GROUPED] = {"diff_grouped", 2, 0, 0, 1, 0, 0, LAMBDA_PER_LAYER, 1, 1, "Grouped DIFF", 0x6a3d9a},
    [ATTN_DIFF_SHARED] = {"diff_shared", 2, 0, 0, 0, 1, 0, LAMBDA_PER_LAYER, 1, 1, "Shared DIFF", 0x00838f},
    [ATTN_DINT] = {"dint", 2, 0, 0, 0, 0, 1, LAMBDA_PER_LAYER, 1, 1, "DINT", 0xc2185b},
};

AttnShape attention_shape(const AttnVariant* v, int H, int D, int noise_group) {
    AttnShape s = {0, 0, H, D, v->maps, v->shared_kv, v->lambda == LAMBDA_PER_TOKEN, 0, {0, QUANT_PER_TENSOR}, v->halves, v->lowrank_qk ? 1 : noise_group, v->integral};
    return s;
}

int logit_quant_levels(int bits) { return bits <= 0 || bits >= LOGIT_QUANT_UNQUANTIZED ? 0 : (1 << (bits - 1)) - 1; }

float absmax_quantize(float x, float s, int Q) {
    if (s == 0.0f) return x;
    float level = rintf(x / s);
    return s * fminf(fmaxf(level, (float)-Q), (float)Q);
}
