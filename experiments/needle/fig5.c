// Figure 5: N = 8, R = 1 retrieval across the preset's context lengths, a depth x length heatmap per row
#define _GNU_SOURCE
#include "task.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../model/base/util.h"

// DIFF minus Transformer in accuracy averaged over the depths, at each length, paired on the
// episodes; right and asked as task_fig5 lays them out
static void write_verdicts(Report* md, const Row* rows, int n_rows, int seeds, const int* lengths, int n_lengths, int units,
                           const double* right, const double* asked) {
    int base = paper_group(rows, n_rows, seeds, 0), diff = paper_group(rows, n_rows, seeds, 1);
    if (base < 0 || diff < 0) return;
    size_t per_seed = (size_t)n_lengths * units;
    double* pick[4];  // DIFF's right and asked, then the Transformer's, for one length: (seeds, units)
    for (int k = 0; k < 4; k++) pick[k] = mallocCheck((size_t)seeds * units * sizeof(double));
    report_printf(md, "DIFF (%s) minus Transformer (%s) in accuracy averaged over the depths; the paper has DIFF ahead at "
                  "every length (its 3B models from 8K to 64K):\n\n| context | gap (ours) | 95%% interval | verdict |\n|---|---|---|---|\n",
                  rows[diff * seeds].name, rows[base * seeds].name);
    for (int l = 0; l < n_lengths; l++) {
        for (int s = 0; s < seeds; s++) {
            const int model[2] = {diff * seeds + s, base * seeds + s};
            for (int r = 0; r < 2; r++) {
                size_t at = model[r] * per_seed + (size_t)l * units;
                memcpy(pick[2 * r] + (size_t)s * units, right + at, units * sizeof(double));
                memcpy(pick[2 * r + 1] + (size_t)s * units, asked + at, units * sizeof(double));
            }
        }
        Paired p = {seeds, units, pick[0], pick[1], pick[2], pick[3]};
        GapInterval g = paired_gap(&p);
        int retrieves = 0;
        for (size_t i = 0; i < (size_t)seeds * units; i++) retrieves |= pick[0][i] > 0 || pick[2][i] > 0;
        char interval[64];
        report_printf(md, "| %d | %+.2f | %s | %s |\n", lengths[l], g.gap, interval_text(interval, sizeof(interval), g, 2),
                      retrieval_verdict(g, PAPER_DIFF_AHEAD, retrieves));
    }
    report_printf(md, "\n%s\n\n", interval_note(seeds, "episodes"));
    for (int k = 0; k < 4; k++) free(pick[k]);
}

