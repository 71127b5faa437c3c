// The AR-Hit classifier on hand-made windows and the threshold; the loss slices and 8 position bins
// of hand-made windows (16 and 12 tokens); the verdict policy on cases known by hand (the review's
// 3-seed t-intervals, t's p and TOST against 2 df's closed forms, Holm's adjusted p, words only
// from 5 seeds, one seed's evaluation-noise bootstrap), the minimum detectable gap against a
// simulated t-test's power, and the interval's coverage of a zero gap simulated (95%, where the
// bootstrap it replaced held 77%); the spike watch's z-scores by hand (6 for 8 after
// alternating 1 and 3; none before 32 values or without spread). The registry's own tests are
// test_registry's.
#define _DEFAULT_SOURCE
#include <string.h>

#include "../eval/arhit.h"
#include "../run/spikes.h"
#include "../studies/verdict.h"
#include "../base/util.h"
#include "check.h"

static void test_arhit(void) {
    BigramTable table = {8, callocCheck(64, sizeof(uint32_t)), 2.0};
    table.counts[5 * 8 + 6] = 1;  // rare: AR hit when repeated
    table.counts[1 * 8 + 2] = 3;  // frequent in training: never an AR hit
    //            i: 0  1  2  3  4  5  6  7  8
    int window[9] = {5, 6, 1, 2, 5, 6, 1, 2, 6};
    unsigned char hit[8];
    arhit_classify(&table, window, 8, hit);
    // hit[t] is about token window[t + 1]: (5,6) repeats at t = 4, (1,2) repeats at t = 6 but
    // is frequent, (6,1) repeats at t = 5 with count 0 (rare); (2,6) at t = 7 is new
    unsigned char expect[8] = {0, 0, 0, 0, 1, 1, 0, 0};
    CHECK(memcmp(hit, expect, 8) == 0, "AR hits %d%d%d%d%d%d%d%d", hit[0], hit[1], hit[2], hit[3], hit[4], hit[5], hit[6], hit[7]);
    // the earlier occurrence must lie strictly before: a bigram overlapping itself (7,7,7) hits at its second occurrence
    int run[4] = {7, 7, 7, 7};
    arhit_classify(&table, run, 3, hit);
    CHECK(hit[0] == 0 && hit[1] == 1 && hit[2] == 1, "repeated (7,7): %d %d %d", hit[0], hit[1], hit[2]);
    CHECK(fabs(arhit_threshold(10000000000ull) - 1250.0) < 1e-9 && fabs(arhit_threshold(4808481) - 0.601060125) < 1e-6,
          "threshold rescales 1250 per 10B tokens");
    bigrams_free(&table);
}

// Position bins and slices of one window, summed by hand
static void test_window_loss(void) {
    float loss[16];
    unsigned char hit[16] = {0};
    for (int t = 0; t < 16; t++) loss[t] = (float)(t + 1);
    hit[3] = hit[12] = 1;
    WindowLoss w = {{0}, {0}};
    window_loss_add(&w, loss, hit, 16);
    CHECK(w.sum[SLICE_ALL] == 136 && w.count[SLICE_ALL] == 16, "every token: 136 over 16, got %g over %ld", w.sum[SLICE_ALL],
          w.count[SLICE_ALL]);
    CHECK(w.sum[SLICE_ARHIT] == 4 + 13 && w.count[SLICE_ARHIT] == 2, "AR hits: 17 over 2, got %g over %ld", w.sum[SLICE_ARHIT],
          w.count[SLICE_ARHIT]);
    int ok = 1;  // 16 tokens in 8 bins: bin b holds positions 2b and 2b+1, losses 2b+1 and 2b+2
    for (int b = 0; b < POSITION_BINS; b++) ok &= w.sum[SLICE_POSITION + b] == 4 * b + 3 && w.count[SLICE_POSITION + b] == 2;
    CHECK(ok, "each of the 8 position bins holds its two tokens");
    // T not a multiple of the bins: 12 tokens, bin b holds [12b/8, 12(b+1)/8): 1,2,1,2,1,2,1,2 tokens
    WindowLoss v = {{0}, {0}};
    window_loss_add(&v, loss, hit, 12);
    static const long counts[POSITION_BINS] = {2, 1, 2, 1, 2, 1, 2, 1};
    ok = 1;
    for (int b = 0; b < POSITION_BINS; b++) ok &= v.count[SLICE_POSITION + b] == counts[b];
    CHECK(ok && v.sum[SLICE_POSITION + 1] == 3, "12 tokens fill the bins 2,1,2,1,...; bin 2 holds position 2 (loss 3)");
    CHECK(strcmp(window_slice_name(SLICE_POSITION + 7), "pos8") == 0 && strcmp(window_slice_name(SLICE_ARHIT), "arhit") == 0,
          "slice names");
}

