#define _GNU_SOURCE
#include "needle_tasks.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../data/dataset.h"
#include "../data/needle.h"
#include "../eval/attnmap.h"
#include "../eval/nexttoken.h"
#include "../eval/retrieval.h"
#include "../model/checkpoint.h"
#include "../model/base/util.h"
#include "recipe.h"
#include "registry.h"
#include "report.h"
#include "train.h"

#define N_DEPTHS 5
#define MAX_LENGTHS 16
#define COPY_HALF 100
static const double DEPTHS[N_DEPTHS] = {0.0, 0.25, 0.5, 0.75, 1.0};

// Table 2's settings (N, R) and the paper's accuracies (3B models, 4K context)
#define N_SETTINGS 4
static const int SETTING_N[N_SETTINGS] = {1, 2, 4, 6}, SETTING_R[N_SETTINGS] = {1, 2, 2, 2};
static const double PAPER_TABLE2[2][N_SETTINGS] = {{1.00, 0.85, 0.62, 0.55}, {1.00, 0.92, 0.84, 0.85}};
// Table 3: attention to the answer and noise per depth, Transformer then DIFF
static const double PAPER_ANSWER[2][N_DEPTHS] = {{0.03, 0.03, 0.03, 0.07, 0.09}, {0.27, 0.30, 0.31, 0.32, 0.40}};
static const double PAPER_NOISE[2][N_DEPTHS] = {{0.51, 0.54, 0.52, 0.49, 0.49}, {0.01, 0.02, 0.02, 0.02, 0.01}};

int needle_extra_key(int is_row, const char* k) {
    static const char* keys[] = {"corpus", "copy_steps", "copy_batch_size", "context", "lengths", "samples",
                                 "fig5_samples", "maps", "eval_seed", "fig8_samples", "fig8_windows", "outlier_tokens"};
    if (recipe_shape_key(is_row, k)) return 1;
    for (size_t i = 0; !is_row && i < sizeof(keys) / sizeof(keys[0]); i++) {
        if (strcmp(k, keys[i]) == 0) return 1;
    }
    return 0;
}

typedef struct {
    char name[64];    // the recipe's row
    int seed_index;   // of NeedleOptions.seeds: the row's seed_index-th model
    Config copy_cfg;  // the copy stage, whose checkpoint starts cfg (init_from)
    Config cfg;
    Model model;
    int64_t run;
    char checkpoint[4200];
    CopyScore copy;  // the least retrieval needs
} Row;

// computed per row from the preset's h and d and the row's heads and width, and its run folder
static const char* const NEEDLE_DERIVED_KEYS[] = {"n_head", "head_dim", "d_model", "out", NULL};

Config needle_row_config(const Recipe* r, const Section* preset, const Section* row, int seed_index, const char* recipe,
                         const char* results) {
    Config cfg;
    config_defaults(&cfg);
    section_apply(&cfg, &r->common, needle_extra_key);
    section_apply(&cfg, preset, needle_extra_key);
    section_apply(&cfg, row, needle_extra_key);
    section_apply(&cfg, &r->overrides, needle_extra_key);
    recipe_resolve_row(&cfg, r, preset, row, recipe);
    cfg.seed += seed_index;
    path_printf(cfg.out, sizeof(cfg.out), "%s/needle/%s/%s/seed%d", results, preset->name, row->name, cfg.seed);
    config_validate(&cfg);
    return cfg;
}

// The copy stage: the row's model on copy practice in NEEDLE_COPY_SEQ_LEN windows at the
// constant peak learning rate, so that induction heads form before the needle mix
// (docs/needle.md says why); the needle run starts from its checkpoint
static Config copy_stage_config(const Config* cfg, const Section* preset, const char* recipe) {
    Config copy = *cfg;
    copy.steps = section_int(preset, "copy_steps", recipe);
    copy.batch_size = section_int(preset, "copy_batch_size", recipe);
    copy.seq_len = NEEDLE_COPY_SEQ_LEN;
    copy.grad_accum = 1;
    copy.lr_final = copy.lr;
    path_printf(copy.data, sizeof(copy.data), "%s/copy", cfg->data);
    // <row>/seed<N> -> <row>_copy/seed<N>
    const char* seed_dir = strrchr(cfg->out, '/');
    path_printf(copy.out, sizeof(copy.out), "%.*s_copy%s", (int)(seed_dir - cfg->out), cfg->out, seed_dir);
    config_validate(&copy);
    return copy;
}

// The registry's FINISHED run of (row, cfg), trained now if there is none; a killed attempt
// resumes from its checkpoint
static int64_t trained_run(Registry* reg, int64_t experiment, const char* row, const Config* cfg) {
    int64_t run = registry_finished_run(reg, experiment, row, cfg->seed, cfg, data_identity(cfg->data));
    if (run) {
        printf("%s, seed %d: already finished (run %lld)\n", row, cfg->seed, (long long)run);
        return run;
    }
    printf("== training %s, seed %d (%s)\n", row, cfg->seed, cfg->out);
    fflush(stdout);
    return train_registry_row(reg, experiment, row, cfg, 1);
}

