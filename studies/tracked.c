#define _GNU_SOURCE
#include "tracked.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../base/util.h"
#include "../data/dataset.h"
#include "../run/train.h"
#include "recipe.h"

typedef struct {
    Registry* reg;
    int64_t run;  // 0 until begin has registered it
    // registers the run once training starts (after every check), so a refused run writes nothing
    int64_t (*begin)(void* ctx, Registry** reg, const char* device);
    void* begin_ctx;
    int n, cap;
    int steps_trained;  // by this process: its throughput
    const char** keys;
    int* steps;
    int64_t* tokens;
    double* values;
    double* times;  // seconds since 1970: metrics carry wall-clock time
} MetricBuffer;

static void buffer_metric(void* ctx, const char* key, int step, long tokens, double value) {
    MetricBuffer* b = ctx;
    b->steps_trained += strcmp(key, "train_loss") == 0;
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 256;
        b->keys = realloc(b->keys, b->cap * sizeof(char*));
        b->steps = realloc(b->steps, b->cap * sizeof(int));
        b->tokens = realloc(b->tokens, b->cap * sizeof(int64_t));
        b->values = realloc(b->values, b->cap * sizeof(double));
        b->times = realloc(b->times, b->cap * sizeof(double));
        if (!b->keys || !b->steps || !b->tokens || !b->values || !b->times) die("out of memory buffering metrics");
    }
    b->keys[b->n] = strdup(key);  // per layer keys are made in a buffer of the training loop
    if (!b->keys[b->n]) die("out of memory buffering metrics");
    b->steps[b->n] = step;
    b->tokens[b->n] = tokens;
    b->values[b->n] = value;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    b->times[b->n] = (double)now.tv_sec + 1e-9 * now.tv_nsec;
    b->n++;
}

static void flush_metrics(void* ctx) {
    MetricBuffer* b = ctx;
    registry_metrics(b->reg, b->run, b->n, b->keys, b->steps, b->tokens, b->values, b->times);
    for (int i = 0; i < b->n; i++) free((void*)b->keys[i]);
    b->n = 0;
}

static void resume_metrics(void* ctx, int step, const char* device) {
    MetricBuffer* b = ctx;
    if (!b->run) b->run = b->begin(b->begin_ctx, &b->reg, device);
    registry_forget_metrics_after(b->reg, b->run, step);
}

// Trains cfg recorded through buffer (its run begun, or begun at the start of training);
// returns the run
static int64_t record_training(MetricBuffer* buffer, const Config* cfg, int until) {
    TrainObserver observer = {buffer_metric, flush_metrics, resume_metrics, buffer};
    double t0 = wall_time();
    train_run(cfg, until, &observer);
    double seconds = wall_time() - t0;
    Registry* reg = buffer->reg;
    int64_t run = buffer->run;
    registry_evaluation(reg, run, "train_seconds", seconds);
    double tokens = (double)buffer->steps_trained * cfg->batch_size * cfg->model.seq_len * cfg->grad_accum;
    if (buffer->steps_trained) registry_evaluation(reg, run, "tokens_per_second", tokens / seconds);
    // the mix is made from code that changes, so its hash is what says which data a run saw
    ShardList shards;
    data_list_split(&shards, cfg->data, "train");
    for (int i = 0; i < shards.n; i++) registry_artifact(reg, run, "training_data", shards.paths[i]);
    shard_list_free(&shards);
    for (int i = 0; i < buffer->n; i++) free((void*)buffer->keys[i]);
    free(buffer->keys);
    free(buffer->steps);
    free(buffer->tokens);
    free(buffer->values);
    free(buffer->times);
    return run;
}

// A row of an experiment: its run begun in an open registry when training starts
typedef struct {
    Registry* reg;
    int64_t experiment;
    const char* row;
    const Config* cfg;
} RowStart;

static int64_t begin_row_run(void* ctx, Registry** reg, const char* device) {
    RowStart* s = ctx;
    *reg = s->reg;
    return registry_begin_run(s->reg, s->experiment, s->row, s->cfg->seed, s->cfg, device, data_identity(s->cfg->data));
}

int64_t train_finished_row(Registry* reg, int64_t experiment, const char* row, const Config* cfg) {
    int64_t run = registry_finished_run(reg, experiment, row, cfg->seed, cfg, data_identity(cfg->data));
    if (run) printf("%s, seed %d: already finished (run %lld)\n", row, cfg->seed, (long long)run);
    return run;
}

int64_t train_registry_row(Registry* reg, int64_t experiment, const char* row, const Config* cfg, int end) {
    RowStart start = {reg, experiment, row, cfg};
    MetricBuffer buffer = {.begin = begin_row_run, .begin_ctx = &start};
    int64_t run = record_training(&buffer, cfg, 0);
    char checkpoint[CONFIG_STR + 16];
    config_checkpoint_path(cfg, checkpoint, sizeof(checkpoint));
    registry_artifact(reg, run, "checkpoint", checkpoint);
    if (end) registry_end_run(reg, run, RUN_FINISHED);
    return run;
}

// `difftx train`'s registry: opened, and its run begun, only when training starts
typedef struct {
    const char* results;
    const char* recipe_path;
    const Config* cfg;
    Registry reg;
} TrainRegistry;

static int64_t begin_train_run(void* ctx, Registry** reg, const char* device) {
    TrainRegistry* t = ctx;
    int64_t experiment = recipe_file_experiment(&t->reg, t->results, "train", t->recipe_path);
    int64_t run = registry_begin_run(&t->reg, experiment, t->cfg->out, t->cfg->seed, t->cfg, device, data_identity(t->cfg->data));
    printf("run %lld in %s\n", (long long)run, t->reg.path);
    *reg = &t->reg;
    return run;
}

void train_tracked(const char* recipe_path, const Config* cfg, int until, const char* results) {
    char path[4200];
    registry_path(path, sizeof(path), results);
    if (access(path, F_OK) == 0) {  // a registry that holds this config finished: nothing to record
        Registry reg;
        int64_t experiment = recipe_file_experiment(&reg, results, "train", recipe_path);
        int64_t run = registry_finished_run(&reg, experiment, cfg->out, cfg->seed, cfg, data_identity(cfg->data));
        char ckpt[4200];
        config_checkpoint_path(cfg, ckpt, sizeof(ckpt));
        if (run) printf("run %lld of %s already finished this config: checkpoint %s\n", (long long)run, reg.path, ckpt);
        registry_close(&reg);
        if (run) return;
    }
    TrainRegistry t = {results, recipe_path, cfg, {0}};
    MetricBuffer buffer = {.begin = begin_train_run, .begin_ctx = &t};
    int64_t run = record_training(&buffer, cfg, until);
    config_checkpoint_path(cfg, path, sizeof(path));
    registry_artifact(&t.reg, run, "checkpoint", path);
    registry_end_run(&t.reg, run, until > 0 && until < cfg->optim.steps ? RUN_KILLED : RUN_FINISHED);
    registry_close(&t.reg);
}
