// What a model is: its shape and initialisation, the part of a run's recipe (the recipe keys:
// run/config.h) the model layer sees. Runs' paths, data, batch and optimizer settings are
// not here.
#ifndef MODEL_CONFIG_H
#define MODEL_CONFIG_H

#include "attention.h"

#define CONFIG_STR 4096  // PATH_MAX: string values of a recipe, paths among them

typedef struct {
    int attention;       // AttentionKind: an index into ATTN_VARIANTS
    int n_layer;         // L
    int d_model;         // C
    int n_head;          // H; gda: its query heads, signal and noise
    int head_dim;        // D, width of one Q/K (sub-)head; 0 = d_model / (maps * H), d_model / H for diff2
    int head_norm;       // per-head RMSNorm over the head's V width (the paper's GroupNorm);
                         // -1 until set: the variant's default (config_head_norm)
    int noise_group;     // G of diff_shared_noise and gda: signal heads per noise head; 0 for the others
    int update_rank;     // r of diff_shared: rank of each map's update of the shared Q/K projection; 0 for the others
    char lambda_init[CONFIG_STR];  // "schedule" (0.8 - 0.6 exp(-0.3 depth)) or a constant
    int ffn_hidden;      // F; 0 = 8/3 C rounded up to a multiple of 64
    float rope_theta;
    int seq_len;         // T, the longest context
    float init_std;
} ModelConfig;

// Shape checks (positive sizes within int range, d_model = heads x head_dim, even head_dim, a
// readable lambda_init); dies naming the recipe key.
void model_config_validate(const ModelConfig* cfg);

const AttnVariant* config_variant(const ModelConfig* cfg);
// The field that holds a variant switch (attention.h), NULL for SWITCH_NONE
int* config_switch(ModelConfig* cfg, VariantSwitch which);
const char* config_attention_name(const ModelConfig* cfg);  // "standard", "diff", "diff2"
int config_head_norm(const ModelConfig* cfg);     // head_norm after resolving the variant's default
int config_head_dim(const ModelConfig* cfg);      // D after resolving 0
int config_ffn_hidden(const ModelConfig* cfg);    // F after resolving 0
// lambda_init for layer `depth` (from 0); used by per-layer lambda (diff)
float config_lambda_init(const ModelConfig* cfg, int depth);

#endif
