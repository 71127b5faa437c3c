// Table 3 and Figure 1: attention allocation of the question to the answer needle and to the noise, and maps saved
#define _GNU_SOURCE
#include "task.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../eval/attnmap.h"
#include "../../base/util.h"
#include "../verdict.h"

// The per-episode shares the verdicts read: answer and noise of rows summing to 1, then the
// same over each row's absolute weight (bounded whatever lambda)
#define SHARES 4
static const char* const SHARE_NAMES[SHARES] = {"answer", "noise", "answer / sum \\|w\\|", "noise / sum \\|w\\|"};
static double share_of(const Allocation* a, int k) {
    const double v[SHARES] = {a->answer, a->noise, a->answer_abs, a->noise_abs};
    return v[k];
}

// Table 3's numbers: per model the mean shares at each depth, per episode the shares (the
// verdicts' units), and per row their spreads over seeds
typedef struct {
    TaskModels m;
    const NeedlePaper* paper;  // the paper's attention to the answer and to the noise per depth
    int units;      // episodes per model: N_DEPTHS x N_SETTINGS x samples
    double* shares; // (SHARES, n_models, units): each share per episode
    Allocation by_depth[RECIPE_SECTIONS][N_DEPTHS];  // (n_models, N_DEPTHS)
    Spread depth_shares[SHARES][RECIPE_SECTIONS][N_DEPTHS];  // (SHARES, n_rows, N_DEPTHS)
    Spread overall[RECIPE_SECTIONS][4];  // (n_rows, answer noise question BOS): Figure 1, means over depths
    Allocation** heads;  // (n_models) each model's (L, H): every head's mean over all its episodes
} Table3;

// The noise metrics per head, as the registry keys them (table3_<key>_lLL_hHH, from 1) and the
// report names them
#define NOISE_METRICS 7
static const char* const NOISE_KEYS[NOISE_METRICS] = {"sink", "entropy", "negative", "answer", "noise", "answer_abs", "noise_abs"};
static double noise_metric(const Allocation* a, int k) {
    const double v[NOISE_METRICS] = {a->bos, a->entropy, a->negative, a->answer, a->noise, a->answer_abs, a->noise_abs};
    return v[k];
}

// Model i's per-head metrics, each head's mean over the episodes, into the registry
static void store_heads(const Table3* t, int i, Registry* reg) {
    const Row* row = &t->m.rows[i];
    int L = row->model.L, H = row->model.H;
    for (int l = 0; l < L; l++) {
        for (int h = 0; h < H; h++) {
            for (int k = 0; k < NOISE_METRICS; k++) {
                char key[64];
                snprintf(key, sizeof(key), "table3_%s_l%02d_h%02d", NOISE_KEYS[k], l + 1, h + 1);
                registry_evaluation(reg, row->study.run, key, noise_metric(&t->heads[i][l * H + h], k));
            }
        }
    }
}

