#define _GNU_SOURCE
#include "table6.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../data/dataset.h"
#include "../eval/arhit.h"
#include "../model/checkpoint.h"
#include "../model/config.h"
#include "../model/base/dist.h"
#include "../model/base/util.h"
#include "recipe.h"
#include "registry.h"
#include "report.h"
#include "train.h"

static int is_row_key(const char* k) {
    return !strcmp(k, "label") || recipe_shape_key(1, k) || !strcmp(k, "paper") || !strcmp(k, "match_params");
}
static int is_preset_key(const char* k) {
    return recipe_shape_key(0, k) || !strcmp(k, "eval_windows") || !strcmp(k, "outlier_tokens");
}
int table6_extra_key(int is_row, const char* k) { return is_row ? is_row_key(k) : is_preset_key(k); }

// computed per row from the preset's h and d, the row's heads and width, and match_params
static const char* const TABLE6_DERIVED_KEYS[] = {"n_head", "head_dim", "d_model", "ffn_hidden", "out", NULL};

static Config row_config(const Recipe* r, const Section* preset, const Section* row, int seed_index,
                         const char* recipe, const char* results) {
    Config cfg = recipe_row_config(r, preset, row, seed_index, recipe, results, "table6", table6_extra_key);
    const char* match = section_get(row, "match_params");
    if (match && strcmp(match, "true") == 0 && row != &r->rows[0]) {
        // one unit of ffn_hidden is 3 x d_model parameters per layer; the vocabulary cancels
        Config reference = row_config(r, preset, &r->rows[0], seed_index, recipe, results);
        double missing = (double)model_param_count(&reference, 1) - (double)model_param_count(&cfg, 1);
        cfg.ffn_hidden = config_ffn_hidden(&cfg) + (int)lround(missing / (3.0 * cfg.d_model * cfg.n_layer));
        config_validate(&cfg);
    }
    return cfg;
}

// The paper's Valid, AR-Hit and Others of a row (returns 1), or NaN where it has no `paper` key
static int paper_values(const Section* row, double v[3], const char* recipe) {
    v[0] = v[1] = v[2] = NAN;
    const char* text = section_get(row, "paper");
    if (!text) return 0;
    char extra;
    if (sscanf(text, "%lf %lf %lf %c", &v[0], &v[1], &v[2], &extra) != 3) {
        die("%s: [row %s] key 'paper': '%s' is not three numbers (Valid, AR-Hit, Others)", recipe, row->name, text);
    }
    return 1;
}

Config table6_row_config(const Recipe* r, const Section* preset, int row, int seed_index, const char* recipe,
                         const char* results) {
    return row_config(r, preset, &r->rows[row], seed_index, recipe, results);
}

// One (row, seed): train (resuming), evaluate, record
static void run_row(const Table6Options* opt, int64_t experiment, const char* row, const Config* cfg, int eval_windows) {
    Registry reg;
    char path[4096];
    path_printf(path, sizeof(path), "%s/registry.sqlite", opt->results);
    registry_open(&reg, path);
    int64_t run = train_registry_row(&reg, experiment, row, cfg, 0);  // ended after its evaluation

    Model model;
    CheckpointInfo info;
    config_checkpoint_path(cfg, path, sizeof(path));
    checkpoint_load(path, backend_of_device(cfg->device), &model, NULL, &info);
    DataDir data;
    data_open(&data, cfg->data, DATA_TRAIN | DATA_VAL);
    BigramTable table;
    bigrams_count(&table, &data.train);
    SliceLoss s = evaluate_slices(&model, &data.val, &table, eval_windows, cfg->batch_size);
    // a slice without tokens has no loss: its evaluation is absent, and the table says why
    registry_evaluation(&reg, run, "valid", s.valid);
    if (isfinite(s.arhit)) registry_evaluation(&reg, run, "arhit", s.arhit);
    if (isfinite(s.others)) registry_evaluation(&reg, run, "others", s.others);
    registry_evaluation(&reg, run, "arhit_fraction", s.arhit_fraction);
    registry_evaluation(&reg, run, "arhit_threshold", table.threshold);
    registry_evaluation(&reg, run, "eval_tokens", (double)s.tokens);
    registry_evaluation(&reg, run, "params", (double)model.n_params);
    registry_evaluation(&reg, run, "tokens_seen", (double)info.step * cfg->batch_size * cfg->seq_len * cfg->grad_accum);
    registry_end_run(&reg, run, RUN_FINISHED);
    char arhit[64];
    if (isfinite(s.arhit)) snprintf(arhit, sizeof(arhit), "%.4f (%.2f%% of tokens)", s.arhit, 100 * s.arhit_fraction);
    else snprintf(arhit, sizeof(arhit), "none (no AR-Hit tokens)");
    printf("%s seed %d: valid %.4f, AR-Hit %s, Others %.4f\n", row, cfg->seed, s.valid, arhit, s.others);
    bigrams_free(&table);
    data_close(&data);
    model_free(&model);
    registry_close(&reg);
}

