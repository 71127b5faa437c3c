#define _GNU_SOURCE
#include "runs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../base/util.h"
#include "recipe.h"
#include "registry.h"
#include "report.h"

static void open_registry(Registry* reg, const char* results) {
    char path[4200];
    registry_path(path, sizeof(path), results);
    FILE* probe = fopen(path, "rb");
    if (!probe) die("no registry at '%s' (--results names the folder that holds registry.sqlite)", path);
    fclose(probe);
    if (access(path, W_OK) != 0 || access(results, W_OK) != 0) {
        registry_open_read(reg, path);  // a reader where nothing can be written: interrupted runs are not reaped
        return;
    }
    registry_open(reg, path);
    registry_reap(reg);
}

static void number(char* out, size_t n, double value, const char* format) {
    if (isnan(value)) snprintf(out, n, "-");
    else snprintf(out, n, format, value);
}

// A filter that matches no experiment or preset of the registry is a typo, not "0 runs"
static void require_known(Registry* reg, int presets, const char* value) {
    if (!value) return;
    char** names;
    int n = registry_experiment_values(reg, presets, &names), found = 0;
    for (int i = 0; i < n; i++) found |= strcmp(names[i], value) == 0;
    if (!found) {
        char list[1024] = "";
        for (int i = 0; i < n; i++) snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "", names[i]);
        const char* near = closest_name(value, (const char* const*)names, n);
        char hint[128] = "";
        if (near) snprintf(hint, sizeof(hint), "; did you mean '%s'?", near);
        die("no %s '%s' in '%s'%s (it holds: %s)", presets ? "preset" : "experiment", value, reg->path, hint, n ? list : "none");
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

// The status name --status gives, matched without regard to case (`finished` is FINISHED); dies
// naming the statuses there are
static const char* known_status(const char* given) {
    if (!given) return NULL;
    char list[64] = "";
    for (RunStatus k = RUN_RUNNING; k <= RUN_KILLED; k++) {
        if (strcasecmp(given, run_status_name(k)) == 0) return run_status_name(k);
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", k ? ", " : "", run_status_name(k));
    }
    die("option --status: no status '%s' (a run is one of %s)", given, list);
}

void runs_list(const RunFilter* f) {
    const char* status = known_status(f->status);
    Registry reg;
    open_registry(&reg, f->results);
    require_known(&reg, 0, f->experiment);
    require_known(&reg, 1, f->preset);
    RunSummary* runs;
    int n = registry_runs(&reg, f->experiment, f->preset, status, &runs);
    printf("%5s  %-10s %-10s %-28s %6s %-9s %11s %8s %8s %6s %9s  %s\n", "id", "experiment", "preset", "row", "seed", "status",
           "steps", "train", "val", "spikes", "tok/s", "started");
    for (int i = 0; i < n; i++) {
        const RunSummary* r = &runs[i];
        char steps[32], train[32], val[32], rate[32];
        snprintf(steps, sizeof(steps), "%d/%d", r->step, r->steps);
        number(train, sizeof(train), r->train_loss, "%.4f");
        number(val, sizeof(val), r->val_loss, "%.4f");
        number(rate, sizeof(rate), r->tokens_per_second, "%.0f");
        printf("%5lld  %-10s %-10s %-28s %6d %-9s %11s %8s %8s %6d %9s  %s\n", (long long)r->id, r->experiment, r->preset, r->row,
               r->seed, r->status, steps, train, val, r->spikes, rate, r->started);
    }
    free(runs);
    printf("%d run%s in %s\n", n, n == 1 ? "" : "s", reg.path);
    registry_close(&reg);
}

// results/<png's file name without .png>.dat: where a figure's data goes. The figure and its
// data replace only regular files, and never the registry they are drawn from.
static void figure_data_path(char* dat, size_t n, const Registry* reg, const char* results, const char* png) {
    char name[256];
    const char* base = strrchr(png, '/') ? strrchr(png, '/') + 1 : png;
    snprintf(name, sizeof(name), "%.*s", (int)(strstr(base, ".png") ? strstr(base, ".png") - base : (long)strlen(base)), base);
    path_printf(dat, n, "%s/%s.dat", results, name);
    char wal[4200], shm[4200];
    path_printf(wal, sizeof(wal), "%s-wal", reg->path);
    path_printf(shm, sizeof(shm), "%s-shm", reg->path);
    const char* inputs[] = {reg->path, wal, shm};
    refuse_output_over_input("--out", png, inputs, 3);
    refuse_output_over_input("the figure's data", dat, inputs, 3);
    const char* figure[] = {png};
    refuse_output_over_input("the figure's data", dat, figure, 1);
    refuse_replacing_non_file("--out", png);
    refuse_replacing_non_file("the figure's data", dat);
}

void runs_compare(const char* results, const int64_t* ids, int n, const char* png) {
    Registry reg;
    open_registry(&reg, results);
    char dat[4200];
    figure_data_path(dat, sizeof(dat), &reg, results, png);
    char labels[16][160];
    printf("%-18s", "run");
    for (int i = 0; i < n; i++) printf(" | %-22lld", (long long)ids[i]);
    printf("\n");
    // what each run is and how it ended
    static const char* rows[] = {"experiment", "preset", "row", "seed", "status", "steps", "final train loss",
                                 "final val loss", "tokens/s", "spikes"};
    char cells[10][16][64];
    for (int i = 0; i < n; i++) {
        RunSummary r;
        if (!registry_run(&reg, ids[i], &r)) die("compare: no run %lld in '%s' (`difftx runs` lists them)", (long long)ids[i], reg.path);
        snprintf(cells[0][i], sizeof(cells[0][i]), "%.63s", r.experiment);
        snprintf(cells[1][i], sizeof(cells[1][i]), "%.63s", r.preset);
        snprintf(cells[2][i], sizeof(cells[2][i]), "%.63s", r.row);
        snprintf(cells[3][i], sizeof(cells[3][i]), "%d", r.seed);
        snprintf(cells[4][i], sizeof(cells[4][i]), "%s", r.status);
        snprintf(cells[5][i], sizeof(cells[5][i]), "%d/%d", r.step, r.steps);
        number(cells[6][i], sizeof(cells[6][i]), r.train_loss, "%.4f");
        number(cells[7][i], sizeof(cells[7][i]), r.val_loss, "%.4f");
        number(cells[8][i], sizeof(cells[8][i]), r.tokens_per_second, "%.0f");
        snprintf(cells[9][i], sizeof(cells[9][i]), "%d", r.spikes);
        snprintf(labels[i], sizeof(labels[i]), "%lld %.20s/%.20s %.60s seed %.12s", (long long)ids[i], cells[0][i],
                 cells[1][i], cells[2][i], cells[3][i]);
    }
    for (int k = 0; k < 10; k++) {
        printf("%-18s", rows[k]);
        for (int i = 0; i < n; i++) printf(" | %-22s", cells[k][i]);
        printf("\n");
    }
    // the config keys whose values differ: every key any listed run sets (a run from before a
    // key existed lacks it), in the order of the first run that sets it
    char** keys;
    int n_keys = registry_param_keys(&reg, ids, n, &keys), differ = 0;
    for (int k = 0; k < n_keys; k++) {
        char* values[16];
        int same = 1;
        for (int i = 0; i < n; i++) {
            values[i] = registry_param(&reg, ids[i], keys[k]);
            same &= strcmp(values[i], values[0]) == 0;
        }
        if (!same) {
            if (!differ++) printf("config where the runs differ:\n");
            printf("%-18s", keys[k]);
            for (int i = 0; i < n; i++) printf(" | %-22s", values[i][0] ? values[i] : "(not recorded)");
            printf("\n");
        }
        for (int i = 0; i < n; i++) free(values[i]);
        free(keys[k]);
    }
    free(keys);
    if (!differ) printf("the runs' configs are the same\n");

    // the curves: per run, a validation block and a training block of "tokens loss"; runs that
    // recorded no loss at all (benchmarks) have nothing to draw, and compare says so
    int drawn = 0;
    for (int k = 0; k < 2 && !drawn; k++) {
        for (int i = 0; i < n && !drawn; i++) {
            int64_t* tokens;
            double* values;
            drawn = registry_run_curve(&reg, ids[i], k ? "train_loss" : "val_loss", &tokens, &values) > 0;
            free(tokens);
            free(values);
        }
    }
    if (!drawn) {
        printf("no figure: these runs recorded no training or validation losses\n");
        registry_close(&reg);
        return;
    }
    DataFile out;
    data_file_open(&out, dat);
    FILE* f = out.f;
    static const char* metric[2] = {"val_loss", "train_loss"};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < n; i++) {
            int64_t* tokens;
            double* values;
            int points = registry_run_curve(&reg, ids[i], metric[k], &tokens, &values);  // the whole run
            fprintf(f, "\"%s\"\n", labels[i]);
            for (int p = 0; p < points; p++) fprintf(f, "%lld %.9g\n", (long long)tokens[p], values[p]);
            if (points == 0) fprintf(f, "0 NaN\n");  // an empty block would end the file's indexing
            fprintf(f, "\n\n");
            free(tokens);
            free(values);
        }
    }
    data_file_close(&out);
    GnuplotVars vars;
    gnuplot_init(&vars);
    gnuplot_input(&vars, "data", dat);
    gnuplot_number(&vars, "runs", n);
    gnuplot_output(&vars, "out", png);
    gnuplot("compare.gp", &vars);
    printf("wrote %s (data %s)\n", png, dat);
    registry_close(&reg);
}

