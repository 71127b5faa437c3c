// `difftx needle`: the rows of a needle recipe configured, trained (copy stage, then the needle
// mix) unless the registry holds them as FINISHED, loaded, and handed to one task (task.h)
#define _GNU_SOURCE
#include "task.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../data/dataset.h"
#include "../../run/checkpoint.h"
#include "../../base/util.h"
#include "../recipe.h"

int needle_extra_key(int place, const char* k) {
    static const char* keys[] = {"corpus", "copy_steps", "copy_batch_size", "context", "lengths", "samples",
                                 "fig5_samples", "maps", "eval_seed", "fig8_samples", "fig8_windows", "outlier_tokens"};
    // the paper's numbers the tables stand beside, and the directions of the figures' claims (task.h)
    if (place == RECIPE_CLAIM) return !strcmp(k, "text") || !strcmp(k, "transformer") || !strcmp(k, "diff") || !strcmp(k, "direction");
    if (place == RECIPE_OUTSIDE) return 0;
    if (recipe_shape_key(place == RECIPE_ROW, k)) return 1;
    if (place == RECIPE_ROW && strcmp(k, "against") == 0) return 1;
    for (size_t i = 0; place == RECIPE_PRESET && i < sizeof(keys) / sizeof(keys[0]); i++) {
        if (strcmp(k, keys[i]) == 0) return 1;
    }
    return 0;
}

// computed per row from the preset's h and d and the row's heads and width, and its run folder
static const char* const NEEDLE_DERIVED_KEYS[] = {"n_head", "head_dim", "d_model", "out", NULL};

Config needle_row_config(const Recipe* r, const Section* preset, int row, int seed_index, const char* recipe, const char* results) {
    return recipe_row_config(r, preset, &r->rows[row], seed_index, recipe, results, "needle", needle_extra_key);
}

// The copy stage: the row's model on copy practice in NEEDLE_COPY_SEQ_LEN windows at the
// constant peak learning rate, so that induction heads form before the needle mix
// (docs/needle.md says why); the needle run starts from its checkpoint
static Config copy_stage_config(const Config* cfg, const Section* preset, const char* recipe) {
    Config copy = *cfg;
    copy.optim.steps = section_int(preset, "copy_steps", recipe);
    copy.batch_size = section_int(preset, "copy_batch_size", recipe);
    copy.model.seq_len = NEEDLE_COPY_SEQ_LEN;
    copy.grad_accum = 1;
    copy.optim.lr_final = copy.optim.lr;
    path_printf(copy.data, sizeof(copy.data), "%s/copy", cfg->data);
    // <row>/seed<N> -> <row>_copy/seed<N>
    const char* seed_dir = strrchr(cfg->out, '/');
    path_printf(copy.out, sizeof(copy.out), "%.*s_copy%s", (int)(seed_dir - cfg->out), cfg->out, seed_dir);
    config_validate(&copy);
    return copy;
}

// The training mix: made from the preset's corpus when missing, and it must be cut for seq_len
static void ensure_data(const Config* cfg, const Section* preset, const char* recipe) {
    char path[4200], copy_path[4200];
    path_printf(path, sizeof(path), "%s/train.bin", cfg->data);
    path_printf(copy_path, sizeof(copy_path), "%s/copy/train.bin", cfg->data);
    if (access(path, R_OK) != 0 || access(copy_path, R_OK) != 0) {
        const char* corpus = section_get(preset, "corpus");
        if (!corpus) die("%s: [preset %s] needs 'corpus', the prepared data the training mix is made from", recipe, preset->name);
        printf("making the needle training mix %s from %s\n", cfg->data, corpus);
        char cities[4200];
        source_file_path(cities, sizeof(cities), "data/cities.txt");
        needle_prepare(cfg->data, corpus, cities, cfg->model.seq_len, NEEDLE_TRAIN_NEEDLES, NEEDLE_DATA_SEED);
    }
    DataDir data;
    data_open(&data, cfg->data, DATA_TRAIN);
    int block = data_single_train_shard(&data, "a needle training mix")->block;
    if (block != cfg->model.seq_len) {
        die("'%s' holds needle blocks of %d tokens but the recipe trains at seq_len %d; delete '%s' to remake it", path,
            block, cfg->model.seq_len, cfg->data);
    }
    data_close(&data);
}

