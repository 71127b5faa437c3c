// The training-speed benchmark (`difftx bench`, make bench)
#ifndef BENCH_H
#define BENCH_H

#include "../run/config.h"

// Builds the model of each of the n_recipes (1 or 2) configs, each on an instance of its own
// device and precision (two recipes: one device, any precisions), with a vocabulary of vocab,
// times steps training steps (or forward passes) of each on random tokens, the first a warm-up
// left out, prints tokens/s, MFU against the matmul rate and the device's peak and the peak
// memory, and records each as a run of the experiment `bench` of its recipe_paths entry in
// results/registry.sqlite (row `train` or `forward`). Two recipes run in one process, their
// steps alternated, so that a machine whose speed drifts slows both alike: each is recorded as
// row `train-alternated` (or `forward-alternated`) without a peak memory of its own, and the
// second's tokens/s is compared with the first's pair of steps by pair of steps. With
// profile_csv (one recipe), one more step is profiled operation by operation (model/profile.h):
// printed, and written to that file by operation and layer.
void bench_run(const Config* const* cfgs, const char* const* recipe_paths, int n_recipes, int vocab, int steps, int forward_only,
               const char* results, const char* profile_csv);

#endif