// The training mix: made from the preset's corpus when missing, and it must be cut for seq_len
static void ensure_data(const Config* cfg, const Section* preset, const char* recipe) {
    char path[4200], copy_path[4200];
    path_printf(path, sizeof(path), "%s/train.bin", cfg->data);
    path_printf(copy_path, sizeof(copy_path), "%s/copy/train.bin", cfg->data);
    if (access(path, R_OK) != 0 || access(copy_path, R_OK) != 0) {
        const char* corpus = section_get(preset, "corpus");
        if (!corpus) die("%s: [preset %s] needs 'corpus', the prepared data the training mix is made from", recipe, preset->name);
        printf("making the needle training mix %s from %s\n", cfg->data, corpus);
        char cities[4200];
        source_file_path(cities, sizeof(cities), "data/cities.txt");
        needle_prepare(cfg->data, corpus, cities, cfg->seq_len, NEEDLE_TRAIN_NEEDLES, NEEDLE_DATA_SEED);
    }
    DataDir data;
    data_open(&data, cfg->data, DATA_TRAIN);
    int block = data_single_train_shard(&data, "a needle training mix")->block;
    if (block != cfg->seq_len) {
        die("'%s' holds needle blocks of %d tokens but the recipe trains at seq_len %d; delete '%s' to remake it", path,
            block, cfg->seq_len, cfg->data);
    }
    data_close(&data);
}

static uint64_t episode_seed(int eval_seed, int length, int n_needles, int n_queries, int depth, int sample) {
    uint64_t h = hash64((uint64_t)eval_seed);
    h = hash64(h ^ (uint64_t)length);
    h = hash64(h ^ ((uint64_t)n_needles << 8 | (uint64_t)n_queries));
    h = hash64(h ^ (uint64_t)depth);
    return hash64(h ^ (uint64_t)sample);
}

static void ensure_cache(Model* m, const Episode* e) {
    int need = episode_cache_need(e);
    if (model_cache_size(m) < need) model_cache_init(m, need);
}

// ---- retrieval: one cell is (length, N, R, depth), `samples` episodes ----
typedef struct {
    int length, n_needles, n_queries, depth;
    int queries, correct, samples, all_correct;
} Cell;

typedef struct {
    EpisodeRecord* rec;
    char (*output)[ANSWER_TEXT];
    int n, cap;
} Records;

static EpisodeRecord* add_record(Records* r) {
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 1024;
        r->rec = realloc(r->rec, r->cap * sizeof(EpisodeRecord));
        r->output = realloc(r->output, r->cap * sizeof(*r->output));
        if (!r->rec || !r->output) die("out of memory holding episode records");
    }
    memset(&r->rec[r->n], 0, sizeof(EpisodeRecord));
    return &r->rec[r->n++];
}

static void store_records(Registry* reg, int64_t run, const char* task, Records* r) {
    for (int i = 0; i < r->n; i++) r->rec[i].output = r->output[i];  // realloc may have moved them
    registry_episodes(reg, run, task, r->n, r->rec);
    free(r->rec);
    free(r->output);
    memset(r, 0, sizeof(*r));
}

static void run_cells(Row* row, const NeedleSource* src, const Tokenizer* tok, Cell* cells, int n_cells, int samples,
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
               row->name, cell->length, cell->n_needles, cell->n_queries, 100 * DEPTHS[cell->depth],
               (double)cell->correct / cell->queries, cell->queries, cell->n_queries, (double)cell->all_correct / samples, samples,
               wall_time() - t0);
        fflush(stdout);
    }
}

static void provenance(Report* f, const Row* rows, int n_rows, const NeedleOptions* opt, int samples) {
    report_printf(f, "Recipe %s, preset %s, git %s; %d episodes per cell, answer depths 0/25/50/75/100%%.\n", opt->recipe,
            opt->preset, GIT_COMMIT, samples);
    for (int i = 0; i < n_rows; i++) {
        report_printf(f, "- %s, seed %d: %s attention, %d layers, d_model %d, %d heads x %d, %zu parameters, trained %d steps at "
                "context %d on copy practice, then %d steps at context %d on the needle mix (%s, registry run %lld); "
                "copying check %.2f (first copy %.2f)\n",
                rows[i].name, rows[i].cfg.seed, config_attention_name(&rows[i].cfg), rows[i].cfg.n_layer, rows[i].cfg.d_model, rows[i].cfg.n_head,
                config_head_dim(&rows[i].cfg), rows[i].model.n_params, rows[i].copy_cfg.steps, rows[i].copy_cfg.seq_len,
                rows[i].cfg.steps, rows[i].cfg.seq_len,
                rows[i].checkpoint, (long long)rows[i].run, rows[i].copy.second, rows[i].copy.first);
    }
    report_printf(f, "\nCopying check: greedy accuracy on the second copy of a %d-token span of validation text repeated (an "
               "induction head, the least retrieval needs); the first copy's accuracy is what the language model guesses "
               "alone.\n\n", COPY_HALF);
}

// A task's report: results/<task>_<preset>.md (and stdout when to_stdout), its heading (a
// printf format), the preset's note and the provenance every task states
static void open_task_report(Report* rep, const char* task, int to_stdout, const Section* preset, const Row* rows, int n_rows,
                             const NeedleOptions* opt, int samples, const char* heading, ...) __attribute__((format(printf, 9, 10)));
static void open_task_report(Report* rep, const char* task, int to_stdout, const Section* preset, const Row* rows, int n_rows,
                             const NeedleOptions* opt, int samples, const char* heading, ...) {
    char path[4200], text[1024];
    preset_path(path, sizeof(path), opt->results, task, opt->preset, ".md");
    report_open(rep, path, to_stdout);
    va_list ap;
    va_start(ap, heading);
    vsnprintf(text, sizeof(text), heading, ap);
    va_end(ap);
    report_printf(rep, "%s%s\n\n", to_stdout ? "\n" : "", text);
    report_printf(rep, "%s", preset_note(preset, opt->recipe));
    provenance(rep, rows, n_rows, opt, samples);
}

// index of the paper's row a model stands beside: 0 Transformer, 1 DIFF
static int paper_row(const Row* row) { return config_variant(&row->cfg)->maps == 1 ? 0 : 1; }

