#include "verdict.h"

#include <gsl/gsl_cdf.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_integration.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/util.h"

double t_two_sided_p(double t, double df) { return 2 * gsl_cdf_tdist_Q(fabs(t), df); }

double t_quantile(double prob, double df) { return gsl_cdf_tdist_Pinv(prob, df); }

// Power of a two-sided t-test (critical value tc, df degrees of freedom) at noncentrality
// ncp: T' = (Z + ncp) / (V / √df) with V ~ χ(df), so the power is the mean over V of
// Φ(ncp − tc·V/√df) + Φ(−ncp − tc·V/√df), integrated against χ's density
typedef struct {
    double df, tc, ncp;
} PowerArgs;

static double power_integrand(double v, void* params) {
    const PowerArgs* a = params;
    if (v <= 0) return 0;
    double log_chi = (a->df - 1) * log(v) - 0.5 * v * v - (0.5 * a->df - 1) * M_LN2 - lgamma(0.5 * a->df);
    double s = a->tc * v / sqrt(a->df);
    return exp(log_chi) * (gsl_cdf_ugaussian_P(a->ncp - s) + gsl_cdf_ugaussian_P(-a->ncp - s));
}

static double t_power(gsl_integration_workspace* w, double df, double tc, double ncp) {
    PowerArgs a = {df, tc, ncp};
    gsl_function f = {power_integrand, &a};
    double power, err;
    // χ(df) lies within 12 of √df but for 1e-30 of its mass (its spread is about 1/√2): a
    // finite range, where an infinite one would miss the narrow peak of a large df
    double mid = sqrt(df);
    int status = gsl_integration_qags(&f, fmax(0, mid - 12), mid + 12, 1e-12, 1e-10, w->limit, w, &power, &err);
    if (status && err > 1e-6) die("the power of a t-test with %g degrees of freedom did not integrate: %s", df, gsl_strerror(status));
    return power;
}

double t_detectable_ncp(double df, double alpha, double power) {
    // a table asks for the same few df again and again; each answer is ~60 integrals
    static double cached[VERDICT_MAX_SEEDS];
    int key = df == floor(df) && df >= 1 && df < VERDICT_MAX_SEEDS && alpha == VERDICT_ALPHA && power == VERDICT_POWER ? (int)df : 0;
    if (key && cached[key] > 0) return cached[key];
    gsl_set_error_handler_off();  // a status is returned and checked instead of an abort
    gsl_integration_workspace* w = gsl_integration_workspace_alloc(256);  // one for the whole search
    if (!w) die("out of memory integrating a t-test's power");
    double tc = t_quantile(1 - alpha / 2, df), lo = 0, hi = 1;
    while (t_power(w, df, tc, hi) < power) {  // power rises with ncp, to 1
        hi *= 2;
        if (hi > 1e6) die("no noncentrality gives a t-test with %g degrees of freedom power %g", df, power);
    }
    for (int i = 0; i < 60; i++) {
        double mid = 0.5 * (lo + hi);
        if (t_power(w, df, tc, mid) < power) lo = mid;
        else hi = mid;
    }
    gsl_integration_workspace_free(w);
    if (key) cached[key] = hi;
    return hi;
}

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

// One seed: a percentile bootstrap over its units, the evaluation's noise alone
static void unit_bootstrap(const Paired* p, int seed, GapInterval* g) {
    uint64_t rng = 0x5eedb007u;
    int* pick = mallocCheck((size_t)p->units * sizeof(int));
    double* draws = mallocCheck(BOOTSTRAP_DRAWS * sizeof(double));
    int n = 0;
    for (int d = 0; d < BOOTSTRAP_DRAWS; d++) {
        for (int u = 0; u < p->units; u++) pick[u] = (int)(rng_next(&rng) % (uint64_t)p->units);
        double gap = seed_gap(p, seed, pick);
        // a draw of units that all lack a denominator (no AR-Hit token drawn) has no value
        if (!isnan(gap)) draws[n++] = gap;
    }
    if (n >= BOOTSTRAP_DRAWS / 2) {
        sort_doubles(draws, n);
        g->lo = draws[(int)floor(0.025 * (n - 1))];
        g->hi = draws[(int)ceil(0.975 * (n - 1))];
    }
    free(pick);
    free(draws);
}

