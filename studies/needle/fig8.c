// Figure 8: attention logits quantized to 16 (none), 8, 6 and 4 bits, per tensor and per row
#define _GNU_SOURCE
#include "task.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../eval/nexttoken.h"
#include "../../base/util.h"

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
    // each episode's queries right and asked, setting-major (FIG8_SETTINGS x N_DEPTHS x samples):
    // the same episodes at every width, which the verdicts pair
    double *right, *asked;
} QuantResult;

static QuantResult quantized_eval(Row* row, const NeedleSource* src, const Tokenizer* tok, const Shard* val, Registry* reg,
                                  LogitQuant q, int windows, int samples, int context, int eval_seed) {
    QuantResult res;
    model_set_logit_quant(&row->model, q);
    res.lm = evaluate_next_token(&row->model, val, row->study.cfg.model.seq_len, windows, row->study.cfg.batch_size);
    Cell cells[FIG8_SETTINGS * N_DEPTHS];
    for (int k = 0; k < FIG8_SETTINGS * N_DEPTHS; k++) {
        Cell c = {context, FIG8_N[k / N_DEPTHS], FIG8_R[k / N_DEPTHS], k % N_DEPTHS, 0, 0, 0, 0};
        cells[k] = c;
    }
    Records rec = {0};
    run_cells(row, src, tok, cells, FIG8_SETTINGS * N_DEPTHS, samples, eval_seed, &rec);
    res.right = mallocCheck((size_t)FIG8_SETTINGS * N_DEPTHS * samples * sizeof(double));
    res.asked = mallocCheck((size_t)FIG8_SETTINGS * N_DEPTHS * samples * sizeof(double));
    episode_counts(&rec, cells, FIG8_SETTINGS * N_DEPTHS, samples, res.right, res.asked);
    model_set_logit_quant(&row->model, (LogitQuant){0, QUANT_PER_TENSOR});
    int bits = q.bits ? q.bits : LOGIT_QUANT_UNQUANTIZED;
    char task[64];
    snprintf(task, sizeof(task), "fig8_%s_%dbit", SCOPE_KEYS[q.scope], bits);
    store_records(reg, row->study.run, task, &rec);
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
        registry_evaluation(reg, row->study.run, key, values[k]);
    }
    printf("  %-10s %2d bits %-10s: loss %.4f  accuracy %.4f  retrieval N=1 %.3f  N=4,R=2 %.3f\n", row->study.name, bits,
           q.bits ? SCOPE_NAMES[q.scope] : "(none)", res.lm.loss, res.lm.accuracy,
           res.retrieval[0], res.retrieval[1]);
    fflush(stdout);
    return res;
}

// Figure 8's numbers: every model at every width and scope, and the language-model panels' ranges
typedef struct {
    Row* rows;
    int n_rows, seeds, n_models;
    int context, samples, windows, eval_seed;
    QuantResult (*res)[2][FIG8_WIDTHS];  // (n_models, scope, width); scope 1's unquantized is scope 0's
    // the language-model panels' ranges (loss, accuracy): the data with headroom, never zoomed to
    // less than a floor (0.05 nats, 0.02 accuracy), so a flat line reads as flat
    double lo[2], hi[2];
    double paper_direction;  // the sign of the paper's DIFF - Transformer gap ([claim fig8])
} Fig8;

// What quantization costs row group a minus what it costs row group b at one scope, width and
// setting, paired on the episodes (the same at every width and scope); change: four (seeds,
// units) buffers; *retrieves: a model of either answered a query right
static GapInterval quantization_gap(const Fig8* t, int a, int b, int scope, int width, int st, double* change[4], int* retrieves) {
    int seeds = t->seeds, units = N_DEPTHS * t->samples;
    *retrieves = 0;
    for (int s = 0; s < seeds; s++) {
        const int model[2] = {a * seeds + s, b * seeds + s};
        for (int r = 0; r < 2; r++) {
            const QuantResult *q = &t->res[model[r]][scope][width], *full = &t->res[model[r]][0][0];
            for (int u = 0; u < units; u++) {
                size_t at = (size_t)st * units + u, to = (size_t)s * units + u;
                change[2 * r][to] = q->right[at] - full->right[at];
                change[2 * r + 1][to] = q->asked[at];
                *retrieves |= q->right[at] > 0 || full->right[at] > 0;
            }
        }
    }
    Paired p = {seeds, units, change[0], change[1], change[2], change[3]};
    return paired_gap(&p);
}

