// Table 2: multi-needle retrieval accuracy at (N, R) = (1,1) (2,2) (4,2) (6,2), per depth
#define _GNU_SOURCE
#include "task.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/util.h"

// Table 2's numbers: per model each cell's counts, and the verdicts' units (each episode's
// queries right and asked); per model and per row the accuracies derived from them
typedef struct {
    TaskModels m;
    const double (*paper)[N_SETTINGS];  // (2, N_SETTINGS) the paper's accuracies, Transformer then DIFF
    int units;      // episodes per model and setting: N_DEPTHS x samples
    double* right;  // (N_SETTINGS, n_models, units)
    double* asked;  // (N_SETTINGS, n_models, units)
    Cell cells[RECIPE_SECTIONS][N_SETTINGS * N_DEPTHS];  // (n_models, setting x depth)
    // per model: each setting's accuracy, fraction of samples all right and queries, summed over
    // the depths, and each depth's accuracy
    double acc[RECIPE_SECTIONS][N_SETTINGS], all[RECIPE_SECTIONS][N_SETTINGS], depth_acc[RECIPE_SECTIONS][N_SETTINGS][N_DEPTHS];
    int queries[RECIPE_SECTIONS][N_SETTINGS];
    // per row: the spread over its seeds; with one seed the error bar is the binomial standard error
    Spread acc_s[RECIPE_SECTIONS][N_SETTINGS], all_s[RECIPE_SECTIONS][N_SETTINGS];
    double err[RECIPE_SECTIONS][N_SETTINGS];
} Table2;

// Every model's episodes, stored in the registry, counted per cell and per episode
static void measure_models(Table2* t, const NeedleSource* src, const Tokenizer* tok, Registry* reg, int eval_seed) {
    int units = t->units;
    double* model_right = mallocCheck((size_t)N_SETTINGS * units * sizeof(double));
    double* model_asked = mallocCheck((size_t)N_SETTINGS * units * sizeof(double));
    for (int m = 0; m < t->m.n_models; m++) {
        for (int k = 0; k < N_SETTINGS * N_DEPTHS; k++) {
            Cell c = {t->m.context, SETTING_N[k / N_DEPTHS], SETTING_R[k / N_DEPTHS], k % N_DEPTHS, 0, 0, 0, 0};
            t->cells[m][k] = c;
        }
        Records rec = {0};
        run_cells(&t->m.rows[m], src, tok, t->cells[m], N_SETTINGS * N_DEPTHS, t->m.samples, eval_seed, &rec);
        // cell-major, so each setting's episodes are one run of units
        episode_counts(&rec, t->cells[m], N_SETTINGS * N_DEPTHS, t->m.samples, model_right, model_asked);
        for (int st = 0; st < N_SETTINGS; st++) {
            size_t at = ((size_t)st * t->m.n_models + m) * units;
            memcpy(t->right + at, model_right + (size_t)st * units, units * sizeof(double));
            memcpy(t->asked + at, model_asked + (size_t)st * units, units * sizeof(double));
        }
        store_records(reg, t->m.rows[m].study.run, "table2", &rec);
    }
    free(model_right);
    free(model_asked);
}

static void accuracies(Table2* t) {
    int seeds = t->m.seeds;
    for (int m = 0; m < t->m.n_models; m++) {
        for (int st = 0; st < N_SETTINGS; st++) {
            int right = 0, asked = 0, all_right = 0, episodes = 0;
            for (int d = 0; d < N_DEPTHS; d++) {
                const Cell* c = &t->cells[m][st * N_DEPTHS + d];
                right += c->correct;
                asked += c->queries;
                all_right += c->all_correct;
                episodes += c->samples;
                t->depth_acc[m][st][d] = (double)c->correct / c->queries;
            }
            t->acc[m][st] = (double)right / asked;
            t->all[m][st] = (double)all_right / episodes;
            t->queries[m][st] = asked;
        }
    }
    for (int g = 0; g < t->m.n_rows; g++) {
        for (int st = 0; st < N_SETTINGS; st++) {
            t->acc_s[g][st] = spread_of(&t->acc[g * seeds][st], seeds, N_SETTINGS);
            t->all_s[g][st] = spread_of(&t->all[g * seeds][st], seeds, N_SETTINGS);
            double p = t->acc[g * seeds][st];
            t->err[g][st] = seeds > 1 ? t->acc_s[g][st].std : sqrt(p * (1 - p) / t->queries[g * seeds][st]);
        }
    }
}

