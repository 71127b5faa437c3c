// The runs' and studies' test fixtures: a small synthetic corpus for tests that need prepared
// data, the tiny models of model_fixtures.h as a run's Config, and a registry query.
#ifndef FIXTURES_H
#define FIXTURES_H

#include <sqlite3.h>
#include <stdio.h>

#include "../data/prepare.h"
#include "model_fixtures.h"
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

// A run's Config of a test model: the recipes' defaults for the other keys, validated
static inline Config config_of(TestModel t) {
    Config cfg;
    config_defaults(&cfg);
    cfg.model = t.model;
    cfg.optim = t.optim;
    cfg.batch_size = t.batch_size;
    config_validate(&cfg);
    return cfg;
}
static inline Config tiny_model_config(AttentionKind kind) { return config_of(tiny_model(kind)); }
static inline Config short_context_config(AttentionKind kind) { return config_of(short_context_model(kind)); }

// The first column of the first row of the query sql on reg, -1 without a row
static inline int registry_count(Registry* reg, const char* sql) {
    sqlite3_stmt* st;
    sqlite3_prepare_v2(reg->db, sql, -1, &st, NULL);
    int n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
    sqlite3_finalize(st);
    return n;
}

#endif