void task_fig5(Row* rows, int n_rows, int seeds, const NeedleSource* src, const Tokenizer* tok, Registry* reg,
                      const Section* preset, const NeedleOptions* opt) {
    int samples = section_int(preset, "fig5_samples", opt->recipe), eval_seed = section_int(preset, "eval_seed", opt->recipe);
    const char* list = section_get(preset, "lengths");
    if (!list) die("%s: [preset %s] needs 'lengths'", opt->recipe, preset->name);
    int lengths[MAX_LENGTHS], n_lengths = 0;
    char copy[CONFIG_STR];
    snprintf(copy, sizeof(copy), "%s", list);
    for (char* t = strtok(copy, " "); t; t = strtok(NULL, " ")) {
        if (n_lengths == MAX_LENGTHS || atoi(t) <= 0) die("%s: [preset %s] 'lengths' must be up to %d positive integers", opt->recipe, preset->name, MAX_LENGTHS);
        lengths[n_lengths++] = atoi(t);
    }
    // acc[model][length][depth], the last depth the average over the depths, as in the paper's figure
    int n_models = n_rows * seeds;
    double (*acc)[MAX_LENGTHS][N_DEPTHS + 1] = callocCheck(n_models, sizeof(*acc));
    // the verdicts' units: each episode's queries right and asked, (model, length x depth x samples)
    int units = N_DEPTHS * samples;
    double* right = mallocCheck((size_t)n_models * n_lengths * units * sizeof(double));
    double* asked = mallocCheck((size_t)n_models * n_lengths * units * sizeof(double));
    for (int m = 0; m < n_models; m++) {
        Cell cells[MAX_LENGTHS * N_DEPTHS];
        for (int k = 0; k < n_lengths * N_DEPTHS; k++) {
            Cell c = {lengths[k / N_DEPTHS], 8, 1, k % N_DEPTHS, 0, 0, 0, 0};
            cells[k] = c;
        }
        Records rec = {0};
        run_cells(&rows[m], src, tok, cells, n_lengths * N_DEPTHS, samples, eval_seed, &rec);
        size_t at = (size_t)m * n_lengths * units;
        episode_counts(&rec, cells, n_lengths * N_DEPTHS, samples, right + at, asked + at);
        store_records(reg, rows[m].run, "fig5", &rec);  // frees the records
        for (int l = 0; l < n_lengths; l++) {
            for (int d = 0; d < N_DEPTHS; d++) {
                acc[m][l][d] = (double)cells[l * N_DEPTHS + d].correct / cells[l * N_DEPTHS + d].queries;
                acc[m][l][N_DEPTHS] += acc[m][l][d] / N_DEPTHS;
            }
        }
    }
    Report rep, *md = &rep;
    open_task_report(md, "fig5", 0, preset, rows, n_models, opt, samples, "## Figure 5 (preset %s): N = 8, R = 1 across context lengths",
                     opt->preset);
    seeds_caption(md, seeds);
    char titles[RECIPE_SECTIONS * 128] = "";
    GnuplotVars vars;
    gnuplot_init(&vars);
    for (int g = 0; g < n_rows; g++) {
        const Row* row = &rows[g * seeds];
        char dat[4200];
        path_printf(dat, sizeof(dat), "%s/fig5_%s_%s.dat", opt->results, opt->preset, row->name);
        DataFile dat_file;
        data_file_open(&dat_file, dat);
        FILE* f = dat_file.f;
        report_printf(md, "### %s (trained at context %d)\n\n| depth |", row->name, row->cfg.model.seq_len);
        for (int l = 0; l < n_lengths; l++) report_printf(md, " %d |", lengths[l]);
        report_printf(md, "\n|---|");
        for (int l = 0; l < n_lengths; l++) report_printf(md, "---|");
        report_printf(md, "\n");
        // rows: depths then the average (y = 0 is the top row)
        for (int d = 0; d <= N_DEPTHS; d++) {
            report_printf(md, d < N_DEPTHS ? "| %.0f%% |" : "| average |", 100 * (d < N_DEPTHS ? DEPTHS[d] : 0));
            for (int l = 0; l < n_lengths; l++) {
                Spread cell = spread_of(&acc[g * seeds][l][d], seeds, MAX_LENGTHS * (N_DEPTHS + 1));
                char text[48];
                report_printf(md, " %s |", spread_text(text, sizeof(text), cell, seeds, 2));
                fprintf(f, "%d %d %.4f %.4f\n", l, d, cell.mean, cell.std);
            }
            report_printf(md, "\n");
            fprintf(f, "\n");
        }
        report_printf(md, "\n");
        data_file_close(&dat_file);
        char name[32];
        snprintf(name, sizeof(name), "model%d", g + 1);
        gnuplot_input(&vars, name, dat);
        snprintf(titles + strlen(titles), sizeof(titles) - strlen(titles), "%s%s", g ? " " : "", row->name);
    }
    free(acc);
    write_verdicts(md, rows, n_rows, seeds, lengths, n_lengths, units, right, asked);
    free(right);
    free(asked);
    // the models side by side on one colour scale
    char text[4400];
    gnuplot_number(&vars, "n", n_rows);
    gnuplot_number(&vars, "seeds", seeds);
    gnuplot_number(&vars, "n_lengths", n_lengths);
    for (int l = 0; l < n_lengths; l++) {
        char name[32];
        snprintf(name, sizeof(name), "length%d", l + 1);
        gnuplot_number(&vars, name, lengths[l]);
    }
    gnuplot_string(&vars, "titles", titles);
    char png[4400];
    preset_path(png, sizeof(png), opt->plots, "fig5", opt->preset, ".png");
    gnuplot_output(&vars, "out", png);
    if (seeds > 1) {
        snprintf(text, sizeof(text), "Figure 5, preset %s: N = 8, R = 1, %d samples per cell; models trained at %d tokens; "
                 "mean ± std over %d seeds", opt->preset, samples, rows[0].cfg.model.seq_len, seeds);
    } else {
        snprintf(text, sizeof(text), "Figure 5, preset %s: N = 8, R = 1, %d samples per cell; models trained at %d tokens; 1 seed",
                 opt->preset, samples, rows[0].cfg.model.seq_len);
    }
    gnuplot_string(&vars, "title_text", text);
    gnuplot("fig5.gp", &vars);
    printf("wrote %s\n", png);
    report_close(md);
    printf("wrote %s\n", rep.path);
}
