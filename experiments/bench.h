// The training-speed benchmark (`difftx bench`, make bench)
#ifndef BENCH_H
#define BENCH_H

#include "../model/backend.h"
#include "config.h"

// Builds cfg's model on be with a vocabulary of vocab, times steps training steps (or forward
// passes) on random tokens, the first a warm-up left out, prints tokens/s, MFU against the
// matmul rate and the device's peak and the peak memory, and records them as a run of the
// experiment `bench` of recipe_path in results/registry.sqlite
void bench_run(const Config* cfg, const Backend* be, int vocab, int steps, int forward_only, const char* results,
               const char* recipe_path);

#endif