// The rows of the recipe at every seed, parameter counts checked and the training mix made;
// nothing trained yet. Row g's seed s is rows[g * seeds + s], as the study's models; at most
// max_models of them (checked before the mix is made). The paper's numbers from the recipe's
// claims into paper, read before anything is made.
static Row* configure_rows(Study* study, const NeedleOptions* opt, int max_models, NeedlePaper* paper) {
    StudySpec spec = {opt->recipe, opt->preset, opt->seeds, opt->results, opt->overrides, opt->n_overrides, needle_extra_key,
                      NEEDLE_DERIVED_KEYS, needle_row_config, opt->rows};
    study_load(study, &spec);
    *paper = needle_paper(study->recipe, opt->recipe);
    if (study->n_models > RECIPE_SECTIONS) {
        die("--seeds %d: %d rows x seeds must lie in 1..%d models", opt->seeds, study->n_rows, RECIPE_SECTIONS);
    }
    if (study->n_models > max_models) {
        die("%s: %d rows x %d seeds, more than the %d models a study takes", opt->recipe, study->n_rows, opt->seeds, max_models);
    }
    Row* rows = callocCheck(study->n_models, sizeof(Row));
    for (int i = 0; i < study->n_models; i++) {
        rows[i].study = study->models[i];
        const StudyModel* against = rows[i].study.against[0] ? study_row(study, rows[i].study.against) : NULL;
        rows[i].against = against ? against->row : -1;
        rows[i].copy_cfg = copy_stage_config(&rows[i].study.cfg, study->preset, opt->recipe);
        config_checkpoint_path(&rows[i].copy_cfg, rows[i].study.cfg.init_from, sizeof(rows[i].study.cfg.init_from));
        size_t a = model_param_count(&rows[i].study.cfg.model, 1), b = model_param_count(&rows[0].study.cfg.model, 1);
        if (fabs((double)a - (double)b) > 0.01 * (double)b) {
            die("%s: row '%s' has %zu parameters (without the vocabulary), more than 1%% from row '%s' (%zu)", opt->recipe,
                rows[i].study.name, a, rows[0].study.name, b);
        }
    }
    ensure_data(&rows[0].study.cfg, study->preset, opt->recipe);
    return rows;
}

// Both stages of a row, in this process, each trained unless the registry holds it as FINISHED
static void train_row(Study* study, Row* row) {
    static const StudyTraining in_process = {NULL, NULL, NULL, 0};
    char copy_name[80];
    snprintf(copy_name, sizeof(copy_name), "%s_copy", row->study.name);
    study_train(study, copy_name, &row->copy_cfg, &in_process);
    study_train_model(study, &row->study, &in_process);
}

int needle_trained_rows(const NeedleOptions* opt, StudyModel* out, int max_rows) {
    Study study;
    NeedlePaper paper;  // Table 5 reads its own claims; a needle recipe states these all the same
    Row* rows = configure_rows(&study, opt, max_rows, &paper);
    int n = study.n_models;
    study_begin(&study, "needle");
    for (int i = 0; i < n; i++) {
        train_row(&study, &rows[i]);
        out[i] = rows[i].study;
    }
    free(rows);
    study_close(&study);
    return n;
}

int needle_main(const NeedleOptions* opt) {
    static const char* const TASKS[] = {"table2", "fig5", "table3", "fig8"};
    int task = 0, n_tasks = sizeof(TASKS) / sizeof(TASKS[0]);
    while (task < n_tasks && strcmp(opt->task, TASKS[task])) task++;
    if (task == n_tasks) die("--task '%s': expected table2, fig5, table3 or fig8", opt->task);
    Study study;
    NeedlePaper paper;
    Row* rows = configure_rows(&study, opt, RECIPE_SECTIONS, &paper);
    // the rows studied in the recipe's order, which names the outputs (needle_output_path)
    char studied[RECIPE_SECTIONS * 65] = "";
    NeedleOptions named = *opt;
    for (int g = 0; opt->rows && g < study.n_rows; g++) {
        snprintf(studied + strlen(studied), sizeof(studied) - strlen(studied), "%s%s", g ? "," : "", study.recipe->rows[g].name);
    }
    if (opt->rows) named.rows = studied;
    opt = &named;
    const Section* preset = study.preset;
    mkdir_p(opt->plots);
    study_begin(&study, "needle");
    Registry* reg = &study.reg;
    DataDir data;
    data_open(&data, rows[0].study.cfg.data, DATA_VAL);
    const Tokenizer* tok = &data.tok;
    const Shard* val = &data.val;
    int n_models = study.n_models, n_rows = study.n_rows;
    for (int i = 0; i < n_models; i++) {
        Row* row = &rows[i];
        train_row(&study, row);
        CheckpointInfo info;
        row->be = study_load_checkpoint(row->study.checkpoint, &row->study.cfg, &row->model, &info);
        row->copy = copy_score(&row->model, val, COPY_HALF, 4, (uint64_t)row->study.cfg.seed);
        registry_evaluation(reg, row->study.run, "copy_score", row->copy.second);
        registry_evaluation(reg, row->study.run, "copy_score_first", row->copy.first);
        printf("%s: copying check %.2f (first copy %.2f)\n", row->study.name, row->copy.second, row->copy.first);
    }
    NeedleSource src;
    char cities[4200];
    source_file_path(cities, sizeof(cities), "data/cities.txt");
    needle_source_init(&src, tok, val, cities, NEEDLE_EVAL);
    printf("%s, preset %s: %d evaluation cities, haystacks from %s/val.bin\n", opt->task, opt->preset, src.n_cities, data.dir);
    if (task == 0) task_table2(rows, n_rows, opt->seeds, &src, tok, reg, preset, opt, &paper);
    if (task == 1) task_fig5(rows, n_rows, opt->seeds, &src, tok, reg, preset, opt, &paper);
    if (task == 2) task_table3(rows, n_rows, opt->seeds, &src, tok, reg, preset, opt, &paper);
    if (task == 3) task_fig8(rows, n_rows, opt->seeds, &src, tok, val, reg, preset, opt, &paper);
    needle_source_free(&src);
    data_close(&data);
    for (int i = 0; i < n_models; i++) {
        model_free(&rows[i].model);
        backend_close(rows[i].be);
    }
    free(rows);
    study_close(&study);
    return 0;
}