// A standard normal draw (Box-Muller on the project's generator)
static double normal_draw(uint64_t* rng) {
    double u1 = ((rng_next(rng) >> 11) + 0.5) / 9007199254740992.0, u2 = ((rng_next(rng) >> 11) + 0.5) / 9007199254740992.0;
    return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

// Student's t with 2 degrees of freedom has closed forms, an independent reference:
// P(T > t) = (1 - t / sqrt(t^2 + 2)) / 2 and its quantile (2p - 1) / sqrt(2 p (1 - p))
static double t2_upper(double t) { return 0.5 * (1 - t / sqrt(t * t + 2)); }

// The verdict policy on cases whose answer is known by hand
static void test_verdict(void) {
    // the review's three seeds of GDA - DIFF: mean +0.0465, s_d 0.012766, t(0.975, 2) 4.302653
    double gda[3] = {0.0401, 0.0612, 0.0382}, zeros[8] = {0};
    Paired three = {3, 1, gda, NULL, zeros, NULL};
    GapInterval g = paired_gap(&three);
    double se = sqrt(((0.0401 - 0.0465) * (0.0401 - 0.0465) + (0.0612 - 0.0465) * (0.0612 - 0.0465) +
                      (0.0382 - 0.0465) * (0.0382 - 0.0465)) / 2 / 3);
    CHECK(g.n == 3 && fabs(g.gap - 0.0465) < 1e-12 && fabs(g.lo - 0.014787) < 1e-5 && fabs(g.hi - 0.078213) < 1e-5,
          "+0.0401, +0.0612, +0.0382: gap +0.0465 in [+0.0148, +0.0782] (t, 2 df), got %g [%g, %g]", g.gap, g.lo, g.hi);
    CHECK(fabs(g.p - 2 * t2_upper(0.0465 / se)) < 1e-9, "its t p %g against the closed form %g", g.p, 2 * t2_upper(0.0465 / se));
    CHECK(g.same_sign == 3 && g.seed_gap[1] == 0.0612, "3 of 3 seeds higher, the per-seed values kept in order");
    CHECK(strcmp(gap_word(&g, NAN), "n too small for a verdict") == 0 && strcmp(gap_word(&g, 0.02), "n too small for a verdict") == 0,
          "no direction from 3 seeds, however small p (%g)", g.p);
    char cells[1024];
    gap_cells(cells, sizeof(cells), &g, NAN, 0, 4);
    CHECK(strstr(cells, " +0.0465 | [+0.0148, +0.0782] | +0.0401, +0.0612, +0.0382 | 3 of 3 seeds higher; t p = 0.024; MDG ") &&
              strstr(cells, "| n too small for a verdict |"), "the cells of a 3-seed gap: '%s'", cells);
    // Table 5's needle logits: +50.24, +28.22, +28.53 gives [+4.30, +67.02], not [min, max]
    double logits[3] = {50.24, 28.22, 28.53};
    Paired table5 = {3, 1, logits, NULL, zeros, NULL};
    g = paired_gap(&table5);
    CHECK(fabs(g.lo - 4.30) < 0.01 && fabs(g.hi - 67.02) < 0.01, "Table 5 logits: [+4.30, +67.02], got [%g, %g]", g.lo, g.hi);
    CHECK(fabs(t_quantile(0.975, 2) - 0.95 / sqrt(2 * 0.975 * 0.025)) < 1e-9 && fabs(t_quantile(0.975, 4) - 2.776445) < 1e-6,
          "t(0.975, 2) = 4.302653 (closed form), t(0.975, 4) = 2.776445");

    // the minimum detectable gap: a t-test on n normal draws of mean MDG (sd 1) rejects 80% of the
    // time, counted over 200,000 draws of n (standard error of the rate 0.0009)
    uint64_t rng = 0xd1ffu;
    static const int NS[3] = {3, 5, 10};
    for (int k = 0; k < 3; k++) {
        int n = NS[k];
        double mdg = t_detectable_ncp(n - 1, VERDICT_ALPHA, VERDICT_POWER) / sqrt(n), tc = t_quantile(0.975, n - 1);
        long rejected = 0, trials = 200000;
        for (long i = 0; i < trials; i++) {
            double x[10], mean = 0, ss = 0;
            for (int j = 0; j < n; j++) mean += (x[j] = mdg + normal_draw(&rng)) / n;
            for (int j = 0; j < n; j++) ss += (x[j] - mean) * (x[j] - mean);
            rejected += fabs(mean / sqrt(ss / (n - 1) / n)) > tc;
        }
        CHECK(fabs((double)rejected / trials - 0.8) < 0.005, "n = %d: MDG %.3f s_d is found %.4f of the time (0.8)", n, mdg,
              (double)rejected / trials);
    }
    CHECK(fabs(t_detectable_ncp(1e5, 0.05, 0.8) - (1.959964 + 0.841621)) < 1e-3, "with many df the MDG nears (z_0.975 + z_0.8) s_e");
    CHECK(fabs(g.mdg - t_detectable_ncp(2, 0.05, 0.8) * g.sd / sqrt(3)) < 1e-12, "a gap's MDG is ncp s_d / sqrt(n)");
    gap_cells(cells, sizeof(cells), &g, -279.2, 0, 2);
    CHECK(!strstr(cells, "underpowered"), "the paper's logit gap -279.2 is above this MDG (%g): not underpowered", g.mdg);
    gap_cells(cells, sizeof(cells), &g, 10, 0, 2);
    CHECK(strstr(cells, "underpowered for the paper's gap") != NULL, "a paper gap of 10 below the MDG %g: underpowered", g.mdg);

    // five seeds earn a word: +1.1, +0.9, +1.0, +1.2, +0.8 (p < 0.001)
    double five[5] = {1.1, 0.9, 1.0, 1.2, 0.8};
    Paired p5 = {5, 1, five, NULL, zeros, NULL};
    g = paired_gap(&p5);
    CHECK(strcmp(gap_word(&g, 0.3), "same direction") == 0 && strcmp(gap_word(&g, -0.3), "opposite") == 0 &&
              strcmp(gap_word(&g, NAN), "higher") == 0, "5 seeds of +1: same direction, opposite, higher (p %g)", g.p);
    double mixed[5] = {1, -1, 0.5, -0.5, 0.2};
    Paired m5 = {5, 1, mixed, NULL, zeros, NULL};
    g = paired_gap(&m5);
    CHECK(strcmp(gap_word(&g, 0.3), "within noise") == 0 && g.same_sign == 3, "5 mixed seeds: within noise, 3 of 5 positive");

    // Holm: p 0.01, 0.04, 0.03, 0.005 adjust to 0.03, 0.06, 0.06, 0.02; an untested cell stays out
    GapInterval fam[5];
    static const double P[5] = {0.01, 0.04, 0.03, 0.005, NAN}, HOLM[4] = {0.03, 0.06, 0.06, 0.02};
    for (int i = 0; i < 5; i++) fam[i].p = P[i];
    int tested = verdict_holm(fam, 5);
    int ok = tested == 4 && isnan(fam[4].p_holm);
    for (int i = 0; i < 4; i++) ok &= fabs(fam[i].p_holm - HOLM[i]) < 1e-12;
    CHECK(ok, "Holm's adjusted p: 0.03 0.06 0.06 0.02, got %g %g %g %g", fam[0].p_holm, fam[1].p_holm, fam[2].p_holm, fam[3].p_holm);
    g = paired_gap(&p5);
    g.p_holm = 0.06;
    CHECK(strcmp(gap_word(&g, NAN), "within noise") == 0, "a cell Holm's correction leaves above 0.05: within noise");

    // TOST, by the closed form of 2 df: +0.004, +0.006, +0.002 (s_e 0.0011547) within ±0.01 gives
    // p = P(T < -5.196) = 0.0175: equivalent; within ±0.006, P(T < -1.732) = 0.113: not shown
    double small[3] = {0.004, 0.006, 0.002};
    Paired eq = {3, 1, small, NULL, zeros, NULL};
    g = paired_gap(&eq);
    double se_eq = 0.002 / sqrt(3);
    CHECK(fabs(tost_p(&g, 0.01) - t2_upper((0.01 - 0.004) / se_eq)) < 1e-9 && fabs(tost_p(&g, 0.006) - t2_upper(0.002 / se_eq)) < 1e-9,
          "TOST p %g and %g against the closed forms %g and %g", tost_p(&g, 0.01), tost_p(&g, 0.006), t2_upper(0.006 / se_eq),
          t2_upper(0.002 / se_eq));
    gap_cells(cells, sizeof(cells), &g, 0.001, 0.01, 3);
    CHECK(strstr(cells, "equivalent within ±0.01 (TOST p = 0.018)") && !strstr(cells, "not shown"), "equivalent: '%s'", cells);
    gap_cells(cells, sizeof(cells), &g, 0.001, 0.006, 3);
    CHECK(strstr(cells, "not shown equivalent within ±0.006 (TOST p = 0.11)") != NULL, "not shown equivalent: '%s'", cells);

    // one seed: units pool as sum(num) / sum(den), its interval the units' bootstrap, and no verdict
    enum { U = 100 };
    double a[U], b[U], one[U], zero[U];
    for (int u = 0; u < U; u++) {
        b[u] = u % 7;
        a[u] = b[u] + (u % 2 ? 1 : -1);  // differences of +-1: standard error 0.1
        one[u] = 1;
        zero[u] = 0;
    }
    Paired units = {1, U, a, one, b, one};
    g = paired_gap(&units);
    CHECK(g.n == 1 && fabs(g.gap) < 1e-12 && g.lo > -0.25 && g.lo < -0.15 && g.hi > 0.15 && g.hi < 0.25 && isnan(g.p),
          "one seed, differences of +-1: gap 0, interval about [-0.2, +0.2], no p; got %g [%g, %g]", g.gap, g.lo, g.hi);
    gap_cells(cells, sizeof(cells), &g, 0.3, 0.01, 3);
    CHECK(strstr(cells, "(evaluation noise only)") && strstr(cells, "| 1 seed | no verdict (one seed) |"), "one seed's cells: '%s'", cells);
    GapInterval again = paired_gap(&units);
    CHECK(again.lo == g.lo && again.hi == g.hi, "the one-seed bootstrap is reproducible");
    double an[2] = {2, 0}, ad[2] = {1, 3}, bn[2] = {1, 1}, bd[2] = {1, 1};
    Paired pooled = {1, 2, an, ad, bn, bd};
    CHECK(paired_gap(&pooled).gap == -0.5, "units pool as sum(num) / sum(den): gap -0.5");
    Paired single = {1, 1, a, one, b, one};
    g = paired_gap(&single);
    CHECK(!isnan(g.gap) && isnan(g.lo), "one seed of one unit: no interval");
    Paired empty = {1, U, a, zero, b, one};
    g = paired_gap(&empty);
    CHECK(strcmp(gap_word(&g, 1), "n/a (no data)") == 0, "a row without tokens: no data");
    // a seed without tokens is left out: seeds 0 and 2 of 3 hold a gap
    double sn[6] = {1, 1, 5, 5, 2, 2}, sd[6] = {1, 1, 0, 0, 1, 1}, tn[6] = {0, 0, 0, 0, 0, 0};
    Paired holes = {3, 2, sn, sd, tn, one};
    g = paired_gap(&holes);
    CHECK(g.n == 2 && g.gap == 1.5, "a seed without tokens is left out: 2 seeds, gap 1.5, got %d, %g", g.n, g.gap);

    // Coverage, simulated: 3 seeds of 20 units, each seed's training noise (sd 1) and each unit's
    // evaluation noise (sd 2) on both rows, a true gap of 0. The t-interval holds 0 about 95% of
    // the time (the seeds-and-units bootstrap it replaces held it 77%); with 5 seeds a direction
    // is stated about 5% of the time
    enum { TRIALS = 4000, S = 5, UNITS = 20 };
    double ua[S * UNITS], ub[S * UNITS];
    int covered = 0, words = 0;
    for (int trial = 0; trial < TRIALS; trial++) {
        for (int s = 0; s < S; s++) {
            double ta = normal_draw(&rng), tb = normal_draw(&rng);
            for (int u = 0; u < UNITS; u++) {
                ua[s * UNITS + u] = ta + 2 * normal_draw(&rng);
                ub[s * UNITS + u] = tb + 2 * normal_draw(&rng);
            }
        }
        Paired sim3 = {3, UNITS, ua, NULL, ub, NULL}, sim5 = {5, UNITS, ua, NULL, ub, NULL};
        g = paired_gap(&sim3);
        covered += g.lo <= 0 && g.hi >= 0;
        g = paired_gap(&sim5);
        const char* w = gap_word(&g, NAN);
        words += strcmp(w, "higher") == 0 || strcmp(w, "lower") == 0;
    }
    CHECK(fabs((double)covered / TRIALS - 0.95) < 0.015, "3 seeds, true gap 0: the interval holds it %.3f of the time (0.95)",
          (double)covered / TRIALS);
    CHECK(fabs((double)words / TRIALS - 0.05) < 0.015, "5 seeds, true gap 0: a direction stated %.3f of the time (0.05)",
          (double)words / TRIALS);
}

// z-scores against the window before each value, by hand
static void test_spikes(void) {
    SpikeWatch w = {{0}, 0, 0};
    int early_nan = 1;
    for (int i = 0; i < SPIKE_MIN; i++) early_nan &= isnan(spike_watch(&w, i % 2 ? 3 : 1));
    CHECK(early_nan, "no z-score before %d values", SPIKE_MIN);
    for (int i = SPIKE_MIN; i < 100; i++) spike_watch(&w, i % 2 ? 3 : 1);
    // 100 values alternating 1 and 3: mean 2, standard deviation 1, so 8 stands 6 deviations out
    double z = spike_watch(&w, 8);
    CHECK(fabs(z - 6) < 1e-12 && z > SPIKE_Z, "8 after 1, 3, 1, 3, ...: z = 6, a spike (got %g)", z);
    // 101 values now; the next one, 2, sits at the mean of those plus 6 / 101 over their spread
    double mean = (50 * 1 + 50 * 3 + 8) / 101.0, var = (50 * (1 - mean) * (1 - mean) + 50 * (3 - mean) * (3 - mean) + (8 - mean) * (8 - mean)) / 101;
    z = spike_watch(&w, 2);
    CHECK(fabs(z - (2 - mean) / sqrt(var)) < 1e-12 && z < SPIKE_Z, "the value after the spike: z = %g, not a spike", z);
    // the window slides: after 128 values of 5 the earlier ones are gone and 5 has no spread
    for (int i = 0; i < SPIKE_WINDOW; i++) spike_watch(&w, 5);
    CHECK(w.n == SPIKE_WINDOW && isnan(spike_watch(&w, 5)), "a window of equal values has no z-score");
    // a replay gives the same watch as the run that never stopped
    SpikeWatch a = {{0}, 0, 0}, b = {{0}, 0, 0};
    for (int i = 0; i < 300; i++) spike_watch(&a, sin(i));
    for (int i = 0; i < 300; i++) spike_watch(&b, sin(i));
    CHECK(spike_watch(&a, 4) == spike_watch(&b, 4), "replaying the same values gives the same z-score");
}

int main(void) {
    test_arhit();
    test_window_loss();
    test_verdict();
    test_spikes();
    return check_summary();
}