// Model i's allocation over every depth, setting and sample, stored in the registry; the maps
// of the first samples of the most distracting setting go to HDF5 on the row's first seed
static void measure_model(Table3* t, int i, const NeedleSource* src, const Tokenizer* tok, Registry* reg, const Section* preset,
                          const NeedleOptions* opt, int eval_seed) {
    Row* row = &t->m.rows[i];
    int context = t->m.context, samples = t->m.samples;
    // the other seeds' maps would repeat the first's for another model
    int keep_maps = row->study.seed_index == 0 ? section_int(preset, "maps", opt->recipe) : 0;
    char maps_path[4200];
    path_printf(maps_path, sizeof(maps_path), "%s/needle/%s/maps_%s.h5", opt->results, opt->preset, row->study.name);
    MapsFile maps;
    if (keep_maps) maps_file_create(&maps, maps_path, &row->model, row->study.checkpoint);
    int heads = row->model.L * row->model.H;
    Allocation* per_head = mallocCheck((size_t)heads * sizeof(Allocation));
    t->heads[i] = callocCheck(heads, sizeof(Allocation));
    Records rec = {0};
    double t0 = wall_time();
    for (int d = 0; d < N_DEPTHS; d++) {
        Allocation sum = {0};
        for (int s = 0; s < N_SETTINGS; s++) {
            for (int k = 0; k < samples; k++) {
                uint64_t seed = episode_seed(eval_seed, context, SETTING_N[s], SETTING_R[s], d, k);
                Episode e;
                episode_make(&e, src, context, SETTING_N[s], SETTING_R[s], DEPTHS[d], 0, seed);
                ensure_cache(&row->model, &e);
                int save = s == N_SETTINGS - 1 && k < keep_maps;
                int all_rows = save ? maps_file_sample(&maps, &e, tok, context, seed) : 0;
                Allocation a = episode_allocation(&row->model, &e, all_rows, per_head, save ? maps_file_head : NULL, &maps);
                allocation_add(&sum, &a);
                for (int j = 0; j < heads; j++) allocation_add(&t->heads[i][j], &per_head[j]);
                size_t u = (size_t)i * t->units + ((size_t)d * N_SETTINGS + s) * samples + k;
                for (int q = 0; q < SHARES; q++) t->shares[(size_t)q * t->m.n_models * t->units + u] = share_of(&a, q);
                EpisodeRecord* r = add_record(&rec);
                r->length = context;
                r->n_needles = SETTING_N[s];
                r->n_queries = SETTING_R[s];
                r->depth = DEPTHS[d];
                r->sample = k;
                r->seed = seed;
                r->city = src->cities[e.city[0]];
                r->number = e.number[0];
                r->correct = -1;
                rec.output[rec.n - 1][0] = 0;
                r->answer = a.answer; r->noise = a.noise; r->question = a.question; r->bos = a.bos;
                episode_free(&e);
            }
        }
        double n = N_SETTINGS * samples;
        Allocation mean = allocation_divide(sum, n);
        t->by_depth[i][d] = mean;
        printf("  %-10s depth %3.0f%%: answer %.3f  noise %.3f  question %.3f  BOS %.3f (%.0f s)\n", row->study.name, 100 * DEPTHS[d],
               mean.answer, mean.noise, mean.question, mean.bos, wall_time() - t0);
        fflush(stdout);
    }
    store_records(reg, row->study.run, "table3", &rec);
    for (int j = 0; j < heads; j++) t->heads[i][j] = allocation_divide(t->heads[i][j], (double)N_DEPTHS * N_SETTINGS * samples);
    store_heads(t, i, reg);
    free(per_head);
    if (keep_maps) {
        maps_file_close(&maps);
        registry_artifact(reg, row->study.run, "attention_maps", maps_path);
        printf("  attention maps of %d episodes in %s\n", maps.n_samples, maps_path);
    }
}

// Per row: the spread over its seeds of each depth's shares and of Figure 1's means over depths
static void spread_over_seeds(Table3* t) {
    int seeds = t->m.seeds;
    for (int g = 0; g < t->m.n_rows; g++) {
        double parts[RECIPE_SECTIONS][4] = {{0}};
        for (int s = 0; s < seeds; s++) {
            for (int d = 0; d < N_DEPTHS; d++) {
                const Allocation* a = &t->by_depth[g * seeds + s][d];
                parts[s][0] += a->answer / N_DEPTHS;
                parts[s][1] += a->noise / N_DEPTHS;
                parts[s][2] += a->question / N_DEPTHS;
                parts[s][3] += a->bos / N_DEPTHS;
            }
        }
        for (int k = 0; k < 4; k++) t->overall[g][k] = spread_of(&parts[0][k], seeds, 4);
        for (int d = 0; d < N_DEPTHS; d++) {
            for (int q = 0; q < SHARES; q++) {
                double v[RECIPE_SECTIONS];
                for (int s = 0; s < seeds; s++) v[s] = share_of(&t->by_depth[g * seeds + s][d], q);
                t->depth_shares[q][g][d] = spread_of(v, seeds, 1);
            }
        }
    }
}

