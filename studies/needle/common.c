// What the needle tasks share: the paper's numbers, retrieval over cells of episodes, the
// reports' provenance and the seeds' verdicts (task.h)
#define _GNU_SOURCE
#include "task.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/util.h"

const double DEPTHS[N_DEPTHS] = {0.0, 0.25, 0.5, 0.75, 1.0};

// Table 2's settings (N, R)
const int SETTING_N[N_SETTINGS] = {1, 2, 4, 6}, SETTING_R[N_SETTINGS] = {1, 2, 2, 2};

uint64_t episode_seed(int eval_seed, int length, int n_needles, int n_queries, int depth, int sample) {
    uint64_t h = hash64((uint64_t)eval_seed);
    h = hash64(h ^ (uint64_t)length);
    h = hash64(h ^ ((uint64_t)n_needles << 8 | (uint64_t)n_queries));
    h = hash64(h ^ (uint64_t)depth);
    return hash64(h ^ (uint64_t)sample);
}

void ensure_cache(Model* m, const Episode* e) {
    int need = episode_cache_need(e);
    if (model_cache_size(m) < need) model_cache_init(m, need);
}



EpisodeRecord* add_record(Records* r) {
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 1024;
        r->rec = realloc(r->rec, r->cap * sizeof(EpisodeRecord));
        r->output = realloc(r->output, r->cap * sizeof(*r->output));
        if (!r->rec || !r->output) die("out of memory holding episode records");
    }
    memset(&r->rec[r->n], 0, sizeof(EpisodeRecord));
    return &r->rec[r->n++];
}

void store_records(Registry* reg, int64_t run, const char* task, Records* r) {
    for (int i = 0; i < r->n; i++) r->rec[i].output = r->output[i];  // realloc may have moved them
    registry_episodes(reg, run, task, r->n, r->rec);
    free(r->rec);
    free(r->output);
    memset(r, 0, sizeof(*r));
}

void run_cells(Row* row, const NeedleSource* src, const Tokenizer* tok, Cell* cells, int n_cells, int samples,
                      int eval_seed, Records* records) {
    double t0 = wall_time();
    for (int c = 0; c < n_cells; c++) {
        Cell* cell = &cells[c];
        cell->queries = cell->correct = cell->all_correct = 0;
        cell->samples = samples;
        for (int s = 0; s < samples; s++) {
            uint64_t seed = episode_seed(eval_seed, cell->length, cell->n_needles, cell->n_queries, cell->depth, s);
            Episode e;
            episode_make(&e, src, cell->length, cell->n_needles, cell->n_queries, DEPTHS[cell->depth], 0, seed);
            ensure_cache(&row->model, &e);
            char text[NEEDLE_MAX][ANSWER_TEXT];
            int correct[NEEDLE_MAX];
            int right = episode_answer(&row->model, tok, &e, text, correct);
            cell->queries += e.n_queries;
            cell->correct += right;
            cell->all_correct += right == e.n_queries;
            for (int q = 0; q < e.n_queries; q++) {
                EpisodeRecord* r = add_record(records);
                r->length = cell->length;
                r->n_needles = cell->n_needles;
                r->n_queries = cell->n_queries;
                r->depth = DEPTHS[cell->depth];
                r->sample = s;
                r->seed = seed;
                r->query = q;
                r->city = src->cities[e.city[e.query[q]]];
                r->number = e.number[e.query[q]];
                r->correct = correct[q];
                snprintf(records->output[records->n - 1], ANSWER_TEXT, "%s", text[q]);
            }
            episode_free(&e);
        }
        printf("  %-10s length %5d  N=%d R=%d  depth %3.0f%%: %.2f of %d queries, all %d asked right in %.2f of %d samples (%.0f s)\n",
               row->study.name, cell->length, cell->n_needles, cell->n_queries, 100 * DEPTHS[cell->depth],
               (double)cell->correct / cell->queries, cell->queries, cell->n_queries, (double)cell->all_correct / samples, samples,
               wall_time() - t0);
        fflush(stdout);
    }
}

void episode_counts(const Records* rec, const Cell* cells, int n_cells, int samples, double* right, double* asked) {
    int i = 0;  // run_cells records cell by cell, episode by episode, query by query
    for (int c = 0; c < n_cells; c++) {
        for (int e = 0; e < samples; e++) {
            size_t u = (size_t)c * samples + e;
            asked[u] = cells[c].n_queries;
            right[u] = 0;
            for (int q = 0; q < cells[c].n_queries; q++) right[u] += rec->rec[i++].correct;
        }
    }
}

