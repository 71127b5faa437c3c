#include "verdict.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../base/util.h"

// Row a's minus row b's value on seed s, its units drawn by pick (units entries) or all of them
static double seed_gap(const Paired* p, int s, const int* pick) {
    double an = 0, ad = 0, bn = 0, bd = 0;
    for (int k = 0; k < p->units; k++) {
        size_t u = (size_t)s * p->units + (pick ? pick[k] : k);
        an += p->a_num[u];
        ad += p->a_den ? p->a_den[u] : 1;
        bn += p->b_num[u];
        bd += p->b_den ? p->b_den[u] : 1;
    }
    return ad > 0 && bd > 0 ? an / ad - bn / bd : NAN;
}

GapInterval paired_gap(const Paired* p) {
    GapInterval g = {0, NAN, NAN};
    for (int s = 0; s < p->seeds; s++) g.gap += seed_gap(p, s, NULL) / p->seeds;
    if (isnan(g.gap) || (p->seeds < 2 && p->units < 2)) return g;
    uint64_t rng = 0x5eedb007u;
    int* pick = mallocCheck((size_t)p->units * sizeof(int));
    double* draws = mallocCheck(BOOTSTRAP_DRAWS * sizeof(double));
    int n = 0;
    for (int d = 0; d < BOOTSTRAP_DRAWS; d++) {
        double sum = 0;
        for (int k = 0; k < p->seeds; k++) {
            int s = p->seeds > 1 ? (int)(rng_next(&rng) % (uint64_t)p->seeds) : 0;
            for (int u = 0; u < p->units; u++) pick[u] = p->units > 1 ? (int)(rng_next(&rng) % (uint64_t)p->units) : u;
            sum += seed_gap(p, s, pick);
        }
        // a draw of units that all lack a denominator (no AR-Hit token drawn) has no value
        if (!isnan(sum)) draws[n++] = sum / p->seeds;
    }
    if (n >= BOOTSTRAP_DRAWS / 2) {
        sort_doubles(draws, n);
        g.lo = draws[(int)floor(0.025 * (n - 1))];
        g.hi = draws[(int)ceil(0.975 * (n - 1))];
    }
    free(pick);
    free(draws);
    return g;
}

const char* gap_verdict(GapInterval g, double paper_gap) {
    if (isnan(g.gap)) return "n/a (no data)";
    if (isnan(g.lo)) return "n/a (no interval)";
    if (g.lo <= 0 && g.hi >= 0) return "within noise";
    if (isnan(paper_gap) || paper_gap == 0) return g.gap < 0 ? "lower" : "higher";
    return (g.gap > 0) == (paper_gap > 0) ? "same direction" : "opposite";
}

const char* interval_text(char* out, int n, GapInterval g, int digits) {
    if (isnan(g.lo)) snprintf(out, n, "n/a");
    else snprintf(out, n, "[%+.*f, %+.*f]", digits, g.lo, digits, g.hi);
    return out;
}

const char* interval_note(int seeds, const char* units) {
    static char note[768];
    if (seeds > 1) {
        snprintf(note, sizeof(note), "Rows are paired: seed s of one row against seed s of the other (the same data order "
                 "and evaluation %s). Gap = mean over the %d seeds of the paired difference; 95%% interval = percentile "
                 "bootstrap over seeds and, within each, over %s (%d draws). \"Within noise\" when the interval holds 0; "
                 "otherwise the direction against the paper's gap.", units, seeds, units, BOOTSTRAP_DRAWS);
    } else {
        snprintf(note, sizeof(note), "One seed: rows are paired on the same evaluation %s, and the 95%% interval "
                 "(percentile bootstrap over %s, %d draws) covers the evaluation's sampling only, not the seed-to-seed "
                 "noise of training; `--seeds N` (make SEEDS=N) measures that. \"Within noise\" when the interval holds 0; "
                 "otherwise the direction against the paper's gap.", units, units, BOOTSTRAP_DRAWS);
    }
    return note;
}
