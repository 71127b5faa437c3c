// Λ per layer and head on weights whose λ is known (zero λ vectors: DIFF's λ is λ_init of each
// depth; zero W_λ: DIFF V2's per-token λ is 0.5 with no spread; none for standard); bitwise
// determinism, resume after `--until` equal to a non-stop run (losses, parameters and moments),
// checkpoint save/load, finished runs not retrained; metrics reach the registry before the
// checkpoint that covers them is renamed into place, and a resumed attempt drops a killed one's
// metrics past its checkpoint (every step stored once); a log line a kill cut short does not
// survive the resume. Training on a tiny corpus brings the loss down.
#define _DEFAULT_SOURCE
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../data/dataset.h"
#include "../studies/registry.h"
#include "../run/train.h"
#include "../run/checkpoint.h"
#include "../base/util.h"
#include "check.h"
#include "fixtures.h"
#include "../studies/tracked.h"
#include "instances.h"

static Config tiny_config(int attention, const char* out) {
    Config cfg;
    config_defaults(&cfg);
    cfg.model.attention = attention;
    cfg.model.n_layer = 2;
    cfg.model.d_model = 32;
    cfg.model.n_head = 2;
    cfg.model.head_dim = 0;
    cfg.model.seq_len = 32;
    cfg.batch_size = 4;
    cfg.grad_accum = 2;
    cfg.optim.steps = 8;
    cfg.optim.lr = 3e-3f;
    cfg.optim.warmup_steps = 2;
    cfg.eval_every = 4;
    cfg.eval_batches = 2;
    cfg.checkpoint_every = 3;
    cfg.log_every = 100;
    snprintf(cfg.data, sizeof(cfg.data), "build/test_train_data");
    snprintf(cfg.out, sizeof(cfg.out), "%s", out);
    return cfg;
}

static char* read_log(const char* out) {
    char path[512];
    snprintf(path, sizeof(path), "%s/log.tsv", out);
    return read_text_file(path, NULL);
}

static void fresh(const char* out) {
    char path[512];
    snprintf(path, sizeof(path), "%s/checkpoint.h5", out);
    unlink(path);
    snprintf(path, sizeof(path), "%s/log.tsv", out);
    unlink(path);
}

// Parameters and (when both optimizers are given) AdamW moments equal bitwise, read through the
// model's and the optimizer's downloads
static int same_state(const Model* a, const AdamW* oa, const Model* b, const AdamW* ob) {
    size_t n = a->n_params, bytes = n * sizeof(float);
    if (b->n_params != n) return 0;
    float *x = mallocCheck(bytes), *y = mallocCheck(bytes);
    model_get_params(a, x);
    model_get_params(b, y);
    int same = memcmp(x, y, bytes) == 0;
    for (int moment = 0; moment < 2 && oa && ob && same; moment++) {
        adamw_get_moments(oa, n, moment ? NULL : x, moment ? x : NULL);
        adamw_get_moments(ob, n, moment ? NULL : y, moment ? y : NULL);
        same = memcmp(x, y, bytes) == 0;
    }
    free(x);
    free(y);
    return same;
}

