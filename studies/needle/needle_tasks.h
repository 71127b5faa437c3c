// `difftx needle`: trains the rows of experiments/needle.ini that the registry does not hold
// as FINISHED, then runs one task on them:
//   table2  multi-needle retrieval, (N, R) = (1,1) (2,2) (4,2) (6,2) at the preset's context
//   fig5    N = 8, R = 1 across the preset's context lengths, a depth x length heatmap per row
//   table3  attention allocation of the question to the answer needle and to the noise on
//           Table 2's episodes, Figure 1's breakdown, attention maps saved to HDF5
//   fig8    attention logits quantized to 16 (none), 8, 6 and 4 bits: validation loss,
//           next-token accuracy and retrieval at (N, R) = (1, 1) and (4, 2), per tensor and
//           per row (docs/outliers.md)
#ifndef NEEDLE_TASKS_H
#define NEEDLE_TASKS_H

#include "../../run/config.h"
#include "../recipe.h"
#include "../study.h"

typedef struct {
    const char* recipe;   // experiments/needle.ini
    const char* preset;   // smoke, default
    const char* task;     // table2, fig5, table3, fig8 (unused by needle_trained_rows)
    const char* results;  // registry.sqlite, run folders, tables, maps
    const char* plots;    // figures
    const char* const* overrides;  // key=value for every row (recipe_override)
    int n_overrides;
    int seeds;  // models per row: seeds seed, seed + 1, ... of the recipe's
    const char* rows;  // --rows: the recipe's rows studied, comma-separated; NULL: every row
} NeedleOptions;

int needle_main(const NeedleOptions* opt);
// Every row's needle-stage models, opt->seeds per row (row i's seed s at i x seeds + s; at most
// max_rows in all), both stages trained first where the registry does not hold them as
// FINISHED, as the tasks train them. Returns the model count.
int needle_trained_rows(const NeedleOptions* opt, StudyModel* out, int max_rows);

// The recipe keys of a needle recipe that are not training keys (recipe_load's extra_key)
int needle_extra_key(int place, const char* key);
// The needle stage's full config of row `row` for a preset and its seed_index-th seed (the
// recipe's seed + seed_index, in <results>/needle/<preset>/<row>/seed<seed>), as the tasks train it
Config needle_row_config(const Recipe* r, const Section* preset, int row, int seed_index, const char* recipe, const char* results);

#endif