// Row group a minus row group b in share k, paired on the episodes: at depth d, or over every
// depth (d = N_DEPTHS, the mean over depths: each depth has as many episodes)
static GapInterval share_gap(const Table3* t, int a, int b, int k, int d, double* pick[2]) {
    int seeds = t->m.seeds, units = t->units, per_depth = units / N_DEPTHS;
    int first = d == N_DEPTHS ? 0 : d * per_depth, count = d == N_DEPTHS ? units : per_depth;
    const double* share = t->shares + (size_t)k * t->m.n_models * units;
    for (int s = 0; s < seeds; s++) {
        memcpy(pick[0] + (size_t)s * count, share + ((size_t)a * seeds + s) * units + first, count * sizeof(double));
        memcpy(pick[1] + (size_t)s * count, share + ((size_t)b * seeds + s) * units + first, count * sizeof(double));
    }
    Paired p = {seeds, count, pick[0], NULL, pick[1], NULL};
    return paired_gap(&p);
}

// DIFF minus the Transformer in each share, per depth (one family of N_DEPTHS cells per share)
// and mean over depths, paired on the episodes, against the paper's gap; then each row not in
// the paper minus the row it is read against
static void write_verdicts(Report* f, const Table3* t) {
    int seeds = t->m.seeds, units = t->units;
    double* pick[2];  // row a's shares, then row b's, at a depth or over all: (seeds, units)
    for (int k = 0; k < 2; k++) pick[k] = mallocCheck((size_t)seeds * units * sizeof(double));
    const Row* rows = t->m.rows;
    Comparison c[RECIPE_SECTIONS + 1];
    int n = task_comparisons(rows, t->m.n_rows, seeds, c);
    for (int i = 0; i < n; i++) {
        char caption[512];
        snprintf(caption, sizeof(caption), "DIFF (%s) minus Transformer (%s), mean over depths, against the paper's gap:",
                 rows[c[i].a * seeds].study.name, rows[c[i].b * seeds].study.name);
        comparison_heading(f, c, i, caption, "share | depth | paper gap | " GAP_HEADER, "per depth and mean over depths",
                           "share | depth | " GAP_HEADER);
        // the paper's normalisation is unpublished: both readings are set against its gap
        for (int k = 0; k < SHARES; k++) {
            double paper_gap[N_DEPTHS + 1];
            int noise = k % 2;
            const double* paper = noise ? t->paper->noise[0] : t->paper->answer[0];
            const double* paper_diff = noise ? t->paper->noise[1] : t->paper->answer[1];
            paper_gap[N_DEPTHS] = 0;
            for (int d = 0; d < N_DEPTHS; d++) {
                paper_gap[d] = c[i].paper ? paper_diff[d] - paper[d] : NAN;
                paper_gap[N_DEPTHS] += paper_gap[d] / N_DEPTHS;
            }
            GapInterval g[N_DEPTHS + 1];
            for (int d = 0; d <= N_DEPTHS; d++) g[d] = share_gap(t, c[i].a, c[i].b, k, d, pick);
            verdict_holm(g, N_DEPTHS);  // the depths are the family; their mean is a test of its own
            for (int d = 0; d <= N_DEPTHS; d++) {
                char cells[1024], depth[32];
                if (d < N_DEPTHS) snprintf(depth, sizeof(depth), "%.0f%%", 100 * DEPTHS[d]);
                else snprintf(depth, sizeof(depth), "mean");
                comparison_row(f, rows, seeds, c[i]);
                report_printf(f, "| %s | %s |", SHARE_NAMES[k], depth);
                if (c[i].paper) report_printf(f, " %+.3f |", paper_gap[d]);
                report_printf(f, "%s\n", gap_cells(cells, sizeof(cells), &g[d], paper_gap[d], 0, 3));
            }
        }
    }
    char family[256];
    if (n) report_printf(f, "\n%s %s The mean over depths is tested on its own.\n", interval_note(seeds, "episodes"),
                         family_note(family, sizeof(family), N_DEPTHS, "depths of a share"));
    for (int k = 0; k < 2; k++) free(pick[k]);
}