static void test_variant(int attention) {
    const char* name = attention == ATTN_DIFF ? "diff" : "standard";
    char a_dir[128], b_dir[128], c_dir[128];
    snprintf(a_dir, sizeof(a_dir), "build/test_train_%s_a", name);
    snprintf(b_dir, sizeof(b_dir), "build/test_train_%s_b", name);
    snprintf(c_dir, sizeof(c_dir), "build/test_train_%s_c", name);
    fresh(a_dir); fresh(b_dir); fresh(c_dir);
    Config a = tiny_config(attention, a_dir), b = tiny_config(attention, b_dir), c = tiny_config(attention, c_dir);

    double loss_a = train_run(&a, 0, NULL);
    train_run(&b, 0, NULL);
    char *log_a = read_log(a_dir), *log_b = read_log(b_dir);
    CHECK(strcmp(log_a, log_b) == 0, "%s: two runs with the same seed log identical losses", name);

    train_run(&c, 5, NULL);  // stops after step 5; the checkpoint of step 3 is the last, then step 5 is written
    char* partial = read_log(c_dir);
    CHECK(strstr(partial, "\ntrain\t5\t") && !strstr(partial, "\ntrain\t6\t"), "%s: --until stops after step 5", name);
    Model mc;
    CheckpointInfo info;
    char ckpt[256];
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoint.h5", c_dir);
    checkpoint_load(ckpt, backend_named("cpu"), NULL, &mc, NULL, &info);
    CHECK(info.step == 5 && !info.finished, "%s: stopped run is resumable, not finished (step %d)", name, info.step);
    model_free(&mc);
    double loss_c = train_run(&c, 0, NULL);
    char* log_c = read_log(c_dir);
    CHECK(strcmp(log_a, log_c) == 0, "%s: a resumed run logs exactly the losses of one that never stopped", name);
    CHECK(loss_a == loss_c, "%s: final loss %.17g vs resumed %.17g", name, loss_a, loss_c);

    Config ca, cc2;
    Model ma, mc2;
    AdamW oa, oc;
    CheckpointInfo ia, ic;
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoint.h5", a_dir);
    checkpoint_load(ckpt, backend_named("cpu"), &ca, &ma, &oa, &ia);
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoint.h5", c_dir);
    checkpoint_load(ckpt, backend_named("cpu"), &cc2, &mc2, &oc, &ic);
    CHECK(ia.finished && ic.finished && ia.step == 8, "%s: finished runs say so", name);
    CHECK(same_state(&ma, &oa, &mc2, &oc), "%s: resumed parameters and moments equal the non-stop run's bitwise", name);

    // save and load again: everything survives
    checkpoint_save("build/test_resave.h5", &ca, &ma, &oa, &ia);
    Config cr;
    Model mr;
    AdamW orr;
    CheckpointInfo ir;
    checkpoint_load("build/test_resave.h5", backend_named("cpu"), &cr, &mr, &orr, &ir);
    CHECK(same_state(&ma, &oa, &mr, &orr) && ir.step == ia.step && ir.rows_seen == ia.rows_seen && ir.tokenizer_hash == ia.tokenizer_hash &&
          ir.train_loss == ia.train_loss, "%s: checkpoint save/load round-trips", name);
    char *text_a = config_to_text(&ca), *text_r = config_to_text(&cr);
    CHECK(strcmp(text_a, text_r) == 0, "%s: the config survives the checkpoint", name);

    // loss goes down on the tiny repetitive corpus
    double first;
    sscanf(strstr(log_a, "\ntrain\t1\t") + 1, "train\t%*d\t%*d\t%lf", &first);
    CHECK(loss_a < first - 0.5, "%s: loss falls from %.3f to %.3f in 8 steps", name, first, loss_a);
    printf("%s: loss %.4f -> %.4f over 8 steps; resume and determinism exact\n", name, first, loss_a);

    // a finished run is not trained again: same result, log and checkpoint untouched
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoint.h5", a_dir);
    struct stat before, after;
    stat(ckpt, &before);
    CHECK(train_run(&a, 0, NULL) == loss_a, "%s: rerunning a finished run returns its result", name);
    stat(ckpt, &after);
    char* log_again = read_log(a_dir);
    CHECK(strcmp(log_again, log_a) == 0 && before.st_mtim.tv_sec == after.st_mtim.tv_sec &&
          before.st_mtim.tv_nsec == after.st_mtim.tv_nsec, "%s: rerunning a finished run writes nothing", name);
    free(log_again);
    free(text_a); free(text_r); free(log_a); free(log_b); free(log_c); free(partial);
    model_free(&ma); model_free(&mc2); model_free(&mr);
    adamw_free(&oa); adamw_free(&oc); adamw_free(&orr);
    unlink("build/test_resave.h5");
}

// The step of the checkpoint on disk, 0 when there is none
static int checkpoint_step_on_disk(const char* out) {
    char path[512];
    snprintf(path, sizeof(path), "%s/checkpoint.h5", out);
    if (access(path, F_OK) != 0) return 0;
    Model m;
    CheckpointInfo info;
    checkpoint_load(path, backend_named("cpu"), NULL, &m, NULL, &info);
    model_free(&m);
    return info.step;
}

typedef struct {
    const char* out;
    int last_metric_step, flushes, flushed_after_checkpoint, resumed_at;
} OrderProbe;

static void probe_metric(void* ctx, const char* key, int step, long tokens, double value) {
    (void)key; (void)tokens; (void)value;
    ((OrderProbe*)ctx)->last_metric_step = step;
}

static void probe_flush(void* ctx) {
    OrderProbe* p = ctx;
    p->flushes++;
    // the checkpoint of the flushed interval must not be on disk yet
    p->flushed_after_checkpoint += checkpoint_step_on_disk(p->out) >= p->last_metric_step;
}