// The FINISHED run of (row, cfg): trained now in a worker process when there is none.
// Returns 0 when the worker failed or was killed (the registry says which). A data-parallel
// job trains in this process, since a forked child cannot take part in MPI; a row that fails
// there takes the job down.
static int64_t train_row(const Table6Options* opt, Registry* reg, int64_t experiment, const char* row, const Config* cfg,
                         int eval_windows) {
    int64_t run = train_finished_row(reg, experiment, row, cfg);
    if (run) return run;
    printf("== %s, seed %d (%s)\n", row, cfg->seed, cfg->out);
    fflush(stdout);
    if (dist_ranks() > 1) {
        run_row(opt, experiment, row, cfg, eval_windows);
        return registry_finished_run(reg, experiment, row, cfg->seed, cfg, data_identity(cfg->data));
    }
    pid_t pid = fork();
    if (pid < 0) die("fork failed");
    if (pid == 0) {
        run_row(opt, experiment, row, cfg, eval_windows);
        exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        RunStatus end = WIFSIGNALED(status) ? RUN_KILLED : RUN_FAILED;
        registry_end_pid(reg, pid, end);
        fprintf(stderr, "row %s seed %d: %s\n", row, cfg->seed, run_status_name(end));
        return 0;
    }
    return registry_finished_run(reg, experiment, row, cfg->seed, cfg, data_identity(cfg->data));
}

void table6_trained_rows(const Table6Options* opt, const char* const* names, int n, TrainedRow* out) {
    Recipe* r = recipe_load(opt->recipe, table6_extra_key);
    recipe_override(r, opt->overrides, opt->n_overrides, TABLE6_DERIVED_KEYS, opt->recipe);
    const Section* preset = recipe_preset(r, opt->preset, opt->recipe);
    int eval_windows = section_int(preset, "eval_windows", opt->recipe);
    Registry reg;
    int lock;
    int64_t experiment = recipe_experiment(&reg, opt->results, "table6", opt->preset, opt->recipe, &lock);
    for (int m = 0; m < n * opt->seeds; m++) {
        int k = m / opt->seeds, i = 0;
        while (i < r->n_rows && strcmp(r->rows[i].name, names[k])) i++;
        if (i == r->n_rows) die("%s: no [row %s]", opt->recipe, names[k]);
        TrainedRow* t = &out[m];
        snprintf(t->name, sizeof(t->name), "%s", names[k]);
        t->cfg = row_config(r, preset, &r->rows[i], m % opt->seeds, opt->recipe, opt->results);
        t->run = train_row(opt, &reg, experiment, names[k], &t->cfg, eval_windows);
        if (!t->run) die("%s: row %s (preset %s) did not train", opt->recipe, names[k], opt->preset);
        config_checkpoint_path(&t->cfg, t->checkpoint, sizeof(t->checkpoint));
    }
    registry_close(&reg);
    unlock_folder(lock);
    free(r);
}

// ---- aggregation ----
typedef struct {
    double mean[3], std[3];  // valid, arhit, others
    double arhit_fraction, threshold;
    int n;
    int64_t runs[256];       // the FINISHED run of each seed with the current config
} RowResult;

