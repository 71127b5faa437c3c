#include "attention.h"

#include <math.h>

const AttnVariant ATTN_VARIANTS[ATTN_VARIANT_COUNT] = {
    [ATTN_STANDARD] = {"standard", 1, 0, LAMBDA_NONE, 0, 0},
    [ATTN_DIFF] = {"diff", 2, 0, LAMBDA_PER_LAYER, 1, 1},
    [ATTN_DIFF2] = {"diff2", 2, 1, LAMBDA_PER_TOKEN, 0, 0},
};

AttnShape attention_shape(const AttnVariant* v, int H, int D) {
    AttnShape s = {0, 0, H, D, v->maps, v->shared_kv, v->lambda == LAMBDA_PER_TOKEN, 0, {0, QUANT_PER_TENSOR}};
    return s;
}

int attention_value_width(const AttnShape* s) { return s->shared_kv ? s->D : s->M * s->D; }
int attention_key_heads(const AttnShape* s) { return s->shared_kv ? s->H : s->M * s->H; }

int attention_rope_heads(const AttnShape* s) { return s->M * s->H + attention_key_heads(s); }
int attention_q_col(const AttnShape* s, int h, int m) { return (h * s->M + m) * s->D; }
int attention_k_col(const AttnShape* s, int h, int m) { return (s->M * s->H + (s->shared_kv ? h : h * s->M + m)) * s->D; }
int attention_v_col(const AttnShape* s, int h) { return attention_rope_heads(s) * s->D + h * attention_value_width(s); }

int attention_lambda_offset(const AttnShape* s) { return s->token_lambda ? attention_v_col(s, s->H) : -1; }

int attention_qkv_width(const AttnShape* s) { return attention_v_col(s, s->H) + (s->token_lambda ? s->H : 0); }

int logit_quant_levels(int bits) { return bits <= 0 || bits >= LOGIT_QUANT_UNQUANTIZED ? 0 : (1 << (bits - 1)) - 1; }

float absmax_quantize(float x, float s, int Q) {
    if (s == 0.0f) return x;
    float level = rintf(x / s);
    return s * fminf(fmaxf(level, (float)-Q), (float)Q);
}