// What quantization costs DIFF minus what it costs the Transformer, in retrieval accuracy
// (quantized minus unquantized, so a positive gap is DIFF losing less, the paper's claim); then
// the same for each row not in the paper against the row it is read against
static void write_verdicts(Report* f, const Fig8* t) {
    const Row* rows = t->rows;
    int seeds = t->seeds;
    Comparison c[RECIPE_SECTIONS + 1];
    int n = task_comparisons(rows, t->n_rows, seeds, c);
    double* change[4];  // row a's change and queries, then row b's: (seeds, units)
    for (int k = 0; k < 4; k++) change[k] = mallocCheck((size_t)seeds * N_DEPTHS * t->samples * sizeof(double));
    for (int i = 0; i < n; i++) {
        char caption[512];
        snprintf(caption, sizeof(caption), "What quantization costs DIFF (%s) minus what it costs the Transformer (%s): each model's "
                 "retrieval accuracy quantized minus its own unquantized, DIFF's change minus the Transformer's; positive is DIFF "
                 "losing less, which the paper reports.", rows[c[i].a * seeds].study.name, rows[c[i].b * seeds].study.name);
        comparison_heading(f, c, i, caption, "scale | bits | N, R | " GAP_HEADER,
                           "in what quantization costs each (its retrieval accuracy quantized minus unquantized)",
                           "scale | bits | N, R | " GAP_HEADER);
        enum { CELLS = 2 * (FIG8_WIDTHS - 1) * FIG8_SETTINGS };  // scopes x quantized widths x settings: one family
        GapInterval g[CELLS];
        int retrieves[CELLS], k = 0;
        for (int scope = 0; scope < 2; scope++) {
            for (int w = 1; w < FIG8_WIDTHS; w++) {
                for (int st = 0; st < FIG8_SETTINGS; st++, k++) g[k] = quantization_gap(t, c[i].a, c[i].b, scope, w, st, change, &retrieves[k]);
            }
        }
        retrieval_family(g, retrieves, CELLS);
        k = 0;
        for (int scope = 0; scope < 2; scope++) {
            for (int w = 1; w < FIG8_WIDTHS; w++) {
                for (int st = 0; st < FIG8_SETTINGS; st++, k++) {
                    char cells[1024];
                    comparison_row(f, rows, seeds, c[i]);
                    report_printf(f, "| %s | %d | %d, %d |%s\n", SCOPE_NAMES[scope], FIG8_BITS[w], FIG8_N[st], FIG8_R[st],
                                  retrieval_cells(cells, sizeof(cells), &g[k], c[i].paper ? t->paper_direction : NAN, retrieves[k], 3));
                }
            }
        }
    }
    char family[256];
    if (n) report_printf(f, "\n%s %s\n", interval_note(seeds, "episodes"),
                         family_note(family, sizeof(family), 2 * (FIG8_WIDTHS - 1) * FIG8_SETTINGS, "cells (scale, bits, N and R)"));
    for (int k = 0; k < 4; k++) free(change[k]);
}

static void measure_models(Fig8* t, const NeedleSource* src, const Tokenizer* tok, const Shard* val, Registry* reg) {
    for (int i = 0; i < t->n_models; i++) {
        for (int scope = 0; scope < 2; scope++) {
            for (int b = 0; b < FIG8_WIDTHS; b++) {
                if (FIG8_BITS[b] == LOGIT_QUANT_UNQUANTIZED && scope > 0) {
                    t->res[i][scope][b] = t->res[i][0][b];  // unquantized: no scope
                    continue;
                }
                LogitQuant q = {FIG8_BITS[b] == LOGIT_QUANT_UNQUANTIZED ? 0 : FIG8_BITS[b], (QuantScope)scope};
                t->res[i][scope][b] = quantized_eval(&t->rows[i], src, tok, val, reg, q, t->windows, t->samples, t->context,
                                                     t->eval_seed);
            }
        }
    }
}

