// Figure 5: N = 8, R = 1 retrieval across the preset's context lengths, a depth x length heatmap per row
#define _GNU_SOURCE
#include "task.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../model/base/util.h"

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
    for (int m = 0; m < n_models; m++) {
        Cell cells[MAX_LENGTHS * N_DEPTHS];
        for (int k = 0; k < n_lengths * N_DEPTHS; k++) {
            Cell c = {lengths[k / N_DEPTHS], 8, 1, k % N_DEPTHS, 0, 0, 0, 0};
            cells[k] = c;
        }
        Records rec = {0};
        run_cells(&rows[m], src, tok, cells, n_lengths * N_DEPTHS, samples, eval_seed, &rec);
        store_records(reg, rows[m].run, "fig5", &rec);
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
        FILE* f = fopenCheck(dat, "w");
        report_printf(md, "### %s (trained at context %d)\n\n| depth |", row->name, row->cfg.seq_len);
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
        fcloseCheck(f, dat);
        char name[32];
        snprintf(name, sizeof(name), "model%d", g + 1);
        gnuplot_input(&vars, name, dat);
        snprintf(titles + strlen(titles), sizeof(titles) - strlen(titles), "%s%s", g ? " " : "", row->name);
    }
    free(acc);
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
                 "mean ± std over %d seeds", opt->preset, samples, rows[0].cfg.seq_len, seeds);
    } else {
        snprintf(text, sizeof(text), "Figure 5, preset %s: N = 8, R = 1, %d samples per cell; models trained at %d tokens; 1 seed",
                 opt->preset, samples, rows[0].cfg.seq_len);
    }
    gnuplot_string(&vars, "title_text", text);
    gnuplot("fig5.gp", &vars);
    printf("wrote %s\n", png);
    report_close(md);
    printf("wrote %s\n", rep.path);
}
