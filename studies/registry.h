// The results registry: one SQLite database (results/registry.sqlite) of experiments, runs,
// their parameters, metrics, evaluations and artifacts. Schema and example queries are in
// docs/registry.md. WAL mode and a busy timeout let concurrent runs share it; every write is
// one transaction.
#ifndef REGISTRY_H
#define REGISTRY_H

#include <stdint.h>

#include "../eval/arhit.h"
#include "../run/config.h"

typedef struct {
    struct sqlite3* db;  // SQL stays in registry.c
    char path[4096];
} Registry;

typedef enum { RUN_RUNNING, RUN_FINISHED, RUN_FAILED, RUN_KILLED } RunStatus;

// The schema's version (PRAGMA user_version): older registries are migrated on opening, newer
// ones refused
#define REGISTRY_SCHEMA 10

void registry_open(Registry* reg, const char* path);
// The registry of a results folder (--results): path (n bytes) = results/registry.sqlite, the one
// place its name is made
void registry_path(char* path, size_t n, const char* results);
// For readers (difftx runs, compare) where the registry or its folder cannot be written: opens
// it read-only, migrating nothing (an older schema is refused with what to do)
void registry_open_read(Registry* reg, const char* path);
void registry_close(Registry* reg);
// Finds or creates the experiment row; returns its id.
int64_t registry_experiment(Registry* reg, const char* name, const char* preset, const char* recipe_path,
                            const char* recipe_text);
// Marks RUNNING attempts whose process is gone (same host, pid not alive) as KILLED; returns
// how many.
int registry_reap(Registry* reg);
// The id of the last FINISHED attempt of (experiment, row, seed) trained with this config (its
// identity, registry.c: the config as resolved, so a key added since with its default is the
// same run; or the same config in a results folder copied or moved whole) on data of identity data_id (data_identity's; NULL for a run that reads no data
// folder), or 0. It counts only while cfg's checkpoint is still the file that attempt recorded
// (by sha256): a checkpoint deleted or overwritten since is warned about and gives 0, so the
// caller trains the row again.
int64_t registry_finished_run(Registry* reg, int64_t experiment, const char* row, int seed, const Config* cfg,
                              const char* data_id);
// Starts a new RUNNING attempt with full provenance, the data folder (cfg's, from the root) and
// data_id among it; returns its id.
int64_t registry_begin_run(Registry* reg, int64_t experiment, const char* row, int seed, const Config* cfg,
                           const char* device, const char* data_id);
void registry_end_run(Registry* reg, int64_t run, RunStatus status);
// Ends the RUNNING attempts of process pid on this host with status (a worker that failed).
void registry_end_pid(Registry* reg, int pid, RunStatus status);
// Appends metrics in one transaction: keys[i] at (steps[i], tokens[i]) = values[i], measured
// at times[i] (seconds since 1970, UTC).
void registry_metrics(Registry* reg, int64_t run, int n, const char* const* keys, const int* steps,
                      const int64_t* tokens, const double* values, const double* times);
// Deletes the metrics past step of the earlier attempts of run's (experiment, row, seed, config):
// a resumed attempt repeats those steps
void registry_forget_metrics_after(Registry* reg, int64_t run, int step);
void registry_evaluation(Registry* reg, int64_t run, const char* key, double value);
// Table 6's per-window loss sums of a run's evaluation (the units its intervals resample),
// replacing any it had
void registry_window_losses(Registry* reg, int64_t run, int n, const WindowLoss* w);
// How many windows a run's evaluation recorded (0: none)
int registry_window_count(Registry* reg, int64_t run);
// Windows 0..n-1 of them into w; returns how many of those the run has recorded (0: none)
int registry_window_losses_read(Registry* reg, int64_t run, int n, WindowLoss* w);
// The run's evaluation `key`, NaN when it has none
double registry_evaluation_value(Registry* reg, int64_t run, const char* key);
// What `difftx runs` and `compare` show of a run: what it is and how it ended. The steps and
// losses of a resumed attempt include the attempts before it (those of its experiment, row,
// seed and identity).
typedef struct {
    int64_t id;
    char experiment[128], preset[128], row[1024], status[16], started[32];
    int seed;
    int step, steps;                                  // the last step recorded, and the config's steps
    double train_loss, val_loss, tokens_per_second;  // the last recorded; NaN where there is none
    int spikes;                                       // loss and gradient-norm spikes recorded
} RunSummary;
// The runs of an experiment name, preset and status (each NULL for any) in order of id, into
// *runs (the caller frees); returns how many
int registry_runs(Registry* reg, const char* experiment, const char* preset, const char* status, RunSummary** runs);
// Run id's summary into *run; 0 where the registry has no such run
int registry_run(Registry* reg, int64_t id, RunSummary* run);
// The experiments' distinct names (presets 0) or presets (1), sorted, into *values (the caller
// frees each and the array); returns how many
int registry_experiment_values(Registry* reg, int presets, char*** values);
// The run's recorded value of config key as text, "" where it has none (the caller frees)
char* registry_param(Registry* reg, int64_t run, const char* key);
// Every config key any of the runs records, in the order of the first run that records it,
// into *keys (the caller frees each and the array); returns how many
int registry_param_keys(Registry* reg, const int64_t* runs, int n, char*** keys);
// The run's config text as stored (the caller frees), NULL where the registry has no such run
char* registry_run_config(Registry* reg, int64_t run);
// The eval_tokens evaluation of the last finished run whose folder is run_dir (compared
// resolved), read from the registry at path read-only; 0 where there is none or no registry
double registry_recorded_eval_tokens(const char* path, const char* run_dir);

// One run's whole curve of key (tokens, values; caller frees; returns the points): the steps of
// every attempt of its row, seed and run folder up to this one, each step from the latest
// attempt that stored it, so a resumed or extended run is drawn from its first step
int registry_run_curve(Registry* reg, int64_t run, const char* key, int64_t** tokens, double** values);
// Metric `key` of the given finished runs against training tokens, averaged over the runs at
// each step; every attempt of each run's (row, seed, identity) contributes the steps it
// checkpointed. Returns the number of points; *tokens and *values are the caller's to free.
int registry_mean_curve(Registry* reg, const int64_t* runs, int n_runs, const char* key, int64_t** tokens, double** values);
// Records a file with its sha256.
void registry_artifact(Registry* reg, int64_t run, const char* kind, const char* path);
const char* run_status_name(RunStatus status);

// One query of one needle episode: retrieval (correct >= 0, output the decoded text) or
// attention allocation (correct < 0, answer/noise/question/bos set).
typedef struct {
    int length, n_needles, n_queries, sample, query, number, correct;
    double depth;
    uint64_t seed;
    const char* city;
    const char* output;
    double answer, noise, question, bos;
} EpisodeRecord;
// Replaces the run's records of task (table2, fig5, table3) with rec, in one transaction
void registry_episodes(Registry* reg, int64_t run, const char* task, int n, const EpisodeRecord* rec);

#endif
