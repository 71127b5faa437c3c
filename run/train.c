#define _GNU_SOURCE
#include "train.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "../data/dataset.h"
#include "checkpoint.h"
#include "device.h"
#include "../base/dist.h"
#include "../model/model.h"
#include "../model/optim.h"
#include "../base/util.h"
#include "spikes.h"

// Dies naming the first key whose value differs; `out` may differ, so run folders can move, and
// `steps` may grow, which extends the run
static void require_same_config(const Config* stored, const Config* now, const char* ckpt) {
    Config a = *stored, b = *now;
    memcpy(a.out, b.out, sizeof(a.out));
    a.optim.steps = b.optim.steps;
    char *ta = config_to_text(&a), *tb = config_to_text(&b);
    char *la = ta, *lb = tb;
    while (*la && *lb) {
        char *ea = strchr(la, '\n'), *eb = strchr(lb, '\n');
        *ea = *eb = 0;
        if (strcmp(la, lb) != 0) {
            die("'%s' belongs to a run with a different config (checkpoint: '%s', now: '%s'); "
                "choose another out folder or delete that one", ckpt, la, lb);
        }
        la = ea + 1;
        lb = eb + 1;
    }
    free(ta);
    free(tb);
}

// log.tsv: a header, then one row per step and one per evaluation, tab-separated, so pandas,
// gnuplot and sqlite3's .import read it as it is. Fields a row does not have are empty.
static const char LOG_HEADER[] = "kind\tstep\ttokens\tloss\tlr\tgrad_norm\n";

typedef struct {
    int val;  // a validation row, else a training step
    int step;
    long tokens;
    double loss, lr, norm;
} LogRow;

// The log is line-buffered: a row that cannot be written (a full disk) stops the run here
static void write_log_row(FILE* f, const char* path, const LogRow* r) {
    int w = r->val ? fprintf(f, "val\t%d\t%ld\t%.17g\t\t\n", r->step, r->tokens, r->loss)
                   : fprintf(f, "train\t%d\t%ld\t%.17g\t%.9g\t%.9g\n", r->step, r->tokens, r->loss, r->lr, r->norm);
    if (w < 0 || ferror(f)) die("cannot write the log '%s' at step %d: %s", path, r->step, strerror(errno));
}

// Splits line at sep into at most max fields, each parsed whole: returns the field count
static int split_fields(char* line, char sep, char** fields, int max) {
    int n = 0;
    for (char* at = line; n < max; at++) {
        fields[n++] = at;
        at = strchr(at, sep);
        if (!at) return n;
        *at = 0;
    }
    return max + 1;  // too many
}

static int whole_long(const char* s, long* v) {
    char* end;
    *v = strtol(s, &end, 10);
    return *s && !*end;
}

static int whole_double(const char* s, double* v) {
    char* end;
    *v = strtod(s, &end);
    return *s && !*end;
}

// A whole row, every field parsed to its end (1), or 0 for anything else: a line a kill cut
// short reads as 0 even where its cut-off step number still parses ("train\t1" of
// "train\t12\t..."). Rows of the space-separated log of earlier versions ("train STEP LOSS LR
// NORM", "val STEP LOSS") are read too, their tokens from tokens_per_step.
static int parse_log_row(char* line, long tokens_per_step, LogRow* r) {
    char* f[7] = {0};
    long step = 0;
    memset(r, 0, sizeof(*r));
    int tabs = strchr(line, '\t') != NULL, n = split_fields(line, tabs ? '\t' : ' ', f, 6);
    r->val = strcmp(f[0], "val") == 0;
    if (!r->val && strcmp(f[0], "train") != 0) return 0;
    if (n < 2 || !whole_long(f[1], &step)) return 0;
    r->step = (int)step;
    r->tokens = step * tokens_per_step;
    if (!tabs) {  // earlier versions
        if (r->val) return n == 3 && whole_double(f[2], &r->loss);
        return n == 5 && whole_double(f[2], &r->loss) && whole_double(f[3], &r->lr) && whole_double(f[4], &r->norm);
    }
    if (n != 6 || !whole_long(f[2], &r->tokens) || !whole_double(f[3], &r->loss)) return 0;
    if (r->val) return !*f[4] && !*f[5];
    return whole_double(f[4], &r->lr) && whole_double(f[5], &r->norm);
}

