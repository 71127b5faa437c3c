#include "model_config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../base/util.h"

const AttnVariant* config_variant(const ModelConfig* cfg) { return &ATTN_VARIANTS[cfg->attention]; }

const char* config_attention_name(const ModelConfig* cfg) { return config_variant(cfg)->name; }

int config_head_norm(const ModelConfig* cfg) { return cfg->head_norm < 0 ? config_variant(cfg)->head_norm : cfg->head_norm; }

static int head_multiple(const ModelConfig* cfg) { return variant_sub_heads_per_head(config_variant(cfg)); }

int* config_switch(ModelConfig* cfg, VariantSwitch which) {
    switch (which) {
    case SWITCH_NOISE_GROUP: return &cfg->noise_group;
    case SWITCH_UPDATE_RANK: return &cfg->update_rank;
    default: return NULL;
    }
}

// Dies unless the switch the variant needs is in its range and every other switch is 0
static void validate_switches(const ModelConfig* cfg, int D) {
    const AttnVariant* v = config_variant(cfg);
    for (int k = SWITCH_NONE + 1; k < SWITCH_COUNT; k++) {
        int value = *config_switch((ModelConfig*)cfg, (VariantSwitch)k);
        const char* key = VARIANT_SWITCHES[k].key;
        if ((int)v->needs != k) {
            if (value) die("key '%s' = %d: attention = %s does not use it (0 or left out)", key, value, v->name);
            continue;
        }
        int fits;
        char range[96];
        if (k == SWITCH_UPDATE_RANK) {
            fits = value >= 1 && value <= cfg->n_head * D;
            snprintf(range, sizeof(range), "1 .. n_head x head_dim = %d", cfg->n_head * D);
        } else if (v->layout == LAYOUT_GROUPED_KV) {
            fits = value >= 1 && cfg->n_head % (value + 1) == 0;
            snprintf(range, sizeof(range), "G >= 1 with G + 1 dividing n_head = %d (its signal and noise query heads)", cfg->n_head);
        } else {
            fits = value >= 1 && cfg->n_head % value == 0;
            snprintf(range, sizeof(range), "a divisor of n_head = %d", cfg->n_head);
        }
        if (!fits) die("key '%s': attention = %s needs it stated, %s, got %d", key, v->name, range, value);
    }
}

int config_head_dim(const ModelConfig* cfg) {
    if (cfg->head_dim) return cfg->head_dim;
    int per = head_multiple(cfg) * cfg->n_head;
    return per > 0 ? cfg->d_model / per : 0;
}

int config_ffn_hidden(const ModelConfig* cfg) {
    if (cfg->ffn_hidden) return cfg->ffn_hidden;
    int f = (8 * cfg->d_model + 2) / 3;
    return (f + 63) / 64 * 64;
}

static int parse_lambda_init(const ModelConfig* cfg, float* constant) {
    if (strcmp(cfg->lambda_init, "schedule") == 0) return 0;
    char* end;
    *constant = strtof(cfg->lambda_init, &end);
    if (end == cfg->lambda_init || *end || !isfinite(*constant)) {
        die("key 'lambda_init': '%s' is neither 'schedule' nor a number", cfg->lambda_init);
    }
    return 1;
}

float config_lambda_init(const ModelConfig* cfg, int depth) {
    float constant;
    if (parse_lambda_init(cfg, &constant)) return constant;
    return 0.8f - 0.6f * expf(-0.3f * (float)depth);
}

void model_config_validate(const ModelConfig* cfg) {
    struct { const char* key; int value; } positive[] = {
        {"n_layer", cfg->n_layer}, {"d_model", cfg->d_model}, {"n_head", cfg->n_head}, {"seq_len", cfg->seq_len},
    };
    for (size_t i = 0; i < sizeof(positive) / sizeof(positive[0]); i++) {
        if (positive[i].value <= 0) die("key '%s' must be positive, got %d", positive[i].key, positive[i].value);
    }
    // bounds that keep every size the model computes in int range (and far beyond any machine)
    struct { const char* key; int value, max; } bounded[] = {
        {"n_layer", cfg->n_layer, 1 << 12}, {"d_model", cfg->d_model, 1 << 16}, {"n_head", cfg->n_head, 1 << 12},
        {"head_dim", cfg->head_dim, 1 << 12}, {"ffn_hidden", cfg->ffn_hidden, 1 << 20}, {"seq_len", cfg->seq_len, 1 << 22},
    };
    for (size_t i = 0; i < sizeof(bounded) / sizeof(bounded[0]); i++) {
        if (bounded[i].value > bounded[i].max) die("key '%s': %d is too large (at most %d)", bounded[i].key, bounded[i].value, bounded[i].max);
    }
    int M = head_multiple(cfg), D = config_head_dim(cfg);
    const char* times = M == 2 ? "2 x n_head x head_dim (diff attention)" : "n_head x head_dim";
    if (D <= 0 || (int64_t)M * cfg->n_head * D != cfg->d_model) {
        die("key 'd_model': %d must equal %s = %d x %d x %d", cfg->d_model, times, M, cfg->n_head, D);
    }
    if (D % 2) die("key 'head_dim': %d must be even (RoPE rotates channel pairs)", D);
    if (config_variant(cfg)->layout == LAYOUT_SHARED_KV_HALVES && cfg->n_head % 2) {
        die("key 'n_head': %d must be even for attention = %s (heads 2g and 2g + 1 share their key/value heads)", cfg->n_head,
            config_attention_name(cfg));
    }
    validate_switches(cfg, D);
    if (cfg->ffn_hidden < 0) die("key 'ffn_hidden' must be 0 (automatic) or positive");
    if (!(cfg->rope_theta > 0)) die("key 'rope_theta' must be positive");
    float constant;
    parse_lambda_init(cfg, &constant);
}
