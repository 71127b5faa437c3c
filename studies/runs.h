// Every recorded run, listed and compared: `difftx runs` and `difftx compare` over a results
// registry (registry.h).
#ifndef RUNS_H
#define RUNS_H

#include <stdint.h>

#include "../model/backend.h"
#include "../run/config.h"

// Filters are NULL for any: experiment (train, table6, needle), preset, status
typedef struct {
    const char* results;  // the folder of registry.sqlite
    const char* experiment;
    const char* preset;
    const char* status;
} RunFilter;

// One line per run: id, experiment, preset, row, seed, status, steps, final losses, tokens/s, start
void runs_list(const RunFilter* filter);

// The runs' configs where they differ and their final metrics side by side; their validation
// and training losses against tokens drawn into png (one figure, two panels), its data in
// results/<png's name>.dat
void runs_compare(const char* results, const int64_t* ids, int n, const char* png);

// `difftx lambda`: each run's lambda per layer at every evaluation of its training (metrics
// lambda_l<l>, or for per-token lambda the mean over heads of lambda_l<l>_h<h>_mean, with the
// mean over heads of the spread over tokens), printed as a table per run and drawn into png (one
// line per layer and run against training tokens), its data in results/<png's name>.dat. Dies
// naming a run that recorded no lambda (a standard run, or one trained before it was recorded).
void runs_lambda(const char* results, const int64_t* ids, int n, const char* png);

// The validation windows of seq_len tokens a recorded run of the run folder run_dir was evaluated
// on (a Table 6 row's `eval_tokens`), from results/registry.sqlite read-only; 0 when none is
// recorded there
int runs_recorded_windows(const char* results, const char* run_dir, int seq_len);

// What one bench measured (bench.c)
typedef struct {
    double tokens_per_second;
    double mfu;            // percent of the measured matmul rate; training only
    double mfu_peak;       // percent of the device's peak; 0 where the backend has no model of it
    double peak_mib;       // < 0: not the model's own (two models shared the process)
    double matmul_share;   // percent of the step spent in the weights' products
    double matmul_gflops;  // the rate of those products
} BenchNumbers;

// `difftx bench` as a run of experiment "bench" (preset: the recipe's file name; row: train or
// forward, or train-alternated or forward-alternated when two recipes' steps took turns) with its
// config and the evaluations tokens_per_second, mfu (training only), mfu_peak (training only,
// where the backend has a model of the peak), matmul_share and matmul_gflops, and peak_rss_mib
// (device = cpu) or peak_device_mib (a GPU's memory), left out where peak_mib < 0
void runs_record_bench(const char* results, const char* recipe_path, const char* row, const Config* cfg, const Backend* be,
                       int forward_only, const BenchNumbers* n);

#endif
