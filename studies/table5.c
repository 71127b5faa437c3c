#include "table5.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../data/dataset.h"
#include "../eval/outliers.h"
#include "../run/checkpoint.h"
#include "../base/util.h"
#include "needle/needle_tasks.h"
#include "recipe.h"
#include "registry.h"
#include "report.h"
#include "table6.h"
#include "verdict.h"

#define MAX_MODELS RECIPE_SECTIONS
#define N_TOPS 5
static const int TOPS[N_TOPS] = {1, 2, 3, 10, 100};
static const char* const KIND_LABELS[OUTLIER_KINDS] = {"Attention Logits", "Hidden States"};
// The paper's Table 5 (3B models), from the Table 6 recipe's [claim table5_logits] and [claim
// table5_hidden]: Top-1, 2, 3, 10, 100, median; v[Transformer, DIFF][logits, hidden]
typedef struct {
    double v[2][OUTLIER_KINDS][N_TOPS + 1];
} Paper5;
static const char* const KIND_CLAIMS[OUTLIER_KINDS] = {"table5_logits", "table5_hidden"};

static Paper5 read_paper(const char* recipe) {
    Recipe* r = recipe_load(recipe, table6_extra_key);
    Paper5 p;
    static const char* const ROWS[2] = {"transformer", "diff"};
    for (int k = 0; k < OUTLIER_KINDS; k++) {
        for (int m = 0; m < 2; m++) section_numbers(recipe_claim(r, KIND_CLAIMS[k], recipe), ROWS[m], p.v[m][k], N_TOPS + 1, recipe);
    }
    free(r);
    return p;
}

typedef struct {
    const char* source;  // "table6" or "needle"
    const char* preset;
    char label[256];     // "table6/small/transformer": the row, whichever seed
    StudyModel row;
    size_t tokens;    // positions asked for
    OutlierStats stats;
    char h5[4200];
} Studied;

// outlier_tokens of a recipe's preset
static size_t preset_tokens(const char* recipe, const char* preset, ExtraKey extra_key) {
    Recipe* r = recipe_load(recipe, extra_key);
    size_t n = (size_t)section_int(recipe_preset(r, preset, recipe), "outlier_tokens", recipe);
    free(r);
    return n;
}

static void add_model(Studied* s, const char* source, const char* preset, const StudyModel* row, size_t tokens) {
    s->source = source;
    s->preset = preset;
    s->row = *row;
    s->tokens = tokens;
    path_printf(s->label, sizeof(s->label), "%s/%s/%s", source, preset, row->name);
}

static void study(Studied* s, Registry* reg, const char* results) {
    Model model;
    CheckpointInfo info;
    Backend* be = study_load_checkpoint(s->row.checkpoint, &s->row.cfg, &model, &info);
    DataDir data;
    data_open(&data, s->row.cfg.data, DATA_VAL);
    char shard[4200];
    path_printf(shard, sizeof(shard), "%s/val.bin", data.dir);
    int windows, stride, T = s->row.cfg.model.seq_len;
    outlier_windows(data.val.n_tokens, T, s->tokens, shard, &windows, &stride);
    double t0 = wall_time();
    outlier_stats_collect(&s->stats, &model, &data.val, T, windows, stride, s->row.cfg.batch_size);
    printf("  %-28s seed %d: %d windows of %d at stride %d: %zu positions (%zu distinct tokens) in %.0f s\n", s->label, s->row.cfg.seed,
           windows, T, stride, s->stats.positions, s->stats.distinct, wall_time() - t0);
    char dir[4200];
    path_printf(dir, sizeof(dir), "%s/table5", results);
    mkdir_p(dir);
    path_printf(s->h5, sizeof(s->h5), "%s/%s_%s_%s_seed%d.h5", dir, s->source, s->preset, s->row.name, s->row.cfg.seed);
    outlier_stats_write(&s->stats, s->h5, s->label);
    registry_artifact(reg, s->row.run, "outlier_stats", s->h5);
    for (int k = 0; k < OUTLIER_KINDS; k++) {
        for (int t = 0; t <= N_TOPS; t++) {
            char key[64];
            if (t < N_TOPS) snprintf(key, sizeof(key), "table5_%s_top%d", OUTLIER_KIND_NAMES[k], TOPS[t]);
            else snprintf(key, sizeof(key), "table5_%s_median", OUTLIER_KIND_NAMES[k]);
            double v = t < N_TOPS ? act_stats_top(&s->stats.pooled[k], TOPS[t]) : act_stats_median(&s->stats.pooled[k]);
            registry_evaluation(reg, s->row.run, key, v);
        }
    }
    data_close(&data);
    model_free(&model);
    backend_close(be);
}