// Mean and sample std over the seeds whose run finished with the row's current config
static RowResult row_result(Registry* reg, int64_t experiment, const Recipe* r, const Section* preset, int row,
                            const Table6Options* opt) {
    static const char* keys[3] = {"valid", "arhit", "others"};
    RowResult res = {{0}, {0}, 0, 0, 0, {0}};
    double values[3][256];
    for (int s = 0; s < opt->seeds; s++) {
        Config cfg = row_config(r, preset, &r->rows[row], s, opt->recipe, opt->results);
        int64_t run = registry_finished_run(reg, experiment, r->rows[row].name, cfg.seed, &cfg, data_identity(cfg.data));
        if (!run) continue;
        for (int k = 0; k < 3; k++) values[k][res.n] = registry_evaluation_value(reg, run, keys[k]);
        res.arhit_fraction += registry_evaluation_value(reg, run, "arhit_fraction");
        res.threshold = registry_evaluation_value(reg, run, "arhit_threshold");
        res.runs[res.n++] = run;
    }
    if (res.n) res.arhit_fraction /= res.n;
    for (int k = 0; k < 3; k++) {
        Spread s = res.n ? spread_of(values[k], res.n, 1) : (Spread){NAN, 0};
        res.mean[k] = s.mean;
        res.std[k] = s.std;
    }
    return res;
}

static void format_cell(char* buf, size_t n, const RowResult* r, int k) {
    if (r->n == 0) snprintf(buf, n, "-");
    else if (isnan(r->mean[k])) snprintf(buf, n, "%s", k == 1 ? "no AR-Hit tokens" : "no tokens");
    else if (r->n == 1) snprintf(buf, n, "%.3f", r->mean[k]);
    else snprintf(buf, n, "%.3f ± %.3f", r->mean[k], r->std[k]);
}

// A claim compares row a with row b on metric k (gap = a - b): LOWER claims a < b; NOT_LOWER
// claims a is not lower than b beyond the noise; NEGLIGIBLE claims |gap| is within the noise.
// The noise is 2 x the larger seed std, or 0.01 nats with one seed.
typedef enum { LOWER, NOT_LOWER, NEGLIGIBLE } ClaimKind;

typedef struct {
    const char* text;
    int a, b, metric;
    ClaimKind kind;
} Claim;

static const Claim CLAIMS[] = {
    {"DIFF beats Transformer overall (Valid)", 3, 0, 0, LOWER},
    {"DIFF beats Transformer on AR-Hit", 3, 0, 1, LOWER},
    {"removing the per-head norm hurts DIFF (Valid; gap = DIFF - without)", 3, 4, 0, LOWER},
    {"adding GroupNorm does not help Transformer (Valid; gap = with - without, h/2 x 2d)", 2, 1, 0, NOT_LOWER},
    {"lambda_init = 0.8 barely matters (Valid vs DIFF)", 5, 3, 0, NEGLIGIBLE},
    {"lambda_init = 0.5 barely matters (Valid vs DIFF)", 6, 3, 0, NEGLIGIBLE},
    {"halving heads barely matters for Transformer (Valid; h/2 x 2d vs h x d)", 1, 0, 0, NEGLIGIBLE},
};

static const char* verdict(ClaimKind kind, double gap, double noise) {
    if (isnan(gap)) return "no data";
    switch (kind) {
    case LOWER: return gap < -noise ? "yes" : gap < 0 ? "direction only (within noise)" : "no";
    case NOT_LOWER: return gap >= -noise ? "yes" : "no";
    case NEGLIGIBLE: return fabs(gap) <= noise ? "yes" : "no";
    }
    return "?";
}