static void probe_resume(void* ctx, int step, const char* device) {
    (void)device;
    ((OrderProbe*)ctx)->resumed_at = step;
}

// Metrics reach the observer before the checkpoint that covers them is renamed into place, and
// a resumed run says where it resumes
static void test_metrics_before_checkpoint(void) {
    const char* out = "build/test_train_order";
    fresh(out);
    Config cfg = tiny_config(ATTN_DIFF, out);
    OrderProbe p = {out, 0, 0, 0, -1};
    TrainObserver observer = {probe_metric, probe_flush, probe_resume, &p};
    train_run(&cfg, 4, &observer);
    CHECK(p.resumed_at == 0 && p.flushes == 2 && p.flushed_after_checkpoint == 0,
          "metrics flushed before each checkpoint's rename (%d of %d flushes came after it), new run resumes at 0 (%d)",
          p.flushed_after_checkpoint, p.flushes, p.resumed_at);
    train_run(&cfg, 0, &observer);
    CHECK(p.resumed_at == 4 && p.flushed_after_checkpoint == 0, "a resumed run says it resumes at step 4 (%d)", p.resumed_at);
}

// A kill after the metrics of steps 4..6 were committed but before their checkpoint replaced
// the one of step 3: the resumed attempt drops them and records steps 4..8 itself, so every
// step is stored once
static void test_metrics_reconciled(void) {
    const char* out = "build/test_train_reconcile";
    const char* db = "build/test_train_reconcile.sqlite";
    fresh(out);
    unlink(db);
    Config cfg = tiny_config(ATTN_STANDARD, out);
    train_run(&cfg, 3, NULL);  // the checkpoint a kill left: step 3
    Registry reg;
    registry_open(&reg, db);
    int64_t exp = registry_experiment(&reg, "test", "tiny", "none", "none");
    int64_t first = registry_begin_run(&reg, exp, "row", cfg.seed, &cfg, "cpu", NULL);
    for (int step = 1; step <= 6; step++) {
        const char* key = "train_loss";
        int64_t tokens = step;
        double value = 100.0 + step;  // the killed attempt's values
        registry_metrics(&reg, first, 1, &key, &step, &tokens, &value, &value);
    }
    registry_end_run(&reg, first, RUN_KILLED);
    train_registry_row(&reg, exp, "row", &cfg, 1);  // the second attempt, begun as training starts
    CHECK(registry_count(&reg, "SELECT COUNT(*) FROM metrics WHERE key = 'train_loss'") == 8 &&
              registry_count(&reg, "SELECT COUNT(DISTINCT step) FROM metrics WHERE key = 'train_loss'") == 8,
          "every step's training loss stored once after the resume (%d rows)",
          registry_count(&reg, "SELECT COUNT(*) FROM metrics WHERE key = 'train_loss'"));
    CHECK(registry_count(&reg, "SELECT COUNT(*) FROM metrics WHERE step > 3 AND value > 100") == 0 &&
              registry_count(&reg, "SELECT COUNT(*) FROM metrics WHERE step <= 3 AND value > 100") == 3,
          "steps past the checkpoint come from the resumed attempt, the ones before it stay");
    CHECK(registry_count(&reg, "SELECT COUNT(*) FROM params WHERE key = 'n_layer' AND typeof(value) = 'integer'") == 2 &&
              registry_count(&reg, "SELECT COUNT(*) FROM params WHERE key = 'lr' AND typeof(value) = 'real'") == 2,
          "numeric params are stored as numbers");
    registry_close(&reg);
    unlink(db);
}

