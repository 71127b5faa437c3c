// Figure 5: N = 8, R = 1 retrieval across the preset's context lengths, a depth x length heatmap per row
#define _GNU_SOURCE
#include "task.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/util.h"

// Figure 5's numbers: every model's accuracy per length and depth, and each episode's counts
typedef struct {
    Row* rows;
    int n_rows, seeds, n_models;
    int samples, eval_seed;
    int lengths[MAX_LENGTHS], n_lengths;
    // acc[model][length][depth], the last depth the average over the depths, as in the paper's figure
    double (*acc)[MAX_LENGTHS][N_DEPTHS + 1];
    // the verdicts' units: each episode's queries right and asked, (model, length x depth x samples)
    int units;  // per model and length: N_DEPTHS x samples
    double *right, *asked;
    double paper_direction;  // the sign of the paper's DIFF - Transformer gap ([claim fig5])
} Fig5;

// Row group a minus row group b in accuracy averaged over the depths at length l, paired on the
// episodes; pick: four (seeds, units) buffers; *retrieves: a model of either answered a query right
static GapInterval length_gap(const Fig5* t, int a, int b, int l, double* pick[4], int* retrieves) {
    int seeds = t->seeds, units = t->units;
    size_t per_seed = (size_t)t->n_lengths * units;
    for (int s = 0; s < seeds; s++) {
        const int model[2] = {a * seeds + s, b * seeds + s};
        for (int r = 0; r < 2; r++) {
            size_t at = model[r] * per_seed + (size_t)l * units;
            memcpy(pick[2 * r] + (size_t)s * units, t->right + at, units * sizeof(double));
            memcpy(pick[2 * r + 1] + (size_t)s * units, t->asked + at, units * sizeof(double));
        }
    }
    Paired p = {seeds, units, pick[0], pick[1], pick[2], pick[3]};
    *retrieves = 0;
    for (size_t i = 0; i < (size_t)seeds * units; i++) *retrieves |= pick[0][i] > 0 || pick[2][i] > 0;
    return paired_gap(&p);
}

// DIFF minus Transformer at each length, where the paper has DIFF ahead; then each row not in the
// paper minus the row it is read against
static void write_verdicts(Report* md, const Fig5* t) {
    int seeds = t->seeds;
    Comparison c[RECIPE_SECTIONS + 1];
    int n = task_comparisons(t->rows, t->n_rows, seeds, c);
    double* pick[4];  // row a's right and asked, then row b's, for one length: (seeds, units)
    for (int k = 0; k < 4; k++) pick[k] = mallocCheck((size_t)seeds * t->units * sizeof(double));
    for (int i = 0; i < n; i++) {
        char caption[512];
        snprintf(caption, sizeof(caption), "DIFF (%s) minus Transformer (%s) in accuracy averaged over the depths; the paper has "
                 "DIFF ahead at every length (its 3B models from 8K to 64K):", t->rows[c[i].a * seeds].study.name, t->rows[c[i].b * seeds].study.name);
        comparison_heading(md, c, i, caption, "context | " GAP_HEADER, "in accuracy averaged over the depths", "context | " GAP_HEADER);
        GapInterval g[MAX_LENGTHS];
        int retrieves[MAX_LENGTHS];
        for (int l = 0; l < t->n_lengths; l++) g[l] = length_gap(t, c[i].a, c[i].b, l, pick, &retrieves[l]);
        retrieval_family(g, retrieves, t->n_lengths);
        for (int l = 0; l < t->n_lengths; l++) {
            char cells[1024];
            comparison_row(md, t->rows, seeds, c[i]);
            report_printf(md, "| %d |%s\n", t->lengths[l],
                          retrieval_cells(cells, sizeof(cells), &g[l], c[i].paper ? t->paper_direction : NAN, retrieves[l], 2));
        }
    }
    char family[256];
    if (n) report_printf(md, "\n%s %s\n\n", interval_note(seeds, "episodes"), family_note(family, sizeof(family), t->n_lengths, "context lengths"));
    for (int k = 0; k < 4; k++) free(pick[k]);
}

static void read_lengths(Fig5* t, const Section* preset, const NeedleOptions* opt) {
    const char* list = section_get(preset, "lengths");
    if (!list) die("%s: [preset %s] needs 'lengths'", opt->recipe, preset->name);
    char copy[CONFIG_STR];
    snprintf(copy, sizeof(copy), "%s", list);
    t->n_lengths = 0;
    for (char* s = strtok(copy, " "); s; s = strtok(NULL, " ")) {
        if (t->n_lengths == MAX_LENGTHS || atoi(s) <= 0) die("%s: [preset %s] 'lengths' must be up to %d positive integers", opt->recipe, preset->name, MAX_LENGTHS);
        t->lengths[t->n_lengths++] = atoi(s);
    }
}

static void measure_model(Fig5* t, int m, const NeedleSource* src, const Tokenizer* tok, Registry* reg) {
    int n_cells = t->n_lengths * N_DEPTHS;
    Cell cells[MAX_LENGTHS * N_DEPTHS];
    for (int k = 0; k < n_cells; k++) {
        Cell c = {t->lengths[k / N_DEPTHS], 8, 1, k % N_DEPTHS, 0, 0, 0, 0};
        cells[k] = c;
    }
    Records rec = {0};
    run_cells(&t->rows[m], src, tok, cells, n_cells, t->samples, t->eval_seed, &rec);
    size_t at = (size_t)m * t->n_lengths * t->units;
    episode_counts(&rec, cells, n_cells, t->samples, t->right + at, t->asked + at);
    store_records(reg, t->rows[m].study.run, "fig5", &rec);  // frees the records
    for (int l = 0; l < t->n_lengths; l++) {
        for (int d = 0; d < N_DEPTHS; d++) {
            t->acc[m][l][d] = (double)cells[l * N_DEPTHS + d].correct / cells[l * N_DEPTHS + d].queries;
            t->acc[m][l][N_DEPTHS] += t->acc[m][l][d] / N_DEPTHS;
        }
    }
}