// Row g's noise metric k in layer l: the mean over the layer's heads, spread over the row's seeds
static Spread layer_spread(const Table3* t, int g, int l, int k) {
    int seeds = t->m.seeds, H = t->m.rows[g * seeds].model.H;
    double* v = mallocCheck((size_t)seeds * sizeof(double));
    for (int s = 0; s < seeds; s++) {
        v[s] = 0;
        for (int h = 0; h < H; h++) v[s] += noise_metric(&t->heads[g * seeds + s][l * H + h], k) / H;
    }
    Spread out = spread_of(v, seeds, 1);
    free(v);
    return out;
}

static void write_noise_table(Report* f, const Table3* t) {
    int seeds = t->m.seeds;
    char cell[48];
    report_printf(f, "\nAttention noise per layer: each head's question rows (normalised as above), averaged over the episodes, "
                  "then over the layer's heads. Sink: the weight on BOS; entropy: -sum p ln p in nats of p = |w| / sum |w| "
                  "(a row spread evenly over n positions has ln n); negative: the weight below zero (DIFF's subtraction; 0 for "
                  "softmax); answer and noise as above, and over sum |w|. Each head's values are in the registry (evaluations "
                  "table3_<metric>_lLL_hHH; answer_abs and noise_abs over sum |w|).\n\n"
                  "| Model | layer | sink | entropy | negative | answer | noise | answer / sum \\|w\\| | noise / sum \\|w\\| |\n"
                  "|---|---|---|---|---|---|---|---|---|\n");
    for (int g = 0; g < t->m.n_rows; g++) {
        for (int l = 0; l < t->m.rows[g * seeds].model.L; l++) {
            report_printf(f, "| %s | %d |", t->m.rows[g * seeds].study.name, l + 1);
            for (int k = 0; k < NOISE_METRICS; k++) report_printf(f, " %s |", spread_text(cell, sizeof(cell), layer_spread(t, g, l, k), seeds, 3));
            report_printf(f, "\n");
        }
    }
}

static void write_table(const Table3* t, const Section* preset, const NeedleOptions* opt, char* md, size_t md_size) {
    int seeds = t->m.seeds, n_rows = t->m.n_rows;
    char cell[48];
    Report rep, *f = &rep;
    open_task_report(f, "table3", 1, preset, t->m.rows, t->m.n_models, opt, t->m.samples * N_SETTINGS,
                     "## Table 3 (preset %s): attention of the question to the answer needle and to the noise, context %d",
                     opt->preset, t->m.context);
    report_printf(f, "Rows of question 0's tokens attending over the prompt, averaged over those rows, every layer and head, "
               "and Table 2's episodes (all four (N, R) settings). Each row is normalised to sum to 1: softmax rows as they "
               "are, DIFF rows A1 - lambda A2 divided by 1 - lambda. Answer = the answer needle's tokens; noise = every "
               "other context token after BOS, distractor needles included; the rest goes to BOS and the question itself.\n\n");
    seeds_caption(f, seeds);
    report_printf(f, "| Model | answer 0%% | 25%% | 50%% | 75%% | 100%% | noise 0%% | 25%% | 50%% | 75%% | 100%% |\n");
    report_printf(f, "|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int g = 0; g < n_rows; g++) {
        report_printf(f, "| %s |", t->m.rows[g * seeds].study.name);
        for (int d = 0; d < N_DEPTHS; d++) report_printf(f, " %s |", spread_text(cell, sizeof(cell), t->depth_shares[0][g][d], seeds, 3));
        for (int d = 0; d < N_DEPTHS; d++) report_printf(f, " %s |", spread_text(cell, sizeof(cell), t->depth_shares[1][g][d], seeds, 3));
        report_printf(f, "\n");
    }
    for (int p = 0; p < 2; p++) {
        report_printf(f, "| paper %s |", p ? "DIFF" : "Transformer");
        for (int d = 0; d < N_DEPTHS; d++) report_printf(f, " %.2f |", t->paper->answer[p][d]);
        for (int d = 0; d < N_DEPTHS; d++) report_printf(f, " %.2f |", t->paper->noise[p][d]);
        report_printf(f, "\n");
    }
    report_printf(f, "\nThe same weights over each row's absolute weight sum |w| instead of its sum: bounded by 1 whatever "
                  "lambda, where 1 / (1 - lambda) magnifies a layer whose lambda nears 1 without bound; softmax rows as above "
                  "(docs/needle.md).\n\n| Model | answer / sum \\|w\\| 0%% | 25%% | 50%% | 75%% | 100%% | noise / sum \\|w\\| 0%% "
                  "| 25%% | 50%% | 75%% | 100%% |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int g = 0; g < n_rows; g++) {
        report_printf(f, "| %s |", t->m.rows[g * seeds].study.name);
        for (int q = 2; q < SHARES; q++) {
            for (int d = 0; d < N_DEPTHS; d++) report_printf(f, " %s |", spread_text(cell, sizeof(cell), t->depth_shares[q][g][d], seeds, 3));
        }
        report_printf(f, "\n");
    }
    report_printf(f, "\nFigure 1 breakdown (mean over depths):\n\n| Model | answer | noise | question | BOS |\n|---|---|---|---|---|\n");
    for (int g = 0; g < n_rows; g++) {
        report_printf(f, "| %s |", t->m.rows[g * seeds].study.name);
        for (int k = 0; k < 4; k++) report_printf(f, " %s |", spread_text(cell, sizeof(cell), t->overall[g][k], seeds, 3));
        report_printf(f, "\n");
    }
    write_noise_table(f, t);
    write_verdicts(f, t);
    report_close(&rep);
    snprintf(md, md_size, "%s", rep.path);
}

