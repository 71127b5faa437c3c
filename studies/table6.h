// `difftx table6`: trains the rows of a Table-6 recipe (experiments/table6.ini) that the
// registry does not hold as FINISHED, evaluates Valid / AR-Hit / Others loss, and prints and
// plots the table beside the paper's numbers.
#ifndef TABLE6_H
#define TABLE6_H

#include "../run/config.h"
#include "recipe.h"
#include "study.h"

typedef struct {
    const char* recipe;   // experiments/table6.ini
    const char* preset;   // smoke, small, gpu124m, paper
    int seeds;            // rows are trained with seeds seed, seed+1, ...
    const char* results;  // folder for registry.sqlite, run folders and table6.md
    const char* plots;    // folder for table6.png and table6_curves.png
    const char* const* overrides;  // key=value for every row (recipe_override)
    int n_overrides;
} Table6Options;

int table6_main(const Table6Options* opt);
// The models of the named rows, opt->seeds per row (row k's seed s at out[k x seeds + s]),
// trained and evaluated as table6 does first where the registry does not hold them as FINISHED
// (so a later table reuses them). Dies naming a row the recipe lacks or one that failed.
void table6_trained_rows(const Table6Options* opt, const char* const* names, int n, StudyModel* out);

// The recipe keys of a Table 6 recipe that are not training keys (recipe_load's extra_key)
int table6_extra_key(int place, const char* key);
// The full config of row `row` for a preset and seed index, as the table trains it
Config table6_row_config(const Recipe* r, const Section* preset, int row, int seed_index, const char* recipe,
                         const char* results);

#endif