// Keeps the whole rows of steps <= step, so a resumed run's log reads as if it never stopped,
// and replays their losses and gradient norms through the spike watches (watch[2])
static void truncate_log(const char* path, int step, long tokens_per_step, SpikeWatch* watch) {
    char tmp[4096];
    tmp_path(tmp, sizeof(tmp), path);
    FILE* f = fopenCheck(tmp, "w");
    fwriteCheck(LOG_HEADER, 1, sizeof(LOG_HEADER) - 1, f, tmp);
    if (access(path, F_OK) == 0) {
        size_t len;
        char* text = read_text_file(path, &len);
        for (char *line = text, *end; (end = strchr(line, '\n')); line = end + 1) {  // a last line without '\n' was cut
            *end = 0;
            LogRow r;
            if (!parse_log_row(line, tokens_per_step, &r) || r.step > step) continue;
            write_log_row(f, tmp, &r);
            if (!r.val) {
                spike_watch(&watch[0], r.loss);
                spike_watch(&watch[1], r.norm);
            }
        }
        free(text);
    }
    fcloseCheck(f, tmp);
    renameCheck(tmp, path);
}

// Warm start: the parameters of a finished run with the same tensor layout; nothing else of
// that run (step, optimizer moments, data position) carries over
static void init_from_checkpoint(Model* model, const char* path, uint64_t tokenizer_hash) {
    Config src_cfg;
    Model src;
    CheckpointInfo info;
    Backend* host = device_open_host();  // read only, then copied across
    checkpoint_load(path, host, &src_cfg, &src, NULL, &info);
    if (!info.finished) die("key 'init_from': '%s' is not a finished run's checkpoint (step %d of %d)", path, info.step, src_cfg.optim.steps);
    if (info.tokenizer_hash != tokenizer_hash) die("key 'init_from': '%s' was trained with another tokenizer than this run's data", path);
    if (src.n_tensors != model->n_tensors) die("key 'init_from': '%s' has another architecture than this config", path);
    for (int i = 0; i < model->n_tensors; i++) {
        const ParamTensor *a = &src.tensors[i], *b = &model->tensors[i];
        if (strcmp(a->name, b->name) || a->shape[0] != b->shape[0] || a->shape[1] != b->shape[1]) {
            die("key 'init_from': '%s' has tensor %s (%d, %d) where this config has %s (%d, %d)", path, a->name,
                a->shape[0], a->shape[1], b->name, b->shape[0], b->shape[1]);
        }
    }
    model_copy_params(model, &src);
    model_free(&src);
    backend_close(host);
}

// The ranks take turns over the evaluation batches
static double evaluate(Model* model, const Config* cfg, const Shard* val, const BatchShare* share, int* inputs, int* targets) {
    double total = 0.0;
    for (int k = share->rank; k < cfg->eval_batches; k += share->ranks) {
        loader_eval_rows(val, cfg->model.seq_len, (size_t)k * cfg->batch_size, cfg->batch_size, inputs, targets);
        model_forward(model, inputs, targets, cfg->batch_size, cfg->model.seq_len, 0);
        total += model_loss(model);
    }
    if (share->ranks > 1) dist_sum_doubles(&total, 1);
    return total / cfg->eval_batches;
}

