// One verdict policy for every table: two rows compared on paired units.
//
// Rows are paired by seed (row a's seed s against row b's seed s: the same data order, and the
// same initial weights wherever their tensors coincide) and, within a seed, by evaluation unit
// (the same validation windows, the same needle episodes). A seed's value of a row is
// sum(num) / sum(den) over its units (a mean loss over tokens, an accuracy over queries, a
// mean attention share over episodes); the gap is the mean over seeds of a's value minus b's.
//
// With n >= 2 seeds the 95% interval is Student's t on the n per-seed differences (n - 1
// degrees of freedom): gap ± t(0.975, n - 1)·s_d/√n. Each seed's difference already holds its
// evaluation noise, so units are not resampled on top (that would count that noise twice),
// and seeds are not bootstrapped (with 3 seeds a percentile bootstrap is the [min, max] of the
// three, a 77% interval). With one seed the interval is a percentile bootstrap over its units:
// the evaluation's noise alone, which says nothing of training's seed-to-seed noise, so it
// carries no verdict.
//
// Words are earned: a direction ("same direction", "opposite" against the paper's gap, or
// "higher", "lower" where the paper has none) only from VERDICT_SEEDS seeds on, and only
// where the t-test rejects a zero gap at 5% (after Holm's correction inside a family of cells,
// verdict_holm). Below that a cell states what the seeds show ("3 of 3 seeds higher; t p =
// 0.018") and that n is too small. Every gap also states its minimum detectable gap (80%
// power, two-sided 5% t-test, the observed s_d and n) and, where the paper's gap is smaller,
// that the comparison is underpowered for it. A claim that something "barely matters" states
// a margin m and is judged by two one-sided t-tests (TOST, 5% each): "equivalent within ±m"
// when both reject, else "not shown equivalent".
#ifndef VERDICT_H
#define VERDICT_H

#include <stddef.h>

#define BOOTSTRAP_DRAWS 2000  // one seed's evaluation-noise interval
#define VERDICT_SEEDS 5       // the fewest seeds a directional word needs
#define VERDICT_MAX_SEEDS 256
#define VERDICT_ALPHA 0.05
#define VERDICT_POWER 0.80

typedef struct {
    int seeds, units;
    // (seeds, units) each: unit u of seed s at [s * units + u]; a unit whose den is 0 holds
    // nothing; a_den or b_den NULL: every unit counts once (a mean over units)
    const double *a_num, *a_den, *b_num, *b_den;
} Paired;

typedef struct {
    int n;          // seeds whose difference has a value
    double gap;     // mean over those seeds of a - b; NaN when none has a value
    double sd;      // sample std of the per-seed differences (n >= 2), NaN below
    double lo, hi;  // the 95% interval (see above); NaN when there is none (one seed of one unit)
    double p;       // two-sided one-sample t-test of a zero mean difference (n >= 2), NaN below
    double p_holm;  // p after Holm's correction in the cell's family (verdict_holm); p alone
    double mdg;     // minimum detectable |gap| at 80% power for sd and n (n >= 2), NaN below
    int same_sign;  // seeds whose difference has the sign of the mean (a zero one counts for neither)
    double seed_gap[VERDICT_MAX_SEEDS];  // each seed's difference, in seed order (the first
                                         // VERDICT_MAX_SEEDS of more: tables show a few)
} GapInterval;

GapInterval paired_gap(const Paired* p);
// Holm's step-down correction over a family of n cells: each cell's p_holm becomes its adjusted
// p-value (cells without a p keep NaN and do not count in the family); returns the cells counted
int verdict_holm(GapInterval* cells, int n);

// Student's t distribution, two-sided p of t with df degrees of freedom, and its quantile
double t_two_sided_p(double t, double df);
double t_quantile(double prob, double df);
// The noncentrality ncp at which a two-sided alpha t-test with df degrees of freedom rejects
// with probability power: the minimum detectable gap is ncp·s_d/√n with df = n - 1
double t_detectable_ncp(double df, double alpha, double power);
// TOST p-value of equivalence within ±margin (n >= 2; NaN below): the larger of the two
// one-sided t-tests' p
double tost_p(const GapInterval* g, double margin);

// The word alone: "within noise", "same direction", "opposite", "higher", "lower",
// "n too small for a verdict", "no verdict (one seed)", "n/a (no data)"
const char* gap_word(const GapInterval* g, double paper_gap);
// The cells gap_cells writes, for a table's header: 5 columns
#define GAP_HEADER "gap | 95% interval | per seed | seeds; t p; min. detectable | verdict"
#define GAP_HEADER_RULE "---|---|---|---|---"
// The 5 cells of one gap, each ending "|" (the first starting with a space), digits decimals:
// the gap; its interval; the per-seed differences; "k of n seeds higher; t p = ...; MDG ..."
// (Holm's adjusted p beside t's where the cell is in a family); the verdict, with "underpowered
// for the paper's gap" where |paper_gap| < MDG and, where margin > 0, the equivalence test
const char* gap_cells(char* out, size_t n, const GapInterval* g, double paper_gap, double margin, int digits);
// "[-0.012, +0.004]", or "n/a" without an interval (gap_cells adds "(evaluation noise only)" to
// one seed's)
const char* interval_text(char* out, int n, const GapInterval* g, int digits);
// The sentences a table states under its verdicts: how rows are paired and what the interval,
// the p-values, the minimum detectable gap and the words mean
const char* interval_note(int seeds, const char* units);
// The sentence under a family of cells: how many there are (at most) and that Holm's correction holds
const char* family_note(char* out, size_t n, int cells, const char* family);

#endif