GapInterval paired_gap(const Paired* p) {
    GapInterval g = {.gap = NAN, .sd = NAN, .lo = NAN, .hi = NAN, .p = NAN, .p_holm = NAN, .mdg = NAN};
    int only = -1;  // the seed, when one alone has a value
    double* d = mallocCheck((size_t)(p->seeds > 0 ? p->seeds : 1) * sizeof(double));  // the seeds' differences
    double sum = 0;
    for (int s = 0; s < p->seeds; s++) {
        double gap = seed_gap(p, s, NULL);
        if (isnan(gap)) continue;
        only = s;
        if (g.n < VERDICT_MAX_SEEDS) g.seed_gap[g.n] = gap;
        d[g.n++] = gap;
        sum += gap;
    }
    if (g.n == 0) {
        free(d);
        return g;
    }
    g.gap = sum / g.n;
    double ss = 0;  // about the mean, a second pass: no cancellation
    for (int i = 0; i < g.n; i++) {
        g.same_sign += g.gap > 0 ? d[i] > 0 : g.gap < 0 ? d[i] < 0 : 0;
        ss += (d[i] - g.gap) * (d[i] - g.gap);
    }
    free(d);
    if (g.n == 1) {
        if (p->units > 1) unit_bootstrap(p, only, &g);
        return g;
    }
    double df = g.n - 1;
    g.sd = sqrt(ss / df);
    double se = g.sd / sqrt(g.n), half = t_quantile(1 - VERDICT_ALPHA / 2, df) * se;
    g.lo = g.gap - half;
    g.hi = g.gap + half;
    // identical differences: no spread, so the test is decided by the gap alone
    g.p = se > 0 ? t_two_sided_p(g.gap / se, df) : g.gap == 0 ? 1 : 0;
    g.p_holm = g.p;
    g.mdg = t_detectable_ncp(df, VERDICT_ALPHA, VERDICT_POWER) * se;
    return g;
}

static int by_p(const void* a, const void* b) {
    double x = (*(GapInterval* const*)a)->p, y = (*(GapInterval* const*)b)->p;
    return (x > y) - (x < y);
}

int verdict_holm(GapInterval* cells, int n) {
    GapInterval** tested = mallocCheck((size_t)(n > 0 ? n : 1) * sizeof(GapInterval*));
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!isnan(cells[i].p)) tested[m++] = &cells[i];
        else cells[i].p_holm = NAN;
    }
    qsort(tested, m, sizeof(GapInterval*), by_p);
    double running = 0;  // adjusted p-values never fall down the ordered list
    for (int i = 0; i < m; i++) {
        running = fmax(running, fmin(1, (m - i) * tested[i]->p));
        tested[i]->p_holm = running;
    }
    free(tested);
    return m;
}

double tost_p(const GapInterval* g, double margin) {
    if (g->n < 2 || isnan(g->sd)) return NAN;
    double se = g->sd / sqrt(g->n), df = g->n - 1;
    if (se == 0) return fabs(g->gap) < margin ? 0 : 1;
    double p_low = gsl_cdf_tdist_Q((g->gap + margin) / se, df);  // against gap <= -margin
    double p_high = gsl_cdf_tdist_P((g->gap - margin) / se, df);  // against gap >= +margin
    return fmax(p_low, p_high);
}

const char* gap_word(const GapInterval* g, double paper_gap) {
    if (isnan(g->gap)) return "n/a (no data)";
    if (g->n == 1) return "no verdict (one seed)";
    if (g->n < VERDICT_SEEDS) return "n too small for a verdict";
    if (!(g->p_holm < VERDICT_ALPHA)) return "within noise";
    if (isnan(paper_gap) || paper_gap == 0) return g->gap < 0 ? "lower" : "higher";
    return (g->gap > 0) == (paper_gap > 0) ? "same direction" : "opposite";
}

const char* interval_text(char* out, int n, const GapInterval* g, int digits) {
    if (isnan(g->lo)) snprintf(out, n, "n/a");
    else snprintf(out, n, "[%+.*f, %+.*f]", digits, g->lo, digits, g->hi);
    return out;
}

