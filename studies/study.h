// A study: the rows of a recipe at one preset, each at `seeds` seeds, trained where the results
// registry lacks them. What a study then measures, aggregates and reports is its own (Table 6:
// table6.c; the needle tasks: needle/; Table 5 takes the models of both); what every study
// shares is here: the recipe with its overrides and preset, one model type for a row at a
// seed, the study's results folder taken for this process, the registry, and one way to train
// a missing model, in this process or in a worker.
#ifndef STUDY_H
#define STUDY_H

#include <stdint.h>

#include "../model/model.h"
#include "../run/checkpoint.h"
#include "../run/config.h"
#include "recipe.h"
#include "registry.h"

// One model of a study: a row of the recipe at one seed
typedef struct {
    char name[64];     // the recipe's [row NAME]
    char against[64];  // the row its `against` key names, "" without one
    int row;           // its row's index in the recipe
    int seed_index;    // of the study's seeds: the seed is the recipe's + seed_index
    Config cfg;
    char checkpoint[CONFIG_STR + 16];
    int64_t run;  // the registry's FINISHED run; 0 until trained, or when training failed
} StudyModel;

// A row's full config for a preset and seed (recipe_row_config with the study's extra keys)
typedef Config (*StudyRowConfig)(const Recipe* r, const Section* preset, int row, int seed_index, const char* recipe,
                                 const char* results);

typedef struct {
    const char* recipe;   // the recipe file
    const char* preset;   // its [preset NAME]
    int seeds;            // 1..256
    const char* results;  // registry.sqlite and the run folders
    const char* const* overrides;  // key=value for every row (recipe_override)
    int n_overrides;
    ExtraKey extra_key;                 // the study's recipe keys that are not training keys
    const char* const* derived;         // keys computed per row, which an override may not set
    StudyRowConfig row_config;
    const char* rows;  // the rows studied, comma-separated (recipe_keep_rows); NULL: every row
} StudySpec;

typedef struct {
    StudySpec spec;
    Recipe* recipe;
    const Section* preset;
    int seeds, n_rows, n_models;
    StudyModel* models;  // (n_rows, seeds): row g's seed s at models[g * seeds + s]
    // between study_begin and study_close: the registry and this process's hold on the
    // study's results folder <results>/<name>/<preset>
    Registry reg;
    int64_t experiment;
    int lock;
} Study;

// Loads and checks the recipe (dies naming the file, row or key): the preset, every row at every
// seed configured, every `against` naming another row. Nothing is written.
void study_load(Study* s, const StudySpec* spec);
// Takes <results>/<name>/<preset> for this process (a second process would train the same
// models again, so it stops naming the first), opens the registry, marks interrupted attempts
// KILLED, and finds or makes experiment `name` for the preset and recipe
void study_begin(Study* s, const char* name);
// The row named `name` (its seed 0 model), or NULL
const StudyModel* study_row(const Study* s, const char* name);
void study_close(Study* s);

// How a study trains a missing model
typedef struct {
    // the study's own work on the run right after training, in the process that trained it,
    // before the run ends FINISHED (Table 6 evaluates there); NULL: none. `reg` is that
    // process's registry. Also called on a FINISHED run that `complete` finds incomplete.
    void (*finish)(Registry* reg, int64_t run, const char* row, const Config* cfg, void* ctx);
    // whether a FINISHED run needs no more of finish's work; NULL: every FINISHED run is done
    int (*complete)(Registry* reg, int64_t run, void* ctx);
    void* ctx;
    // train in a worker process forked for the model, so this process never computes (a child
    // forked after an OpenMP team has run waits forever in its first parallel product); a
    // data-parallel job trains in this process, since a forked child cannot take part in MPI
    int in_worker;
} StudyTraining;

// The FINISHED run of (row, cfg) in the study's experiment: trained now where the registry
// lacks it (a killed attempt resumes from its checkpoint). Returns 0 when a worker failed or
// was killed (the registry says which, and stderr); in this process a failure dies.
int64_t study_train(Study* s, const char* row, const Config* cfg, const StudyTraining* how);
// study_train of model m, its run and checkpoint path set; dies when it did not train
void study_train_model(Study* s, StudyModel* m, const StudyTraining* how);

// The finished checkpoint `path` of a study's run with config cfg, loaded for the study's
// evaluations: on cfg's device in fp32 (the tables compute in fp32 whatever precision trained
// them). Returns the instance model computes on, which the caller closes after model_free; dies
// where the checkpoint is not a finished run's.
Backend* study_load_checkpoint(const char* path, const Config* cfg, Model* model, CheckpointInfo* info);

#endif
