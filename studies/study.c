#define _GNU_SOURCE
#include "study.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "../base/dist.h"
#include "../base/util.h"
#include "../data/dataset.h"
#include "../run/device.h"
#include "tracked.h"

// Whether a row can run on this machine, its device and its precision: refused once, naming
// the row, before anything is trained or written (each row's training would refuse alone, once
// per row, after the rows before it had trained)
static void require_runnable(const StudyModel* m, const char* recipe) {
    char context[400];
    snprintf(context, sizeof(context), "%s: row %s", recipe, m->name);
    backend_close(device_open(m->cfg.device, m->cfg.precision, context));
}

Backend* study_load_checkpoint(const char* path, const Config* cfg, Model* model, CheckpointInfo* info) {
    Backend* be = device_open_eval(cfg);
    checkpoint_load(path, be, NULL, model, NULL, info);
    if (!info->finished) die("'%s' is not a finished run's checkpoint", path);
    return be;
}

void study_load(Study* s, const StudySpec* spec) {
    memset(s, 0, sizeof(*s));
    s->spec = *spec;
    s->lock = -1;
    if (spec->seeds < 1 || spec->seeds > 256) die("seeds must lie in 1..256, got %d", spec->seeds);
    s->seeds = spec->seeds;
    s->recipe = recipe_load(spec->recipe, spec->extra_key);
    if (spec->rows) recipe_keep_rows(s->recipe, spec->rows, spec->recipe);
    recipe_override(s->recipe, spec->overrides, spec->n_overrides, spec->derived, spec->recipe);
    s->preset = recipe_preset(s->recipe, spec->preset, spec->recipe);
    s->n_rows = s->recipe->n_rows;
    if (s->n_rows < 1) die("%s: no [row NAME] section", spec->recipe);
    s->n_models = s->n_rows * s->seeds;
    s->models = callocCheck(s->n_models, sizeof(StudyModel));
    for (int i = 0; i < s->n_models; i++) {
        StudyModel* m = &s->models[i];
        const Section* row = &s->recipe->rows[i / s->seeds];
        snprintf(m->name, sizeof(m->name), "%s", row->name);
        m->row = i / s->seeds;
        m->seed_index = i % s->seeds;
        m->cfg = spec->row_config(s->recipe, s->preset, m->row, m->seed_index, spec->recipe, spec->results);
        if (m->seed_index == 0) require_runnable(m, spec->recipe);
        const char* against = section_get(row, "against");
        if (!against) continue;
        int found = 0;
        for (int g = 0; g < s->n_rows; g++) found |= g != m->row && strcmp(s->recipe->rows[g].name, against) == 0;
        if (!found && spec->rows) die("--rows: row '%s' is read against '%s' (its 'against' key in %s): name both", row->name, against, spec->recipe);
        if (!found) die("%s: [row %s] key 'against': '%s' is not another row of this recipe", spec->recipe, row->name, against);
        snprintf(m->against, sizeof(m->against), "%s", against);
    }
}

void study_begin(Study* s, const char* name) {
    char path[4200], what[128];
    path_printf(path, sizeof(path), "%s/%s/%s", s->spec.results, name, s->spec.preset);
    mkdir_p(path);
    snprintf(what, sizeof(what), "%s results folder", name);
    s->lock = lock_folder(path, what);
    registry_path(path, sizeof(path), s->spec.results);
    registry_open(&s->reg, path);
    int reaped = registry_reap(&s->reg);
    if (reaped) printf("marked %d interrupted run(s) KILLED; they resume from their last checkpoint\n", reaped);
    char* recipe_text = read_text_file(s->spec.recipe, NULL);
    s->experiment = registry_experiment(&s->reg, name, s->spec.preset, s->spec.recipe, recipe_text);
    free(recipe_text);
}

const StudyModel* study_row(const Study* s, const char* name) {
    for (int g = 0; g < s->n_rows; g++) {
        if (strcmp(s->models[g * s->seeds].name, name) == 0) return &s->models[g * s->seeds];
    }
    return NULL;
}

void study_close(Study* s) {
    if (s->lock >= 0) {
        registry_close(&s->reg);
        unlock_folder(s->lock);
    }
    free(s->models);
    free(s->recipe);
    memset(s, 0, sizeof(*s));
}

// Trains (row, cfg) to its end in reg, or takes its FINISHED run `finished`, and does the
// study's work on it; the run ends FINISHED after that work
static void train_and_finish(Study* s, Registry* reg, const char* row, const Config* cfg, const StudyTraining* how, int64_t finished) {
    int64_t run = finished ? finished : train_registry_row(reg, s->experiment, row, cfg, 0);
    if (how->finish) how->finish(reg, run, row, cfg, how->ctx);
    if (!finished) registry_end_run(reg, run, RUN_FINISHED);
}

int64_t study_train(Study* s, const char* row, const Config* cfg, const StudyTraining* how) {
    int64_t finished = train_finished_row(&s->reg, s->experiment, row, cfg);
    if (finished && (!how->complete || how->complete(&s->reg, finished, how->ctx))) return finished;
    if (!finished) printf("== training %s, seed %d (%s)\n", row, cfg->seed, cfg->out);
    fflush(stdout);
    if (!how->in_worker || dist_ranks() > 1) {
        train_and_finish(s, &s->reg, row, cfg, how, finished);
    } else {
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) die("fork failed");
        if (pid == 0) {  // the worker's own connection: SQLite's may not cross a fork
            // the worker ends with its parent, however the parent ends (kill -9 included): left
            // running it would hold the results folder's lock, so a rerun could not take the row
            // over; checked again after, for a parent that ended before the request
            if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(1);
            Registry reg;
            char path[4200];
            registry_path(path, sizeof(path), s->spec.results);
            registry_open(&reg, path);
            train_and_finish(s, &reg, row, cfg, how, finished);
            registry_close(&reg);
            exit(0);
        }
        int status;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            RunStatus end = WIFSIGNALED(status) ? RUN_KILLED : RUN_FAILED;
            registry_end_pid(&s->reg, pid, end);
            fprintf(stderr, "row %s seed %d: %s\n", row, cfg->seed, run_status_name(end));
            return 0;
        }
    }
    return registry_finished_run(&s->reg, s->experiment, row, cfg->seed, cfg, data_identity(cfg->data));
}

void study_train_model(Study* s, StudyModel* m, const StudyTraining* how) {
    m->run = study_train(s, m->name, &m->cfg, how);
    if (!m->run) die("%s: row %s (preset %s) did not train", s->spec.recipe, m->name, s->spec.preset);
    config_checkpoint_path(&m->cfg, m->checkpoint, sizeof(m->checkpoint));
}