// The table's rows and the figure's data file: each row's mean (and seed std) per scope and width
static void write_rows(Fig8* t, Report* f, const char* dat) {
    int seeds = t->seeds;
    // metric[model][scope][bits][k]: loss, accuracy, retrieval N=1, retrieval N=4 R=2
    double (*metric)[2][FIG8_WIDTHS][4] = callocCheck(t->n_models, sizeof(*metric));
    for (int i = 0; i < t->n_models; i++) {
        for (int scope = 0; scope < 2; scope++) {
            for (int b = 0; b < FIG8_WIDTHS; b++) {
                const QuantResult* q = &t->res[i][scope][b];
                double v[4] = {q->lm.loss, q->lm.accuracy, q->retrieval[0], q->retrieval[1]};
                memcpy(metric[i][scope][b], v, sizeof(v));
            }
        }
    }
    int stride = (int)(sizeof(metric[0]) / sizeof(double));  // one model's metrics, in doubles
    static const int DIGITS[4] = {4, 4, 3, 3};
    char cell[4][48];
    DataFile dat_file;
    data_file_open(&dat_file, dat);
    FILE* g = dat_file.f;
    for (int k = 0; k < 2; k++) {
        t->lo[k] = INFINITY;
        t->hi[k] = -INFINITY;
    }
    for (int r = 0; r < t->n_rows; r++) {
        const char* name = t->rows[r * seeds].study.name;
        for (int scope = 0; scope < 2; scope++) {
            fprintf(g, "\"%s, %s\"\n", name, SCOPE_NAMES[scope]);
            for (int b = 0; b < FIG8_WIDTHS; b++) {
                Spread m[4];
                for (int k = 0; k < 4; k++) {
                    m[k] = spread_of(&metric[r * seeds][scope][b][k], seeds, stride);
                    spread_text(cell[k], sizeof(cell[k]), m[k], seeds, DIGITS[k]);
                }
                for (int k = 0; k < 2; k++) {
                    t->lo[k] = fmin(t->lo[k], m[k].mean - m[k].std);
                    t->hi[k] = fmax(t->hi[k], m[k].mean + m[k].std);
                }
                if (!(scope > 0 && FIG8_BITS[b] == LOGIT_QUANT_UNQUANTIZED)) {
                    report_printf(f, "| %s | %s | %d | %s | %s | %s | %s |\n", name,
                                  FIG8_BITS[b] == LOGIT_QUANT_UNQUANTIZED ? "none" : SCOPE_NAMES[scope], FIG8_BITS[b], cell[0],
                                  cell[1], cell[2], cell[3]);
                }
                fprintf(g, "%d %.6f %.6f %.6f %.6f %.6f %.6f %.6f %.6f\n", FIG8_BITS[b], m[0].mean, m[1].mean, m[2].mean, m[3].mean,
                        m[0].std, m[1].std, m[2].std, m[3].std);
            }
            fprintf(g, "\n\n");
        }
    }
    data_file_close(&dat_file);
    free(metric);
}

static void write_table(Fig8* t, const Section* preset, const NeedleOptions* opt, const char* dat, char* md, size_t md_size) {
    Report rep, *f = &rep;
    open_task_report(f, "fig8", 1, preset, t->rows, t->n_models, opt, t->samples,
                     "## Figure 8 (preset %s): attention logits quantized to fewer bits", opt->preset);
    report_printf(f, "Dynamic post-training absmax quantization of the attention logits before every softmax: Q = 2^(b-1) - 1, "
               "s = max|S| / Q recomputed on every forward, S_hat = s clamp(round(S / s), -Q, Q); DIFF's two maps separately. "
               "Main setting per tensor (one scale per head, map and sequence); ablation per row (one scale per query row). "
               "16 bits is the unquantized model. Validation loss and next-token accuracy on %d windows of %d tokens of "
               "held-out text; retrieval accuracy of the queried numbers at context %d, N = 1 (%d queries) and N = 4, R = 2 "
               "(%d queries), the same episodes at every width. The paper measured zero-shot HellaSwag with 3B models; "
               "it is not among this harness's data and models this small are not expected to beat its chance level, so "
               "retrieval (where both score well unquantized) and the language-model metrics show what quantization costs "
               "instead (docs/outliers.md).\n\n",
               t->windows, t->rows[0].study.cfg.model.seq_len, t->context, t->res[0][0][0].queries[0], t->res[0][0][0].queries[1]);
    seeds_caption(f, t->seeds);
    report_printf(f, "| Model | scale | bits | valid loss | next-token acc | retrieval N=1 | retrieval N=4, R=2 |\n");
    report_printf(f, "|---|---|---|---|---|---|---|\n");
    write_rows(t, f, dat);
    report_printf(f, "\nPaper (3B, HellaSwag): DIFF keeps its accuracy down to 6 bits, Transformer drops sharply at 6 bits; "
               "4-bit DIFF is about as accurate as 6-bit Transformer and about 25%% better than 4-bit Transformer.\n");
    write_verdicts(f, t);
    report_close(&rep);
    snprintf(md, md_size, "%s", rep.path);
}

