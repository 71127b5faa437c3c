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

// The switches a variant needs, at the values the tests use: grouped DIFF's G = 2 (two heads per
// noise sub-head) and Shared DIFF's update rank 3; 0 for the variants without them
static inline void set_variant_switches(ModelConfig* m) {
    m->noise_group = ATTN_VARIANTS[m->attention].grouped ? 2 : 0;
    m->update_rank = ATTN_VARIANTS[m->attention].lowrank_qk ? 3 : 0;
}

// Two layers, d_model 32, two heads, context 70: two query blocks of the CPU kernel (grouped
// DIFF's two heads share one noise sub-head)
static inline Config tiny_model_config(AttentionKind kind) {
    Config cfg;
    config_defaults(&cfg);
    cfg.model.attention = kind;
    cfg.model.n_layer = 2;
    cfg.model.d_model = 32;
    cfg.model.n_head = 2;
    set_variant_switches(&cfg.model);
    cfg.model.seq_len = 70;
    cfg.batch_size = 2;
    cfg.model.init_std = 0.3f;
    config_validate(&cfg);
    return cfg;
}

// Two layers, d_model 32, heads of width 8 (two for a variant whose heads are two maps wide, else
// four), context 96 over one and a half query blocks: the decoding and needle tests' model
static inline Config short_context_config(AttentionKind kind) {
    Config cfg;
    config_defaults(&cfg);
    cfg.model.attention = kind;
    cfg.model.n_layer = 2;
    cfg.model.d_model = 32;
    cfg.model.n_head = ATTN_VARIANTS[kind].maps == 2 && !ATTN_VARIANTS[kind].shared_kv ? 2 : 4;
    cfg.model.head_dim = 8;
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
