// `difftx table5`: activation outliers (the paper's Table 5) of trained standard and DIFF
// models: the Table 6 rows `transformer` and `diff` of a preset and the needle recipe's rows,
// trained first where the registry does not hold them. Each streams `outlier_tokens` positions
// of its held-out text through the activation hook (eval/outliers.h); per-layer statistics go
// to HDF5, the pooled ones to results/table5.md beside the paper's, plots/table5.png per layer.
#ifndef TABLE5_H
#define TABLE5_H

typedef struct {
    const char* table6_recipe;  // experiments/table6.ini
    const char* preset;         // its preset: smoke, small, gpu124m, paper
    const char* needle_recipe;  // experiments/needle.ini
    const char* needle_preset;  // smoke, default
    const char* needle_rows;    // --needle-rows ROW,ROW: those needle rows alone; NULL every row
    const char* results;
    const char* plots;
    const char* const* overrides;  // key=value for every row of both recipes (recipe_override)
    int n_overrides;
    int seeds;  // models per row of both recipes (their seeds seed, seed + 1, ...)
} Table5Options;

int table5_main(const Table5Options* opt);

#endif