// One run's lambda of each layer (L) at its evaluations: *tokens (points), mean and spread
// (L, points), the caller frees; returns the points
static int lambda_curves(Registry* reg, int64_t run, int L, int H, int per_token, int64_t** tokens, double** mean,
                         double** spread) {
    int points = 0;
    *mean = *spread = NULL;
    *tokens = NULL;
    for (int l = 0; l < L; l++) {
        for (int h = 0; h < (per_token ? H : 1); h++) {
            for (int k = 0; k < (per_token ? 2 : 1); k++) {
                char key[64];
                if (per_token) snprintf(key, sizeof(key), "lambda_l%02d_h%02d_%s", l + 1, h + 1, k ? "std" : "mean");
                else snprintf(key, sizeof(key), "lambda_l%02d", l + 1);
                int64_t* t;
                double* v;
                int n = registry_run_curve(reg, run, key, &t, &v);
                if (!*tokens) {
                    points = n;
                    *tokens = t;
                    *mean = callocCheck((size_t)L * (n ? n : 1), sizeof(double));
                    *spread = callocCheck((size_t)L * (n ? n : 1), sizeof(double));
                } else {
                    if (n != points) die("registry '%s': run %lld has %d values of %s but %d of the first lambda", reg->path,
                                         (long long)run, n, key, points);
                    free(t);
                }
                double* into = k ? *spread : *mean;
                for (int p = 0; p < n; p++) into[(size_t)l * points + p] += v[p] / (per_token ? H : 1);
                free(v);
            }
        }
    }
    return points;
}