// Table 3's bars and Figure 1's breakdown: their data files and one gnuplot script for both
static void write_figures(const Table3* t, const NeedleOptions* opt, const char* md) {
    int seeds = t->m.seeds, n_rows = t->m.n_rows;
    const Row* rows = t->m.rows;
    char dat[4200], fig1[4200];
    needle_output_path(dat, sizeof(dat), opt, opt->results, "table3", ".dat");
    needle_output_path(fig1, sizeof(fig1), opt, opt->results, "fig1", ".dat");
    DataFile t3, g1;
    data_file_open(&t3, dat);
    data_file_open(&g1, fig1);
    for (int d = 0; d < N_DEPTHS; d++) {
        fprintf(t3.f, "\"%.0f%%\"", 100 * DEPTHS[d]);
        for (int g = 0; g < n_rows; g++) {
            int p = paper_row(&rows[g * seeds]);
            fprintf(t3.f, " %.4f %.4f %.2f %.2f %.4f %.4f", t->depth_shares[0][g][d].mean, t->depth_shares[1][g][d].mean,
                    paper_value(t->paper->answer[0][d], t->paper->answer[1][d], p), paper_value(t->paper->noise[0][d], t->paper->noise[1][d], p),
                    t->depth_shares[0][g][d].std, t->depth_shares[1][g][d].std);
        }
        fprintf(t3.f, "\n");
    }
    for (int g = 0; g < n_rows; g++) {
        const Spread* o = t->overall[g];
        fprintf(g1.f, "\"%s\" %.4f %.4f %.4f %.4f\n", rows[g * seeds].study.name, o[0].mean, o[1].mean, o[2].mean, o[3].mean);
    }
    data_file_close(&t3);
    data_file_close(&g1);
    char text[4400];
    GnuplotVars vars;
    gnuplot_init(&vars);
    gnuplot_input(&vars, "data", dat);
    gnuplot_input(&vars, "fig1", fig1);
    attention_numbers(&vars, rows, n_rows, seeds);
    gnuplot_number(&vars, "seeds", seeds);
    char png[4400], fig1_png[4400];
    needle_output_path(png, sizeof(png), opt, opt->plots, "table3", ".png");
    gnuplot_output(&vars, "out", png);
    needle_output_path(fig1_png, sizeof(fig1_png), opt, opt->plots, "fig1", ".png");
    gnuplot_output(&vars, "out_fig1", fig1_png);
    snprintf(text, sizeof(text), "Table 3, preset %s: attention of the question tokens, context %d, %d seed%s%s", opt->preset, t->m.context,
             seeds, seeds > 1 ? "s" : "", seeds > 1 ? " (error bars: seed std)" : "");
    gnuplot_string(&vars, "title_text", text);
    snprintf(text, sizeof(text), "Figure 1, preset %s, context %d: where the question's attention goes (mean over depths%s, rows "
             "normalised to 1)", opt->preset, t->m.context, seeds > 1 ? " and seeds" : "");
    gnuplot_string(&vars, "fig1_title", text);
    gnuplot("table3.gp", &vars);
    printf("\nwrote %s, %s, %s\n", md, png, fig1_png);
}