// Row group a minus row group b in setting st, paired on the episodes; *retrieves: a model of
// either row answered a query right
static GapInterval setting_gap(const Table2* t, int a, int b, int st, int* retrieves) {
    int seeds = t->m.seeds, units = t->units, n_models = t->m.n_models;
    size_t at_a = ((size_t)st * n_models + a * seeds) * units, at_b = ((size_t)st * n_models + b * seeds) * units;
    Paired p = {seeds, units, t->right + at_a, t->asked + at_a, t->right + at_b, t->asked + at_b};
    *retrieves = t->acc_s[a][st].mean > 0 || t->acc_s[b][st].mean > 0;
    return paired_gap(&p);
}

// DIFF minus the Transformer per setting against the paper's gap, then each row not in the
// paper minus the row it is read against
static void write_verdicts(Report* f, const Table2* t) {
    int seeds = t->m.seeds;
    const Row* rows = t->m.rows;
    Comparison c[RECIPE_SECTIONS + 1];
    int n = task_comparisons(rows, t->m.n_rows, seeds, c);
    for (int k = 0; k < n; k++) {
        char caption[512];
        snprintf(caption, sizeof(caption), "DIFF (%s) minus Transformer (%s), against the paper's gap:", rows[c[k].a * seeds].study.name,
                 rows[c[k].b * seeds].study.name);
        comparison_heading(f, c, k, caption, "setting | paper gap | " GAP_HEADER, "in accuracy", "setting | " GAP_HEADER);
        GapInterval g[N_SETTINGS];
        int retrieves[N_SETTINGS];
        for (int st = 0; st < N_SETTINGS; st++) g[st] = setting_gap(t, c[k].a, c[k].b, st, &retrieves[st]);
        retrieval_family(g, retrieves, N_SETTINGS);
        for (int st = 0; st < N_SETTINGS; st++) {
            double paper_gap = c[k].paper ? t->paper[1][st] - t->paper[0][st] : NAN;
            char cells[1024];
            comparison_row(f, rows, seeds, c[k]);
            report_printf(f, "| N=%d, R=%d |", SETTING_N[st], SETTING_R[st]);
            if (c[k].paper) report_printf(f, " %+.2f |", paper_gap);
            report_printf(f, "%s\n", retrieval_cells(cells, sizeof(cells), &g[st], paper_gap, retrieves[st], 2));
        }
    }
    char family[256];
    if (n) report_printf(f, "\n%s %s Where no model of either row answers a query right there is no verdict (models that retrieve "
                         "nothing agree exactly, which says nothing about the paper's gap), and the cell is not tested.\n",
                         interval_note(seeds, "episodes"), family_note(family, sizeof(family), N_SETTINGS, "settings (N, R)"));
}

static void write_table(const Table2* t, const Section* preset, const NeedleOptions* opt, char* md, size_t md_size) {
    int seeds = t->m.seeds, n_rows = t->m.n_rows;
    const Row* rows = t->m.rows;
    Report rep, *f = &rep;
    open_task_report(f, "table2", 1, preset, t->m.rows, t->m.n_models, opt, t->m.samples,
                     "## Table 2 (preset %s): multi-needle retrieval at context %d", opt->preset, t->m.context);
    report_printf(f, "Greedy decoding on a KV cache, each query after the context on its own. Accuracy = fraction of queried "
               "numbers reproduced exactly, averaged over the 5 depths; [in brackets] the fraction of samples with all R "
               "queries right. Paper: 3B models at 4K.\n\n");
    seeds_caption(f, seeds);
    if (seeds == 1) report_printf(f, "± is the binomial standard error of the one model's accuracy.\n\n");
    report_printf(f, "| Model | N=1, R=1 | N=2, R=2 | N=4, R=2 | N=6, R=2 |\n|---|---|---|---|---|\n");
    for (int g = 0; g < n_rows; g++) {
        report_printf(f, "| %s |", rows[g * seeds].study.name);
        for (int st = 0; st < N_SETTINGS; st++) {
            report_printf(f, " %.2f ± %.2f [%.2f] |", t->acc_s[g][st].mean, t->err[g][st], t->all_s[g][st].mean);
        }
        report_printf(f, "\n");
    }
    for (int p = 0; p < 2; p++) {
        report_printf(f, "| paper %s |", p ? "DIFF" : "Transformer");
        for (int st = 0; st < N_SETTINGS; st++) report_printf(f, " %.2f |", t->paper[p][st]);
        report_printf(f, "\n");
    }
    write_verdicts(f, t);
    report_printf(f, "\nPer depth (accuracy of the queried numbers%s):\n\n| Model | N, R |", seeds > 1 ? ", mean over the seeds" : "");
    for (int d = 0; d < N_DEPTHS; d++) report_printf(f, " %.0f%% |", 100 * DEPTHS[d]);
    report_printf(f, "\n|---|---|---|---|---|---|---|\n");
    for (int g = 0; g < n_rows; g++) {
        for (int st = 0; st < N_SETTINGS; st++) {
            report_printf(f, "| %s | %d, %d |", rows[g * seeds].study.name, SETTING_N[st], SETTING_R[st]);
            for (int d = 0; d < N_DEPTHS; d++) {
                report_printf(f, " %.2f |", spread_of(&t->depth_acc[g * seeds][st][d], seeds, N_SETTINGS * N_DEPTHS).mean);
            }
            report_printf(f, "\n");
        }
    }
    if (seeds > 1) {
        report_printf(f, "\nEach seed's accuracy:\n\n| Model | seed | N=1, R=1 | N=2, R=2 | N=4, R=2 | N=6, R=2 |\n|---|---|---|---|---|---|\n");
        for (int m = 0; m < t->m.n_models; m++) {
            report_printf(f, "| %s | %d |", rows[m].study.name, rows[m].study.cfg.seed);
            for (int st = 0; st < N_SETTINGS; st++) report_printf(f, " %.2f |", t->acc[m][st]);
            report_printf(f, "\n");
        }
    }
    report_close(&rep);
    snprintf(md, md_size, "%s", rep.path);
}

