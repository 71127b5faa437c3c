// `difftx bench`: training (or forward) tokens/s of a recipe's model on random tokens, MFU
// against the backend's measured matmul rate and its peak, peak memory; recorded in the
// registry (bench.h)
#include "bench.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "../model/base/util.h"
#include "../model/optim.h"
#include "runs.h"
#include "train.h"

// the median of x (n >= 1), sorted in place
static double median(double* x, int n) {
    sort_doubles(x, n);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

void bench_run(const Config* cfg, const Backend* be, int vocab, int steps, int forward_only, const char* results,
               const char* recipe_path) {
    train_check_memory(cfg, be, vocab);
    Model model;
    model_build(&model, &cfg->model, be, vocab, cfg->batch_size);
    model_init_params(&model, (uint64_t)cfg->seed);
    AdamW opt;
    if (!forward_only) adamw_alloc(&opt, &model, &cfg->optim);
    BatchShare share = batch_share(cfg, 0, 1);  // one process: a benchmark's ranks would share the cores
    int B = cfg->batch_size, T = cfg->model.seq_len;
    size_t N = (size_t)B * T * cfg->grad_accum;  // tokens per step
    int* inputs = mallocCheck(N * sizeof(int));
    int* targets = mallocCheck(N * sizeof(int));
    uint64_t rng = hash64((uint64_t)cfg->seed);
    for (size_t i = 0; i < N; i++) {
        inputs[i] = (int)(rng_next(&rng) % vocab);
        targets[i] = (int)(rng_next(&rng) % vocab);
    }
    // After each timed training step the backend's matmul rate is measured again, and MFU is the
    // median over steps of each step's FLOP rate against the rate measured right after it: on a
    // shared machine whose speed drifts, a step and the product it is read against then ran under
    // the same conditions (one rate measured once, as the best of a few products, set a lucky
    // moment against ten ordinary steps and moved MFU by 5 points from run to run).
    double timed = 0.0, peak = 0.0, flops = model_flops_per_token(&model, T);
    double* ratio = mallocCheck((size_t)steps * sizeof(double));
    double* rate = mallocCheck((size_t)steps * sizeof(double));
    for (int s = 0; s < steps; s++) {
        double t0 = wall_time();
        if (forward_only) {
            for (int micro = 0; micro < cfg->grad_accum; micro++) {
                model_forward(&model, inputs + micro * (size_t)B * T, targets + micro * (size_t)B * T, B, T, 0);
            }
        } else {
            train_step(&model, &opt, cfg, &share, s, inputs, targets);
        }
        model.be->synchronize();  // the step's work is done, not only issued
        double dt = wall_time() - t0;
        if (s == 0) continue;
        timed += dt;
        // the step's own peak: read before any matmul rate measurement adds its operands
        if (s == 1) peak = model.be->peak_memory_bytes() / (1024.0 * 1024.0);
        if (!forward_only) {
            rate[s - 1] = model.be->matmul_rate();
            ratio[s - 1] = flops * N / dt / 1e9 / rate[s - 1];
        }
    }
    double step_s = timed / (steps - 1), tok_s = N / step_s;
    const char* peak_what = model.be->host_memory ? "RSS" : "device memory";
    printf("bench %s: attention=%s L=%d C=%d H=%d D=%d T=%d B=%d V=%d params=%zu threads=%d device=%s\n",
           forward_only ? "forward" : "train", config_attention_name(&cfg->model), model.L, model.C,
           model.H, model.D, T, B, vocab, model.n_params, omp_get_max_threads(), model.be->device_name());
    double mfu = 0, mfu_peak = 0;
    if (forward_only) {
        printf("  %.3f s per forward pass, %.0f tokens/s, peak %s %.0f MiB\n", step_s, tok_s, peak_what, peak);
    } else {
        double sgemm = median(rate, steps - 1);
        char how[256];
        double device_peak = model.be->peak_rate(how, sizeof(how));
        double achieved = flops * tok_s / 1e9;
        mfu = 100.0 * median(ratio, steps - 1);
        printf("  %.0f tokens/s (%.3f s per step), %.1f MFLOP/token, %.1f GFLOP/s, peak %s %.0f MiB\n", tok_s, step_s,
               flops / 1e6, achieved, peak_what, peak);
        printf("  MFU %.0f%% of the measured matmul rate %.1f GFLOP/s (the median, over %d timed step%s, of each step's "
               "rate against the rate measured right after it)\n", mfu, sgemm, steps - 1, steps > 2 ? "s" : "");
        if (device_peak > 0) {
            mfu_peak = 100.0 * achieved / device_peak;
            printf("  MFU %.0f%% of the device's peak %.1f GFLOP/s = %s; the matmul rate is %.0f%% of it\n", mfu_peak,
                   device_peak, how, 100.0 * sgemm / device_peak);
            // a good sgemm kernel reaches 80-95% of the peak
            if (sgemm < 0.6 * device_peak) {
                fprintf(stderr, "warning: the measured matmul rate is %.0f%% of the peak: the matmul kernel (%s) leaves "
                        "this device's speed unused\n", 100.0 * sgemm / device_peak, model.be->device_name());
            }
        } else {
            printf("  (no MFU against the device's peak: %s)\n", how);
        }
        const char* note = model.be->host_memory ? backend_blas_kernel_note() : NULL;  // OpenBLAS's, on the CPU
        if (note) printf("  note: %s\n", note);
        adamw_free(&opt);
    }
    runs_record_bench(results, recipe_path, cfg, model.be, forward_only, tok_s, mfu, mfu_peak, peak);
    free(ratio);
    free(rate);
    free(inputs);
    free(targets);
    model_free(&model);
}