// A p-value as a table shows it after its name: "= " and two significant digits, "< 0.001" below
static const char* p_text(char* out, size_t n, double p) {
    if (p < 0.001) snprintf(out, n, "< 0.001");
    else snprintf(out, n, "= %.2g", p);
    return out;
}

// Appends to out (n bytes) what fits
static void append(char* out, size_t n, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char* out, size_t n, const char* fmt, ...) {
    size_t used = strlen(out);
    if (used + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + used, n - used, fmt, ap);
    va_end(ap);
}

const char* gap_cells(char* out, size_t n, const GapInterval* g, double paper_gap, double margin, int digits) {
    out[0] = 0;
    if (isnan(g->gap)) {
        append(out, n, " n/a | n/a | - | - | %s |", gap_word(g, paper_gap));
        return out;
    }
    char interval[96], p[32], holm[32];
    append(out, n, " %+.*f | %s%s |", digits, g->gap, interval_text(interval, sizeof(interval), g, digits),
           g->n == 1 && !isnan(g->lo) ? " (evaluation noise only)" : "");
    enum { SHOWN = 8 };  // per-seed values shown; more are counted
    for (int i = 0; i < g->n && i < SHOWN; i++) append(out, n, "%s%+.*f", i ? ", " : " ", digits, g->seed_gap[i]);
    if (g->n > SHOWN) append(out, n, ", … (%d in all)", g->n);
    append(out, n, " |");
    if (g->n == 1) {
        append(out, n, " 1 seed |");
    } else {
        const char* way = g->gap > 0 ? "higher" : g->gap < 0 ? "lower" : "at 0";
        append(out, n, " %d of %d seeds %s; t p %s", g->gap == 0 ? 0 : g->same_sign, g->n, way, p_text(p, sizeof(p), g->p));
        if (g->p_holm != g->p && !isnan(g->p_holm)) append(out, n, " (Holm %s)", p_text(holm, sizeof(holm), g->p_holm));
        append(out, n, "; MDG %.*f |", digits, g->mdg);
    }
    append(out, n, " ");
    if (margin > 0 && g->n >= 2) {
        double tp = tost_p(g, margin);
        append(out, n, "%s within ±%g (TOST p %s); ", tp < VERDICT_ALPHA ? "equivalent" : "not shown equivalent", margin,
               p_text(p, sizeof(p), tp));
    }
    append(out, n, "%s", gap_word(g, paper_gap));
    if (!isnan(paper_gap) && paper_gap != 0 && fabs(paper_gap) < g->mdg) append(out, n, "; underpowered for the paper's gap");
    append(out, n, " |");
    return out;
}

const char* interval_note(int seeds, const char* units) {
    static char note[1400];
    if (seeds > 1) {
        snprintf(note, sizeof(note), "Rows are paired: seed s of one row against seed s of the other (the same data order "
                 "and evaluation %s). Gap = mean over the seeds of the paired difference; 95%% interval = Student's t on the "
                 "per-seed differences (n − 1 degrees of freedom); t p = the two-sided t-test of a zero gap; MDG = the smallest "
                 "gap that test finds 80%% of the time at this spread and n. A direction (\"same direction\", \"opposite\" "
                 "against the paper's gap, or \"higher\", \"lower\") is stated only from %d seeds and where p < 0.05; below %d "
                 "seeds the cell says what the seeds show. \"Underpowered for the paper's gap\": the paper's gap is below the "
                 "MDG. \"Equivalent within ±m\": both one-sided t-tests (TOST, 5%%) put the gap inside ±m.",
                 units, VERDICT_SEEDS, VERDICT_SEEDS);
    } else {
        snprintf(note, sizeof(note), "One seed: rows are paired on the same evaluation %s, and the 95%% interval "
                 "(percentile bootstrap over %s, %d draws) covers the evaluation's noise only, not the seed-to-seed noise of "
                 "training, so no verdict is drawn; `--seeds N` (make SEEDS=N) measures that, and a direction needs %d.",
                 units, units, BOOTSTRAP_DRAWS, VERDICT_SEEDS);
    }
    return note;
}

const char* family_note(char* out, size_t n, int cells, const char* family) {
    snprintf(out, n, "Each comparison's %s (%d at most) are one family: a cell's direction needs its Holm-adjusted p (shown as "
             "Holm) below 0.05.", family, cells);
    return out;
}