// The statistic t of kind k of a model: Top-TOPS[t], or the median at t = N_TOPS; layer -1 pooled
static double stat_of(const Studied* s, int k, int layer, int t) {
    const ActStats* a = layer < 0 ? &s->stats.pooled[k] : &s->stats.layer[k][layer];
    return t < N_TOPS ? act_stats_top(a, TOPS[t]) : act_stats_median(a);
}

// The spread over a row's seeds (models[0..seeds-1]) of f(model)
typedef double (*ModelValue)(const Studied* s, int k, int layer, int t);
static Spread seed_spread(const Studied* models, int seeds, ModelValue f, int k, int layer, int t) {
    double v[MAX_MODELS];
    for (int i = 0; i < seeds; i++) v[i] = f(&models[i], k, layer, t);
    return spread_of(v, seeds, 1);
}

// Top-1 over the median: how far the largest value stands out
static double ratio_of(const Studied* s, int k, int layer, int t) {
    (void)t;
    return stat_of(s, k, layer, 0) / stat_of(s, k, layer, N_TOPS);
}

static void spread_cell(Report* f, const Studied* models, int seeds, ModelValue fn, int k, int layer, int t, int digits) {
    char cell[64];
    report_printf(f, " %s |", spread_text(cell, sizeof(cell), seed_spread(models, seeds, fn, k, layer, t), seeds, digits));
}

// The first row of a source whose attention has `maps` maps (1: the Transformer), or -1
static int row_of(const Studied* models, int n_rows, int seeds, const char* source, int maps) {
    for (int g = 0; g < n_rows; g++) {
        const Studied* s = &models[g * seeds];
        if (strcmp(s->source, source) == 0 && (config_variant(&s->row.cfg.model)->maps == 1) == (maps == 1)) return g;
    }
    return -1;
}

// Row group a minus row group b in each activation type's Top-1 and Top-1 / median, paired by
// seed, against the paper's gaps when paper (NaN otherwise: the verdict reads the direction)
static void write_gap_rows(Report* f, const Studied* models, int seeds, int a, int b, int paper, const Paper5* P) {
    static const ModelValue VALUES[2] = {stat_of, ratio_of};
    static const char* const STATISTICS[2] = {"Top-1", "Top-1 / median"};
    for (int k = 0; k < OUTLIER_KINDS; k++) {
        for (int v = 0; v < 2; v++) {
            double x[MAX_MODELS], y[MAX_MODELS];
            for (int s = 0; s < seeds; s++) {
                x[s] = VALUES[v](&models[a * seeds + s], k, -1, 0);
                y[s] = VALUES[v](&models[b * seeds + s], k, -1, 0);
            }
            Paired p = {seeds, 1, x, NULL, y, NULL};
            GapInterval g = paired_gap(&p);
            double paper_gap = !paper ? NAN
                               : v == 0 ? P->v[1][k][0] - P->v[0][k][0]
                                        : P->v[1][k][0] / P->v[1][k][N_TOPS] - P->v[0][k][0] / P->v[0][k][N_TOPS];
            char cells[1024], paper_text[32] = "-";
            if (!isnan(paper_gap)) snprintf(paper_text, sizeof(paper_text), "%+.2f", paper_gap);
            report_printf(f, "| %s − %s | %s | %s | %s |%s\n", models[a * seeds].label, models[b * seeds].label, KIND_LABELS[k],
                          STATISTICS[v], paper_text, gap_cells(cells, sizeof(cells), &g, paper_gap, 0, 2));
        }
    }
}