int table6_main(const Table6Options* opt) {
    Recipe* r = recipe_load(opt->recipe, table6_extra_key);
    recipe_override(r, opt->overrides, opt->n_overrides, TABLE6_DERIVED_KEYS, opt->recipe);
    const Section* preset = recipe_preset(r, opt->preset, opt->recipe);
    if (r->n_rows < 7) die("%s: expected the 7 rows of Table 6 first, found %d rows", opt->recipe, r->n_rows);
    if (opt->seeds < 1 || opt->seeds > 256) die("seeds must lie in 1..256, got %d", opt->seeds);
    int eval_windows = section_int(preset, "eval_windows", opt->recipe);

    // parameter counts, checked before anything trains
    Config first = row_config(r, preset, &r->rows[0], 0, opt->recipe, opt->results);
    char path[4096];
    DataDir data;
    data_open(&data, first.data, DATA_VAL);
    size_t params[RECIPE_SECTIONS];
    printf("Table 6, preset %s, %d seed(s): parameters per row\n", opt->preset, opt->seeds);
    for (int i = 0; i < r->n_rows; i++) {
        Config cfg = row_config(r, preset, &r->rows[i], 0, opt->recipe, opt->results);
        params[i] = model_param_count(&cfg, data.tok.vocab_size);
        double paper[3];
        paper_values(&r->rows[i], paper, opt->recipe);
        printf("  %-18s %-9s %2d heads x %3d  GN %-3s  ffn %4d  %zu\n", r->rows[i].name, config_attention_name(&cfg),
               cfg.n_head, config_head_dim(&cfg), config_head_norm(&cfg) ? "yes" : "no", config_ffn_hidden(&cfg), params[i]);
        if (fabs((double)params[i] - (double)params[0]) > 0.01 * params[0]) {
            die("%s: row '%s' has %zu parameters, more than 1%% from row '%s' (%zu)", opt->recipe, r->rows[i].name,
                params[i], r->rows[0].name, params[0]);
        }
    }
    if ((data.val.n_tokens - 1) / first.seq_len < (size_t)eval_windows) {
        die("%s: [preset %s] eval_windows = %d needs %zu validation tokens at seq_len %d; '%s/val.bin' has %zu", opt->recipe,
            opt->preset, eval_windows, (size_t)eval_windows * first.seq_len + 1, first.seq_len, first.data, data.val.n_tokens);
    }
    data_close(&data);

    mkdir_p(opt->plots);
    Registry reg;
    int lock;
    int64_t experiment = recipe_experiment(&reg, opt->results, "table6", opt->preset, opt->recipe, &lock);

    double t_start = wall_time();
    for (int s = 0; s < opt->seeds; s++) {
        for (int i = 0; i < r->n_rows; i++) {
            Config cfg = row_config(r, preset, &r->rows[i], s, opt->recipe, opt->results);
            if (!train_row(opt, &reg, experiment, r->rows[i].name, &cfg, eval_windows)) {
                fprintf(stderr, "row %s seed %d: the table goes on without it\n", r->rows[i].name, cfg.seed);
            }
        }
    }
    printf("training and evaluation: %.1f minutes\n", (wall_time() - t_start) / 60);

    // ---- the table ----
    RowResult res[RECIPE_SECTIONS];
    for (int i = 0; i < r->n_rows; i++) res[i] = row_result(&reg, experiment, r, preset, i, opt);
    preset_path(path, sizeof(path), opt->results, "table6", opt->preset, ".md");
    Report rep;
    report_open(&rep, path, 1);
    int h = section_int(preset, "h", opt->recipe), d = section_int(preset, "d", opt->recipe);
    double threshold = res[0].threshold;
    report_printf(&rep, "\n## Table 6 (preset %s): validation loss, %d seed(s) per row, mean ± sample std\n\n", opt->preset, opt->seeds);
    report_printf(&rep, "%s", preset_note(preset, opt->recipe));
    report_printf(&rep, "Model: %s layers, d_model %d (h = %d, d = %d), %lld training tokens per row, %d evaluation windows of %d tokens.\n",
            section_get(preset, "n_layer"), h * d, h, d, (long long)first.steps * first.batch_size * first.seq_len * first.grad_accum,
            eval_windows, first.seq_len);
    long eval_tokens = (long)eval_windows * first.seq_len;
    report_printf(&rep, "AR-Hit: bigram seen earlier in the window with training count <= %.3g (Zoology's 1,250 per 10B tokens "
            "rescaled to the training shard); %.2f%% of evaluated tokens (%ld of %ld).\n\n", threshold,
            100 * res[0].arhit_fraction, lround(res[0].arhit_fraction * eval_tokens), eval_tokens);
    report_printf(&rep, "| Model | #Heads | d | GN | n | Valid | AR-Hit | Others | params | paper Valid | paper AR-Hit | paper Others |\n");
    report_printf(&rep, "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < r->n_rows; i++) {
        Config cfg = row_config(r, preset, &r->rows[i], 0, opt->recipe, opt->results);
        char cells[3][64];
        for (int k = 0; k < 3; k++) format_cell(cells[k], sizeof(cells[k]), &res[i], k);
        double pv[3];
        char paper_cells[64] = "not in the paper | | ";
        if (paper_values(&r->rows[i], pv, opt->recipe)) {
            snprintf(paper_cells, sizeof(paper_cells), "%.3f | %.3f | %.3f", pv[0], pv[1], pv[2]);
        }
        char label[2 * CONFIG_STR];
        markdown_cell(label, sizeof(label), section_get(&r->rows[i], "label"));
        report_printf(&rep, "| %s | %d | %d | %s | %d | %s | %s | %s | %zu | %s |\n", label, cfg.n_head,
                config_head_dim(&cfg), config_head_norm(&cfg) ? "✓" : "✗", res[i].n, cells[0], cells[1], cells[2], params[i],
                paper_cells);
    }
    report_printf(&rep, "\n### The paper's claims against these runs\n\n");
    report_printf(&rep, "| claim | gap (ours) | seed spread | paper gap | agrees |\n|---|---|---|---|---|\n");
    for (size_t c = 0; c < sizeof(CLAIMS) / sizeof(CLAIMS[0]); c++) {
        const Claim* cl = &CLAIMS[c];
        const RowResult *a = &res[cl->a], *b = &res[cl->b];
        double gap = a->mean[cl->metric] - b->mean[cl->metric];
        double spread = fmax(a->std[cl->metric], b->std[cl->metric]);
        double pa[3], pb[3];
        paper_values(&r->rows[cl->a], pa, opt->recipe);
        paper_values(&r->rows[cl->b], pb, opt->recipe);
        char paper_gap[32] = "n/a (not in the paper)";
        if (!isnan(pa[cl->metric] - pb[cl->metric])) snprintf(paper_gap, sizeof(paper_gap), "%+.3f", pa[cl->metric] - pb[cl->metric]);
        double noise = opt->seeds > 1 ? 2 * spread : 0.01;
        char spread_text[32];
        if (opt->seeds > 1) snprintf(spread_text, sizeof(spread_text), "%.4f", spread);
        else snprintf(spread_text, sizeof(spread_text), "n/a (1 seed)");
        char gap_text[32] = "n/a (no tokens)";
        if (!isnan(gap)) snprintf(gap_text, sizeof(gap_text), "%+.4f", gap);
        report_printf(&rep, "| %s | %s | %s | %s | %s |\n", cl->text, gap_text, spread_text, paper_gap, verdict(cl->kind, gap, noise));
    }
    report_printf(&rep, "\nGaps are the first row named minus the second (negative = lower loss). The noise level is %s: "
            "\"beats\" claims agree when the gap is below minus the noise, \"does not help\" when it is above it, "
            "\"barely matters\" when |gap| is within it.\n",
            opt->seeds > 1 ? "2 x the larger seed std" : "0.01 nats (one seed: no spread measured)");
    report_close(&rep);

    // ---- figures: data files then gnuplot ----
    char bars[4096], curves[4096];
    preset_path(bars, sizeof(bars), opt->results, "table6", opt->preset, "_bars.dat");
    preset_path(curves, sizeof(curves), opt->results, "table6", opt->preset, "_curves.dat");
    FILE* f = fopenCheck(bars, "w");
    // each row against the first (the Transformer), ours and the paper's on one axis: the paper's
    // claims are differences, and its 3B models' absolute losses are not on our scale
    fprintf(f, "# row label attention, then per metric (Valid, AR-Hit, Others): ours - ours of row 0, seed std, "
               "paper - paper of row 0\n");
    double base_paper[3];
    paper_values(&r->rows[0], base_paper, opt->recipe);
    for (int i = 0; i < r->n_rows; i++) {
        Config cfg = row_config(r, preset, &r->rows[i], 0, opt->recipe, opt->results);
        double pv[3];
        paper_values(&r->rows[i], pv, opt->recipe);
        fprintf(f, "%d \"%s %dx%d%s\" %d", i, section_get(&r->rows[i], "label"), cfg.n_head, config_head_dim(&cfg),
                config_head_norm(&cfg) ? " GN" : "", config_variant(&cfg)->colour);
        for (int k = 0; k < 3; k++) fprintf(f, " %.6f %.6f %.4f", res[i].mean[k] - res[0].mean[k], res[i].std[k], pv[k] - base_paper[k]);
        fprintf(f, "\n");
    }
    fcloseCheck(f, bars);
    f = fopenCheck(curves, "w");
    for (int i = 0; i < r->n_rows; i++) {
        Config cfg = row_config(r, preset, &r->rows[i], 0, opt->recipe, opt->results);
        fprintf(f, "\"%s %dx%d%s\"\n", section_get(&r->rows[i], "label"), cfg.n_head, config_head_dim(&cfg),
                config_head_norm(&cfg) ? " GN" : "");
        int64_t* tokens;
        double* values;
        int n = registry_mean_curve(&reg, res[i].runs, res[i].n, "val_loss", &tokens, &values);
        for (int k = 0; k < n; k++) fprintf(f, "%lld %.6f\n", (long long)tokens[k], values[k]);
        fprintf(f, "\n\n");
        free(tokens);
        free(values);
    }
    fcloseCheck(f, curves);
    GnuplotVars vars;
    gnuplot_init(&vars);
    char text[4400];
    gnuplot_input(&vars, "bars", bars);
    gnuplot_input(&vars, "curves", curves);
    gnuplot_number(&vars, "rows", r->n_rows);
    gnuplot_number(&vars, "seeds", opt->seeds);
    gnuplot_number(&vars, "arhit_tokens", lround(res[0].arhit_fraction * eval_tokens));
    gnuplot_number(&vars, "eval_tokens", eval_tokens);
    for (int i = 0; i < r->n_rows; i++) {
        char name[16];
        snprintf(name, sizeof(name), "att%d", i + 1);
        Config cfg = row_config(r, preset, &r->rows[i], 0, opt->recipe, opt->results);
        gnuplot_number(&vars, name, config_variant(&cfg)->colour);
    }
    gnuplot_number(&vars, "variants", ATTN_VARIANT_COUNT);  // the legend: every variant's colour and label
    for (int v = 0; v < ATTN_VARIANT_COUNT; v++) {
        char name[16];
        snprintf(name, sizeof(name), "vcolour%d", v + 1);
        gnuplot_number(&vars, name, ATTN_VARIANTS[v].colour);
        snprintf(name, sizeof(name), "vlabel%d", v + 1);
        gnuplot_string(&vars, name, ATTN_VARIANTS[v].label);
    }
    for (int k = 0; k < 3; k++) {
        int ours = 0, paper = 0;
        for (int i = 0; i < r->n_rows; i++) {
            double pv[3];
            paper_values(&r->rows[i], pv, opt->recipe);
            ours |= isfinite(res[i].mean[k]);
            paper |= isfinite(pv[k]);
        }
        char name[16];
        snprintf(name, sizeof(name), "ours%d", k + 1);
        gnuplot_number(&vars, name, ours);
        snprintf(name, sizeof(name), "paper%d", k + 1);
        gnuplot_number(&vars, name, paper);
    }
    char png[4400], curves_png[4400];
    preset_path(png, sizeof(png), opt->plots, "table6", opt->preset, ".png");
    gnuplot_output(&vars, "out_bars", png);
    preset_path(curves_png, sizeof(curves_png), opt->plots, "table6", opt->preset, "_curves.png");
    gnuplot_output(&vars, "out_curves", curves_png);
    char spread[64] = "1 seed: no error bars";
    if (opt->seeds > 1) snprintf(spread, sizeof(spread), "error bars: std over %d seeds", opt->seeds);
    snprintf(text, sizeof(text), "Table 6, preset %s: each row's loss minus the Transformer row's, ours (dots; %s) and the "
             "paper's 3B models (diamonds), on the first %d validation windows of %d tokens", opt->preset, spread, eval_windows,
             first.seq_len);
    gnuplot_string(&vars, "title_text", text);
    snprintf(text, sizeof(text), "Table 6, preset %s: validation loss during training, on eval_batches x batch_size = %d "
             "windows (the table: %d)", opt->preset, first.eval_batches * first.batch_size, eval_windows);
    gnuplot_string(&vars, "curves_title", text);
    gnuplot("table6.gp", &vars);
    printf("\nwrote %s, %s, %s; runs in %s/registry.sqlite\n", path, png, curves_png, opt->results);
    registry_close(&reg);
    unlock_folder(lock);
    int missing = 0;
    for (int i = 0; i < r->n_rows; i++) {
        if (res[i].n < opt->seeds) {
            fprintf(stderr, "row %s: %d of %d seeds finished\n", r->rows[i].name, res[i].n, opt->seeds);
            missing = 1;
        }
    }
    free(r);
    return missing;
}
