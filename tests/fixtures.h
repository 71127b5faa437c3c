// Shared test fixtures: a small synthetic corpus for tests that need prepared data, and the
// tiny model the hook and outlier tests run.
#ifndef FIXTURES_H
#define FIXTURES_H

#include <sqlite3.h>
#include <stdio.h>

#include "../data/prepare.h"
#include "../run/config.h"
#include "../studies/registry.h"
#include "../base/util.h"

// `difftx prepare --vocab vocab_size` with the other options at their defaults
static inline void prepare_corpus(const char* out_dir, const char* const* inputs, int n_inputs, int vocab_size) {
    PrepareOptions opt = PREPARE_DEFAULTS;
    opt.vocab_size = vocab_size;
    dataset_prepare(out_dir, inputs, n_inputs, &opt);
}

// n_docs files dir/docNN.txt of 40 short lines each
static inline void write_test_corpus(const char* dir, int n_docs) {
    mkdir_p(dir);
    char path[256];
    for (int d = 0; d < n_docs; d++) {
        snprintf(path, sizeof(path), "%s/doc%02d.txt", dir, d);
        FILE* f = fopenCheck(path, "w");
        for (int i = 0; i < 40; i++) fprintf(f, "Document %d says line %d of the little corpus.\n", d, i);
        fcloseCheck(f, path);
    }
}

// The switch a variant needs at the value its row gives the tests; 0 for the others
static inline void set_variant_switches(ModelConfig* m) {
    const AttnVariant* v = &ATTN_VARIANTS[m->attention];
    m->noise_group = m->update_rank = 0;
    if (v->needs) *config_switch(m, v->needs) = v->test_switch;
}

// Two layers of d_model 32 with n_head heads of width head_dim (0: from d_model), the variant's
// switch at its test value
static inline Config two_layer_config(AttentionKind kind, int n_head, int head_dim) {
    Config cfg;
    config_defaults(&cfg);
    cfg.model.attention = kind;
    cfg.model.n_layer = 2;
    cfg.model.d_model = 32;
    cfg.model.n_head = n_head;
    cfg.model.head_dim = head_dim;
    set_variant_switches(&cfg.model);
    return cfg;
}

// Two groups of heads (attention_test_heads: two heads for most variants, groups of G for the
// grouped ones), context 70: two query blocks of the CPU kernel
static inline Config tiny_model_config(AttentionKind kind) {
    Config cfg = two_layer_config(kind, attention_test_heads(&ATTN_VARIANTS[kind], 2), 0);
    cfg.model.seq_len = 70;
    cfg.batch_size = 2;
    cfg.model.init_std = 0.3f;
    config_validate(&cfg);
    return cfg;
}

// Sub-heads of width 8 (two heads for a variant whose heads are two maps wide, else four),
// context 96 over one and a half query blocks: the decoding and needle tests' model
static inline Config short_context_config(AttentionKind kind) {
    Config cfg = two_layer_config(kind, 4 / variant_sub_heads_per_head(&ATTN_VARIANTS[kind]), 8);
    cfg.model.seq_len = 96;
    config_validate(&cfg);
    return cfg;
}

// The first column of the first row of the query sql on reg, -1 without a row
static inline int registry_count(Registry* reg, const char* sql) {
    sqlite3_stmt* st;
    sqlite3_prepare_v2(reg->db, sql, -1, &st, NULL);
    int n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
    sqlite3_finalize(st);
    return n;
}

#endif