// Row g's heatmap: a table in the report and its data file (rows: depths then the average, y = 0
// the top row), which it hands to the figure as model<g+1>
static void write_heatmap(const Fig5* t, int g, Report* md, const NeedleOptions* opt, GnuplotVars* vars) {
    const Row* row = &t->rows[g * t->seeds];
    char dat[4200], suffix[80];
    snprintf(suffix, sizeof(suffix), "_%s.dat", row->study.name);
    needle_output_path(dat, sizeof(dat), opt, opt->results, "fig5", suffix);
    DataFile dat_file;
    data_file_open(&dat_file, dat);
    FILE* f = dat_file.f;
    report_printf(md, "### %s (trained at context %d)\n\n| depth |", row->study.name, row->study.cfg.model.seq_len);
    for (int l = 0; l < t->n_lengths; l++) report_printf(md, " %d |", t->lengths[l]);
    report_printf(md, "\n|---|");
    for (int l = 0; l < t->n_lengths; l++) report_printf(md, "---|");
    report_printf(md, "\n");
    for (int d = 0; d <= N_DEPTHS; d++) {
        report_printf(md, d < N_DEPTHS ? "| %.0f%% |" : "| average |", 100 * (d < N_DEPTHS ? DEPTHS[d] : 0));
        for (int l = 0; l < t->n_lengths; l++) {
            Spread cell = spread_of(&t->acc[g * t->seeds][l][d], t->seeds, MAX_LENGTHS * (N_DEPTHS + 1));
            char text[48];
            report_printf(md, " %s |", spread_text(text, sizeof(text), cell, t->seeds, 2));
            fprintf(f, "%d %d %.4f %.4f\n", l, d, cell.mean, cell.std);
        }
        report_printf(md, "\n");
        fprintf(f, "\n");
    }
    report_printf(md, "\n");
    data_file_close(&dat_file);
    char name[32];
    snprintf(name, sizeof(name), "model%d", g + 1);
    gnuplot_input(vars, name, dat);
}

// the models side by side on one colour scale
static void write_figure(const Fig5* t, const NeedleOptions* opt, GnuplotVars* vars) {
    char titles[RECIPE_SECTIONS * 128] = "";
    for (int g = 0; g < t->n_rows; g++) {
        snprintf(titles + strlen(titles), sizeof(titles) - strlen(titles), "%s%s", g ? " " : "", t->rows[g * t->seeds].study.name);
    }
    gnuplot_number(vars, "n", t->n_rows);
    gnuplot_number(vars, "seeds", t->seeds);
    gnuplot_number(vars, "n_lengths", t->n_lengths);
    for (int l = 0; l < t->n_lengths; l++) {
        char name[32];
        snprintf(name, sizeof(name), "length%d", l + 1);
        gnuplot_number(vars, name, t->lengths[l]);
    }
    gnuplot_string(vars, "titles", titles);
    char png[4400], text[4400], spread[64];
    needle_output_path(png, sizeof(png), opt, opt->plots, "fig5", ".png");
    gnuplot_output(vars, "out", png);
    if (t->seeds > 1) snprintf(spread, sizeof(spread), "mean ± std over %d seeds", t->seeds);
    else snprintf(spread, sizeof(spread), "1 seed");
    snprintf(text, sizeof(text), "Figure 5, preset %s: N = 8, R = 1, %d samples per cell; models trained at %d tokens; %s",
             opt->preset, t->samples, t->rows[0].study.cfg.model.seq_len, spread);
    gnuplot_string(vars, "title_text", text);
    gnuplot("fig5.gp", vars);
    printf("wrote %s\n", png);
}

void task_fig5(Row* rows, int n_rows, int seeds, const NeedleSource* src, const Tokenizer* tok, Registry* reg,
                      const Section* preset, const NeedleOptions* opt, const NeedlePaper* paper) {
    Fig5 t = {.rows = rows, .n_rows = n_rows, .seeds = seeds, .n_models = n_rows * seeds,
              .samples = section_int(preset, "fig5_samples", opt->recipe), .eval_seed = section_int(preset, "eval_seed", opt->recipe),
              .paper_direction = paper->fig5_direction};
    read_lengths(&t, preset, opt);
    t.units = N_DEPTHS * t.samples;
    t.acc = callocCheck(t.n_models, sizeof(*t.acc));
    t.right = mallocCheck((size_t)t.n_models * t.n_lengths * t.units * sizeof(double));
    t.asked = mallocCheck((size_t)t.n_models * t.n_lengths * t.units * sizeof(double));
    for (int m = 0; m < t.n_models; m++) measure_model(&t, m, src, tok, reg);
    Report rep, *md = &rep;
    open_task_report(md, "fig5", 0, preset, rows, t.n_models, opt, t.samples, "## Figure 5 (preset %s): N = 8, R = 1 across context lengths",
                     opt->preset);
    seeds_caption(md, seeds);
    GnuplotVars vars;
    gnuplot_init(&vars);
    for (int g = 0; g < n_rows; g++) write_heatmap(&t, g, md, opt, &vars);
    write_verdicts(md, &t);
    write_figure(&t, opt, &vars);
    report_close(md);
    printf("wrote %s\n", rep.path);
    free(t.acc);
    free(t.right);
    free(t.asked);
}