void runs_lambda(const char* results, const int64_t* ids, int n, const char* png) {
    Registry reg;
    open_registry(&reg, results);
    char dat[4200];
    figure_data_path(dat, sizeof(dat), &reg, results, png);
    DataFile out;
    data_file_open(&out, dat);
    FILE* f = out.f;
    int blocks = 0, max_layers = 0;
    for (int i = 0; i < n; i++) {
        RunSummary r;
        char* text = registry_run(&reg, ids[i], &r) ? registry_run_config(&reg, ids[i]) : NULL;
        if (!text) die("lambda: no run %lld in '%s' (`difftx runs` lists them)", (long long)ids[i], reg.path);
        char row[160], origin[64];
        snprintf(row, sizeof(row), "%.100s seed %d", r.row, r.seed);
        snprintf(origin, sizeof(origin), "run %lld's config", (long long)ids[i]);
        Config cfg;
        config_defaults(&cfg);
        config_load_string(&cfg, text, origin);
        free(text);
        const AttnVariant* variant = config_variant(&cfg.model);
        const char* attention = variant->name;
        int L = cfg.model.n_layer, H = cfg.model.n_head;
        if (variant->lambda == LAMBDA_NONE) {
            die("lambda: run %lld (%s) has %s attention, which has no lambda", (long long)ids[i], row, attention);
        }
        int per_token = variant->lambda == LAMBDA_PER_TOKEN;
        int64_t* tokens;
        double *mean, *spread;
        int points = lambda_curves(&reg, ids[i], L, H, per_token, &tokens, &mean, &spread);
        if (!points) die("lambda: run %lld (%s) recorded no lambda (trained before runs recorded it at each evaluation)", (long long)ids[i], row);
        printf("run %lld (%s, %s attention): lambda per layer at each evaluation%s\n", (long long)ids[i], row, attention,
               per_token ? " (mean over heads of the mean over tokens ± the mean over heads of its spread over tokens)" : "");
        printf("%12s", "tokens");
        for (int l = 0; l < L; l++) printf(per_token ? " | %-15d" : " | %-7d", l + 1);
        printf("\n");
        for (int p = 0; p < points; p++) {
            printf("%12lld", (long long)tokens[p]);
            for (int l = 0; l < L; l++) {
                if (per_token) printf(" | %.3f ± %.3f  ", mean[(size_t)l * points + p], spread[(size_t)l * points + p]);
                else printf(" | %-7.3f", mean[(size_t)l * points + p]);
            }
            printf("\n");
        }
        for (int l = 0; l < L; l++) {
            fprintf(f, "\"run %lld layer %d\"\n", (long long)ids[i], l + 1);
            for (int p = 0; p < points; p++) fprintf(f, "%lld %.9g %d %d\n", (long long)tokens[p], mean[(size_t)l * points + p], l, i);
            fprintf(f, "\n\n");
            blocks++;
        }
        if (L > max_layers) max_layers = L;
        free(tokens);
        free(mean);
        free(spread);
    }
    data_file_close(&out);
    GnuplotVars vars;
    gnuplot_init(&vars);
    gnuplot_input(&vars, "data", dat);
    gnuplot_number(&vars, "blocks", blocks);
    gnuplot_number(&vars, "layers", max_layers);
    gnuplot_output(&vars, "out", png);
    gnuplot("lambda.gp", &vars);
    printf("wrote %s (data %s)\n", png, dat);
    registry_close(&reg);
}

