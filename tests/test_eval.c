// The AR-Hit classifier on hand-made windows and the threshold; the loss slices and 8 position bins
// of hand-made windows (16 and 12 tokens); the verdict policy's paired bootstrap on cases whose
// answer is known (a constant shift of 0.5 has the interval [0.5, 0.5]; differences of ±1 give
// about [−0.2, +0.2] and "within noise"; seed gaps 1..4; units pooled as Σnum/Σden; no interval
// from one unit; no data), reproducible; the spike watch's z-scores by hand (6 for 8 after
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

// The paired bootstrap on cases whose answer is known
static void test_verdict(void) {
    enum { U = 100 };
    double a[U], b[U], one[U], zero[U];
    for (int u = 0; u < U; u++) {
        b[u] = u % 7;
        a[u] = b[u] + 0.5;  // every pair differs by exactly 0.5
        one[u] = 1;
        zero[u] = 0;
    }
    Paired shift = {1, U, a, one, b, one};
    GapInterval g = paired_gap(&shift);
    CHECK(fabs(g.gap - 0.5) < 1e-12 && fabs(g.lo - 0.5) < 1e-12 && fabs(g.hi - 0.5) < 1e-12,
          "a constant paired difference of 0.5: gap and interval 0.5, got %g [%g, %g]", g.gap, g.lo, g.hi);
    CHECK(strcmp(gap_verdict(g, 0.3), "same direction") == 0 && strcmp(gap_verdict(g, -0.3), "opposite") == 0 &&
          strcmp(gap_verdict(g, NAN), "higher") == 0, "its verdicts against a paper gap of +0.3, -0.3 and none");
    // differences of +1 and -1 alternating: mean 0, standard error 0.1, so the 95% interval is
    // about [-0.2, +0.2] and holds 0
    for (int u = 0; u < U; u++) a[u] = b[u] + (u % 2 ? 1 : -1);
    g = paired_gap(&shift);
    CHECK(fabs(g.gap) < 1e-12 && g.lo > -0.25 && g.lo < -0.15 && g.hi > 0.15 && g.hi < 0.25,
          "differences of +-1: gap 0, interval about [-0.2, +0.2], got %g [%g, %g]", g.gap, g.lo, g.hi);
    CHECK(strcmp(gap_verdict(g, 0.3), "within noise") == 0, "within noise when the interval holds 0");
    // seeds only (one unit each): gaps 1, 2, 3, 4 have mean 2.5 and an interval inside [1, 4]
    double sa[4] = {1, 2, 3, 4}, sb[4] = {0, 0, 0, 0};
    Paired seeds = {4, 1, sa, one, sb, one};
    g = paired_gap(&seeds);
    CHECK(g.gap == 2.5 && g.lo >= 1 && g.lo < 2.5 && g.hi > 2.5 && g.hi <= 4, "seed gaps 1..4: 2.5 in [%g, %g]", g.lo, g.hi);
    // a seed's value pools its units: a = (2 + 0) / (1 + 3) = 0.5, b = (1 + 1) / (1 + 1) = 1
    double an[2] = {2, 0}, ad[2] = {1, 3}, bn[2] = {1, 1}, bd[2] = {1, 1};
    Paired pooled = {1, 2, an, ad, bn, bd};
    CHECK(paired_gap(&pooled).gap == -0.5, "units pool as sum(num) / sum(den): gap -0.5");
    Paired single = {1, 1, a, one, b, one};
    g = paired_gap(&single);
    CHECK(!isnan(g.gap) && isnan(g.lo) && strcmp(gap_verdict(g, 1), "n/a (no interval)") == 0, "one seed of one unit: no interval");
    Paired counted = {1, U, a, NULL, b, NULL};  // NULL denominators: each unit counts once, as ones do
    CHECK(paired_gap(&counted).gap == paired_gap(&shift).gap, "NULL denominators count every unit once");
    Paired empty = {1, U, a, zero, b, one};
    CHECK(strcmp(gap_verdict(paired_gap(&empty), 1), "n/a (no data)") == 0, "a row without tokens: no data");
    GapInterval again = paired_gap(&shift);
    CHECK(again.lo == paired_gap(&shift).lo, "the bootstrap is reproducible");
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