static void write_figure(const Fig8* t, const NeedleOptions* opt, const char* dat, const char* md) {
    static const double FLOOR_SPAN[2] = {0.05, 0.02};
    GnuplotVars vars;
    gnuplot_init(&vars);
    gnuplot_input(&vars, "data", dat);
    gnuplot_number(&vars, "series", 2 * t->n_rows);
    gnuplot_number(&vars, "seeds", t->seeds);
    for (int k = 0; k < 2; k++) {
        double mid = 0.5 * (t->lo[k] + t->hi[k]), half = 0.5 * fmax(t->hi[k] - t->lo[k], FLOOR_SPAN[k]) * 1.4;  // 20% headroom each side
        char name[16];
        snprintf(name, sizeof(name), "lo%d", k + 2);
        gnuplot_number(&vars, name, k == 1 ? fmax(0, mid - half) : mid - half);
        snprintf(name, sizeof(name), "hi%d", k + 2);
        gnuplot_number(&vars, name, k == 1 ? fmin(1, mid + half) : mid + half);
    }
    attention_numbers(&vars, t->rows, t->n_rows, t->seeds);
    char png[4400], text[4400];
    needle_output_path(png, sizeof(png), opt, opt->plots, "fig8", ".png");
    gnuplot_output(&vars, "out", png);
    snprintf(text, sizeof(text), "Figure 8, preset %s: attention logits quantized (solid: per tensor, dashed: per row); %d seed%s%s",
             opt->preset, t->seeds, t->seeds > 1 ? "s" : "", t->seeds > 1 ? ", error bars: seed std" : "");
    gnuplot_string(&vars, "title_text", text);
    gnuplot("fig8.gp", &vars);
    printf("\nwrote %s, %s\n", md, png);
}

static void free_results(Fig8* t) {
    for (int i = 0; i < t->n_models; i++) {
        for (int scope = 0; scope < 2; scope++) {
            for (int b = 0; b < FIG8_WIDTHS; b++) {
                if (scope > 0 && FIG8_BITS[b] == LOGIT_QUANT_UNQUANTIZED) continue;  // scope 0's, copied
                free(t->res[i][scope][b].right);
                free(t->res[i][scope][b].asked);
            }
        }
    }
    free(t->res);
}

void task_fig8(Row* rows, int n_rows, int seeds, const NeedleSource* src, const Tokenizer* tok, const Shard* val,
                      Registry* reg, const Section* preset, const NeedleOptions* opt, const NeedlePaper* paper) {
    Fig8 t = {rows, n_rows, seeds, n_rows * seeds, section_int(preset, "context", opt->recipe),
              section_int(preset, "fig8_samples", opt->recipe), section_int(preset, "fig8_windows", opt->recipe),
              section_int(preset, "eval_seed", opt->recipe), NULL, {0}, {0}, paper->fig8_direction};
    for (int i = 0; i < t.n_models; i++) {
        if ((val->n_tokens - 1) / rows[i].study.cfg.model.seq_len < (size_t)t.windows) {
            die("%s: [preset %s] fig8_windows = %d needs %zu validation tokens at seq_len %d; the shard has %zu", opt->recipe,
                preset->name, t.windows, (size_t)t.windows * rows[i].study.cfg.model.seq_len + 1, rows[i].study.cfg.model.seq_len, val->n_tokens);
        }
    }
    t.res = callocCheck(t.n_models, sizeof(*t.res));
    measure_models(&t, src, tok, val, reg);
    char dat[4200], md[4200];
    needle_output_path(dat, sizeof(dat), opt, opt->results, "fig8", ".dat");
    write_table(&t, preset, opt, dat, md, sizeof(md));
    write_figure(&t, opt, dat, md);
    free_results(&t);
}