// att<i>: the colour of each row's variant, paper<i>: that of the paper's row it meets
static void attention_numbers(GnuplotVars* vars, const Row* rows, int n_rows, int seeds) {
    for (int g = 0; g < n_rows; g++) {
        char name[16];
        snprintf(name, sizeof(name), "att%d", g + 1);
        gnuplot_number(vars, name, config_variant(&rows[g * seeds].cfg)->colour);
        snprintf(name, sizeof(name), "paper%d", g + 1);
        gnuplot_number(vars, name, ATTN_VARIANTS[paper_row(&rows[g * seeds]) ? ATTN_DIFF : ATTN_STANDARD].colour);
    }
}

// ---- seeds: row g's models are rows[g * seeds .. g * seeds + seeds - 1] (spread_of, report.h) ----

// What a table's ± means, for its caption
static void seeds_caption(Report* f, int seeds) {
    if (seeds > 1) report_printf(f, "Each value: mean ± sample standard deviation over %d seeds (one model per seed).\n\n", seeds);
    else report_printf(f, "One seed per row (one model): no seed spread is measured, so no verdict below rests on it; "
                          "`--seeds N` (make SEEDS=N) trains N.\n\n");
}

// The verdict on one of our gaps (DIFF minus Transformer) against the paper's: from the seed
// spread (the noise is 2 x the larger of the two rows' seed std, as Table 6's verdicts take it),
// never from one seed, nor from two rows that measured nothing (models that retrieve nothing
// agree exactly, which says nothing about the paper's gap)
static const char* gap_verdict(double gap, double noise, double paper_gap, int seeds, int measured) {
    if (seeds < 2) return "n/a (1 seed)";
    if (!measured) return "n/a (neither retrieves)";
    if (fabs(gap) <= noise) return "within seed noise";
    if (paper_gap == 0) return "the paper has no gap";
    return (gap > 0) == (paper_gap > 0) ? "same direction" : "opposite";
}

// The first row (group) standing beside the paper's Transformer (p = 0) or DIFF (p = 1), or -1
static int paper_group(const Row* rows, int n_rows, int seeds, int p) {
    for (int g = 0; g < n_rows; g++) {
        if (paper_row(&rows[g * seeds]) == p) return g;
    }
    return -1;
}