// Each layer's lambda at an evaluation, printed and recorded as metrics: lambda_l<l> (diff),
// or lambda_l<l>_h<h>_mean and _std over the tokens of the first evaluation batch (diff2,
// read from one training forward of it, which keeps every layer)
static void record_lambda(Model* model, const Config* cfg, const Shard* val, int* inputs, int* targets, const TrainObserver* observer,
                          int step, long tokens) {
    int L = model->L, H = model->H, per_token = model->variant->lambda == LAMBDA_PER_TOKEN;
    if (model->variant->lambda == LAMBDA_NONE) return;
    if (per_token) {
        loader_eval_rows(val, cfg->model.seq_len, 0, cfg->batch_size, inputs, targets);
        model_forward(model, inputs, targets, cfg->batch_size, cfg->model.seq_len, 1);
    }
    double* mean = mallocCheck((size_t)L * H * sizeof(double));
    double* std = mallocCheck((size_t)L * H * sizeof(double));
    model_lambda_stats(model, mean, std);
    printf("step %5d | lambda by layer%s:", step, per_token ? " (mean over heads and tokens)" : "");
    for (int l = 0; l < L; l++) {
        char key[64];
        double layer = 0;
        for (int h = 0; h < H; h++) layer += mean[l * H + h] / H;
        printf(" %.3f", layer);
        if (!observer) continue;
        if (!per_token) {
            snprintf(key, sizeof(key), "lambda_l%02d", l + 1);
            observer->metric(observer->ctx, key, step, tokens, mean[l * H]);
            continue;
        }
        for (int h = 0; h < H; h++) {
            snprintf(key, sizeof(key), "lambda_l%02d_h%02d_mean", l + 1, h + 1);
            observer->metric(observer->ctx, key, step, tokens, mean[l * H + h]);
            snprintf(key, sizeof(key), "lambda_l%02d_h%02d_std", l + 1, h + 1);
            observer->metric(observer->ctx, key, step, tokens, std[l * H + h]);
        }
    }
    printf("\n");
    free(mean);
    free(std);
}

static void diverged(int step, double loss, float norm, const char* ckpt, FILE* log) {
    if (log) fclose(log);
    die("training diverged at step %d: loss %g, gradient norm %g; the last good checkpoint stays at '%s'%s", step,
        loss, norm, ckpt, access(ckpt, F_OK) == 0 ? "" : " (none was written yet)");
}

