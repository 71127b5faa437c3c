// `difftx bench`: training (or forward) tokens/s of a recipe's model on random tokens, MFU
// against the backend's measured matmul rate and its peak, peak memory; recorded in the
// registry (bench.h). Two recipes are benched step by step in turn, and compared pair by pair.
#include "bench.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "../base/util.h"
#include "../model/optim.h"
#include "../model/profile.h"
#include "runs.h"
#include "../run/device.h"
#include "../run/train.h"
#include "verdict.h"

// One recipe's model under bench, its random batch, and what each timed step measured
typedef struct {
    const Config* cfg;
    const char* recipe_path;
    Model model;
    AdamW opt;  // training only
    BatchShare share;
    int* inputs;    // (N) random tokens
    int* targets;   // (N)
    size_t N;       // tokens per step
    double flops;   // per token
    double* dt;     // (steps - 1) seconds of each timed step
    double* rate;   // (steps - 1) the matmul rate measured right after it (training)
    double matmul_seconds, matmul_flops;  // the weights' products in the timed steps (matmul_spent)
} Bench;

// the median of x (n >= 1), sorted in place
static double median(double* x, int n) {
    sort_doubles(x, n);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static void bench_open(Bench* b, const Config* cfg, const char* recipe_path, const Backend* be, int vocab, int steps,
                       int forward_only) {
    b->cfg = cfg;
    b->recipe_path = recipe_path;
    model_build(&b->model, &cfg->model, be, vocab, cfg->batch_size);
    model_init_params(&b->model, (uint64_t)cfg->seed);
    if (!forward_only) adamw_alloc(&b->opt, &b->model, &cfg->optim);
    b->share = batch_share(cfg, 0, 1);  // one process: a benchmark's ranks would share the cores
    b->N = (size_t)cfg->batch_size * cfg->model.seq_len * cfg->grad_accum;
    b->inputs = mallocCheck(b->N * sizeof(int));
    b->targets = mallocCheck(b->N * sizeof(int));
    uint64_t rng = hash64((uint64_t)cfg->seed);
    for (size_t i = 0; i < b->N; i++) {
        b->inputs[i] = (int)(rng_next(&rng) % vocab);
        b->targets[i] = (int)(rng_next(&rng) % vocab);
    }
    b->flops = model_flops_per_token(&b->model, cfg->model.seq_len);
    b->matmul_seconds = b->matmul_flops = 0.0;
    b->dt = mallocCheck((size_t)steps * sizeof(double));
    b->rate = mallocCheck((size_t)steps * sizeof(double));
}

// Step s (0: the warm-up, not kept). After each timed training step the backend's matmul rate
// is measured again, and MFU is the median over steps of each step's FLOP rate against the rate
// measured right after it: on a shared machine whose speed drifts, a step and the product it is
// read against then ran under the same conditions (one rate measured once, as the best of a few
// products, set a lucky moment against ten ordinary steps and moved MFU by 5 points from run to
// run).
// Step s, returned once its work is done, not only issued
static void run_step(Bench* b, int s, int forward_only) {
    int B = b->cfg->batch_size, T = b->cfg->model.seq_len;
    if (forward_only) {
        for (int micro = 0; micro < b->cfg->grad_accum; micro++) {
            model_forward(&b->model, b->inputs + micro * (size_t)B * T, b->targets + micro * (size_t)B * T, B, T, 0);
        }
    } else {
        train_step(&b->model, &b->opt, b->cfg, &b->share, s, b->inputs, b->targets);
    }
    b->model.be->synchronize();
}

static void bench_step(Bench* b, int s, int forward_only) {
    double t0 = wall_time();
    run_step(b, s, forward_only);
    double dt = wall_time() - t0, matmul_seconds, matmul_flops;
    b->model.be->matmul_spent(&matmul_seconds, &matmul_flops);
    if (s == 0) return;
    b->matmul_seconds += matmul_seconds;
    b->matmul_flops += matmul_flops;
    b->dt[s - 1] = dt;
    if (!forward_only) b->rate[s - 1] = b->model.be->matmul_rate(b->model.be);
}

static double bench_tokens_per_second(const Bench* b, int timed) {
    double total = 0.0;
    for (int s = 0; s < timed; s++) total += b->dt[s];
    return b->N * timed / total;
}

// Where the step's time goes: in the weights' products, at what rate, and the rest. sgemm: the
// measured matmul rate, 0 where none was measured.
static void report_products(const Bench* b, int timed, int forward_only, double step_s, double sgemm, double* share,
                            double* gflops) {
    double per_step = b->matmul_seconds / timed;
    *share = 100.0 * per_step / step_s;
    *gflops = b->matmul_flops / b->matmul_seconds / 1e9;
    printf("  the weights' products (projections, MLP, LM head): %.0f ms of the %.0f ms %s (%.0f%%), %.1f GFLOP at %.1f "
           "GFLOP/s", 1e3 * per_step, 1e3 * step_s, forward_only ? "forward pass" : "step", *share, b->matmul_flops / timed / 1e9,
           *gflops);
    if (sgemm > 0) printf(" = %.0f%% of the matmul rate", 100.0 * *gflops / sgemm);
    printf("; the rest (attention, norms, element-wise passes%s): %.0f ms\n", forward_only ? "" : ", AdamW",
           1e3 * (step_s - per_step));
}

// Prints the bench of b and records it in the registry; peak < 0: not recorded (two models
// shared the process, so its peak memory is neither's alone)
static void bench_report(Bench* b, int timed, int forward_only, double peak, const char* row, const char* results) {
    const Model* m = &b->model;
    int T = b->cfg->model.seq_len;
    double tok_s = bench_tokens_per_second(b, timed), step_s = b->N / tok_s;
    const char* peak_what = m->be->host_memory ? "RSS" : "device memory";
    printf("bench %s: attention=%s L=%d C=%d H=%d D=%d T=%d B=%d V=%d params=%zu threads=%d device=%s\n",
           forward_only ? "forward" : "train", config_attention_name(&b->cfg->model), m->L, m->C, m->H, m->D, T,
           b->cfg->batch_size, m->V, m->n_params, omp_get_max_threads(), m->be->device_name(m->be));
    char memory[96] = "";
    if (peak >= 0) snprintf(memory, sizeof(memory), ", peak %s %.0f MiB", peak_what, peak);
    double mfu = 0, mfu_peak = 0, share, gflops;
    if (forward_only) {
        printf("  %.3f s per forward pass, %.0f tokens/s%s\n", step_s, tok_s, memory);
        report_products(b, timed, forward_only, step_s, 0.0, &share, &gflops);
    } else {
        double* ratio = mallocCheck((size_t)timed * sizeof(double));  // each step's FLOP rate against its matmul rate
        for (int s = 0; s < timed; s++) ratio[s] = b->flops * b->N / b->dt[s] / 1e9 / b->rate[s];
        mfu = 100.0 * median(ratio, timed);
        free(ratio);
        double sgemm = median(b->rate, timed);
        char how[256];
        double device_peak = m->be->peak_rate(m->be, how, sizeof(how));
        double achieved = b->flops * tok_s / 1e9;
        printf("  %.0f tokens/s (%.3f s per step), %.1f MFLOP/token, %.1f GFLOP/s%s\n", tok_s, step_s, b->flops / 1e6,
               achieved, memory);
        printf("  MFU %.0f%% of the measured matmul rate %.1f GFLOP/s (the median, over %d timed step%s, of each step's "
               "rate against the rate measured right after it)\n", mfu, sgemm, timed, timed > 1 ? "s" : "");
        if (device_peak > 0) {
            mfu_peak = 100.0 * achieved / device_peak;
            printf("  MFU %.0f%% of the device's peak %.1f GFLOP/s = %s; the matmul rate is %.0f%% of it\n", mfu_peak,
                   device_peak, how, 100.0 * sgemm / device_peak);
            // a good sgemm kernel reaches 80-95% of the peak
            if (sgemm < 0.6 * device_peak) {
                fprintf(stderr, "warning: the measured matmul rate is %.0f%% of the peak: the matmul kernel (%s) leaves "
                        "this device's speed unused\n", 100.0 * sgemm / device_peak, m->be->device_name(m->be));
            }
        } else {
            printf("  (no MFU against the device's peak: %s)\n", how);
        }
        report_products(b, timed, forward_only, step_s, sgemm, &share, &gflops);
        const char* note = m->be->host_memory ? backend_blas_kernel_note() : NULL;  // OpenBLAS's, on the CPU
        if (note) printf("  note: %s\n", note);
    }
    BenchNumbers numbers = {tok_s, mfu, mfu_peak, peak, share, gflops};
    runs_record_bench(results, b->recipe_path, row, b->cfg, m->be, forward_only, &numbers);
}

// Step s, one more after the timed ones, profiled (model/profile.h): printed by operation, and
// by operation and layer into the CSV file. Not among the timed steps, whose tokens/s the marks
// around every call would lower.
static void bench_profile(Bench* b, int s, int forward_only, const char* csv) {
    Profile p;
    profile_attach(&p, &b->model);
    double t0 = wall_time();
    profile_step_begin(&p);
    run_step(b, s, forward_only);
    profile_step_end(&p);
    double wall = wall_time() - t0;
    profile_detach(&p, &b->model);
    printf("%s: one more %s, each backend call between two timer marks (%s)\n", b->recipe_path, forward_only ? "forward pass" : "step", csv);
    profile_print(&p, stdout);
    printf("  the calls take %.1f of the step's %.1f ms on the host's clock\n", 1e3 * profile_total_seconds(&p), 1e3 * wall);
    profile_write_csv(&p, csv);
    profile_free(&p);
}

static void bench_close(Bench* b, int forward_only) {
    if (!forward_only) adamw_free(&b->opt);
    free(b->dt);
    free(b->rate);
    free(b->inputs);
    free(b->targets);
    model_free(&b->model);
}

// The second model's tokens/s against the first's, step pair by step pair: the geometric mean
// of the pairs' ratios and its 95% t-interval over the pairs (verdict.h), in percent
static void bench_compare(const Bench* a, const Bench* b, int timed) {
    double* log_a = mallocCheck((size_t)timed * sizeof(double));
    double* log_b = mallocCheck((size_t)timed * sizeof(double));
    for (int s = 0; s < timed; s++) {
        log_a[s] = log(a->N / a->dt[s]);
        log_b[s] = log(b->N / b->dt[s]);
    }
    Paired p = {timed, 1, log_b, NULL, log_a, NULL};  // each pair a replicate, as a seed is in the tables
    GapInterval g = paired_gap(&p);
    printf("%s against %s, step pair by step pair: tokens/s %+.1f%%", b->recipe_path, a->recipe_path, 100.0 * expm1(g.gap));
    if (isnan(g.lo)) printf(" (one pair: no interval)\n");
    else printf(" [%+.1f%%, %+.1f%%] (geometric mean over %d alternated pairs of timed steps; 95%% t-interval over "
                "the pairs' log ratios; %d of %d pairs %s)\n", 100.0 * expm1(g.lo), 100.0 * expm1(g.hi), timed, g.same_sign, timed,
                g.gap >= 0 ? "faster" : "slower");
    free(log_a);
    free(log_b);
}

void bench_run(const Config* const* cfgs, const char* const* recipe_paths, int n_recipes, int vocab, int steps, int forward_only,
               const char* results, const char* profile_csv) {
    Bench b[2];
    Backend* instances[2] = {NULL, NULL};  // each model its own, in its recipe's precision, on one device
    for (int r = 0; r < n_recipes; r++) instances[r] = device_open_run(cfgs[r]);
    const Backend* be = instances[0];
    double held = 0.0;  // both models live in one process: each is checked beside the one before
    for (int r = 0; r < n_recipes; r++) held += train_check_memory(cfgs[r], instances[r], vocab, held);
    for (int r = 0; r < n_recipes; r++) bench_open(&b[r], cfgs[r], recipe_paths[r], instances[r], vocab, steps, forward_only);
    double peak = 0.0;
    for (int s = 0; s < steps; s++) {
        for (int r = 0; r < n_recipes; r++) bench_step(&b[r], s, forward_only);
        // the steps' own peak: read before any matmul rate measurement adds its operands
        if (s == 0) peak = be->peak_memory_bytes() / (1024.0 * 1024.0);
    }
    const char* row = forward_only ? "forward" : "train";
    if (n_recipes == 1) {
        bench_report(&b[0], steps - 1, forward_only, peak, row, results);
    } else {
        const char* alternated = forward_only ? "forward-alternated" : "train-alternated";
        for (int r = 0; r < n_recipes; r++) bench_report(&b[r], steps - 1, forward_only, -1.0, alternated, results);
        printf("both models in one process, their steps alternated: peak %s %.0f MiB together\n",
               be->host_memory ? "RSS" : "device memory", peak);
        bench_compare(&b[0], &b[1], steps - 1);
    }
    if (profile_csv) bench_profile(&b[0], steps, forward_only, profile_csv);
    for (int r = 0; r < n_recipes; r++) {
        bench_close(&b[r], forward_only);
        backend_close(instances[r]);
    }
}