// DIFF minus Transformer of each source in Top-1 and in Top-1 / median, then each row not in
// the paper minus the row its `against` key names, paired by seed. The statistics are maxima over
// every position, which do not split into units to resample: one seed has no interval.
static void write_verdicts(Report* f, const Studied* models, int n_rows, int seeds, const Paper5* P) {
    static const char* const SOURCES[2] = {"table6", "needle"};
    report_printf(f, "\nDIFF minus Transformer, rows paired by seed (the same data order and validation text); the paper's DIFF "
                  "is lower in both. Then each row not in the paper minus the row it is read against (`against`). %s\n\n"
                  "| models | activation type | statistic | paper gap | %s |\n|---|---|---|---|%s|\n",
                  seeds > 1 ? interval_note(seeds, "text")
                            : "One seed: no interval (the statistics are maxima over every position, which do not split into "
                              "units to resample) and no verdict; `--seeds N` measures the seeds' spread.", GAP_HEADER, GAP_HEADER_RULE);
    for (int src = 0; src < 2; src++) {
        int base = row_of(models, n_rows, seeds, SOURCES[src], 1), diff = row_of(models, n_rows, seeds, SOURCES[src], 2);
        if (base >= 0 && diff >= 0) write_gap_rows(f, models, seeds, diff, base, 1, P);
    }
    for (int g = 0; g < n_rows; g++) {
        const Studied* m = &models[g * seeds];
        for (int h = 0; m->row.against[0] && h < n_rows; h++) {
            const Studied* other = &models[h * seeds];
            if (strcmp(other->source, m->source) == 0 && strcmp(other->row.name, m->row.against) == 0) write_gap_rows(f, models, seeds, g, h, 0, P);
        }
    }
}

// The models Table 5 studies: Table 6's transformer and diff rows, then every needle row (or
// those --needle-rows names), a row's seeds side by side (row g is models[g x seeds .. g x seeds + seeds - 1]); returns how many
static int gather_models(const Table5Options* opt, Studied* models) {
    int seeds = opt->seeds;
    Table6Options t6 = {opt->table6_recipe, opt->preset, seeds, opt->results, opt->plots, opt->overrides, opt->n_overrides};
    NeedleOptions nd = {.recipe = opt->needle_recipe, .preset = opt->needle_preset, .results = opt->results, .plots = opt->plots,
                        .overrides = opt->overrides, .n_overrides = opt->n_overrides, .seeds = seeds, .rows = opt->needle_rows};
    size_t t6_tokens = preset_tokens(opt->table6_recipe, opt->preset, table6_extra_key);
    size_t nd_tokens = preset_tokens(opt->needle_recipe, opt->needle_preset, needle_extra_key);
    static const char* const T6_ROWS[2] = {"transformer", "diff"};
    StudyModel rows[MAX_MODELS];
    table6_trained_rows(&t6, T6_ROWS, 2, rows);
    int n = 0;
    for (int i = 0; i < 2 * seeds; i++) add_model(&models[n++], "table6", opt->preset, &rows[i], t6_tokens);
    int n_needle = needle_trained_rows(&nd, rows, MAX_MODELS - n);
    for (int i = 0; i < n_needle; i++) add_model(&models[n++], "needle", opt->needle_preset, &rows[i], nd_tokens);
    return n;
}

// The statistics of every model, each recorded in the registry
static void study_models(const Table5Options* opt, Studied* models, int n) {
    Registry reg;
    char path[4200];
    registry_path(path, sizeof(path), opt->results);
    registry_open(&reg, path);
    printf("Table 5: activation outliers of %d models\n", n);
    for (int i = 0; i < n; i++) study(&models[i], &reg, opt->results);
    registry_close(&reg);
}

