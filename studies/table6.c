#define _GNU_SOURCE
#include "table6.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../data/dataset.h"
#include "../eval/arhit.h"
#include "../run/checkpoint.h"
#include "../run/config.h"
#include "../base/util.h"
#include "recipe.h"
#include "registry.h"
#include "report.h"
#include "verdict.h"
#include "study.h"

static int is_row_key(const char* k) {
    return !strcmp(k, "label") || recipe_shape_key(1, k) || !strcmp(k, "paper") || !strcmp(k, "lr_scale") || !strcmp(k, "against");
}
static int is_preset_key(const char* k) {
    return recipe_shape_key(0, k) || !strcmp(k, "eval_windows") || !strcmp(k, "outlier_tokens");
}
// outside any section: `study`, the outputs' name, and `gap_curve`, whether the gaps are also
// followed along training (write_gap_curve); a claim: its text, gap, metric and, for a
// claim that a change barely matters, the equivalence margin
int table6_extra_key(int place, const char* k) {
    // Table 6's claims (text, gap, metric, margin), and Table 5's (table = 5: the paper's numbers
    // for its transformer and diff rows, read by make table5)
    if (place == RECIPE_CLAIM)
        return !strcmp(k, "text") || !strcmp(k, "gap") || !strcmp(k, "metric") || !strcmp(k, "margin") || !strcmp(k, "table") ||
               !strcmp(k, "transformer") || !strcmp(k, "diff");
    return place == RECIPE_ROW ? is_row_key(k) : place == RECIPE_PRESET ? is_preset_key(k) : !strcmp(k, "study") || !strcmp(k, "gap_curve");
}

// computed per row from the preset's h and d, the row's heads and width, and match_params
static const char* const TABLE6_DERIVED_KEYS[] = {"n_head", "head_dim", "d_model", "ffn_hidden", "out", NULL};

