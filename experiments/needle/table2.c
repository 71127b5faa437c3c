// Table 2: multi-needle retrieval accuracy at (N, R) = (1,1) (2,2) (4,2) (6,2), per depth
#define _GNU_SOURCE
#include "task.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../model/base/util.h"

void task_table2(Row* rows, int n_rows, int seeds, const NeedleSource* src, const Tokenizer* tok, Registry* reg,
                        const Section* preset, const NeedleOptions* opt) {
    int context = section_int(preset, "context", opt->recipe), samples = section_int(preset, "samples", opt->recipe);
    int eval_seed = section_int(preset, "eval_seed", opt->recipe), n_models = n_rows * seeds;
    Cell cells[RECIPE_SECTIONS][N_SETTINGS * N_DEPTHS];
    // the verdicts' units: each episode's queries right and asked, (setting, model, depth x samples)
    int units = N_DEPTHS * samples;
    double* right = mallocCheck((size_t)N_SETTINGS * n_models * units * sizeof(double));
    double* asked = mallocCheck((size_t)N_SETTINGS * n_models * units * sizeof(double));
    double* model_right = mallocCheck((size_t)N_SETTINGS * units * sizeof(double));
    double* model_asked = mallocCheck((size_t)N_SETTINGS * units * sizeof(double));
    for (int m = 0; m < n_models; m++) {
        for (int k = 0; k < N_SETTINGS * N_DEPTHS; k++) {
            Cell c = {context, SETTING_N[k / N_DEPTHS], SETTING_R[k / N_DEPTHS], k % N_DEPTHS, 0, 0, 0, 0};
            cells[m][k] = c;
        }
        Records rec = {0};
        run_cells(&rows[m], src, tok, cells[m], N_SETTINGS * N_DEPTHS, samples, eval_seed, &rec);
        // cell-major, so each setting's episodes are one run of units
        episode_counts(&rec, cells[m], N_SETTINGS * N_DEPTHS, samples, model_right, model_asked);
        for (int st = 0; st < N_SETTINGS; st++) {
            size_t at = ((size_t)st * n_models + m) * units;
            memcpy(right + at, model_right + (size_t)st * units, units * sizeof(double));
            memcpy(asked + at, model_asked + (size_t)st * units, units * sizeof(double));
        }
        store_records(reg, rows[m].run, "table2", &rec);
    }
    // per model: each setting's accuracy, fraction of samples all right and queries, summed over
    // the depths, and each depth's accuracy
    double acc[RECIPE_SECTIONS][N_SETTINGS], all[RECIPE_SECTIONS][N_SETTINGS], depth_acc[RECIPE_SECTIONS][N_SETTINGS][N_DEPTHS];
    int queries[RECIPE_SECTIONS][N_SETTINGS];
    for (int m = 0; m < n_models; m++) {
        for (int st = 0; st < N_SETTINGS; st++) {
            int right = 0, asked = 0, all_right = 0, episodes = 0;
            for (int d = 0; d < N_DEPTHS; d++) {
                const Cell* c = &cells[m][st * N_DEPTHS + d];
                right += c->correct;
                asked += c->queries;
                all_right += c->all_correct;
                episodes += c->samples;
                depth_acc[m][st][d] = (double)c->correct / c->queries;
            }
            acc[m][st] = (double)right / asked;
            all[m][st] = (double)all_right / episodes;
            queries[m][st] = asked;
        }
    }
    // per row: the spread over its seeds; with one seed the error bar is the binomial standard error
    Spread acc_s[RECIPE_SECTIONS][N_SETTINGS], all_s[RECIPE_SECTIONS][N_SETTINGS];
    double err[RECIPE_SECTIONS][N_SETTINGS];
    for (int g = 0; g < n_rows; g++) {
        for (int st = 0; st < N_SETTINGS; st++) {
            acc_s[g][st] = spread_of(&acc[g * seeds][st], seeds, N_SETTINGS);
            all_s[g][st] = spread_of(&all[g * seeds][st], seeds, N_SETTINGS);
            double p = acc[g * seeds][st];
            err[g][st] = seeds > 1 ? acc_s[g][st].std : sqrt(p * (1 - p) / queries[g * seeds][st]);
        }
    }
    char dat[4200];
    preset_path(dat, sizeof(dat), opt->results, "table2", opt->preset, ".dat");
    Report rep, *f = &rep;
    open_task_report(f, "table2", 1, preset, rows, n_models, opt, samples, "## Table 2 (preset %s): multi-needle retrieval at context %d",
                     opt->preset, context);
    DataFile dat_file;
    data_file_open(&dat_file, dat);
    FILE* bars = dat_file.f;
    fprintf(bars, "# setting, then per row: accuracy, error bar, paper\n");
    report_printf(f, "Greedy decoding on a KV cache, each query after the context on its own. Accuracy = fraction of queried "
               "numbers reproduced exactly, averaged over the 5 depths; [in brackets] the fraction of samples with all R "
               "queries right. Paper: 3B models at 4K.\n\n");
    seeds_caption(f, seeds);
    if (seeds == 1) report_printf(f, "± is the binomial standard error of the one model's accuracy.\n\n");
    report_printf(f, "| Model | N=1, R=1 | N=2, R=2 | N=4, R=2 | N=6, R=2 |\n|---|---|---|---|---|\n");
    for (int g = 0; g < n_rows; g++) {
        report_printf(f, "| %s |", rows[g * seeds].name);
        for (int st = 0; st < N_SETTINGS; st++) {
            report_printf(f, " %.2f ± %.2f [%.2f] |", acc_s[g][st].mean, err[g][st], all_s[g][st].mean);
        }
        report_printf(f, "\n");
    }
    for (int p = 0; p < 2; p++) {
        report_printf(f, "| paper %s |", p ? "DIFF" : "Transformer");
        for (int st = 0; st < N_SETTINGS; st++) report_printf(f, " %.2f |", PAPER_TABLE2[p][st]);
        report_printf(f, "\n");
    }
    int base = paper_group(rows, n_rows, seeds, 0), diff = paper_group(rows, n_rows, seeds, 1);
    if (base >= 0 && diff >= 0) {
        report_printf(f, "\nDIFF (%s) minus Transformer (%s), against the paper's gap:\n\n| setting | gap (ours) | 95%% interval | "
                      "paper gap | verdict |\n|---|---|---|---|---|\n", rows[diff * seeds].name, rows[base * seeds].name);
        for (int st = 0; st < N_SETTINGS; st++) {
            size_t at_diff = ((size_t)st * n_models + diff * seeds) * units, at_base = ((size_t)st * n_models + base * seeds) * units;
            Paired p = {seeds, units, right + at_diff, asked + at_diff, right + at_base, asked + at_base};
            GapInterval g = paired_gap(&p);
            double paper_gap = PAPER_TABLE2[1][st] - PAPER_TABLE2[0][st];
            int retrieves = acc_s[diff][st].mean > 0 || acc_s[base][st].mean > 0;
            char interval[64];
            report_printf(f, "| N=%d, R=%d | %+.2f | %s | %+.2f | %s |\n", SETTING_N[st], SETTING_R[st], g.gap,
                          interval_text(interval, sizeof(interval), g, 2), paper_gap,
                          retrieval_verdict(g, paper_gap, retrieves));
        }
        report_printf(f, "\n%s Where no model of either row answers a query right there is no verdict (models that retrieve "
                      "nothing agree exactly, which says nothing about the paper's gap).\n", interval_note(seeds, "episodes"));
    }
    report_printf(f, "\nPer depth (accuracy of the queried numbers%s):\n\n| Model | N, R |", seeds > 1 ? ", mean over the seeds" : "");
    for (int d = 0; d < N_DEPTHS; d++) report_printf(f, " %.0f%% |", 100 * DEPTHS[d]);
    report_printf(f, "\n|---|---|---|---|---|---|---|\n");
    for (int g = 0; g < n_rows; g++) {
        for (int st = 0; st < N_SETTINGS; st++) {
            report_printf(f, "| %s | %d, %d |", rows[g * seeds].name, SETTING_N[st], SETTING_R[st]);
            for (int d = 0; d < N_DEPTHS; d++) {
                report_printf(f, " %.2f |", spread_of(&depth_acc[g * seeds][st][d], seeds, N_SETTINGS * N_DEPTHS).mean);
            }
            report_printf(f, "\n");
        }
    }
    if (seeds > 1) {
        report_printf(f, "\nEach seed's accuracy:\n\n| Model | seed | N=1, R=1 | N=2, R=2 | N=4, R=2 | N=6, R=2 |\n|---|---|---|---|---|---|\n");
        for (int m = 0; m < n_models; m++) {
            report_printf(f, "| %s | %d |", rows[m].name, rows[m].cfg.seed);
            for (int st = 0; st < N_SETTINGS; st++) report_printf(f, " %.2f |", acc[m][st]);
            report_printf(f, "\n");
        }
    }
    for (int st = 0; st < N_SETTINGS; st++) {
        fprintf(bars, "\"N=%d, R=%d\"", SETTING_N[st], SETTING_R[st]);
        for (int g = 0; g < n_rows; g++) {
            fprintf(bars, " %.4f %.4f %.2f", acc_s[g][st].mean, err[g][st], PAPER_TABLE2[paper_row(&rows[g * seeds])][st]);
        }
        fprintf(bars, "\n");
    }
    data_file_close(&dat_file);
    report_close(&rep);
    char text[4400], names[512] = "";
    for (int g = 0; g < n_rows; g++) snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", g ? " " : "", rows[g * seeds].name);
    GnuplotVars vars;
    gnuplot_init(&vars);
    gnuplot_input(&vars, "data", dat);
    gnuplot_string(&vars, "names", names);
    attention_numbers(&vars, rows, n_rows, seeds);
    char png[4400];
    preset_path(png, sizeof(png), opt->plots, "table2", opt->preset, ".png");
    gnuplot_output(&vars, "out", png);
    snprintf(text, sizeof(text), "Table 2, preset %s: retrieval at context %d, %d samples per depth, %d seed%s", opt->preset, context,
             samples, seeds, seeds > 1 ? "s" : "");
    gnuplot_string(&vars, "title_text", text);
    if (seeds > 1) snprintf(text, sizeof(text), "accuracy of the queried numbers (mean of %d seeds; error bars: seed std)", seeds);
    else snprintf(text, sizeof(text), "accuracy of the queried numbers (1 seed; error bars: binomial standard error)");
    gnuplot_string(&vars, "error_text", text);
    gnuplot("table2.gp", &vars);
    printf("\nwrote %s, %s; every query in table 'episodes' of %s/registry.sqlite\n", rep.path, png, opt->results);
    free(right);
    free(asked);
    free(model_right);
    free(model_asked);
}