// A kill mid-line leaves "train\t1" of "train\t12\t..." at the end of the log: the resume keeps
// whole rows only, so the log equals a non-stop run's; an earlier version's log carries over
static void test_cut_log_line(void) {
    const char* a_dir = "build/test_train_cut_a";
    const char* b_dir = "build/test_train_cut_b";
    fresh(a_dir);
    fresh(b_dir);
    Config a = tiny_config(ATTN_STANDARD, a_dir), b = tiny_config(ATTN_STANDARD, b_dir);
    train_run(&a, 0, NULL);
    train_run(&b, 3, NULL);
    char path[512];
    snprintf(path, sizeof(path), "%s/log.tsv", b_dir);
    FILE* f = fopenCheck(path, "a");
    fputs("train\t1", f);  // no newline: what a kill while writing "train\t12\t..." leaves
    fcloseCheck(f, path);
    train_run(&b, 0, NULL);
    char *log_a = read_log(a_dir), *log_b = read_log(b_dir);
    CHECK(strcmp(log_a, log_b) == 0, "a cut-off last line does not survive the resume");
    const char* header = "kind\tstep\ttokens\tloss\tlr\tgrad_norm\n";
    CHECK(strncmp(log_a, header, strlen(header)) == 0, "the log starts with its header");
    free(log_b);

    // a log of earlier versions (space-separated, no header, no tokens) is carried over on resume
    fresh(b_dir);
    train_run(&b, 3, NULL);
    char* rows = read_log(b_dir);
    f = fopenCheck(path, "w");
    for (char* line = strtok(rows, "\n"); line; line = strtok(NULL, "\n")) {
        int step;
        long tokens;
        char loss[64], lr[64], norm[64];
        if (sscanf(line, "train\t%d\t%ld\t%63s\t%63s\t%63s", &step, &tokens, loss, lr, norm) == 5) fprintf(f, "train %d %s %s %s\n", step, loss, lr, norm);
        else if (sscanf(line, "val\t%d\t%ld\t%63s", &step, &tokens, loss) == 3) fprintf(f, "val %d %s\n", step, loss);
    }
    fcloseCheck(f, path);
    free(rows);
    train_run(&b, 0, NULL);
    log_b = read_log(b_dir);
    CHECK(strcmp(log_a, log_b) == 0, "an earlier version's log resumes as the same table");
    free(log_a);
    free(log_b);
}


// lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init is lambda_init with zero vectors, and
// sigmoid(x . w_lambda) is 0.5 for every token with w_lambda zero
static void test_lambda_stats(void) {
    for (int attention = ATTN_DIFF; attention <= ATTN_DIFF2; attention++) {
        Config cfg = tiny_config(attention, "build/test_lambda_unused");
        cfg.model.n_layer = 3;
        Model m;
        model_build(&m, &cfg.model, backend_named("cpu"), 64, cfg.batch_size);
        model_init_params(&m, 5);
        float* params = mallocCheck(m.n_params * sizeof(float));
        model_get_params(&m, params);
        for (int i = 0; i < m.n_tensors; i++) {
            const ParamTensor* t = &m.tensors[i];
            if (strstr(t->name, "lambda")) memset(params + t->offset, 0, t->size * sizeof(float));
        }
        model_set_params(&m, params);
        int tokens[2 * 32], targets[2 * 32];
        for (int i = 0; i < 2 * 32; i++) tokens[i] = targets[i] = (7 * i) % 64;
        model_forward(&m, tokens, targets, 2, 32, 1);
        double mean[3 * 8], std[3 * 8];
        CHECK(model_lambda_stats(&m, mean, std) == 1, "%s has lambda", ATTN_VARIANTS[attention].name);
        int ok = 1;
        for (int l = 0; l < 3; l++) {
            for (int h = 0; h < m.H; h++) {
                double want = attention == ATTN_DIFF ? 0.8 - 0.6 * exp(-0.3 * l) : 0.5;
                ok &= fabs(mean[l * m.H + h] - want) < 1e-6 && fabs(std[l * m.H + h]) < 1e-7;
            }
        }
        CHECK(ok, "%s: with zero lambda weights every layer's and head's lambda is %s, with no spread", ATTN_VARIANTS[attention].name,
              attention == ATTN_DIFF ? "lambda_init (0.8 - 0.6 exp(-0.3 depth))" : "sigmoid(0) = 0.5");
        free(params);
        model_free(&m);
    }
    Config cfg = tiny_config(ATTN_STANDARD, "build/test_lambda_unused");
    Model m;
    model_build(&m, &cfg.model, backend_named("cpu"), 64, cfg.batch_size);
    double none[16];
    CHECK(model_lambda_stats(&m, none, none) == 0, "standard attention has no lambda");
    model_free(&m);
}


int main(void) {
    write_test_corpus("build/test_train_corpus", 25);
    const char* inputs[1] = {"build/test_train_corpus"};
    prepare_corpus("build/test_train_data", inputs, 1, 300);
    test_variant(ATTN_STANDARD);
    test_variant(ATTN_DIFF);
    test_metrics_before_checkpoint();
    test_metrics_reconciled();
    test_cut_log_line();
    test_lambda_stats();
    return check_summary();
}
