#include "recipe.h"

#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model/train.h"
#include "../model/util.h"

static int on_line(void* user, const char* section, const char* key, const char* value) {
    Recipe* r = user;
    Section* s = &r->common;
    if (section[0]) {
        int is_row = strncmp(section, "row ", 4) == 0, is_preset = strncmp(section, "preset ", 7) == 0;
        if (!is_row && !is_preset) {
            snprintf(r->error, sizeof(r->error), "section [%s]: expected [preset NAME] or [row NAME]", section);
            return 0;
        }
        Section* list = is_row ? r->rows : r->presets;
        int* n = is_row ? &r->n_rows : &r->n_presets;
        const char* name = section + (is_row ? 4 : 7);
        if (*n == 0 || strcmp(list[*n - 1].name, name) != 0) {
            if (*n == RECIPE_SECTIONS) { snprintf(r->error, sizeof(r->error), "too many sections"); return 0; }
            snprintf(list[(*n)++].name, sizeof(list[0].name), "%s", name);
        }
        s = &list[*n - 1];
    }
    if (!section[0] || !r->extra_key(strncmp(section, "row ", 4) == 0, key)) {
        Config scratch;
        config_defaults(&scratch);
        const char* err = config_set(&scratch, key, value);
        if (err) {
            snprintf(r->error, sizeof(r->error), "%s", err);
            return 0;
        }
    }
    if (s->n == RECIPE_KEYS || strlen(value) >= CONFIG_STR) {
        snprintf(r->error, sizeof(r->error), "key '%s': too many keys or value too long", key);
        return 0;
    }
    snprintf(s->key[s->n], sizeof(s->key[0]), "%s", key);
    snprintf(s->value[s->n], sizeof(s->value[0]), "%s", value);
    s->n++;
    return 1;
}

Recipe* recipe_load(const char* path, ExtraKey extra_key) {
    Recipe* r = callocCheck(1, sizeof(Recipe));
    r->extra_key = extra_key;
    int line = ini_parse(path, on_line, r);
    if (line < 0) die("cannot open recipe '%s'", path);
    if (line > 0) die("%s:%d: %s", path, line, r->error[0] ? r->error : "syntax error");
    return r;
}

const Section* recipe_preset(const Recipe* r, const char* name, const char* path) {
    for (int i = 0; i < r->n_presets; i++) {
        if (strcmp(r->presets[i].name, name) == 0) return &r->presets[i];
    }
    die("%s: no [preset %s]", path, name);
}

const char* section_get(const Section* s, const char* key) {
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->key[i], key) == 0) return s->value[i];
    }
    return NULL;
}

int section_int(const Section* s, const char* key, const char* path) {
    const char* v = section_get(s, key);
    if (!v || atoi(v) <= 0) die("%s: [%s] needs a positive '%s'", path, s->name, key);
    return atoi(v);
}

void section_apply(Config* cfg, const Section* s, ExtraKey extra_key) {
    for (int i = 0; i < s->n; i++) {
        if (extra_key(0, s->key[i]) || extra_key(1, s->key[i])) continue;
        const char* err = config_set(cfg, s->key[i], s->value[i]);
        if (err) die("%s", err);
    }
}

int64_t recipe_experiment(Registry* reg, const char* results, const char* name, const char* preset, const char* recipe_path) {
    char path[4200];
    mkdir_p(results);
    snprintf(path, sizeof(path), "%s/registry.sqlite", results);
    registry_open(reg, path);
    int reaped = registry_reap(reg);
    if (reaped) printf("marked %d interrupted run(s) KILLED; they resume from their last checkpoint\n", reaped);
    char* recipe_text = read_text_file(recipe_path, NULL);
    int64_t experiment = registry_experiment(reg, name, preset, recipe_path, recipe_text);
    free(recipe_text);
    return experiment;
}

typedef struct {
    Registry* reg;
    int64_t run;
    int n, cap;
    const char** keys;
    int* steps;
    int64_t* tokens;
    double* values;
} MetricBuffer;

static void buffer_metric(void* ctx, const char* key, int step, long tokens, double value) {
    MetricBuffer* b = ctx;
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 256;
        b->keys = realloc(b->keys, b->cap * sizeof(char*));
        b->steps = realloc(b->steps, b->cap * sizeof(int));
        b->tokens = realloc(b->tokens, b->cap * sizeof(int64_t));
        b->values = realloc(b->values, b->cap * sizeof(double));
        if (!b->keys || !b->steps || !b->tokens || !b->values) die("out of memory buffering metrics");
    }
    b->keys[b->n] = key;  // string literals from the training loop
    b->steps[b->n] = step;
    b->tokens[b->n] = tokens;
    b->values[b->n] = value;
    b->n++;
}

static void flush_metrics(void* ctx) {
    MetricBuffer* b = ctx;
    registry_metrics(b->reg, b->run, b->n, b->keys, b->steps, b->tokens, b->values);
    b->n = 0;
}

double train_recorded(Registry* reg, int64_t run, const Config* cfg) {
    MetricBuffer buffer = {reg, run, 0, 0, NULL, NULL, NULL, NULL};
    TrainObserver observer = {buffer_metric, flush_metrics, &buffer};
    double t0 = wall_time();
    train_run(cfg, 0, &observer);
    // the mix is made from code that changes, so its hash is what says which data a run saw
    char data[CONFIG_STR + 16];
    snprintf(data, sizeof(data), "%s/train.bin", cfg->data);
    registry_artifact(reg, run, "training_data", data);
    free(buffer.keys);
    free(buffer.steps);
    free(buffer.tokens);
    free(buffer.values);
    return wall_time() - t0;
}
