// The needle tasks' shared part (private to studies/needle/): a row's models, the
// retrieval cells and their records, the report's provenance, the seeds' verdicts, and each
// task (table2.c, fig5.c, table3.c, fig8.c), which runner.c calls.
#ifndef NEEDLE_TASK_H
#define NEEDLE_TASK_H

#include "../../data/needle.h"
#include "../../eval/retrieval.h"
#include "../registry.h"
#include "../study.h"
#include "../report.h"
#include "../verdict.h"
#include "needle_tasks.h"

#define N_DEPTHS 5
#define MAX_LENGTHS 16
#define COPY_HALF 100
extern const double DEPTHS[N_DEPTHS];
// Table 2's settings (N, R)
#define N_SETTINGS 4
extern const int SETTING_N[N_SETTINGS], SETTING_R[N_SETTINGS];
// The paper's numbers the tables stand beside, [Transformer, DIFF], from the recipe's claims:
// Table 2's accuracies per setting ([claim table2], 3B models, 4K context) and Table 3's
// attention to the answer and to the noise per depth ([claim table3_answer], [claim table3_noise]);
// and the direction of the claims Figures 5 and 8 make without a number ([claim fig5], [claim
// fig8]: `direction = diff ahead` reads as +1, the sign of a gap DIFF minus the Transformer in
// the paper's favour; `transformer ahead` -1)
typedef struct {
    double table2[2][N_SETTINGS], answer[2][N_DEPTHS], noise[2][N_DEPTHS];
    double fig5_direction, fig8_direction;
} NeedlePaper;
// Dies naming the recipe, claim and key where one is missing or not the count of numbers it needs
NeedlePaper needle_paper(const Recipe* r, const char* path);

typedef struct {
    StudyModel study;  // the recipe's row at one seed: name, config, run, checkpoint
    int against;       // the row (group) its `against` key names, that the verdicts read it against; -1 none
    Config copy_cfg;   // the copy stage, whose checkpoint starts study.cfg (init_from)
    Model model;
    Backend* be;     // the instance model computes on (fp32)
    CopyScore copy;  // the least retrieval needs
} Row;


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

uint64_t episode_seed(int eval_seed, int length, int n_needles, int n_queries, int depth, int sample);
// A task's models and the preset's episode counts: rows[g * seeds + s] is row g's seed s
typedef struct {
    Row* rows;
    int n_rows, seeds, n_models;  // n_models = n_rows x seeds
    int context, samples;         // the preset's context length and samples per cell
} TaskModels;
TaskModels task_models(Row* rows, int n_rows, int seeds, const Section* preset, const NeedleOptions* opt);

void ensure_cache(Model* m, const Episode* e);
EpisodeRecord* add_record(Records* r);
void store_records(Registry* reg, int64_t run, const char* task, Records* r);
void run_cells(Row* row, const NeedleSource* src, const Tokenizer* tok, Cell* cells, int n_cells, int samples,
               int eval_seed, Records* records);
// Each episode's queries answered right and asked, from run_cells' records of those cells:
// right[c * samples + e] for episode e of cell c (the verdicts' units)
void episode_counts(const Records* rec, const Cell* cells, int n_cells, int samples, double* right, double* asked);
// A task's output <dir>/<name>_<preset><suffix>; of a study of some rows (--rows, listed in the
// recipe's order) <dir>/<name>_<preset>+<row>+<row><suffix>, so that it never replaces the
// whole recipe's ('+' is in no preset's or row's name)
void needle_output_path(char* out, size_t n, const NeedleOptions* opt, const char* dir, const char* name, const char* suffix);
// A task's report: results/<task>_<preset>.md (needle_output_path; and stdout when to_stdout), its heading (a
// printf format), the preset's note and the provenance every task states
void open_task_report(Report* rep, const char* task, int to_stdout, const Section* preset, const Row* rows, int n_rows,
                      const NeedleOptions* opt, int samples, const char* heading, ...) __attribute__((format(printf, 9, 10)));
// index of the paper's row a model stands beside: 0 Transformer, 1 DIFF, -1 none (a variant the
// paper did not measure)
int paper_row(const Row* row);
// The paper's Transformer or DIFF value for paper row p, NaN for p = -1
double paper_value(double transformer, double diff, int p);
// att<i>: the colour of each row's variant, paper<i>: that of the paper's row it meets (its own
// where none); the strings names: the rows' names, and papers: each row's paper row
// ('Transformer', 'DIFF' or 'none')
void attention_numbers(GnuplotVars* vars, const Row* rows, int n_rows, int seeds);
// seeds: row g's models are rows[g * seeds .. g * seeds + seeds - 1] (spread_of, report.h)
// What a table's ± means, for its caption
void seeds_caption(Report* f, int seeds);
// The first row (group) standing beside the paper's Transformer (p = 0) or DIFF (p = 1), or -1
int paper_group(const Row* rows, int n_rows, int seeds, int p);
// The pairs of rows (groups) a task's verdicts compare, a minus b: DIFF minus the Transformer
// (paper = 1: against the paper's gap) when the recipe has both, then each row minus the row its
// `against` key names (paper = 0: the paper has no number, the verdict reads the direction).
// Returns how many, at most n_rows + 1.
typedef struct {
    int a, b, paper;
} Comparison;
int task_comparisons(const Row* rows, int n_rows, int seeds, Comparison* out);
// The heading of comparison k's table: for DIFF minus the Transformer paper_caption and
// paper_columns ("a | b | c"); for the rows read against another row, one table for all of them,
// once before the first, comparing them in `what`, its columns 'row | against | ' + columns
void comparison_heading(Report* f, const Comparison* c, int k, const char* paper_caption, const char* paper_columns,
                        const char* what, const char* columns);
// A comparison's table row starts with the two rows' names where it reads a row against another
void comparison_row(Report* f, const Row* rows, int seeds, Comparison c);
// A retrieval gap's cells (gap_cells), or the gap alone with "n/a (neither retrieves)" when no
// model of either row answered a query right: models that retrieve nothing agree exactly, which
// says nothing about the paper's gap
const char* retrieval_cells(char* out, size_t n, const GapInterval* g, double paper_gap, int retrieves, int digits);
// Holm's correction over a family of n retrieval cells, those where neither row retrieves left out
// of it; returns the cells tested
int retrieval_family(GapInterval* cells, const int* retrieves, int n);

// The tasks, on rows[n_rows * seeds] trained and loaded
void task_table2(Row* rows, int n_rows, int seeds, const NeedleSource* src, const Tokenizer* tok, Registry* reg,
                 const Section* preset, const NeedleOptions* opt, const NeedlePaper* paper);
void task_fig5(Row* rows, int n_rows, int seeds, const NeedleSource* src, const Tokenizer* tok, Registry* reg,
               const Section* preset, const NeedleOptions* opt, const NeedlePaper* paper);
void task_table3(Row* rows, int n_rows, int seeds, const NeedleSource* src, const Tokenizer* tok, Registry* reg,
                 const Section* preset, const NeedleOptions* opt, const NeedlePaper* paper);
void task_fig8(Row* rows, int n_rows, int seeds, const NeedleSource* src, const Tokenizer* tok, const Shard* val,
               Registry* reg, const Section* preset, const NeedleOptions* opt, const NeedlePaper* paper);

#endif