// A recipe's `study` (outside any section): the name of its registry experiment, run folders,
// tables and figures; "table6" when it has none
static const char* study_name(const Recipe* r, const char* recipe) {
    const char* study = section_get(&r->common, "study");
    if (!study) return "table6";
    int ok = study[0] && strlen(study) < 64;
    for (const char* c = study; *c; c++) ok &= (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_';
    if (!ok) die("%s: key 'study': '%s' is not a name of 1 to 63 lowercase letters, digits and '_'", recipe, study);
    // another recipe under Table 6's name would write its rows, tables and figures over Table 6's
    if (strcmp(study, "table6") == 0) die("%s: key 'study': 'table6' is Table 6's own study (a recipe without 'study'); name this one otherwise", recipe);
    return study;
}

// A row's `lr_scale`: its learning rates (peak and final) are the preset's times this
static float lr_scale(const Section* row, const char* recipe) {
    const char* text = section_get(row, "lr_scale");
    if (!text) return 1.0f;
    char* end;
    float scale = strtof(text, &end);
    if (!plain_number(text, 1) || end == text || *end || !isnormal(scale) || !(scale > 0)) {
        die("%s: [row %s] key 'lr_scale': '%s' is not a positive number", recipe, row->name, text);
    }
    return scale;
}

// The row's config (recipe_row_config, match_params included) with its learning-rate scale
Config table6_row_config(const Recipe* r, const Section* preset, int row, int seed_index, const char* recipe,
                         const char* results) {
    const Section* section = &r->rows[row];
    Config cfg = recipe_row_config(r, preset, section, seed_index, recipe, results, study_name(r, recipe), table6_extra_key);
    float scale = lr_scale(section, recipe);
    cfg.optim.lr *= scale;
    cfg.optim.lr_final *= scale;
    return cfg;
}

// The paper's Valid, AR-Hit and Others of a row, or NaN where it has no `paper` key
static void paper_values(const Section* row, double v[3], const char* recipe) {
    v[0] = v[1] = v[2] = NAN;
    const char* text = section_get(row, "paper");
    if (!text) return;
    char extra;
    if (sscanf(text, "%lf %lf %lf %c", &v[0], &v[1], &v[2], &extra) != 3) {
        die("%s: [row %s] key 'paper': '%s' is not three numbers (Valid, AR-Hit, Others)", recipe, row->name, text);
    }
}

// ---- the rows, resolved once ----
enum { VALID, ARHIT, OTHERS, METRICS };
static const char* const METRIC_KEYS[METRICS] = {"valid", "arhit", "others"};

typedef struct {
    const Section* section;
    const char* name;
    StudyModel* models;     // (seeds) the row's model at each seed
    char title[256];        // "label HxD GN": the figures' name of the row
    double paper[METRICS];  // NaN where the row has no `paper` key
    size_t params;
    // aggregated from the registry: the seeds whose run finished with the row's current config
    int n;
    int64_t* runs;          // (seeds) their FINISHED runs; 0 for a seed that did not finish
    double mean[METRICS], std[METRICS];
    double position[POSITION_BINS];  // mean over seeds of each position bin's loss
    double arhit_fraction, threshold;
    WindowLoss* windows;    // (seeds, eval_windows) each seed's per-window sums
} Row;

// A claim of the recipe ([claim NAME]: text, gap = a - b by the rows' names, metric, and
// margin: the claim is that the gap lies within ±margin, judged by equivalence tests)
typedef struct {
    const char* text;
    const Row *a, *b;
    int metric;
    double margin;  // 0: a claim of a direction
} Claim;

typedef struct {
    const Table6Options* opt;
    Study study;
    const char* name;  // the outputs' name: "table6", or the recipe's `study`
    const Section* preset;
    int eval_windows, seeds;
    Row* rows;
    int n_rows;
    Claim claims[RECIPE_CLAIMS];
    int n_claims;
    int gap_curve;  // the recipe's `gap_curve`: the gaps along training too
} Table;

static const Row* row_named(const Table* t, const char* name) {
    for (int i = 0; i < t->n_rows; i++) {
        if (strcmp(t->rows[i].name, name) == 0) return &t->rows[i];
    }
    return NULL;
}

// The recipe's claims, each naming two of its rows and a metric, or dies naming the claim
static void read_claims(Table* t) {
    const char* path = t->opt->recipe;
    const Recipe* r = t->study.recipe;
    t->n_claims = 0;
    for (int c = 0; c < r->n_claims; c++) {
        const Section* s = &r->claims[c];
        const char* table = section_get(s, "table");
        if (table && strcmp(table, "5") == 0) continue;  // Table 5's numbers (make table5)
        if (table) die("%s: [claim %s] key 'table': '%s' is not 5 (a claim without it is Table 6's)", path, s->name, table);
        Claim* cl = &t->claims[t->n_claims++];
        const char *gap = section_get(s, "gap"), *metric = section_get(s, "metric");
        cl->text = section_get(s, "text");
        if (!cl->text || !gap || !metric) die("%s: [claim %s] needs text, gap (row - row) and metric", path, s->name);
        char a[64], b[64], extra;
        if (sscanf(gap, "%63s - %63s %c", a, b, &extra) != 2 || !(cl->a = row_named(t, a)) || !(cl->b = row_named(t, b)) || cl->a == cl->b) {
            die("%s: [claim %s] key 'gap': '%s' is not 'row - row' of two rows of this recipe", path, s->name, gap);
        }
        cl->metric = -1;
        for (int k = 0; k < METRICS; k++) {
            if (!strcmp(metric, METRIC_KEYS[k])) cl->metric = k;
        }
        if (cl->metric < 0) die("%s: [claim %s] key 'metric': '%s' is not valid, arhit or others", path, s->name, metric);
        const char* margin = section_get(s, "margin");
        cl->margin = 0;
        if (margin) {
            char* end;
            cl->margin = strtod(margin, &end);
            if (!plain_number(margin, 1) || end == margin || *end || !isnormal(cl->margin) || !(cl->margin > 0)) {
                die("%s: [claim %s] key 'margin': '%s' is not a positive number", path, s->name, margin);
            }
        }
    }
}

static void table_open(Table* t, const Table6Options* opt) {
    t->opt = opt;
    StudySpec spec = {opt->recipe, opt->preset, opt->seeds, opt->results, opt->overrides, opt->n_overrides, table6_extra_key,
                      TABLE6_DERIVED_KEYS, table6_row_config, NULL};
    study_load(&t->study, &spec);
    t->seeds = t->study.seeds;
    t->preset = t->study.preset;
    t->name = study_name(t->study.recipe, opt->recipe);
    t->eval_windows = section_int(t->preset, "eval_windows", opt->recipe);
    t->n_rows = t->study.n_rows;
    t->rows = callocCheck(t->n_rows, sizeof(Row));
    for (int i = 0; i < t->n_rows; i++) {
        Row* row = &t->rows[i];
        row->section = &t->study.recipe->rows[i];
        row->name = row->section->name;
        row->models = &t->study.models[i * t->seeds];
        row->runs = callocCheck(t->seeds, sizeof(int64_t));
        const Config* cfg = &row->models[0].cfg;
        snprintf(row->title, sizeof(row->title), "%s %dx%d%s", section_get(row->section, "label"), cfg->model.n_head,
                 config_head_dim(&cfg->model), config_head_norm(&cfg->model) ? " GN" : "");
        paper_values(row->section, row->paper, opt->recipe);
    }
    read_claims(t);
    const char* curve = section_get(&t->study.recipe->common, "gap_curve");
    if (curve && strcmp(curve, "true") && strcmp(curve, "false")) die("%s: key 'gap_curve': '%s' is not true or false", opt->recipe, curve);
    t->gap_curve = curve && !strcmp(curve, "true");
}

static void table_close(Table* t) {
    for (int i = 0; i < t->n_rows; i++) {
        free(t->rows[i].runs);
        free(t->rows[i].windows);
    }
    free(t->rows);
    study_close(&t->study);
}

// ---- compute: train (resuming) and evaluate each (row, seed) the registry lacks ----

// A run's Table 6 evaluation on its checkpoint, recorded with the per-window sums the
// intervals resample
static void evaluate_run(Registry* reg, int64_t run, const char* row, const Config* cfg, int eval_windows) {
    Model model;
    CheckpointInfo info;
    char path[4200];
    config_checkpoint_path(cfg, path, sizeof(path));
    Backend* be = study_load_checkpoint(path, cfg, &model, &info);
    DataDir data;
    data_open(&data, cfg->data, DATA_TRAIN | DATA_VAL);
    WindowLoss* windows = mallocCheck((size_t)eval_windows * sizeof(WindowLoss));
    SliceLoss s = evaluate_on_data(&model, &data, eval_windows, cfg->batch_size, windows);
    // a slice without tokens has no loss: its evaluation is absent, and the table says why
    registry_evaluation(reg, run, "valid", s.valid);
    if (isfinite(s.arhit)) registry_evaluation(reg, run, "arhit", s.arhit);
    if (isfinite(s.others)) registry_evaluation(reg, run, "others", s.others);
    for (int b = 0; b < POSITION_BINS; b++) {
        char key[32];
        snprintf(key, sizeof(key), "valid_%s", window_slice_name(SLICE_POSITION + b));
        registry_evaluation(reg, run, key, s.position[b]);
    }
    registry_evaluation(reg, run, "arhit_fraction", s.arhit_fraction);
    registry_evaluation(reg, run, "arhit_threshold", s.threshold);
    registry_evaluation(reg, run, "eval_tokens", (double)s.tokens);
    registry_evaluation(reg, run, "params", (double)model.n_params);
    registry_evaluation(reg, run, "tokens_seen", (double)info.step * cfg->batch_size * cfg->model.seq_len * cfg->grad_accum);
    registry_window_losses(reg, run, eval_windows, windows);
    char arhit[64];
    if (isfinite(s.arhit)) snprintf(arhit, sizeof(arhit), "%.4f (%.2f%% of tokens)", s.arhit, 100 * s.arhit_fraction);
    else snprintf(arhit, sizeof(arhit), "none (no AR-Hit tokens)");
    printf("%s seed %d: valid %.4f, AR-Hit %s, Others %.4f\n", row, cfg->seed, s.valid, arhit, s.others);
    free(windows);
    data_close(&data);
    model_free(&model);
    backend_close(be);
}

// Training a missing model: every model in a worker (this process never computes), evaluated
// there; a finished run whose evaluation did not record the preset's eval_windows window sums
// (one from before they were recorded, or from a recipe with another eval_windows, which is not
// part of a run's config) is evaluated again, so its numbers and the windows its intervals
// resample are the table's
static void finish_run(Registry* reg, int64_t run, const char* row, const Config* cfg, void* ctx) {
    evaluate_run(reg, run, row, cfg, *(const int*)ctx);
}
static int evaluated(Registry* reg, int64_t run, void* ctx) { return registry_window_count(reg, run) == *(const int*)ctx; }
static StudyTraining training(Table* t) { return (StudyTraining){finish_run, evaluated, &t->eval_windows, 1}; }

void table6_trained_rows(const Table6Options* opt, const char* const* names, int n, StudyModel* out) {
    Table t;
    table_open(&t, opt);
    study_begin(&t.study, t.name);
    StudyTraining how = training(&t);
    for (int k = 0; k < n; k++) {
        const StudyModel* row = study_row(&t.study, names[k]);
        if (!row) die("%s: no [row %s]", opt->recipe, names[k]);
        for (int s = 0; s < t.seeds; s++) {
            out[k * t.seeds + s] = row[s];
            study_train_model(&t.study, &out[k * t.seeds + s], &how);
        }
    }
    table_close(&t);
}

// What the output and the figures call the study: a recipe with its own `study` (the scaling
// study) is not Table 6, though it shares Table 6's presets and evaluation
static const char* study_title(const Table* t) {
    return strcmp(t->name, "table6") == 0 ? "Table 6" : t->name;
}

// Parameter counts and the validation shard's size, checked before anything trains
static void check_rows(Table* t) {
    const Table6Options* opt = t->opt;
    const Config* first = &t->rows[0].models[0].cfg;
    DataDir data;
    data_open(&data, first->data, DATA_VAL);
    printf("%s, preset %s, %d seed(s): parameters per row\n", study_title(t), opt->preset, t->seeds);
    for (int i = 0; i < t->n_rows; i++) {
        Row* row = &t->rows[i];
        const Config* cfg = &row->models[0].cfg;
        row->params = model_param_count(&cfg->model, data.tok.vocab_size);
        printf("  %-18s %-12s %2d heads x %3d  GN %-3s  ffn %4d  %zu\n", row->name, config_attention_name(&cfg->model), cfg->model.n_head,
               config_head_dim(&cfg->model), config_head_norm(&cfg->model) ? "yes" : "no", config_ffn_hidden(&cfg->model), row->params);
        size_t base = t->rows[0].params;
        if (fabs((double)row->params - (double)base) > 0.01 * base) {
            die("%s: row '%s' has %zu parameters, more than 1%% from row '%s' (%zu)", opt->recipe, row->name, row->params,
                t->rows[0].name, base);
        }
    }
    if ((data.val.n_tokens - 1) / first->model.seq_len < (size_t)t->eval_windows) {
        die("%s: [preset %s] eval_windows = %d needs %zu validation tokens at seq_len %d; '%s/val.bin' has %zu", opt->recipe,
            opt->preset, t->eval_windows, (size_t)t->eval_windows * first->model.seq_len + 1, first->model.seq_len, first->data,
            data.val.n_tokens);
    }
    data_close(&data);
}

static void train_rows(Table* t) {
    double t_start = wall_time();
    StudyTraining how = training(t);
    for (int s = 0; s < t->seeds; s++) {
        for (int i = 0; i < t->n_rows; i++) {
            const Config* cfg = &t->rows[i].models[s].cfg;
            if (!study_train(&t->study, t->rows[i].name, cfg, &how)) {
                fprintf(stderr, "row %s seed %d: the table goes on without it\n", t->rows[i].name, cfg->seed);
            }
        }
    }
    printf("training and evaluation: %.1f minutes\n", (wall_time() - t_start) / 60);
}

// ---- aggregate: each row over the seeds whose run finished with its current config ----
static void aggregate(Table* t, Registry* reg, int64_t experiment) {
    for (int i = 0; i < t->n_rows; i++) {
        Row* row = &t->rows[i];
        double values[METRICS][256];
        row->windows = callocCheck((size_t)t->seeds * t->eval_windows, sizeof(WindowLoss));
        for (int s = 0; s < t->seeds; s++) {
            const Config* cfg = &row->models[s].cfg;
            int64_t run = registry_finished_run(reg, experiment, row->name, cfg->seed, cfg, data_identity(cfg->data));
            row->runs[s] = run;
            if (!run) continue;
            for (int k = 0; k < METRICS; k++) values[k][row->n] = registry_evaluation_value(reg, run, METRIC_KEYS[k]);
            for (int b = 0; b < POSITION_BINS; b++) {
                char key[32];
                snprintf(key, sizeof(key), "valid_%s", window_slice_name(SLICE_POSITION + b));
                row->position[b] += registry_evaluation_value(reg, run, key);
            }
            row->arhit_fraction += registry_evaluation_value(reg, run, "arhit_fraction");
            row->threshold = registry_evaluation_value(reg, run, "arhit_threshold");
            registry_window_losses_read(reg, run, t->eval_windows, &row->windows[(size_t)s * t->eval_windows]);
            row->n++;
        }
        if (row->n) {
            row->arhit_fraction /= row->n;
            for (int b = 0; b < POSITION_BINS; b++) row->position[b] /= row->n;
        }
        for (int k = 0; k < METRICS; k++) {
            Spread sp = row->n ? spread_of(values[k], row->n, 1) : (Spread){NAN, 0};
            row->mean[k] = sp.mean;
            row->std[k] = sp.std;
        }
    }
}

// The window sums of a row as a bootstrap's (num, den) over (seeds, windows), for `which`:
// VALID, ARHIT, OTHERS (every token minus the AR hits) or METRICS + b, position bin b. A seed
// that did not finish holds nothing.
static void slice_units(const Table* t, const Row* row, int which, double* num, double* den) {
    int k = which == ARHIT ? SLICE_ARHIT : which >= METRICS ? SLICE_POSITION + which - METRICS : SLICE_ALL;
    int minus_hits = which == OTHERS;
    for (size_t u = 0; u < (size_t)t->seeds * t->eval_windows; u++) {
        const WindowLoss* w = &row->windows[u];
        num[u] = w->sum[k] - (minus_hits ? w->sum[SLICE_ARHIT] : 0);
        den[u] = (double)(w->count[k] - (minus_hits ? w->count[SLICE_ARHIT] : 0));
    }
}

// Row a minus row b on `which` (slice_units), paired by seed and window; a seed either row
// lacks is left out of both
static GapInterval row_gap(const Table* t, const Row* a, const Row* b, int which) {
    size_t n = (size_t)t->seeds * t->eval_windows;
    double* units = mallocCheck(4 * n * sizeof(double));
    slice_units(t, a, which, units, units + n);
    slice_units(t, b, which, units + 2 * n, units + 3 * n);
    int kept = 0;  // seeds both rows finished, moved to the front
    for (int s = 0; s < t->seeds; s++) {
        if (!a->runs[s] || !b->runs[s]) continue;
        for (int part = 0; part < 4; part++) {
            memmove(units + part * n + (size_t)kept * t->eval_windows, units + part * n + (size_t)s * t->eval_windows,
                    t->eval_windows * sizeof(double));
        }
        kept++;
    }
    GapInterval g = {.gap = NAN, .lo = NAN, .hi = NAN};
    if (kept) {
        Paired p = {kept, t->eval_windows, units, units + n, units + 2 * n, units + 3 * n};
        g = paired_gap(&p);
    }
    free(units);
    return g;
}

// ---- the table ----
static void format_cell(char* buf, size_t n, const Row* r, int k) {
    if (r->n == 0) snprintf(buf, n, "-");
    else if (isnan(r->mean[k])) snprintf(buf, n, "%s", k == ARHIT ? "no AR-Hit tokens" : "no tokens");
    else if (r->n == 1) snprintf(buf, n, "%.3f", r->mean[k]);
    else snprintf(buf, n, "%.3f ± %.3f", r->mean[k], r->std[k]);
}

static void write_rows(const Table* t, Report* rep) {
    const Table6Options* opt = t->opt;
    const Config* first = &t->rows[0].models[0].cfg;
    int h = section_int(t->preset, "h", opt->recipe), d = section_int(t->preset, "d", opt->recipe);
    if (strcmp(t->name, "table6") == 0) report_printf(rep, "\n## Table 6 (preset %s)", opt->preset);
    else report_printf(rep, "\n## Study %s (Table 6's presets and evaluation, preset %s)", t->name, opt->preset);
    report_printf(rep, ": validation loss, %d seed(s) per row, mean ± sample std\n\n", t->seeds);
    report_printf(rep, "%s", preset_note(t->preset, opt->recipe));
    report_printf(rep, "Model: %s layers, d_model %d (h = %d, d = %d), %lld training tokens per row, %d evaluation windows of %d tokens.\n",
                  section_get(t->preset, "n_layer"), h * d, h, d,
                  (long long)first->optim.steps * first->batch_size * first->model.seq_len * first->grad_accum, t->eval_windows, first->model.seq_len);
    long eval_tokens = (long)t->eval_windows * first->model.seq_len;
    report_printf(rep, "AR-Hit: bigram seen earlier in the window with training count <= %.3g (Zoology's 1,250 per 10B tokens "
                  "rescaled to the training shard); %.2f%% of evaluated tokens (%ld of %ld).\n\n", t->rows[0].threshold,
                  100 * t->rows[0].arhit_fraction, lround(t->rows[0].arhit_fraction * eval_tokens), eval_tokens);
    report_printf(rep, "| Model | #Heads | d | GN | n | Valid | AR-Hit | Others | params | paper Valid | paper AR-Hit | paper Others |\n");
    report_printf(rep, "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < t->n_rows; i++) {
        const Row* row = &t->rows[i];
        const Config* cfg = &row->models[0].cfg;
        char cells[METRICS][64];
        for (int k = 0; k < METRICS; k++) format_cell(cells[k], sizeof(cells[k]), row, k);
        char paper_cells[64] = "not in the paper | | ";
        if (!isnan(row->paper[VALID])) {
            snprintf(paper_cells, sizeof(paper_cells), "%.3f | %.3f | %.3f", row->paper[0], row->paper[1], row->paper[2]);
        }
        char label[2 * CONFIG_STR];
        markdown_cell(label, sizeof(label), section_get(row->section, "label"));
        report_printf(rep, "| %s | %d | %d | %s | %d | %s | %s | %s | %zu | %s |\n", label, cfg->model.n_head, config_head_dim(&cfg->model),
                      config_head_norm(&cfg->model) ? "✓" : "✗", row->n, cells[0], cells[1], cells[2], row->params, paper_cells);
    }
}

// How each row trained: its peak learning rate, the seeds that finished, the loss and
// gradient-norm spikes their runs recorded (watched as training goes, spikes.h) and the last
// training loss; a seed that diverged is one that did not finish
static void write_health(const Table* t, Registry* reg, Report* rep) {
    report_printf(rep, "\n### Training health\n\n| Model | lr | finished | loss spikes | grad-norm spikes | final train loss |\n"
                  "|---|---|---|---|---|---|\n");
    for (int i = 0; i < t->n_rows; i++) {
        const Row* row = &t->rows[i];
        int spikes[2] = {0, 0};
        double final[256];
        int n_final = 0;
        static const char* const keys[2] = {"spike_loss", "spike_grad_norm"};
        for (int s = 0; s < t->seeds; s++) {
            if (!row->runs[s]) continue;
            int64_t* tokens;
            double* values;
            for (int k = 0; k < 2; k++) {
                spikes[k] += registry_run_curve(reg, row->runs[s], keys[k], &tokens, &values);
                free(tokens);
                free(values);
            }
            int points = registry_run_curve(reg, row->runs[s], "train_loss", &tokens, &values);
            if (points) final[n_final++] = values[points - 1];
            free(tokens);
            free(values);
        }
        char label[2 * CONFIG_STR], loss[64] = "-";
        markdown_cell(label, sizeof(label), section_get(row->section, "label"));
        if (n_final) spread_text(loss, sizeof(loss), spread_of(final, n_final, 1), n_final, 3);
        report_printf(rep, "| %s | %.3g | %d of %d | %d | %d | %s |\n", label, row->models[0].cfg.optim.lr, row->n, t->seeds, spikes[0],
                      spikes[1], loss);
    }
}

static void write_claims(const Table* t, Report* rep) {
    report_printf(rep, "\n### The paper's claims against these runs\n\n");
    report_printf(rep, "| claim | paper gap | %s |\n|---|---|%s|\n", GAP_HEADER, GAP_HEADER_RULE);
    for (int c = 0; c < t->n_claims; c++) {
        const Claim* cl = &t->claims[c];
        const Row *a = cl->a, *b = cl->b;
        GapInterval g = row_gap(t, a, b, cl->metric);
        double paper_gap = a->paper[cl->metric] - b->paper[cl->metric];
        char paper_text[32] = "n/a (not in the paper)", cells[1024], text[1024];
        if (!isnan(paper_gap)) snprintf(paper_text, sizeof(paper_text), "%+.3f", paper_gap);
        markdown_cell(text, sizeof(text), cl->text);  // a '|' in the claim's words must not end its cell
        report_printf(rep, "| %s | %s |%s\n", text, paper_text, gap_cells(cells, sizeof(cells), &g, paper_gap, cl->margin, 4));
    }
    report_printf(rep, "\nGaps are the first row named minus the second (negative = lower loss). A claim with a margin (that a "
                  "change barely matters) is judged by equivalence within it. %s\n", interval_note(t->seeds, "windows"));
}

// Rows not in the paper, each against the row its `against` names (DIFF for a DIFF variant):
// the same paired gaps, intervals and verdict policy as the claims, on all three metrics
static void write_against(const Table* t, Report* rep) {
    int any = 0;
    for (int i = 0; i < t->n_rows; i++) {
        const char* base = section_get(t->rows[i].section, "against");
        if (!base) continue;
        if (!any) {
            report_printf(rep, "\n### Rows against the row each is read against (`against`)\n\n");
            report_printf(rep, "| row | against | metric | %s |\n|---|---|---|%s|\n", GAP_HEADER, GAP_HEADER_RULE);
            any = 1;
        }
        const Row* b = row_named(t, base);
        char a_label[2 * CONFIG_STR], b_label[2 * CONFIG_STR];
        markdown_cell(a_label, sizeof(a_label), t->rows[i].title);
        markdown_cell(b_label, sizeof(b_label), b->title);
        static const int metrics[] = {VALID, ARHIT, OTHERS};
        static const char* const names[] = {"Valid", "AR-Hit", "Others"};
        for (int k = 0; k < 3; k++) {
            GapInterval g = row_gap(t, &t->rows[i], b, metrics[k]);
            char cells[1024];
            report_printf(rep, "| %s | %s | %s |%s\n", a_label, b_label, names[k], gap_cells(cells, sizeof(cells), &g, NAN, 0, 4));
        }
    }
    if (any) report_printf(rep, "\nGap = the row minus the row it is read against (negative = lower loss), paired and judged as the claims above.\n");
}

// The header of a table with a column per position bin, named by its token range or its number
static void position_header(Report* rep, int T, int ranges) {
    report_printf(rep, "| Model |");
    for (int b = 0; b < POSITION_BINS; b++) {
        if (ranges) report_printf(rep, " %ld-%ld |", (long)b * T / POSITION_BINS + 1, (long)(b + 1) * T / POSITION_BINS);
        else report_printf(rep, " bin %d |", b + 1);
    }
    report_printf(rep, "\n|---|");
    for (int b = 0; b < POSITION_BINS; b++) report_printf(rep, "---|");
    report_printf(rep, "\n");
}

// Loss by position in the context: each row's mean over seeds per bin, then each row minus the
// first row per bin with its interval, so a claim about long context is read where it lives
static void write_positions(const Table* t, Report* rep) {
    int T = t->rows[0].models[0].cfg.model.seq_len;
    report_printf(rep, "\n### Validation loss by position in the context (%d bins of %d tokens)\n\n", POSITION_BINS,
                  T / POSITION_BINS);
    position_header(rep, T, 1);
    for (int i = 0; i < t->n_rows; i++) {
        char label[2 * CONFIG_STR];
        markdown_cell(label, sizeof(label), t->rows[i].title);
        report_printf(rep, "| %s |", label);
        for (int b = 0; b < POSITION_BINS; b++) {
            if (t->rows[i].n) report_printf(rep, " %.3f |", t->rows[i].position[b]);
            else report_printf(rep, " - |");
        }
        report_printf(rep, "\n");
    }
    char base[2 * CONFIG_STR];
    markdown_cell(base, sizeof(base), t->rows[0].title);
    report_printf(rep, "\nEach row minus %s, per bin: gap [95%% interval] (paired as the claims above)\n\n", base);
    position_header(rep, T, 0);
    for (int i = 1; i < t->n_rows; i++) {
        char label[2 * CONFIG_STR];
        markdown_cell(label, sizeof(label), t->rows[i].title);
        report_printf(rep, "| %s |", label);
        for (int b = 0; b < POSITION_BINS; b++) {
            GapInterval g = row_gap(t, &t->rows[i], &t->rows[0], METRICS + b);
            char interval[64];
            if (isnan(g.gap)) report_printf(rep, " - |");
            else report_printf(rep, " %+.3f %s |", g.gap, interval_text(interval, sizeof(interval), &g, 3));
        }
        report_printf(rep, "\n");
    }
}

// ---- the gaps along training (`gap_curve = true`): Figure 3b of the paper at this scale ----
#define CURVE_POINTS 12  // validation points reported per comparison, log-spaced in tokens

// Two rows compared along training: a claim on Valid, or a row against the row it names
typedef struct {
    const Row *a, *b;
    char label[2 * CONFIG_STR + 8];
} CurvePair;

static CurvePair curve_pair(const Row* a, const Row* b) {
    CurvePair p = {a, b, ""};
    char ta[CONFIG_STR], tb[CONFIG_STR];  // a title cut to fit, never overrun
    markdown_cell(ta, sizeof(ta), a->title);
    markdown_cell(tb, sizeof(tb), b->title);
    snprintf(p.label, sizeof(p.label), "%s − %s", ta, tb);
    return p;
}

static int curve_pairs(const Table* t, CurvePair* out) {
    int n = 0;
    for (int c = 0; c < t->n_claims; c++) {
        if (t->claims[c].metric == VALID) out[n++] = curve_pair(t->claims[c].a, t->claims[c].b);
    }
    for (int i = 0; i < t->n_rows; i++) {
        const char* base = section_get(t->rows[i].section, "against");
        if (base) out[n++] = curve_pair(&t->rows[i], row_named(t, base));
    }
    return n;
}

// CURVE_POINTS validation points (all of them where a run has fewer), spread evenly in
// log(tokens) from the first point to the last: for each target in turn, the point nearest it
// among those after the previous pick that still leave one point for every later target. Early
// on the targets lie closer than the points (validations come every eval_every steps), so the
// plain nearest point would serve two targets and the curve would lose a point there.
static int log_spaced(const int64_t* tokens, int points, int* pick) {
    int m = points < CURVE_POINTS ? points : CURVE_POINTS;
    double lo = log((double)tokens[0]), hi = log((double)tokens[points - 1]);
    for (int j = 0; j < m; j++) {
        double target = m > 1 ? lo + j * (hi - lo) / (m - 1) : lo;
        int first = j ? pick[j - 1] + 1 : 0, last = points - (m - j);
        int best = first;
        for (int k = first + 1; k <= last; k++) {
            if (fabs(log((double)tokens[k]) - target) < fabs(log((double)tokens[best]) - target)) best = k;
        }
        pick[j] = best;
    }
    return m;
}

// The training split's tokens: one pass over it, the table's epochs and the figure's mark
static double train_split_tokens(const Table* t) {
    DataDir data;
    data_open(&data, t->rows[0].models[0].cfg.data, DATA_TRAIN);
    double tokens = (double)data.train.n_tokens;
    data_close(&data);
    return tokens;
}

// Per comparison, at log-spaced validation points, the paired gap in validation loss (every run
// evaluates the same eval_batches x batch_size windows at the same steps) over the seeds both
// rows finished, with its t-interval; the points of a comparison are one family. The data file
// holds one block per comparison: "tokens gap low high" (no interval: low = high = gap).
static int write_gap_curve(const Table* t, Registry* reg, Report* rep, const char* dat, double train_tokens) {
    const Config* first = &t->rows[0].models[0].cfg;
    CurvePair pairs[RECIPE_CLAIMS + RECIPE_SECTIONS];
    int n_pairs = curve_pairs(t, pairs);
    report_printf(rep, "\n### The gaps along training (validation loss against training tokens)\n\nEach comparison's gap in "
                  "validation loss at %d validation points (all of them where a run has fewer) spread evenly in log(tokens), on the "
                  "eval_batches x batch_size = %d "
                  "windows every run evaluates at the same steps; epochs = tokens over the training split's %.0f tokens.\n\n"
                  "| comparison | tokens | epochs | %s |\n|---|---|---|%s|\n", CURVE_POINTS, first->eval_batches * first->batch_size,
                  train_tokens, GAP_HEADER, GAP_HEADER_RULE);
    DataFile file;
    data_file_open(&file, dat);
    for (int c = 0; c < n_pairs; c++) {
        const Row *a = pairs[c].a, *b = pairs[c].b;
        int kept = 0, points = -1, same = 1;
        int64_t* tokens = NULL;
        double *va[VERDICT_MAX_SEEDS], *vb[VERDICT_MAX_SEEDS];  // each kept seed's curves (a study has at most 256 seeds)
        for (int s = 0; s < t->seeds; s++) {
            if (!a->runs[s] || !b->runs[s]) continue;
            int64_t *ta, *tb;
            int na = registry_run_curve(reg, a->runs[s], "val_loss", &ta, &va[kept]);
            int nb = registry_run_curve(reg, b->runs[s], "val_loss", &tb, &vb[kept]);
            same &= na == nb && (points < 0 || na == points) && !memcmp(ta, tb, (size_t)na * sizeof(int64_t)) &&
                    (!tokens || !memcmp(ta, tokens, (size_t)na * sizeof(int64_t)));
            points = na;
            free(tb);
            if (!tokens) tokens = ta;
            else free(ta);
            kept++;
        }
        char quoted[sizeof(pairs[0].label)];
        gnuplot_data_text(quoted, sizeof(quoted), pairs[c].label);
        fprintf(file.f, "\"%s\"\n", quoted);
        if (!kept || !same || points < 1) {
            report_printf(rep, "| %s | - | - | n/a | n/a | - | - | %s |\n", pairs[c].label,
                          kept ? "n/a (the runs' validation points differ)" : "n/a (no data)");
        } else {
            int pick[CURVE_POINTS];
            int n = log_spaced(tokens, points, pick);
            GapInterval g[CURVE_POINTS];
            for (int i = 0; i < n; i++) {
                double x[VERDICT_MAX_SEEDS], y[VERDICT_MAX_SEEDS];
                for (int s = 0; s < kept; s++) {
                    x[s] = va[s][pick[i]];
                    y[s] = vb[s][pick[i]];
                }
                Paired p = {kept, 1, x, NULL, y, NULL};
                g[i] = paired_gap(&p);
            }
            verdict_holm(g, n);
            for (int i = 0; i < n; i++) {
                char cells[1024];
                double tok = (double)tokens[pick[i]];
                report_printf(rep, "| %s | %.0f | %.2f |%s\n", pairs[c].label, tok, tok / train_tokens,
                              gap_cells(cells, sizeof(cells), &g[i], NAN, 0, 4));
                fprintf(file.f, "%.0f %.6f %.6f %.6f\n", tok, g[i].gap, isnan(g[i].lo) ? g[i].gap : g[i].lo,
                        isnan(g[i].hi) ? g[i].gap : g[i].hi);
            }
        }
        fprintf(file.f, "\n\n");
        for (int s = 0; s < kept; s++) {
            free(va[s]);
            free(vb[s]);
        }
        free(tokens);
    }
    data_file_close(&file);
    char family[256];
    if (t->seeds > 1) {
        report_printf(rep, "\nGap = the first row minus the second (negative = lower loss). %s %s\n", interval_note(t->seeds, "windows"),
                      family_note(family, sizeof(family), CURVE_POINTS, "validation points"));
    } else {
        report_printf(rep, "\nGap = the first row minus the second (negative = lower loss). One seed: a validation point's loss is one "
                      "number per run, so there is no interval and no verdict; `--seeds N` gives the t-interval over seeds.\n");
    }
    return n_pairs;
}

// The gaps' figure: plots/<name>_<preset>_gaps.png from the data file write_gap_curve wrote
static void draw_gap_curve(const Table* t, const char* dat, int pairs, double train_tokens, char* png, size_t n) {
    GnuplotVars vars;
    gnuplot_init(&vars);
    gnuplot_input(&vars, "gaps", dat);
    gnuplot_number(&vars, "pairs", pairs);
    gnuplot_number(&vars, "pass_tokens", train_tokens);
    preset_path(png, n, t->opt->plots, t->name, t->opt->preset, "_gaps.png");
    gnuplot_output(&vars, "out_gaps", png);
    char text[512];
    snprintf(text, sizeof(text), "%s, preset %s: validation loss gap against training tokens (%s)", study_title(t), t->opt->preset,
             t->seeds > 1 ? "bars: 95% t-interval over the seeds" : "1 seed: no interval");
    gnuplot_string(&vars, "title_text", text);
    gnuplot("gap_curve.gp", &vars);
}

// ---- figures: data files, then gnuplot ----
// Each row against the first (the Transformer), ours and the paper's on one axis: the paper's
// claims are differences, and its 3B models' absolute losses are not on our scale
static void write_bars(const Table* t, const char* bars) {
    DataFile bars_file;
    data_file_open(&bars_file, bars);
    FILE* f = bars_file.f;
    fprintf(f, "# row title colour, then per metric (Valid, AR-Hit, Others): ours - ours of row 0, its 95%% interval "
               "(low, high), paper - paper of row 0\n");
    for (int i = 0; i < t->n_rows; i++) {
        const Row* row = &t->rows[i];
        fprintf(f, "%d \"%s\" %d", i, row->title, config_variant(&row->models[0].cfg.model)->colour);
        for (int k = 0; k < METRICS; k++) {
            GapInterval g = i ? row_gap(t, row, &t->rows[0], k) : (GapInterval){.n = 1};
            if (isnan(g.lo)) g.lo = g.hi = g.gap;  // no interval: a dot without a bar
            fprintf(f, " %.6f %.6f %.6f %.4f", g.gap, g.lo, g.hi, row->paper[k] - t->rows[0].paper[k]);
        }
        fprintf(f, "\n");
    }
    data_file_close(&bars_file);
}

// Each row's validation loss during training, the mean over its seeds' runs (the registry's)
static void write_curves(const Table* t, Registry* reg, const char* curves) {
    DataFile curves_file;
    data_file_open(&curves_file, curves);
    FILE* f = curves_file.f;
    for (int i = 0; i < t->n_rows; i++) {
        const Row* row = &t->rows[i];
        fprintf(f, "\"%s\"\n", row->title);
        int64_t runs[256];
        int n_runs = 0;
        for (int s = 0; s < t->seeds; s++) {
            if (row->runs[s]) runs[n_runs++] = row->runs[s];
        }
        int64_t* tokens;
        double* values;
        int points = registry_mean_curve(reg, runs, n_runs, "val_loss", &tokens, &values);
        for (int k = 0; k < points; k++) fprintf(f, "%lld %.6f\n", (long long)tokens[k], values[k]);
        fprintf(f, "\n\n");
        free(tokens);
        free(values);
    }
    data_file_close(&curves_file);
}

// Each row's validation loss per position bin, at the bin's middle position
static void write_positions_data(const Table* t, const char* positions) {
    int seq_len = t->rows[0].models[0].cfg.model.seq_len;
    DataFile positions_file;
    data_file_open(&positions_file, positions);
    FILE* f = positions_file.f;
    for (int i = 0; i < t->n_rows; i++) {
        fprintf(f, "\"%s\"\n", t->rows[i].title);
        for (int b = 0; t->rows[i].n && b < POSITION_BINS; b++) {
            fprintf(f, "%.1f %.6f\n", (b + 0.5) * seq_len / POSITION_BINS, t->rows[i].position[b]);
        }
        fprintf(f, "\n\n");
    }
    data_file_close(&positions_file);
}

static void write_figures(const Table* t, Registry* reg, char* png, char* curves_png, char* positions_png, size_t n) {
    const Table6Options* opt = t->opt;
    const Config* first = &t->rows[0].models[0].cfg;
    char bars[4096], curves[4096], positions[4096];
    preset_path(bars, sizeof(bars), opt->results, t->name, opt->preset, "_bars.dat");
    preset_path(curves, sizeof(curves), opt->results, t->name, opt->preset, "_curves.dat");
    preset_path(positions, sizeof(positions), opt->results, t->name, opt->preset, "_positions.dat");
    write_bars(t, bars);
    write_curves(t, reg, curves);
    write_positions_data(t, positions);
    GnuplotVars vars;
    gnuplot_init(&vars);
    char text[4400];
    long eval_tokens = (long)t->eval_windows * first->model.seq_len;
    gnuplot_input(&vars, "bars", bars);
    gnuplot_input(&vars, "curves", curves);
    gnuplot_input(&vars, "positions", positions);
    gnuplot_number(&vars, "rows", t->n_rows);
    gnuplot_number(&vars, "seeds", t->seeds);
    gnuplot_number(&vars, "seq_len", first->model.seq_len);
    gnuplot_number(&vars, "arhit_tokens", lround(t->rows[0].arhit_fraction * eval_tokens));
    gnuplot_number(&vars, "eval_tokens", eval_tokens);
    for (int i = 0; i < t->n_rows; i++) {
        char name[16];
        snprintf(name, sizeof(name), "att%d", i + 1);
        gnuplot_number(&vars, name, config_variant(&t->rows[i].models[0].cfg.model)->colour);
    }
    gnuplot_number(&vars, "variants", ATTN_VARIANT_COUNT);  // the legend: every variant's colour and label
    for (int v = 0; v < ATTN_VARIANT_COUNT; v++) {
        char name[16];
        snprintf(name, sizeof(name), "vcolour%d", v + 1);
        gnuplot_number(&vars, name, ATTN_VARIANTS[v].colour);
        snprintf(name, sizeof(name), "vlabel%d", v + 1);
        gnuplot_string(&vars, name, ATTN_VARIANTS[v].label);
    }
    for (int k = 0; k < METRICS; k++) {
        int ours = 0, paper = 0;
        for (int i = 0; i < t->n_rows; i++) {
            ours |= isfinite(t->rows[i].mean[k]);
            paper |= isfinite(t->rows[i].paper[k]);
        }
        char name[16];
        snprintf(name, sizeof(name), "ours%d", k + 1);
        gnuplot_number(&vars, name, ours);
        snprintf(name, sizeof(name), "paper%d", k + 1);
        gnuplot_number(&vars, name, paper);
    }
    preset_path(png, n, opt->plots, t->name, opt->preset, ".png");
    gnuplot_output(&vars, "out_bars", png);
    preset_path(curves_png, n, opt->plots, t->name, opt->preset, "_curves.png");
    gnuplot_output(&vars, "out_curves", curves_png);
    preset_path(positions_png, n, opt->plots, t->name, opt->preset, "_positions.png");
    gnuplot_output(&vars, "out_positions", positions_png);
    snprintf(text, sizeof(text), "%s, preset %s: each row's loss minus the Transformer row's, ours (dots; bars: 95%% "
             "paired interval, %s) and the paper's 3B models (diamonds), on the first %d validation windows of %d tokens",
             study_title(t), opt->preset, t->seeds > 1 ? "t over the seeds" : "1 seed: windows' noise only", t->eval_windows, first->model.seq_len);
    gnuplot_string(&vars, "title_text", text);
    snprintf(text, sizeof(text), "%s, preset %s: validation loss during training, on eval_batches x batch_size = %d "
             "windows (the table: %d)", study_title(t), opt->preset, first->eval_batches * first->batch_size, t->eval_windows);
    gnuplot_string(&vars, "curves_title", text);
    snprintf(text, sizeof(text), "%s, preset %s: validation loss by position in the context (%d bins; mean over %d "
             "seed(s), %d windows)", study_title(t), opt->preset, POSITION_BINS, t->seeds, t->eval_windows);
    gnuplot_string(&vars, "positions_title", text);
    gnuplot("table6.gp", &vars);
}

int table6_main(const Table6Options* opt) {
    Table t;
    table_open(&t, opt);
    check_rows(&t);
    mkdir_p(opt->plots);
    study_begin(&t.study, t.name);
    Registry* reg = &t.study.reg;
    train_rows(&t);
    aggregate(&t, reg, t.study.experiment);

    char path[4096];
    preset_path(path, sizeof(path), opt->results, t.name, opt->preset, ".md");
    Report rep;
    report_open(&rep, path, 1);
    write_rows(&t, &rep);
    write_health(&t, reg, &rep);
    write_claims(&t, &rep);
    write_against(&t, &rep);
    write_positions(&t, &rep);
    char gaps[4096], gaps_png[4400] = "";
    int pairs = 0;
    double train_tokens = 0;  // the gaps' table and figure both need it; the data is read once
    if (t.gap_curve) {
        preset_path(gaps, sizeof(gaps), opt->results, t.name, opt->preset, "_gaps.dat");
        train_tokens = train_split_tokens(&t);
        pairs = write_gap_curve(&t, reg, &rep, gaps, train_tokens);
    }
    report_close(&rep);
    char png[4400], curves_png[4400], positions_png[4400];
    write_figures(&t, reg, png, curves_png, positions_png, sizeof(png));
    if (pairs) draw_gap_curve(&t, gaps, pairs, train_tokens, gaps_png, sizeof(gaps_png));
    printf("\nwrote %s, %s, %s, %s%s%s; runs in %s/registry.sqlite\n", path, png, curves_png, positions_png, pairs ? ", " : "", gaps_png,
           opt->results);
    int missing = 0;
    for (int i = 0; i < t.n_rows; i++) {
        if (t.rows[i].n < t.seeds) {
            fprintf(stderr, "row %s: %d of %d seeds finished\n", t.rows[i].name, t.rows[i].n, t.seeds);
            missing = 1;
        }
    }
    table_close(&t);
    return missing;
}