static void write_figure(const Table2* t, const NeedleOptions* opt, const char* md) {
    int seeds = t->m.seeds, n_rows = t->m.n_rows;
    const Row* rows = t->m.rows;
    char dat[4200];
    needle_output_path(dat, sizeof(dat), opt, opt->results, "table2", ".dat");
    DataFile bars;
    data_file_open(&bars, dat);
    fprintf(bars.f, "# setting, then per row: accuracy, error bar, paper\n");
    for (int st = 0; st < N_SETTINGS; st++) {
        fprintf(bars.f, "\"N=%d, R=%d\"", SETTING_N[st], SETTING_R[st]);
        for (int g = 0; g < n_rows; g++) {
            int p = paper_row(&rows[g * seeds]);
            fprintf(bars.f, " %.4f %.4f %.2f", t->acc_s[g][st].mean, t->err[g][st], paper_value(t->paper[0][st], t->paper[1][st], p));
        }
        fprintf(bars.f, "\n");
    }
    data_file_close(&bars);
    char text[4400];
    GnuplotVars vars;
    gnuplot_init(&vars);
    gnuplot_input(&vars, "data", dat);
    attention_numbers(&vars, rows, n_rows, seeds);
    char png[4400];
    needle_output_path(png, sizeof(png), opt, opt->plots, "table2", ".png");
    gnuplot_output(&vars, "out", png);
    snprintf(text, sizeof(text), "Table 2, preset %s: retrieval at context %d, %d samples per depth, %d seed%s", opt->preset, t->m.context,
             t->m.samples, seeds, seeds > 1 ? "s" : "");
    gnuplot_string(&vars, "title_text", text);
    if (seeds > 1) snprintf(text, sizeof(text), "accuracy of the queried numbers (mean of %d seeds; error bars: seed std)", seeds);
    else snprintf(text, sizeof(text), "accuracy of the queried numbers (1 seed; error bars: binomial standard error)");
    gnuplot_string(&vars, "error_text", text);
    gnuplot("table2.gp", &vars);
    printf("\nwrote %s, %s; every query in table 'episodes' of %s/registry.sqlite\n", md, png, opt->results);
}

void task_table2(Row* rows, int n_rows, int seeds, const NeedleSource* src, const Tokenizer* tok, Registry* reg,
                        const Section* preset, const NeedleOptions* opt, const NeedlePaper* paper) {
    Table2* t = callocCheck(1, sizeof(Table2));  // its tables: too large for the stack's comfort
    t->m = task_models(rows, n_rows, seeds, preset, opt);
    t->paper = paper->table2;
    t->units = N_DEPTHS * t->m.samples;
    t->right = mallocCheck((size_t)N_SETTINGS * t->m.n_models * t->units * sizeof(double));
    t->asked = mallocCheck((size_t)N_SETTINGS * t->m.n_models * t->units * sizeof(double));
    measure_models(t, src, tok, reg, section_int(preset, "eval_seed", opt->recipe));
    accuracies(t);
    char md[4200];
    write_table(t, preset, opt, md, sizeof(md));
    write_figure(t, opt, md);
    free(t->right);
    free(t->asked);
    free(t);
}