// results/table5_<presets>.md: the models, the pooled table beside the paper's, the ratios, the
// verdicts and the per-layer table
static void write_table(const Table5Options* opt, const Studied* models, int n, const char* presets, const Paper5* P, char* path,
                        size_t path_size) {
    int seeds = opt->seeds, n_rows = n / seeds;
    preset_path(path, path_size, opt->results, "table5", presets, ".md");
    Report rep, *f = &rep;
    report_open(f, path, 1);
    report_printf(f, "\n## Table 5: largest activation values (Table 6 preset %s, needle preset %s)\n\n", opt->preset, opt->needle_preset);
    report_printf(f, "Absolute values pooled over every layer. Attention logits: |q k^T / sqrt(d)| before the softmax at every "
               "causal position of every head and map (q1k1 and q2k2 for DIFF). Hidden states: every element of each "
               "layer's output after both residual additions. Top-k exact; the median is the lower median within a relative "
               "%.2g (docs/outliers.md). Recipe commit %s.\n\n", OUTLIER_MEDIAN_REL_ERROR, GIT_COMMIT);
    if (seeds > 1) report_printf(f, "Each value: mean ± sample standard deviation over %d seeds (one model per seed).\n\n", seeds);
    else report_printf(f, "One seed per row (one model): no seed spread is measured; `--seeds N` (make SEEDS=N) trains N.\n\n");
    for (int i = 0; i < n; i++) {
        const Studied* s = &models[i];
        report_printf(f, "- %s, seed %d: %s attention, %d layers, d_model %d, %d heads x %d, head norm %s; %zu positions of held-out "
                      "text (%d windows of %d at stride %d, %zu distinct tokens; registry run %lld; per layer in %s)\n",
                      s->label, s->row.cfg.seed, config_attention_name(&s->row.cfg.model), s->row.cfg.model.n_layer, s->row.cfg.model.d_model,
                      s->row.cfg.model.n_head, config_head_dim(&s->row.cfg.model), config_head_norm(&s->row.cfg.model) ? "on" : "off",
                      s->stats.positions, s->stats.windows, s->stats.T, s->stats.stride, s->stats.distinct, (long long)s->row.run, s->h5);
    }
    report_printf(f, "\n| Model | Activation type | Top-1 | Top-2 | Top-3 | Top-10 | Top-100 | Median |\n|---|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < OUTLIER_KINDS; k++) {
        for (int g = 0; g < n_rows; g++) {
            report_printf(f, "| %s | %s |", models[g * seeds].label, KIND_LABELS[k]);
            for (int t = 0; t <= N_TOPS; t++) spread_cell(f, &models[g * seeds], seeds, stat_of, k, -1, t, t < N_TOPS ? 2 : 3);
            report_printf(f, "\n");
        }
        for (int p = 0; p < 2; p++) {
            report_printf(f, "| paper %s (3B) | %s |", p ? "DIFF" : "Transformer", KIND_LABELS[k]);
            for (int t = 0; t <= N_TOPS; t++) report_printf(f, " %.1f |", P->v[p][k][t]);
            report_printf(f, "\n");
        }
    }
    report_printf(f, "\nTop-1 / median ratio (how far the largest value stands out):\n\n| Model | logits | hidden states |\n|---|---|---|\n");
    for (int g = 0; g < n_rows; g++) {
        report_printf(f, "| %s |", models[g * seeds].label);
        for (int k = 0; k < OUTLIER_KINDS; k++) spread_cell(f, &models[g * seeds], seeds, ratio_of, k, -1, 0, 1);
        report_printf(f, "\n");
    }
    report_printf(f, "| paper Transformer | %.1f | %.1f |\n| paper DIFF | %.1f | %.1f |\n", P->v[0][0][0] / P->v[0][0][5],
                  P->v[0][1][0] / P->v[0][1][5], P->v[1][0][0] / P->v[1][0][5], P->v[1][1][0] / P->v[1][1][5]);
    write_verdicts(f, models, n_rows, seeds, P);
    report_printf(f, "\nPer layer (Top-1 / median%s):\n\n| Model | kind |", seeds > 1 ? ", means over the seeds" : "");
    int max_L = 0;
    for (int i = 0; i < n; i++) max_L = models[i].stats.L > max_L ? models[i].stats.L : max_L;
    for (int l = 0; l < max_L; l++) report_printf(f, " layer %d |", l);
    report_printf(f, "\n|---|---|");
    for (int l = 0; l < max_L; l++) report_printf(f, "---|");
    report_printf(f, "\n");
    for (int g = 0; g < n_rows; g++) {
        const Studied* row = &models[g * seeds];
        for (int k = 0; k < OUTLIER_KINDS; k++) {
            report_printf(f, "| %s | %s |", row->label, KIND_LABELS[k]);
            for (int l = 0; l < max_L; l++) {
                if (l < row->stats.L) {
                    report_printf(f, " %.2f / %.3f |", seed_spread(row, seeds, stat_of, k, l, 0).mean,
                                  seed_spread(row, seeds, stat_of, k, l, N_TOPS).mean);
                } else {
                    report_printf(f, " |");
                }
            }
            report_printf(f, "\n");
        }
    }
    report_close(&rep);
}