const char* retrieval_cells(char* out, size_t n, const GapInterval* g, double paper_gap, int retrieves, int digits) {
    if (retrieves) return gap_cells(out, n, g, paper_gap, 0, digits);
    snprintf(out, n, " %+.*f | - | - | - | n/a (neither retrieves) |", digits, g->gap);
    return out;
}

int retrieval_family(GapInterval* cells, const int* retrieves, int n) {
    for (int i = 0; i < n; i++) {
        if (!retrieves[i]) cells[i].p = NAN;
    }
    return verdict_holm(cells, n);
}

void provenance(Report* f, const Row* rows, int n_rows, const NeedleOptions* opt, int samples) {
    report_printf(f, "Recipe %s, preset %s, git %s; %d episodes per cell, answer depths 0/25/50/75/100%%.\n", opt->recipe,
            opt->preset, GIT_COMMIT, samples);
    for (int i = 0; i < n_rows; i++) {
        report_printf(f, "- %s, seed %d: %s attention, %d layers, d_model %d, %d heads x %d, %zu parameters, trained %d steps at "
                "context %d on copy practice, then %d steps at context %d on the needle mix (%s, registry run %lld); "
                "copying check %.2f (first copy %.2f)\n",
                rows[i].study.name, rows[i].study.cfg.seed, config_attention_name(&rows[i].study.cfg.model), rows[i].study.cfg.model.n_layer, rows[i].study.cfg.model.d_model, rows[i].study.cfg.model.n_head,
                config_head_dim(&rows[i].study.cfg.model), rows[i].model.n_params, rows[i].copy_cfg.optim.steps, rows[i].copy_cfg.model.seq_len,
                rows[i].study.cfg.optim.steps, rows[i].study.cfg.model.seq_len,
                rows[i].study.checkpoint, (long long)rows[i].study.run, rows[i].copy.second, rows[i].copy.first);
    }
    report_printf(f, "\nCopying check: greedy accuracy on the second copy of a %d-token span of validation text repeated (an "
               "induction head, the least retrieval needs); the first copy's accuracy is what the language model guesses "
               "alone.\n\n", COPY_HALF);
}

void needle_output_path(char* out, size_t n, const NeedleOptions* opt, const char* dir, const char* name, const char* suffix) {
    char label[4096];
    snprintf(label, sizeof(label), "%s%s%s", opt->preset, opt->rows ? "+" : "", opt->rows ? opt->rows : "");
    for (char* c = label; *c; c++) {
        if (*c == ',') *c = '+';
    }
    preset_path(out, n, dir, name, label, suffix);
}

void open_task_report(Report* rep, const char* task, int to_stdout, const Section* preset, const Row* rows, int n_rows,
                             const NeedleOptions* opt, int samples, const char* heading, ...) {
    char path[4200], text[1024];
    needle_output_path(path, sizeof(path), opt, opt->results, task, ".md");
    report_open(rep, path, to_stdout);
    va_list ap;
    va_start(ap, heading);
    vsnprintf(text, sizeof(text), heading, ap);
    va_end(ap);
    report_printf(rep, "%s%s\n\n", to_stdout ? "\n" : "", text);
    report_printf(rep, "%s", preset_note(preset, opt->recipe));
    provenance(rep, rows, n_rows, opt, samples);
}

// index of the paper's row a model stands beside: 0 Transformer, 1 DIFF, -1 none (a variant
// the paper did not measure, such as DIFF V2 or grouped DIFF)
int paper_row(const Row* row) {
    int attention = row->study.cfg.model.attention;
    return attention == ATTN_STANDARD ? 0 : attention == ATTN_DIFF ? 1 : -1;
}

// The paper's Transformer or DIFF value for paper row p (paper_row), NaN where it has none
double paper_value(double transformer, double diff, int p) { return p == 0 ? transformer : p == 1 ? diff : NAN; }

// att<i>: the colour of each row's variant, paper<i>: that of the paper's row it meets (its own
// where it meets none); the strings names: the rows' names, and papers: each row's paper row,
// 'Transformer', 'DIFF' or 'none'
void attention_numbers(GnuplotVars* vars, const Row* rows, int n_rows, int seeds) {
    char names[512] = "", papers[512] = "";
    for (int g = 0; g < n_rows; g++) {
        char name[16];
        int p = paper_row(&rows[g * seeds]), own = config_variant(&rows[g * seeds].study.cfg.model)->colour;
        snprintf(name, sizeof(name), "att%d", g + 1);
        gnuplot_number(vars, name, own);
        snprintf(name, sizeof(name), "paper%d", g + 1);
        gnuplot_number(vars, name, p < 0 ? own : ATTN_VARIANTS[p ? ATTN_DIFF : ATTN_STANDARD].colour);
        snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", g ? " " : "", rows[g * seeds].study.name);
        snprintf(papers + strlen(papers), sizeof(papers) - strlen(papers), "%s%s", g ? " " : "", p < 0 ? "none" : p ? "DIFF" : "Transformer");
    }
    gnuplot_string(vars, "names", names);
    gnuplot_string(vars, "papers", papers);
}