// The noise metrics per layer, a line per row (means over seeds), drawn by noise.gp
static void write_noise_figure(const Table3* t, const NeedleOptions* opt) {
    int seeds = t->m.seeds;
    char dat[4200], png[4400], text[4400];
    needle_output_path(dat, sizeof(dat), opt, opt->results, "table3_noise", ".dat");
    DataFile file;
    data_file_open(&file, dat);
    for (int g = 0; g < t->m.n_rows; g++) {
        fprintf(file.f, "\"%s\"\n", t->m.rows[g * seeds].study.name);
        for (int l = 0; l < t->m.rows[g * seeds].model.L; l++) {
            fprintf(file.f, "%d", l + 1);
            for (int k = 0; k < NOISE_METRICS; k++) fprintf(file.f, " %.6f", layer_spread(t, g, l, k).mean);
            fprintf(file.f, "\n");
        }
        fprintf(file.f, "\n\n");
    }
    data_file_close(&file);
    GnuplotVars vars;
    gnuplot_init(&vars);
    gnuplot_input(&vars, "data", dat);
    gnuplot_number(&vars, "rows", t->m.n_rows);
    attention_numbers(&vars, t->m.rows, t->m.n_rows, seeds);
    needle_output_path(png, sizeof(png), opt, opt->plots, "table3_noise", ".png");
    gnuplot_output(&vars, "out", png);
    snprintf(text, sizeof(text), "Attention noise per layer, preset %s, context %d: the question's rows, mean over heads and "
             "episodes%s", opt->preset, t->m.context, seeds > 1 ? " and seeds" : "");
    gnuplot_string(&vars, "title_text", text);
    gnuplot("noise.gp", &vars);
    printf("wrote %s\n", png);
}

void task_table3(Row* rows, int n_rows, int seeds, const NeedleSource* src, const Tokenizer* tok, Registry* reg,
                        const Section* preset, const NeedleOptions* opt, const NeedlePaper* paper) {
    Table3* t = callocCheck(1, sizeof(Table3));  // Spread and Allocation tables: too large for the stack's comfort
    t->m = task_models(rows, n_rows, seeds, preset, opt);
    t->paper = paper;
    t->units = N_DEPTHS * N_SETTINGS * t->m.samples;
    int eval_seed = section_int(preset, "eval_seed", opt->recipe);
    t->shares = mallocCheck((size_t)SHARES * t->m.n_models * t->units * sizeof(double));
    t->heads = callocCheck(t->m.n_models, sizeof(Allocation*));
    for (int i = 0; i < t->m.n_models; i++) measure_model(t, i, src, tok, reg, preset, opt, eval_seed);
    spread_over_seeds(t);
    char md[4200];
    write_table(t, preset, opt, md, sizeof(md));
    write_figures(t, opt, md);
    write_noise_figure(t, opt);
    for (int i = 0; i < t->m.n_models; i++) free(t->heads[i]);
    free(t->heads);
    free(t->shares);
    free(t);
}