// plots/table5_<presets>.png from its data file: per layer and pooled, colour by attention type
static void write_figure(const Table5Options* opt, const Studied* models, int n, const char* presets, const Paper5* P, char* png,
                         size_t png_size) {
    int seeds = opt->seeds, n_rows = n / seeds;
    char dat[4200];
    // figure data: per row, one block per kind of rows "layer top1 top10 top100 median", then
    // their seed std, with the pooled values at layer -1
    preset_path(dat, sizeof(dat), opt->results, "table5", presets, ".dat");
    DataFile dat_file;
    data_file_open(&dat_file, dat);
    FILE* g = dat_file.f;
    char names[2048] = "";
    static const int COLUMNS[4] = {0, 3, 4, N_TOPS};  // Top-1, Top-10, Top-100, median
    for (int k = 0; k < OUTLIER_KINDS; k++) {
        for (int r = 0; r < n_rows; r++) {
            const Studied* row = &models[r * seeds];
            fprintf(g, "# %s %s\n", row->label, OUTLIER_KIND_NAMES[k]);
            for (int l = -1; l < row->stats.L; l++) {
                Spread c[4];
                for (int j = 0; j < 4; j++) c[j] = seed_spread(row, seeds, stat_of, k, l, COLUMNS[j]);
                fprintf(g, "%d %.6g %.6g %.6g %.6g %.6g %.6g %.6g %.6g\n", l, c[0].mean, c[1].mean, c[2].mean, c[3].mean, c[0].std,
                        c[1].std, c[2].std, c[3].std);
            }
            fprintf(g, "\n\n");
        }
    }
    data_file_close(&dat_file);
    for (int r = 0; r < n_rows; r++) {
        snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", r ? " " : "", models[r * seeds].label);
    }
    mkdir_p(opt->plots);
    char text[4400];
    GnuplotVars vars;
    gnuplot_init(&vars);
    gnuplot_input(&vars, "data", dat);
    gnuplot_string(&vars, "names", names);
    gnuplot_number(&vars, "models", n_rows);
    gnuplot_number(&vars, "seeds", seeds);
    for (int r = 0; r < n_rows; r++) {  // colour by attention type, point by source
        char name[32];
        snprintf(name, sizeof(name), "att%d", r + 1);
        gnuplot_number(&vars, name, config_variant(&models[r * seeds].row.cfg.model)->colour);
        snprintf(name, sizeof(name), "src%d", r + 1);
        gnuplot_number(&vars, name, strcmp(models[r * seeds].source, "needle") == 0);
    }
    for (int p = 0; p < 2; p++) {  // the paper's pooled Top-1 and median, beside ours
        for (int k = 0; k < OUTLIER_KINDS; k++) {
            char name[32];
            snprintf(name, sizeof(name), "paper_top_%d_%d", p, k);
            gnuplot_number(&vars, name, P->v[p][k][0]);
            snprintf(name, sizeof(name), "paper_median_%d_%d", p, k);
            gnuplot_number(&vars, name, P->v[p][k][N_TOPS]);
        }
        char name[32];
        snprintf(name, sizeof(name), "paper_colour_%d", p);
        gnuplot_number(&vars, name, ATTN_VARIANTS[p ? ATTN_DIFF : ATTN_STANDARD].colour);
    }
    preset_path(png, png_size, opt->plots, "table5", presets, ".png");
    gnuplot_output(&vars, "out", png);
    snprintf(text, sizeof(text), "Table 5: largest activations (Table 6 preset %s, needle preset %s); %d seed%s%s", opt->preset,
             opt->needle_preset, seeds, seeds > 1 ? "s" : "", seeds > 1 ? ", means with the seed std on the pooled points" : "");
    gnuplot_string(&vars, "title_text", text);
    gnuplot("table5.gp", &vars);
}

int table5_main(const Table5Options* opt) {
    int seeds = opt->seeds;
    if (seeds < 1 || seeds > 8) die("--seeds must lie in 1..8, got %d", seeds);
    Paper5 paper = read_paper(opt->table6_recipe);  // refused before anything is trained
    Studied* models = callocCheck(MAX_MODELS, sizeof(Studied));
    int n = gather_models(opt, models);
    study_models(opt, models, n);
    // both sources' presets name the table, and the needle rows studied when not every row, in
    // the recipe's order (as the needle tasks name theirs: <preset>+row+row)
    char presets[4096], path[4200], png[4400];
    snprintf(presets, sizeof(presets), "%s_%s", opt->preset, opt->needle_preset);
    for (int i = 2 * seeds; opt->needle_rows && i < n; i += seeds) {
        snprintf(presets + strlen(presets), sizeof(presets) - strlen(presets), "+%s", models[i].row.name);
    }
    write_table(opt, models, n, presets, &paper, path, sizeof(path));
    write_figure(opt, models, n, presets, &paper, png, sizeof(png));
    printf("\nwrote %s, %s; per-layer statistics in %s/table5/\n", path, png, opt->results);
    for (int i = 0; i < n; i++) outlier_stats_free(&models[i].stats);
    free(models);
    return 0;
}