static void task_table2(Row* rows, int n_rows, int seeds, const NeedleSource* src, const Tokenizer* tok, Registry* reg,
                        const Section* preset, const NeedleOptions* opt) {
    int context = section_int(preset, "context", opt->recipe), samples = section_int(preset, "samples", opt->recipe);
    int eval_seed = section_int(preset, "eval_seed", opt->recipe), n_models = n_rows * seeds;
    Cell cells[RECIPE_SECTIONS][N_SETTINGS * N_DEPTHS];
    for (int m = 0; m < n_models; m++) {
        for (int k = 0; k < N_SETTINGS * N_DEPTHS; k++) {
            Cell c = {context, SETTING_N[k / N_DEPTHS], SETTING_R[k / N_DEPTHS], k % N_DEPTHS, 0, 0, 0, 0};
            cells[m][k] = c;
        }
        Records rec = {0};
        run_cells(&rows[m], src, tok, cells[m], N_SETTINGS * N_DEPTHS, samples, eval_seed, &rec);
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
    FILE* bars = fopenCheck(dat, "w");
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
        report_printf(f, "\nDIFF (%s) minus Transformer (%s), against the paper's gap:\n\n| setting | gap (ours) | seed spread | "
                      "paper gap | verdict |\n|---|---|---|---|---|\n", rows[diff * seeds].name, rows[base * seeds].name);
        for (int st = 0; st < N_SETTINGS; st++) {
            double gap = acc_s[diff][st].mean - acc_s[base][st].mean;
            double spread = fmax(acc_s[diff][st].std, acc_s[base][st].std);
            double paper_gap = PAPER_TABLE2[1][st] - PAPER_TABLE2[0][st];
            char spread_cell[32] = "n/a (1 seed)";
            if (seeds > 1) snprintf(spread_cell, sizeof(spread_cell), "%.2f", spread);
            int retrieves = acc_s[diff][st].mean > 0 || acc_s[base][st].mean > 0;
            report_printf(f, "| N=%d, R=%d | %+.2f | %s | %+.2f | %s |\n", SETTING_N[st], SETTING_R[st], gap, spread_cell, paper_gap,
                          gap_verdict(gap, 2 * spread, paper_gap, seeds, retrieves));
        }
        report_printf(f, "\nA gap within 2 x the larger seed std of the two rows is within seed noise; otherwise it goes in the "
                      "paper's direction or the opposite one. Where no model of either row answers a query right there is no "
                      "verdict.\n");
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
    fcloseCheck(bars, dat);
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
}

static void task_fig5(Row* rows, int n_rows, int seeds, const NeedleSource* src, const Tokenizer* tok, Registry* reg,
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

static void task_table3(Row* rows, int n_rows, int seeds, const NeedleSource* src, const Tokenizer* tok, Registry* reg,
                        const Section* preset, const NeedleOptions* opt) {
    int context = section_int(preset, "context", opt->recipe), samples = section_int(preset, "samples", opt->recipe);
    int eval_seed = section_int(preset, "eval_seed", opt->recipe), n_models = n_rows * seeds;
    Allocation by_depth[RECIPE_SECTIONS][N_DEPTHS];
    for (int i = 0; i < n_models; i++) {
        Row* row = &rows[i];
        // the maps of each row's first seed: the other seeds' would repeat them for another model
        int keep_maps = row->seed_index == 0 ? section_int(preset, "maps", opt->recipe) : 0;
        char maps_path[4200];
        path_printf(maps_path, sizeof(maps_path), "%s/needle/%s/maps_%s.h5", opt->results, opt->preset, row->name);
        MapsFile maps;
        if (keep_maps) maps_file_create(&maps, maps_path, &row->model, row->checkpoint);
        Records rec = {0};
        double t0 = wall_time();
        for (int d = 0; d < N_DEPTHS; d++) {
            Allocation sum = {0, 0, 0, 0};
            for (int s = 0; s < N_SETTINGS; s++) {
                for (int k = 0; k < samples; k++) {
                    uint64_t seed = episode_seed(eval_seed, context, SETTING_N[s], SETTING_R[s], d, k);
                    Episode e;
                    episode_make(&e, src, context, SETTING_N[s], SETTING_R[s], DEPTHS[d], 0, seed);
                    ensure_cache(&row->model, &e);
                    // maps of the first samples of the most distracting setting go to HDF5
                    int save = s == N_SETTINGS - 1 && k < keep_maps;
                    int all_rows = save ? maps_file_sample(&maps, &e, tok, context, seed) : 0;
                    Allocation a = episode_allocation(&row->model, &e, all_rows, save ? maps_file_head : NULL, &maps);
                    sum.answer += a.answer; sum.noise += a.noise; sum.question += a.question; sum.bos += a.bos;
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
            Allocation mean = {sum.answer / n, sum.noise / n, sum.question / n, sum.bos / n};
            by_depth[i][d] = mean;
            printf("  %-10s depth %3.0f%%: answer %.3f  noise %.3f  question %.3f  BOS %.3f (%.0f s)\n", row->name, 100 * DEPTHS[d],
                   mean.answer, mean.noise, mean.question, mean.bos, wall_time() - t0);
            fflush(stdout);
        }
        store_records(reg, row->run, "table3", &rec);
        if (keep_maps) {
            maps_file_close(&maps);
            registry_artifact(reg, row->run, "attention_maps", maps_path);
            printf("  attention maps of %d episodes in %s\n", maps.n_samples, maps_path);
        }
    }
    // per row: the spread over its seeds of each depth's shares and of Figure 1's means over depths
    Spread answer[RECIPE_SECTIONS][N_DEPTHS], noise[RECIPE_SECTIONS][N_DEPTHS], overall[RECIPE_SECTIONS][4];
    for (int g = 0; g < n_rows; g++) {
        double parts[RECIPE_SECTIONS][4] = {{0}};
        for (int s = 0; s < seeds; s++) {
            for (int d = 0; d < N_DEPTHS; d++) {
                const Allocation* a = &by_depth[g * seeds + s][d];
                parts[s][0] += a->answer / N_DEPTHS;
                parts[s][1] += a->noise / N_DEPTHS;
                parts[s][2] += a->question / N_DEPTHS;
                parts[s][3] += a->bos / N_DEPTHS;
            }
        }
        for (int k = 0; k < 4; k++) overall[g][k] = spread_of(&parts[0][k], seeds, 4);
        int stride = (int)(sizeof(by_depth[0]) / (sizeof(double)));  // one model's allocations, in doubles
        for (int d = 0; d < N_DEPTHS; d++) {
            answer[g][d] = spread_of(&by_depth[g * seeds][d].answer, seeds, stride);
            noise[g][d] = spread_of(&by_depth[g * seeds][d].noise, seeds, stride);
        }
    }
    char dat[4200], fig1[4200], cell[48];
    preset_path(dat, sizeof(dat), opt->results, "table3", opt->preset, ".dat");
    preset_path(fig1, sizeof(fig1), opt->results, "fig1", opt->preset, ".dat");
    Report rep, *f = &rep;
    open_task_report(f, "table3", 1, preset, rows, n_models, opt, samples * N_SETTINGS,
                     "## Table 3 (preset %s): attention of the question to the answer needle and to the noise, context %d",
                     opt->preset, context);
    report_printf(f, "Rows of question 0's tokens attending over the prompt, averaged over those rows, every layer and head, "
               "and Table 2's episodes (all four (N, R) settings). Each row is normalised to sum to 1: softmax rows as they "
               "are, DIFF rows A1 - lambda A2 divided by 1 - lambda. Answer = the answer needle's tokens; noise = every "
               "other context token after BOS, distractor needles included; the rest goes to BOS and the question itself.\n\n");
    seeds_caption(f, seeds);
    report_printf(f, "| Model | answer 0%% | 25%% | 50%% | 75%% | 100%% | noise 0%% | 25%% | 50%% | 75%% | 100%% |\n");
    report_printf(f, "|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int g = 0; g < n_rows; g++) {
        report_printf(f, "| %s |", rows[g * seeds].name);
        for (int d = 0; d < N_DEPTHS; d++) report_printf(f, " %s |", spread_text(cell, sizeof(cell), answer[g][d], seeds, 3));
        for (int d = 0; d < N_DEPTHS; d++) report_printf(f, " %s |", spread_text(cell, sizeof(cell), noise[g][d], seeds, 3));
        report_printf(f, "\n");
    }
    for (int p = 0; p < 2; p++) {
        report_printf(f, "| paper %s |", p ? "DIFF" : "Transformer");
        for (int d = 0; d < N_DEPTHS; d++) report_printf(f, " %.2f |", PAPER_ANSWER[p][d]);
        for (int d = 0; d < N_DEPTHS; d++) report_printf(f, " %.2f |", PAPER_NOISE[p][d]);
        report_printf(f, "\n");
    }
    report_printf(f, "\nFigure 1 breakdown (mean over depths):\n\n| Model | answer | noise | question | BOS |\n|---|---|---|---|---|\n");
    for (int g = 0; g < n_rows; g++) {
        report_printf(f, "| %s |", rows[g * seeds].name);
        for (int k = 0; k < 4; k++) report_printf(f, " %s |", spread_text(cell, sizeof(cell), overall[g][k], seeds, 3));
        report_printf(f, "\n");
    }
    int base = paper_group(rows, n_rows, seeds, 0), diff = paper_group(rows, n_rows, seeds, 1);
    if (base >= 0 && diff >= 0) {
        report_printf(f, "\nDIFF (%s) minus Transformer (%s), mean over depths, against the paper's gap:\n\n| share | gap (ours) | "
                      "seed spread | paper gap | verdict |\n|---|---|---|---|---|\n", rows[diff * seeds].name, rows[base * seeds].name);
        for (int k = 0; k < 2; k++) {
            const double* paper = k ? PAPER_NOISE[0] : PAPER_ANSWER[0];
            const double* paper_diff = k ? PAPER_NOISE[1] : PAPER_ANSWER[1];
            double paper_gap = 0;
            for (int d = 0; d < N_DEPTHS; d++) paper_gap += (paper_diff[d] - paper[d]) / N_DEPTHS;
            double gap = overall[diff][k].mean - overall[base][k].mean, spread = fmax(overall[diff][k].std, overall[base][k].std);
            char spread_cell[32] = "n/a (1 seed)";
            if (seeds > 1) snprintf(spread_cell, sizeof(spread_cell), "%.3f", spread);
            report_printf(f, "| %s | %+.3f | %s | %+.3f | %s |\n", k ? "noise" : "answer", gap, spread_cell, paper_gap,
                          gap_verdict(gap, 2 * spread, paper_gap, seeds, 1));
        }
    }
    report_close(&rep);
    FILE* t3 = fopenCheck(dat, "w");
    FILE* g1 = fopenCheck(fig1, "w");
    for (int d = 0; d < N_DEPTHS; d++) {
        fprintf(t3, "\"%.0f%%\"", 100 * DEPTHS[d]);
        for (int g = 0; g < n_rows; g++) {
            int p = paper_row(&rows[g * seeds]);
            fprintf(t3, " %.4f %.4f %.2f %.2f %.4f %.4f", answer[g][d].mean, noise[g][d].mean, PAPER_ANSWER[p][d], PAPER_NOISE[p][d],
                    answer[g][d].std, noise[g][d].std);
        }
        fprintf(t3, "\n");
    }
    for (int g = 0; g < n_rows; g++) {
        fprintf(g1, "\"%s\" %.4f %.4f %.4f %.4f\n", rows[g * seeds].name, overall[g][0].mean, overall[g][1].mean, overall[g][2].mean,
                overall[g][3].mean);
    }
    fcloseCheck(t3, dat);
    fcloseCheck(g1, fig1);
    char text[4400], names[512] = "", papers[512] = "";
    for (int g = 0; g < n_rows; g++) {
        snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", g ? " " : "", rows[g * seeds].name);
        snprintf(papers + strlen(papers), sizeof(papers) - strlen(papers), "%s%s", g ? " " : "", paper_row(&rows[g * seeds]) ? "DIFF" : "Transformer");
    }
    GnuplotVars vars;
    gnuplot_init(&vars);
    gnuplot_input(&vars, "data", dat);
    gnuplot_input(&vars, "fig1", fig1);
    attention_numbers(&vars, rows, n_rows, seeds);
    gnuplot_number(&vars, "seeds", seeds);
    gnuplot_string(&vars, "names", names);
    gnuplot_string(&vars, "papers", papers);
    char png[4400], fig1_png[4400];
    preset_path(png, sizeof(png), opt->plots, "table3", opt->preset, ".png");
    gnuplot_output(&vars, "out", png);
    preset_path(fig1_png, sizeof(fig1_png), opt->plots, "fig1", opt->preset, ".png");
    gnuplot_output(&vars, "out_fig1", fig1_png);
    snprintf(text, sizeof(text), "Table 3, preset %s: attention of the question tokens, context %d, %d seed%s%s", opt->preset, context,
             seeds, seeds > 1 ? "s" : "", seeds > 1 ? " (error bars: seed std)" : "");
    gnuplot_string(&vars, "title_text", text);
    snprintf(text, sizeof(text), "Figure 1, preset %s, context %d: where the question's attention goes (mean over depths%s, rows "
             "normalised to 1)", opt->preset, context, seeds > 1 ? " and seeds" : "");
    gnuplot_string(&vars, "fig1_title", text);
    gnuplot("table3.gp", &vars);
    printf("\nwrote %s, %s, %s\n", rep.path, png, fig1_png);
}

// ---- Figure 8: attention logits quantized ----
#define FIG8_WIDTHS 4
#define FIG8_SETTINGS 2
static const int FIG8_BITS[FIG8_WIDTHS] = {16, 8, 6, 4};
static const int FIG8_N[FIG8_SETTINGS] = {1, 4}, FIG8_R[FIG8_SETTINGS] = {1, 2};
static const char* const SCOPE_NAMES[2] = {"per tensor", "per row"};
static const char* const SCOPE_KEYS[2] = {"tensor", "row"};

typedef struct {
    NextToken lm;
    double retrieval[FIG8_SETTINGS];
    int queries[FIG8_SETTINGS];
} QuantResult;

static QuantResult quantized_eval(Row* row, const NeedleSource* src, const Tokenizer* tok, const Shard* val, Registry* reg,
                                  LogitQuant q, int windows, int samples, int context, int eval_seed) {
    QuantResult res;
    model_set_logit_quant(&row->model, q);
    res.lm = evaluate_next_token(&row->model, val, row->cfg.seq_len, windows, row->cfg.batch_size);
    Cell cells[FIG8_SETTINGS * N_DEPTHS];
    for (int k = 0; k < FIG8_SETTINGS * N_DEPTHS; k++) {
        Cell c = {context, FIG8_N[k / N_DEPTHS], FIG8_R[k / N_DEPTHS], k % N_DEPTHS, 0, 0, 0, 0};
        cells[k] = c;
    }
    Records rec = {0};
    run_cells(row, src, tok, cells, FIG8_SETTINGS * N_DEPTHS, samples, eval_seed, &rec);
    model_set_logit_quant(&row->model, (LogitQuant){0, QUANT_PER_TENSOR});
    int bits = q.bits ? q.bits : LOGIT_QUANT_UNQUANTIZED;
    char task[64];
    snprintf(task, sizeof(task), "fig8_%s_%dbit", SCOPE_KEYS[q.scope], bits);
    store_records(reg, row->run, task, &rec);
    for (int st = 0; st < FIG8_SETTINGS; st++) {
        int right = 0, queries = 0;
        for (int d = 0; d < N_DEPTHS; d++) {
            right += cells[st * N_DEPTHS + d].correct;
            queries += cells[st * N_DEPTHS + d].queries;
        }
        res.retrieval[st] = (double)right / queries;
        res.queries[st] = queries;
    }
    const char* names[4] = {"loss", "accuracy", "retrieval_n1", "retrieval_n4r2"};
    double values[4] = {res.lm.loss, res.lm.accuracy, res.retrieval[0], res.retrieval[1]};
    for (int k = 0; k < 4; k++) {
        char key[96];
        snprintf(key, sizeof(key), "%s_%s", task, names[k]);
        registry_evaluation(reg, row->run, key, values[k]);
    }
    printf("  %-10s %2d bits %-10s: loss %.4f  accuracy %.4f  retrieval N=1 %.3f  N=4,R=2 %.3f\n", row->name, bits,
           q.bits ? SCOPE_NAMES[q.scope] : "(none)", res.lm.loss, res.lm.accuracy,
           res.retrieval[0], res.retrieval[1]);
    fflush(stdout);
    return res;
}

static void task_fig8(Row* rows, int n_rows, int seeds, const NeedleSource* src, const Tokenizer* tok, const Shard* val,
                      Registry* reg, const Section* preset, const NeedleOptions* opt) {
    int context = section_int(preset, "context", opt->recipe), samples = section_int(preset, "fig8_samples", opt->recipe);
    int windows = section_int(preset, "fig8_windows", opt->recipe), eval_seed = section_int(preset, "eval_seed", opt->recipe);
    int n_models = n_rows * seeds;
    for (int i = 0; i < n_models; i++) {
        if ((val->n_tokens - 1) / rows[i].cfg.seq_len < (size_t)windows) {
            die("%s: [preset %s] fig8_windows = %d needs %zu validation tokens at seq_len %d; the shard has %zu", opt->recipe,
                preset->name, windows, (size_t)windows * rows[i].cfg.seq_len + 1, rows[i].cfg.seq_len, val->n_tokens);
        }
    }
    QuantResult (*res)[2][FIG8_WIDTHS] = callocCheck(n_models, sizeof(*res));
    for (int i = 0; i < n_models; i++) {
        for (int scope = 0; scope < 2; scope++) {
            for (int b = 0; b < FIG8_WIDTHS; b++) {
                if (FIG8_BITS[b] == LOGIT_QUANT_UNQUANTIZED && scope > 0) {
                    res[i][scope][b] = res[i][0][b];  // unquantized: no scope
                    continue;
                }
                LogitQuant q = {FIG8_BITS[b] == LOGIT_QUANT_UNQUANTIZED ? 0 : FIG8_BITS[b], (QuantScope)scope};
                res[i][scope][b] = quantized_eval(&rows[i], src, tok, val, reg, q, windows, samples, context, eval_seed);
            }
        }
    }
    // metric[model][scope][bits][k]: loss, accuracy, retrieval N=1, retrieval N=4 R=2
    double (*metric)[2][FIG8_WIDTHS][4] = callocCheck(n_models, sizeof(*metric));
    for (int i = 0; i < n_models; i++) {
        for (int scope = 0; scope < 2; scope++) {
            for (int b = 0; b < FIG8_WIDTHS; b++) {
                const QuantResult* q = &res[i][scope][b];
                double v[4] = {q->lm.loss, q->lm.accuracy, q->retrieval[0], q->retrieval[1]};
                memcpy(metric[i][scope][b], v, sizeof(v));
            }
        }
    }
    int stride = (int)(sizeof(metric[0]) / sizeof(double));  // one model's metrics, in doubles
    char dat[4200], cell[4][48];
    preset_path(dat, sizeof(dat), opt->results, "fig8", opt->preset, ".dat");
    Report rep, *f = &rep;
    open_task_report(f, "fig8", 1, preset, rows, n_models, opt, samples, "## Figure 8 (preset %s): attention logits quantized to fewer bits",
                     opt->preset);
    report_printf(f, "Dynamic post-training absmax quantization of the attention logits before every softmax: Q = 2^(b-1) - 1, "
               "s = max|S| / Q recomputed on every forward, S_hat = s clamp(round(S / s), -Q, Q); DIFF's two maps separately. "
               "Main setting per tensor (one scale per head, map and sequence); ablation per row (one scale per query row). "
               "16 bits is the unquantized model. Validation loss and next-token accuracy on %d windows of %d tokens of "
               "held-out text; retrieval accuracy of the queried numbers at context %d, N = 1 (%d queries) and N = 4, R = 2 "
               "(%d queries), the same episodes at every width. The paper measured zero-shot HellaSwag with 3B models; "
               "it is not among this harness's data and models this small are not expected to beat its chance level, so "
               "retrieval (where both score well unquantized) and the language-model metrics show what quantization costs "
               "instead (docs/outliers.md).\n\n",
               windows, rows[0].cfg.seq_len, context, res[0][0][0].queries[0], res[0][0][0].queries[1]);
    seeds_caption(f, seeds);
    report_printf(f, "| Model | scale | bits | valid loss | next-token acc | retrieval N=1 | retrieval N=4, R=2 |\n");
    report_printf(f, "|---|---|---|---|---|---|---|\n");
    FILE* g = fopenCheck(dat, "w");
    // the language-model panels' ranges: the data with headroom, never zoomed to less than a
    // floor (0.05 nats, 0.02 accuracy), so a flat line reads as flat
    double lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY}, floor_span[2] = {0.05, 0.02};
    static const int DIGITS[4] = {4, 4, 3, 3};
    for (int r = 0; r < n_rows; r++) {
        for (int scope = 0; scope < 2; scope++) {
            fprintf(g, "\"%s, %s\"\n", rows[r * seeds].name, SCOPE_NAMES[scope]);
            for (int b = 0; b < FIG8_WIDTHS; b++) {
                Spread m[4];
                for (int k = 0; k < 4; k++) {
                    m[k] = spread_of(&metric[r * seeds][scope][b][k], seeds, stride);
                    spread_text(cell[k], sizeof(cell[k]), m[k], seeds, DIGITS[k]);
                }
                for (int k = 0; k < 2; k++) {
                    lo[k] = fmin(lo[k], m[k].mean - m[k].std);
                    hi[k] = fmax(hi[k], m[k].mean + m[k].std);
                }
                if (!(scope > 0 && FIG8_BITS[b] == LOGIT_QUANT_UNQUANTIZED)) {
                    report_printf(f, "| %s | %s | %d | %s | %s | %s | %s |\n", rows[r * seeds].name,
                                  FIG8_BITS[b] == LOGIT_QUANT_UNQUANTIZED ? "none" : SCOPE_NAMES[scope], FIG8_BITS[b], cell[0],
                                  cell[1], cell[2], cell[3]);
                }
                fprintf(g, "%d %.6f %.6f %.6f %.6f %.6f %.6f %.6f %.6f\n", FIG8_BITS[b], m[0].mean, m[1].mean, m[2].mean, m[3].mean,
                        m[0].std, m[1].std, m[2].std, m[3].std);
            }
            fprintf(g, "\n\n");
        }
    }
    report_printf(f, "\nPaper (3B, HellaSwag): DIFF keeps its accuracy down to 6 bits, Transformer drops sharply at 6 bits; "
               "4-bit DIFF is about as accurate as 6-bit Transformer and about 25%% better than 4-bit Transformer.\n");
    report_close(&rep);
    fcloseCheck(g, dat);
    free(metric);
    free(res);
    char text[4400];
    GnuplotVars vars;
    gnuplot_init(&vars);
    gnuplot_input(&vars, "data", dat);
    gnuplot_number(&vars, "series", 2 * n_rows);
    gnuplot_number(&vars, "seeds", seeds);
    for (int k = 0; k < 2; k++) {
        double mid = 0.5 * (lo[k] + hi[k]), half = 0.5 * fmax(hi[k] - lo[k], floor_span[k]) * 1.4;  // 20% headroom each side
        char name[16];
        snprintf(name, sizeof(name), "lo%d", k + 2);
        gnuplot_number(&vars, name, k == 1 ? fmax(0, mid - half) : mid - half);
        snprintf(name, sizeof(name), "hi%d", k + 2);
        gnuplot_number(&vars, name, k == 1 ? fmin(1, mid + half) : mid + half);
    }
    attention_numbers(&vars, rows, n_rows, seeds);
    char png[4400];
    preset_path(png, sizeof(png), opt->plots, "fig8", opt->preset, ".png");
    gnuplot_output(&vars, "out", png);
    snprintf(text, sizeof(text), "Figure 8, preset %s: attention logits quantized (solid: per tensor, dashed: per row); %d seed%s%s",
             opt->preset, seeds, seeds > 1 ? "s" : "", seeds > 1 ? ", error bars: seed std" : "");
    gnuplot_string(&vars, "title_text", text);
    gnuplot("fig8.gp", &vars);
    printf("\nwrote %s, %s\n", rep.path, png);
}

// The rows of the recipe with their configs, parameter counts checked and the training mix
// made; nothing trained yet
static Row* configure_rows(const NeedleOptions* opt, const Recipe* r, const Section* preset) {
    if (r->n_rows < 1) die("%s: no [row NAME] sections", opt->recipe);
    if (opt->seeds < 1 || r->n_rows * opt->seeds > RECIPE_SECTIONS) {
        die("--seeds %d: %d rows x seeds must lie in 1..%d models", opt->seeds, r->n_rows, RECIPE_SECTIONS);
    }
    Row* rows = callocCheck(r->n_rows * opt->seeds, sizeof(Row));
    for (int i = 0; i < r->n_rows * opt->seeds; i++) {
        const Section* section = &r->rows[i / opt->seeds];
        snprintf(rows[i].name, sizeof(rows[i].name), "%s", section->name);
        rows[i].seed_index = i % opt->seeds;
        rows[i].cfg = needle_row_config(r, preset, section, rows[i].seed_index, opt->recipe, opt->results);
        rows[i].copy_cfg = copy_stage_config(&rows[i].cfg, preset, opt->recipe);
        config_checkpoint_path(&rows[i].copy_cfg, rows[i].cfg.init_from, sizeof(rows[i].cfg.init_from));
        size_t a = model_param_count(&rows[i].cfg, 1), b = model_param_count(&rows[0].cfg, 1);
        if (fabs((double)a - (double)b) > 0.01 * (double)b) {
            die("%s: row '%s' has %zu parameters (without the vocabulary), more than 1%% from row '%s' (%zu)", opt->recipe,
                rows[i].name, a, rows[0].name, b);
        }
    }
    ensure_data(&rows[0].cfg, preset, opt->recipe);
    return rows;
}

// Both stages of a row, each trained unless the registry holds it as FINISHED
static void train_row(Row* row, Registry* reg, int64_t experiment) {
    char copy_name[80];
    snprintf(copy_name, sizeof(copy_name), "%s_copy", row->name);
    trained_run(reg, experiment, copy_name, &row->copy_cfg);
    row->run = trained_run(reg, experiment, row->name, &row->cfg);
    config_checkpoint_path(&row->cfg, row->checkpoint, sizeof(row->checkpoint));
}

int needle_trained_rows(const NeedleOptions* opt, TrainedRow* out, int max_rows) {
    Recipe* r = recipe_load(opt->recipe, needle_extra_key);
    recipe_override(r, opt->overrides, opt->n_overrides, NEEDLE_DERIVED_KEYS, opt->recipe);
    const Section* preset = recipe_preset(r, opt->preset, opt->recipe);
    int n = r->n_rows * opt->seeds;
    if (n > max_rows) die("%s: %d rows x %d seeds, more than the %d models a study takes", opt->recipe, r->n_rows, opt->seeds, max_rows);
    Row* rows = configure_rows(opt, r, preset);
    Registry reg;
    int lock;
    int64_t experiment = recipe_experiment(&reg, opt->results, "needle", opt->preset, opt->recipe, &lock);
    for (int i = 0; i < n; i++) {
        train_row(&rows[i], &reg, experiment);
        snprintf(out[i].name, sizeof(out[i].name), "%s", rows[i].name);
        out[i].cfg = rows[i].cfg;
        path_printf(out[i].checkpoint, sizeof(out[i].checkpoint), "%s", rows[i].checkpoint);
        out[i].run = rows[i].run;
    }
    registry_close(&reg);
    unlock_folder(lock);
    free(rows);
    free(r);
    return n;
}

int needle_main(const NeedleOptions* opt) {
    static const char* const TASKS[] = {"table2", "fig5", "table3", "fig8"};
    int task = 0, n_tasks = sizeof(TASKS) / sizeof(TASKS[0]);
    while (task < n_tasks && strcmp(opt->task, TASKS[task])) task++;
    if (task == n_tasks) die("--task '%s': expected table2, fig5, table3 or fig8", opt->task);
    Recipe* r = recipe_load(opt->recipe, needle_extra_key);
    recipe_override(r, opt->overrides, opt->n_overrides, NEEDLE_DERIVED_KEYS, opt->recipe);
    const Section* preset = recipe_preset(r, opt->preset, opt->recipe);
    Row* rows = configure_rows(opt, r, preset);
    mkdir_p(opt->plots);
    Registry reg;
    int lock;
    int64_t experiment = recipe_experiment(&reg, opt->results, "needle", opt->preset, opt->recipe, &lock);
    DataDir data;
    data_open(&data, rows[0].cfg.data, DATA_VAL);
    const Tokenizer* tok = &data.tok;
    const Shard* val = &data.val;
    int n_models = r->n_rows * opt->seeds;
    for (int i = 0; i < n_models; i++) {
        Row* row = &rows[i];
        train_row(row, &reg, experiment);
        CheckpointInfo info;
        checkpoint_load(row->checkpoint, backend_of_device(row->cfg.device), &row->model, NULL, &info);
        if (!info.finished) die("'%s' is not a finished run's checkpoint", row->checkpoint);
        row->copy = copy_score(&row->model, val, COPY_HALF, 4, (uint64_t)row->cfg.seed);
        registry_evaluation(&reg, row->run, "copy_score", row->copy.second);
        registry_evaluation(&reg, row->run, "copy_score_first", row->copy.first);
        printf("%s: copying check %.2f (first copy %.2f)\n", row->name, row->copy.second, row->copy.first);
    }
    NeedleSource src;
    char cities[4200];
    source_file_path(cities, sizeof(cities), "data/cities.txt");
    needle_source_init(&src, tok, val, cities, NEEDLE_EVAL);
    printf("%s, preset %s: %d evaluation cities, haystacks from %s/val.bin\n", opt->task, opt->preset, src.n_cities, data.dir);
    if (task == 0) task_table2(rows, r->n_rows, opt->seeds, &src, tok, &reg, preset, opt);
    if (task == 1) task_fig5(rows, r->n_rows, opt->seeds, &src, tok, &reg, preset, opt);
    if (task == 2) task_table3(rows, r->n_rows, opt->seeds, &src, tok, &reg, preset, opt);
    if (task == 3) task_fig8(rows, r->n_rows, opt->seeds, &src, tok, val, &reg, preset, opt);
    needle_source_free(&src);
    data_close(&data);
    for (int i = 0; i < n_models; i++) model_free(&rows[i].model);
    free(rows);
    free(r);
    registry_close(&reg);
    unlock_folder(lock);
    return 0;
}