// Where a ulimit (-v, -d) bounds a process whose buffers are host memory: its smaller value in
// bytes, else -1
static double host_limit_bytes(void) {
    double smallest = -1;
    static const int LIMITS[] = {RLIMIT_AS, RLIMIT_DATA};
    for (int i = 0; i < 2; i++) {
        struct rlimit limit;
        if (getrlimit(LIMITS[i], &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) continue;
        if (smallest < 0 || (double)limit.rlim_cur < smallest) smallest = (double)limit.rlim_cur;
    }
    return smallest;
}

double train_check_memory(const Config* cfg, const Backend* be, int vocab_size, double held) {
    double activations, need = model_training_bytes(&cfg->model, vocab_size, cfg->batch_size, be->precision, &activations);
    // in host memory, a checkpoint is written from a copy of the parameters
    if (be->host_memory) need += 4.0 * (double)model_param_count(&cfg->model, vocab_size);
    double have = be->memory_bytes() - held;
    double gib = 1024.0 * 1024 * 1024;
    if (need > have) {
        char beside[96] = "", limit[200] = "";
        if (held > 0) snprintf(beside, sizeof(beside), " left beside the %.1f GiB of the recipe it alternates with", held / gib);
        double bound = be->host_memory ? host_limit_bytes() : -1;
        if (bound >= 0 && bound < machine_memory_bytes()) {  // the ulimit, not the machine, is short: the figure to set
            snprintf(limit, sizeof(limit), " (what this process's ulimit leaves past OpenBLAS's buffers: raise it to at least %.0f KiB, "
                     "ulimit -v %.0f)", (bound + need - have) / 1024.0 + 1, (bound + need - have) / 1024.0 + 1);
        }
        const char* bf16 = be->precision == PRECISION_BF16 ? " (and the bf16 twins of weights and activations)" : "";
        die("training needs %.1f GiB, more than the %.1f GiB of device %s%s%s: %.1f GiB of parameters with their gradients and "
            "AdamW moments (keys 'n_layer' = %d, 'd_model' = %d, 'ffn_hidden' and the vocabulary of %d) and %.1f GiB of one "
            "micro-batch's activations (keys 'batch_size' = %d, 'seq_len' = %d)%s", need / gib, have / gib, be->device_name(be),
            limit, beside, (need - activations) / gib, cfg->model.n_layer, cfg->model.d_model, vocab_size, activations / gib,
            cfg->batch_size, cfg->model.seq_len, bf16);
    }
    return need;
}

BatchShare batch_share(const Config* cfg, int rank, int ranks) {
    int global = cfg->batch_size * cfg->grad_accum;
    if (global % ranks) {
        die("keys 'batch_size' x 'grad_accum' = %d rows per step do not split evenly across %d ranks; run with a "
            "number of ranks that divides %d", global, ranks, global);
    }
    int rows = global / ranks, micro_rows = cfg->batch_size < rows ? cfg->batch_size : rows;
    while (rows % micro_rows) micro_rows--;  // equal micro-batches keep the mean of means the global mean
    return (BatchShare){rank, ranks, rank * rows, micro_rows, rows / micro_rows};
}

TrainStep train_step(Model* model, AdamW* opt, const Config* cfg, const BatchShare* share, int step, const int* inputs,
                     const int* targets) {
    size_t rows = (size_t)share->micro_rows * cfg->model.seq_len;
    int parts = share->micros * share->ranks;  // equal parts of the global batch
    TrainStep out = {0.0, NAN, lr_at(&opt->cfg, step)};
    model_zero_grad(model);
    for (int micro = 0; micro < share->micros; micro++) {
        model_forward(model, inputs + micro * rows, targets + micro * rows, share->micro_rows, cfg->model.seq_len, 1);
        double loss = model_loss(model);
        out.loss += loss;
        if (!isfinite(loss)) break;
        model_backward(model, 1.0f / parts);
    }
    // every rank learns of a non-finite loss anywhere, so all of them skip the update together
    if (share->ranks > 1) dist_sum_doubles(&out.loss, 1);
    out.loss /= parts;
    if (!isfinite(out.loss)) return out;
    if (share->ranks > 1) model_sum_grads_across_ranks(model);
    out.norm = clip_grad_norm(model, cfg->optim.grad_clip);
    if (isfinite(out.norm)) adamw_update(opt, model, out.lr, step + 1);
    return out;
}

// One run on every rank: rank 0 owns the run folder (lock, log, checkpoints) and the observer
// One training run in progress: what its steps share
typedef struct {
    const Config* cfg;  // as asked for
    Backend* be;        // the run's instance: its device and precision
    Config recorded;    // what checkpoints record: the stored recipe when resuming, the data's absolute path
    BatchShare share;
    int root, threads, lock;
    size_t tokens_per_step;
    char ckpt[4096], log_path[4096];
    DataDir data;
    Model model;
    AdamW opt;
    CheckpointInfo info;
    SpikeWatch watch[2];  // the loss's and the gradient norm's
} Run;

// The data, the device and their checks, then the run folder (locked): nothing is written
// before every check has passed
static void open_run(Run* r, const Config* cfg) {
    config_validate(cfg);
    memset(r, 0, sizeof(*r));
    r->cfg = cfg;
    r->share = batch_share(cfg, dist_rank(), dist_ranks());
    r->root = r->share.rank == 0;
    r->threads = omp_get_max_threads();
    r->lock = -1;
    int T = cfg->model.seq_len;
    r->tokens_per_step = (size_t)cfg->batch_size * T * cfg->grad_accum;
    data_open(&r->data, cfg->data, DATA_TRAIN | DATA_VAL);
    if (r->data.val.n_tokens < (size_t)T + 1) {  // refused before anything is written
        die("key 'data': the validation shard of '%s' holds %zu tokens, fewer than one window of seq_len + 1 = %d; prepare "
            "more text or lower 'seq_len'", cfg->data, r->data.val.n_tokens, T + 1);
    }
    r->be = device_open_run(cfg);
    train_check_memory(cfg, r->be, r->data.tok.vocab_size, 0.0);
    if (r->root) {
        mkdir_p(cfg->out);
        r->lock = lock_folder(cfg->out, "run folder");
        data_copy_tokenizer(&r->data, cfg->out);  // the run folder stands alone
    }
    config_checkpoint_path(cfg, r->ckpt, sizeof(r->ckpt));
    path_printf(r->log_path, sizeof(r->log_path), "%s/log.tsv", cfg->out);
    r->recorded = *cfg;
}

// Model, moments, position and log from the run folder's checkpoint, after checking that it is
// this run's: the same recipe (steps may grow), tokenizer and data
static void resume_run(Run* r) {
    const Config* cfg = r->cfg;
    const char* ckpt = r->ckpt;
    CheckpointInfo* info = &r->info;
    checkpoint_load(ckpt, r->be, &r->recorded, &r->model, &r->opt, info);
    require_same_config(&r->recorded, cfg, ckpt);
    int steps = cfg->optim.steps;
    if (steps < info->step) die("key 'steps': %d is below the %d steps '%s' has trained; a run only grows", steps, info->step, ckpt);
    if (steps != r->recorded.optim.steps) {
        printf("extending %s from %d to %d steps: parameters, AdamW moments and data position carry on; the "
               "learning-rate schedule is the one of %d steps from here\n", ckpt, r->recorded.optim.steps, steps, steps);
        r->recorded.optim.steps = steps;  // what the next checkpoint records
        r->opt.cfg.steps = steps;
        info->finished = info->step == steps;
    }
    if (info->tokenizer_hash != r->data.tok.hash) die("'%s' was trained with another tokenizer than '%s/tokenizer.bin'", ckpt, cfg->data);
    if (!info->data_id[0]) {
        if (r->root) fprintf(stderr, "warning: '%s' records no data identity (an older file): it cannot say whether '%s' holds its data\n", ckpt, cfg->data);
    } else if (strcmp(info->data_id, r->data.identity) != 0) {
        die("'%s' was trained on other data than '%s' holds (checkpoint: %s; '%s' now: %s); choose another out folder or "
            "the data it was trained on", ckpt, cfg->data, info->data_id, r->data.absolute, r->data.identity);
    }
    const char* device = r->model.be->device_name(r->model.be);
    if (r->root && (info->threads != r->threads || info->ranks != r->share.ranks || strcmp(info->device, device) != 0)) {
        fprintf(stderr, "warning: resuming with %d ranks of %d threads on %s, the checkpoint was written by %d of %d on "
                "%s; losses match a non-stop run bitwise only with the same device, ranks and threads\n", r->share.ranks,
                r->threads, device, info->ranks, info->threads, info->device);
    }
    if (r->root) truncate_log(r->log_path, info->step, (long)r->tokens_per_step, r->watch);
    if (!info->finished) printf("resuming %s from step %d\n", ckpt, info->step);
}

// A fresh model (random, or a finished run's weights) and optimizer, and an empty log
static void start_run(Run* r) {
    const Config* cfg = r->cfg;
    model_build(&r->model, &cfg->model, r->be, r->data.tok.vocab_size, cfg->batch_size);
    if (cfg->init_from[0]) init_from_checkpoint(&r->model, cfg->init_from, r->data.tok.hash);
    else model_init_params(&r->model, (uint64_t)cfg->seed);
    adamw_alloc(&r->opt, &r->model, &cfg->optim);
    if (r->root) truncate_log(r->log_path, 0, 0, r->watch);
}

static void announce_run(const Run* r) {
    const Config* cfg = r->cfg;
    const Model* m = &r->model;
    printf("model: %s attention, L=%d C=%d H=%d D=%d F=%d, %zu parameters; %zu tokens per step, ", config_attention_name(&cfg->model),
           m->L, m->C, m->H, m->D, m->F, m->n_params, r->tokens_per_step);
    if (r->share.ranks > 1) printf("%d ranks x %d micro-batches of %d rows, ", r->share.ranks, r->share.micros, r->share.micro_rows);
    printf("%d threads, %s\n", r->threads, m->be->device_name(m->be));
    if (r->info.finished) printf("run already finished at step %d (train loss %.4f)\n", r->info.step, r->info.train_loss);
    if (!r->root) return;
    if (cfg->optim.warmup_steps >= cfg->optim.steps) {
        fprintf(stderr, "warning: warmup_steps = %d >= steps = %d: the learning rate never reaches lr\n", cfg->optim.warmup_steps, cfg->optim.steps);
    }
    int T = cfg->model.seq_len;
    size_t val_windows = (r->data.val.n_tokens - 1) / T, asked = (size_t)cfg->eval_batches * cfg->batch_size;
    if (asked > val_windows) {
        fprintf(stderr, "warning: the validation shard holds %zu windows of seq_len + 1 = %d tokens, but eval_batches x "
                "batch_size = %zu: windows repeat, so the validation loss averages only %zu distinct windows\n",
                val_windows, T + 1, asked, val_windows);
    }
}

// Loss and gradient-norm spikes (root only): printed and recorded as metrics
static void watch_spikes(Run* r, const TrainObserver* observer, int done, long tokens_seen, double loss, float norm) {
    static const char* const names[2] = {"loss", "grad_norm"}, *const keys[2] = {"spike_loss", "spike_grad_norm"};
    double value[2] = {loss, norm};
    for (int k = 0; k < 2; k++) {
        int before = r->watch[k].n;
        double z = spike_watch(&r->watch[k], value[k]);
        if (!(z > SPIKE_Z)) continue;
        printf("step %5d | %s spike: %.4g, z-score %.1f against the last %d steps\n", done, names[k], value[k], z, before);
        if (observer) observer->metric(observer->ctx, keys[k], done, tokens_seen, z);
    }
}

// Metrics first: a kill before the checkpoint's rename leaves metrics past the last checkpoint,
// which the resumed run's observer drops (resume); the other order would lose this interval's
// metrics for good
static void save_run(Run* r, const TrainObserver* observer, int done, double loss) {
    if (observer) observer->flush(observer->ctx);
    const Config* cfg = r->cfg;
    CheckpointInfo now = {.step = done, .rows_seen = (uint64_t)done * cfg->grad_accum * cfg->batch_size,
                          .tokenizer_hash = r->data.tok.hash, .threads = r->threads, .ranks = r->share.ranks,
                          .finished = done == cfg->optim.steps, .train_loss = loss};
    snprintf(now.data_id, sizeof(now.data_id), "%s", r->data.identity);
    checkpoint_save(r->ckpt, &r->recorded, &r->model, &r->opt, &now);
}

static void close_run(Run* r) {
    model_free(&r->model);
    adamw_free(&r->opt);
    backend_close(r->be);  // after everything that computes on it releases its buffers
    data_close(&r->data);
    if (r->root) unlock_folder(r->lock);
}

static double run_training(const Config* cfg, int until, const TrainObserver* observer) {
    Run r;
    open_run(&r, cfg);
    if (until <= 0 || until > cfg->optim.steps) until = cfg->optim.steps;
    if (access(r.ckpt, F_OK) == 0) resume_run(&r);
    else start_run(&r);
    snprintf(r.recorded.data, sizeof(r.recorded.data), "%s", r.data.absolute);
    announce_run(&r);

    int B = cfg->batch_size, T = cfg->model.seq_len;
    const BatchShare* share = &r.share;
    Loader loader;
    loader_init(&loader, &r.data.train, T, (uint64_t)cfg->seed);
    size_t rank_tokens = (size_t)share->micros * share->micro_rows * T;
    size_t buffer_tokens = rank_tokens > (size_t)B * T ? rank_tokens : (size_t)B * T;  // training or evaluation
    int* inputs = mallocCheck(buffer_tokens * sizeof(int));   // (micros, micro_rows, T)
    int* targets = mallocCheck(buffer_tokens * sizeof(int));  // (micros, micro_rows, T)
    if (!r.root) observer = NULL;
    if (observer) observer->resume(observer->ctx, r.info.step, r.model.be->device_name(r.model.be));
    FILE* log = NULL;
    if (r.root) {
        log = fopenCheck(r.log_path, "a");
        setvbuf(log, NULL, _IOLBF, 0);  // one write per line: a kill never leaves half a line mid-log
    }
    double t_start = wall_time(), loss = r.info.train_loss, t_logged = t_start;
    int first_step = r.info.step, step_logged = r.info.step;
    for (int step = first_step; step < until; step++) {
        loader_rows(&loader, (size_t)step * cfg->grad_accum * B + share->first_row, share->micros * share->micro_rows, inputs,
                    targets);
        TrainStep st = train_step(&r.model, &r.opt, cfg, share, step, inputs, targets);
        loss = st.loss;
        if (!isfinite(st.loss) || !isfinite(st.norm)) diverged(step + 1, st.loss, st.norm, r.ckpt, log);
        int done = step + 1;
        long tokens_seen = (long)done * (long)r.tokens_per_step;
        if (log) write_log_row(log, r.log_path, &(LogRow){0, done, tokens_seen, loss, st.lr, st.norm});
        if (observer) observer->metric(observer->ctx, "train_loss", done, tokens_seen, loss);
        if (r.root) watch_spikes(&r, observer, done, tokens_seen, loss, st.norm);
        if (done % cfg->log_every == 0 || done == until) {
            // the rate over the steps since the last line: steady, unlike one step's, and current
            char elapsed_text[32], eta[32];
            double now = wall_time(), elapsed = now - t_start;
            format_duration(elapsed_text, sizeof(elapsed_text), elapsed);
            format_duration(eta, sizeof(eta), elapsed / (done - first_step) * (until - done));  // to where this call stops
            printf("step %5d/%d | loss %.4f | lr %.2e | norm %6.3f | %ld tokens | %6.0f tok/s | %s elapsed, eta %s\n", done,
                   cfg->optim.steps, loss, st.lr, st.norm, tokens_seen,
                   (double)(done - step_logged) * r.tokens_per_step / (now - t_logged), elapsed_text, eta);
            fflush(stdout);
            t_logged = now;
            step_logged = done;
        }
        if ((cfg->eval_every && done % cfg->eval_every == 0) || done == cfg->optim.steps) {
            double val_loss = evaluate(&r.model, cfg, &r.data.val, share, inputs, targets);
            if (log) write_log_row(log, r.log_path, &(LogRow){1, done, tokens_seen, val_loss, 0, 0});
            if (observer) observer->metric(observer->ctx, "val_loss", done, tokens_seen, val_loss);
            printf("step %5d | val loss %.4f\n", done, val_loss);
            if (r.root) record_lambda(&r.model, cfg, &r.data.val, inputs, targets, observer, done, tokens_seen);
        }
        if (r.root && ((cfg->checkpoint_every && done % cfg->checkpoint_every == 0) || done == until)) save_run(&r, observer, done, loss);
    }
    if (log) fcloseCheck(log, r.log_path);
    if (r.root && until > first_step) {
        printf("%s at step %d: checkpoint %s, log %s\n", until == cfg->optim.steps ? "finished" : "stopped", until, r.ckpt, r.log_path);
    }
    free(inputs);
    free(targets);
    loader_free(&loader);
    close_run(&r);
    return loss;
}

// What rank 0 sends its followers to start a run
typedef struct {
    Config cfg;
    int until;
} TrainOrder;

double train_run(const Config* cfg, int until, const TrainObserver* observer) {
    TrainOrder order = {*cfg, until};
    dist_lead(&order, sizeof(order));
    return run_training(cfg, until, observer);
}

void train_follow(void) {
    TrainOrder order;
    while (dist_follow(&order, sizeof(order))) run_training(&order.cfg, order.until, NULL);
}
