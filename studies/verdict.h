// One verdict policy for every table: two rows compared on paired units.
//
// Rows are paired by seed (row a's seed s against row b's seed s: the same data order, and the
// same initial weights wherever their tensors coincide) and, within a seed, by evaluation unit
// (the same validation windows, the same needle episodes). A seed's value of a row is
// sum(num) / sum(den) over its units (a mean loss over tokens, an accuracy over queries, a
// mean attention share over episodes); the gap is the mean over seeds of a's value minus b's.
// Its 95% interval is a percentile bootstrap that draws seeds with replacement and, within each
// drawn seed, units with replacement, BOOTSTRAP_DRAWS times from a fixed seed (the same table
// twice has the same intervals). With one seed the interval covers the evaluation's sampling
// only, not the training's seed-to-seed noise; interval_note says so in the table.
//
// The verdict reads the interval: "within noise" when it holds 0, otherwise the gap's
// direction against the paper's: "same direction" or "opposite".
#ifndef VERDICT_H
#define VERDICT_H

#define BOOTSTRAP_DRAWS 2000

typedef struct {
    int seeds, units;
    // (seeds, units) each: unit u of seed s at [s * units + u]; a unit whose den is 0 holds
    // nothing; a_den or b_den NULL: every unit counts once (a mean over units)
    const double *a_num, *a_den, *b_num, *b_den;
} Paired;

typedef struct {
    double gap;     // mean over seeds of a - b; NaN when a row has no unit with a denominator
    double lo, hi;  // the 95% interval; NaN when there is nothing to resample (one seed of one unit)
} GapInterval;

GapInterval paired_gap(const Paired* p);
// "within noise", "same direction", "opposite" (against paper_gap), "lower" / "higher" where the
// paper has no gap (paper_gap NaN or 0), "n/a (no data)" or "n/a (no interval)"
const char* gap_verdict(GapInterval g, double paper_gap);
// "[-0.012, +0.004]", or "n/a" without an interval
const char* interval_text(char* out, int n, GapInterval g, int digits);
// The sentence a table states under its verdicts: how rows are paired and what was resampled
const char* interval_note(int seeds, const char* units);

#endif