// ---- seeds: row g's models are rows[g * seeds .. g * seeds + seeds - 1] (spread_of, report.h) ----

// What a table's ± means, for its caption
void seeds_caption(Report* f, int seeds) {
    if (seeds > 1) report_printf(f, "Each value: mean ± sample standard deviation over %d seeds (one model per seed).\n\n", seeds);
    else report_printf(f, "One seed per row (one model): no seed spread is measured, so the verdicts below cover the "
                          "evaluation's episodes only; `--seeds N` (make SEEDS=N) trains N.\n\n");
}

// The first row (group) standing beside the paper's Transformer (p = 0) or DIFF (p = 1), or -1
int paper_group(const Row* rows, int n_rows, int seeds, int p) {
    for (int g = 0; g < n_rows; g++) {
        if (paper_row(&rows[g * seeds]) == p) return g;
    }
    return -1;
}

int task_comparisons(const Row* rows, int n_rows, int seeds, Comparison* out) {
    int n = 0, base = paper_group(rows, n_rows, seeds, 0), diff = paper_group(rows, n_rows, seeds, 1);
    if (base >= 0 && diff >= 0) out[n++] = (Comparison){diff, base, 1};
    for (int g = 0; g < n_rows; g++) {
        if (rows[g * seeds].against >= 0) out[n++] = (Comparison){g, rows[g * seeds].against, 0};
    }
    return n;
}

// caption, then a Markdown table's header row of columns ("a | b | c") and its rule
static void table_heading(Report* f, const char* caption, const char* columns) {
    report_printf(f, "\n%s\n\n| %s |\n|---|", caption, columns);
    for (const char* s = columns; *s; s++) {
        if (*s == '|') report_printf(f, "---|");
    }
    report_printf(f, "\n");
}

void comparison_heading(Report* f, const Comparison* c, int k, const char* paper_caption, const char* paper_columns,
                        const char* what, const char* columns) {
    if (c[k].paper) {
        table_heading(f, paper_caption, paper_columns);
        return;
    }
    if (k > 0 && !c[k - 1].paper) return;
    char caption[512], against_columns[256];
    snprintf(caption, sizeof(caption), "Rows not in the paper, each minus the row it is read against (`against`), %s; the "
             "verdict as in the note below:", what);
    snprintf(against_columns, sizeof(against_columns), "row | against | %s", columns);
    table_heading(f, caption, against_columns);
}

void comparison_row(Report* f, const Row* rows, int seeds, Comparison c) {
    if (!c.paper) report_printf(f, "| %s | %s ", rows[c.a * seeds].study.name, rows[c.b * seeds].study.name);
}

TaskModels task_models(Row* rows, int n_rows, int seeds, const Section* preset, const NeedleOptions* opt) {
    return (TaskModels){rows, n_rows, seeds, n_rows * seeds, section_int(preset, "context", opt->recipe),
                        section_int(preset, "samples", opt->recipe)};
}

NeedlePaper needle_paper(const Recipe* r, const char* path) {
    NeedlePaper p;
    static const char* const ROWS[2] = {"transformer", "diff"};
    for (int k = 0; k < 2; k++) {
        section_numbers(recipe_claim(r, "table2", path), ROWS[k], p.table2[k], N_SETTINGS, path);
        section_numbers(recipe_claim(r, "table3_answer", path), ROWS[k], p.answer[k], N_DEPTHS, path);
        section_numbers(recipe_claim(r, "table3_noise", path), ROWS[k], p.noise[k], N_DEPTHS, path);
    }
    static const char* const FIGURES[2] = {"fig5", "fig8"};
    double* directions[2] = {&p.fig5_direction, &p.fig8_direction};
    for (int f = 0; f < 2; f++) {
        const Section* s = recipe_claim(r, FIGURES[f], path);
        const char* d = section_get(s, "direction");
        if (!d || (strcmp(d, "diff ahead") && strcmp(d, "transformer ahead")))
            die("%s: [claim %s] needs 'direction' = diff ahead or transformer ahead%s%s%s", path, FIGURES[f], d ? ", not '" : "",
                d ? d : "", d ? "'" : "");
        *directions[f] = strcmp(d, "diff ahead") == 0 ? 1.0 : -1.0;
    }
    return p;
}