int runs_recorded_windows(const char* results, const char* run_dir, int seq_len) {
    char path[4200];
    registry_path(path, sizeof(path), results);
    return (int)(registry_recorded_eval_tokens(path, run_dir) / seq_len);
}

void runs_record_bench(const char* results, const char* recipe_path, const char* row, const Config* cfg, const Backend* be,
                       int forward_only, const BenchNumbers* n) {
    Registry reg;
    int64_t experiment = recipe_file_experiment(&reg, results, "bench", recipe_path);
    int64_t run = registry_begin_run(&reg, experiment, row, cfg->seed, cfg, be->device_name(be), NULL);
    registry_evaluation(&reg, run, "tokens_per_second", n->tokens_per_second);
    if (!forward_only) registry_evaluation(&reg, run, "mfu", n->mfu);
    if (!forward_only && n->mfu_peak > 0) registry_evaluation(&reg, run, "mfu_peak", n->mfu_peak);
    registry_evaluation(&reg, run, "matmul_share", n->matmul_share);
    registry_evaluation(&reg, run, "matmul_gflops", n->matmul_gflops);
    // the host's resident set, or a device's memory: named apart, so a query never mixes them
    if (n->peak_mib >= 0) registry_evaluation(&reg, run, be->host_memory ? "peak_rss_mib" : "peak_device_mib", n->peak_mib);
    registry_end_run(&reg, run, RUN_FINISHED);
    printf("recorded as run %lld in %s\n", (long long)run, reg.path);
    registry_close(&reg);
}
