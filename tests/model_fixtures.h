// The model layer's test fixtures: tiny models of every variant, as ModelConfig, optimizer
// settings and a batch size, which is all the model layer sees of a run. The tests of that layer
// include only this (with model/ and base/), so they link model/ and base/ alone; fixtures.h adds
// what the runs' and studies' tests need.
#ifndef MODEL_FIXTURES_H
#define MODEL_FIXTURES_H

#include <string.h>

#include "../model/model_config.h"
#include "../model/optim.h"

// What a run's Config gives the model layer, at the recipes' defaults (run/config.c's
// config_defaults for these keys)
typedef struct {
    ModelConfig model;
    OptimConfig optim;
    int batch_size;
} TestModel;

static inline TestModel test_model_defaults(void) {
    TestModel t;
    memset(&t, 0, sizeof(t));
    t.model.attention = ATTN_DIFF;
    t.model.n_layer = 6;
    t.model.d_model = 256;
    t.model.n_head = 4;
    t.model.head_norm = -1;
    strcpy(t.model.lambda_init, "schedule");
    t.model.rope_theta = 10000.0f;
    t.model.seq_len = 256;
    t.model.init_std = 0.02f;
    t.batch_size = 16;
    t.optim.steps = 1000;
    t.optim.lr = 1e-3f;
    t.optim.warmup_steps = 100;
    t.optim.beta1 = 0.9f;
    t.optim.beta2 = 0.98f;
    t.optim.adam_eps = 1e-8f;
    t.optim.weight_decay = 0.05f;
    t.optim.grad_clip = 1.0f;
    return t;
}

// The switch a variant needs at the value its row gives the tests; 0 for the others
static inline void set_variant_switches(ModelConfig* m) {
    const AttnVariant* v = &ATTN_VARIANTS[m->attention];
    m->noise_group = m->update_rank = 0;
    if (v->needs) *config_switch(m, v->needs) = v->test_switch;
}

// Two layers of d_model 32 with n_head heads of width head_dim (0: from d_model), the variant's
// switch at its test value
static inline TestModel two_layer_model(AttentionKind kind, int n_head, int head_dim) {
    TestModel t = test_model_defaults();
    t.model.attention = kind;
    t.model.n_layer = 2;
    t.model.d_model = 32;
    t.model.n_head = n_head;
    t.model.head_dim = head_dim;
    set_variant_switches(&t.model);
    return t;
}

// Two groups of heads (attention_test_heads: two heads for most variants, groups of G for the
// grouped ones), context 70: two query blocks of the CPU kernel
static inline TestModel tiny_model(AttentionKind kind) {
    TestModel t = two_layer_model(kind, attention_test_heads(&ATTN_VARIANTS[kind], 2), 0);
    t.model.seq_len = 70;
    t.batch_size = 2;
    t.model.init_std = 0.3f;
    model_config_validate(&t.model);
    return t;
}

// Sub-heads of width 8 (two heads for a variant whose heads are two maps wide, else four),
// context 96 over one and a half query blocks: the decoding and needle tests' model
static inline TestModel short_context_model(AttentionKind kind) {
    TestModel t = two_layer_model(kind, 4 / variant_sub_heads_per_head(&ATTN_VARIANTS[kind]), 8);
    t.model.seq_len = 96;
    model_config_validate(&t.model);
    return t;
}

#endif
