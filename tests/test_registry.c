// The results registry (studies/registry.c): experiments found again; two concurrent writers
// (600 metric transactions, integrity check); a finished run counts only with its config, seed
// and the checkpoint file it recorded, byte for byte; a worker killed with SIGKILL never shows
// FINISHED, is reaped as KILLED and rerun as attempt 2; window losses written, replaced and read
// back bitwise; a run's identity is its resolved config (a stored text lacking a key at its
// default is the same run, and its attempts are joined by it). Migrations: a registry from
// before schema versions (numeric params, ranks, device, metric times, resolved config texts)
// and a version 7 one (noise_group = 0 in every config text) open as today's schema and find
// today's configs.
#define _DEFAULT_SOURCE
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../base/util.h"
#include "../eval/arhit.h"
#include "../run/config.h"
#include "../studies/registry.h"
#include "check.h"
#include "../base/h5.h"
#include "fixtures.h"

// A stand-in checkpoint: an HDF5 file with the config attribute a checkpoint's finished run is
// read by (checkpoint_unloadable) and a mark that makes two of them different files
static void fake_checkpoint(const char* path, const Config* cfg, const char* mark) {
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.fake", path);
    hid_t file = h5_create_checksummed(tmp, tmp);
    char* text = config_to_text(cfg);
    if (strcmp(mark, "another version's") == 0) {  // its attention a variant this program has not
        char* at = strstr(text, "attention = ");
        if (!at) die("no attention line");
        char* renamed = mallocCheck(strlen(text) + 64);
        snprintf(renamed, strlen(text) + 64, "%.*sattention = no_such_variant%s", (int)(at - text), text, strchr(at, '\n'));
        free(text);
        text = renamed;
    }
    h5_write_string_attr(file, "config", text, tmp);
    h5_write_string_attr(file, "mark", mark, tmp);
    free(text);
    h5_check(H5Fclose(file), "closing", tmp);
    if (rename(tmp, path) != 0) die("cannot rename %s", tmp);
}

// Closes and opens the registry again, as the next command would
static void reopen(Registry* reg, const char* path) {
    registry_close(reg);
    registry_open(reg, path);
}

static void test_registry(void) {
    const char* path = "build/test_registry.sqlite";
    unlink(path);
    Registry reg;
    registry_open(&reg, path);
    int64_t exp = registry_experiment(&reg, "table6", "smoke", "recipe.ini", "text");
    CHECK(exp == registry_experiment(&reg, "table6", "smoke", "recipe.ini", "text"), "experiments are found again");
    Config cfg;
    config_defaults(&cfg);
    // a finished run counts only while its recorded checkpoint is there: one file both rows write
    snprintf(cfg.out, sizeof(cfg.out), "build/test_registry_run");
    mkdir_p(cfg.out);
    char ckpt[4200];
    config_checkpoint_path(&cfg, ckpt, sizeof(ckpt));
    fake_checkpoint(ckpt, &cfg, "weights");
    char saved[4300];  // its bytes, put back later: two writes of one HDF5 file differ (times in its headers)
    snprintf(saved, sizeof(saved), "%s.saved", ckpt);
    copy_file(ckpt, saved);
    // two processes write 300 metric transactions each at the same time
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            Registry own;
            registry_open(&own, path);
            char row[16];
            snprintf(row, sizeof(row), "row%d", k);
            int64_t run = registry_begin_run(&own, exp, row, 1, &cfg, "cpu", NULL);
            for (int i = 0; i < 300; i++) {
                const char* key = "train_loss";
                int64_t tokens = i;
                double value = k + i * 1e-3;
                registry_metrics(&own, run, 1, &key, &i, &tokens, &value, &value);
            }
            registry_artifact(&own, run, "checkpoint", ckpt);
            registry_end_run(&own, run, RUN_FINISHED);
            registry_close(&own);
            _exit(0);
        }
    }
    int ok = 1;
    for (int k = 0; k < 2; k++) {
        int status;
        waitpid(kids[k], &status, 0);
        ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    CHECK(ok, "both concurrent writers finish");
    sqlite3_stmt* st;
    sqlite3_prepare_v2(reg.db, "SELECT COUNT(*), COUNT(DISTINCT run_id) FROM metrics", -1, &st, NULL);
    sqlite3_step(st);
    CHECK(sqlite3_column_int(st, 0) == 600 && sqlite3_column_int(st, 1) == 2, "600 metrics from 2 runs, got %d", sqlite3_column_int(st, 0));
    sqlite3_finalize(st);
    sqlite3_prepare_v2(reg.db, "PRAGMA integrity_check", -1, &st, NULL);
    sqlite3_step(st);
    CHECK(strcmp((const char*)sqlite3_column_text(st, 0), "ok") == 0, "database integrity after concurrent writes");
    sqlite3_finalize(st);
    CHECK(registry_finished_run(&reg, exp, "row0", 1, &cfg, NULL) > 0 && registry_finished_run(&reg, exp, "row0", 2, &cfg, NULL) == 0,
          "finished runs are found by seed");
    Config other = cfg;
    other.optim.lr *= 2;
    CHECK(registry_finished_run(&reg, exp, "row0", 1, &other, NULL) == 0, "a run with another config does not count as finished");
    unlink(ckpt);
    CHECK(registry_finished_run(&reg, exp, "row0", 1, &cfg, NULL) == 0, "a finished run whose checkpoint is gone does not count");
    fake_checkpoint(ckpt, &cfg, "another run's weights");
    CHECK(registry_finished_run(&reg, exp, "row0", 1, &cfg, NULL) == 0, "nor one whose checkpoint another run replaced");
    copy_file(saved, ckpt);
    CHECK(registry_finished_run(&reg, exp, "row0", 1, &cfg, NULL) > 0, "the file it recorded, byte for byte, counts again");
    // a run's identity is its resolved config, not its text: a stored run lacking a key at its
    // default (an older version's text, before the key existed) is the same run, with no
    // migration, once the registry is opened again (which brings the identities up to date); one
    // with a key this version does not know is another run, and nothing dies
    int64_t found = registry_finished_run(&reg, exp, "row0", 1, &cfg, NULL);
    char sql[400];
    snprintf(sql, sizeof(sql), "UPDATE runs SET recipe_text = replace(recipe_text, 'rope_theta = 1e+04' || char(10), '') WHERE id = %lld "
             "AND instr(recipe_text, 'rope_theta = 1e+04' || char(10)) > 0", (long long)found);
    sqlite3_exec(reg.db, sql, NULL, NULL, NULL);
    int dropped = sqlite3_changes(reg.db);
    reopen(&reg, path);
    CHECK(dropped == 1 && registry_finished_run(&reg, exp, "row0", 1, &cfg, NULL) == found,
          "a stored run without a key at its default (rope_theta; %d row rewritten) is the same run", dropped);
    snprintf(sql, sizeof(sql), "UPDATE runs SET recipe_text = recipe_text || 'a_later_key = 1' || char(10) WHERE id = %lld", (long long)found);
    sqlite3_exec(reg.db, sql, NULL, NULL, NULL);
    reopen(&reg, path);
    CHECK(registry_finished_run(&reg, exp, "row0", 1, &cfg, NULL) == 0, "a stored run with a key this version does not know is another run");
    snprintf(sql, sizeof(sql), "UPDATE runs SET recipe_text = replace(recipe_text, 'a_later_key = 1' || char(10), 'rope_theta = 1e+04' || "
             "char(10)) WHERE id = %lld", (long long)found);
    sqlite3_exec(reg.db, sql, NULL, NULL, NULL);
    reopen(&reg, path);
    CHECK(registry_finished_run(&reg, exp, "row0", 1, &cfg, NULL) == found, "and with the key back (at the end) it is the same run again");
    // the attempts of one run are joined by identity: an attempt whose text lacks a key at its
    // default and the attempt resumed from it are one run, whose metrics past the resumed step go
    int64_t first = registry_begin_run(&reg, exp, "resumed", 1, &cfg, "cpu", NULL);
    for (int i = 1; i <= 10; i++) {
        const char* key = "train_loss";
        int64_t tokens = 100 * i;
        double value = 5.0 - 0.1 * i;
        registry_metrics(&reg, first, 1, &key, &i, &tokens, &value, &value);
    }
    registry_end_run(&reg, first, RUN_KILLED);
    snprintf(sql, sizeof(sql), "UPDATE runs SET recipe_text = replace(recipe_text, 'rope_theta = 1e+04' || char(10), ''), identity = '' "
             "WHERE id = %lld", (long long)first);
    sqlite3_exec(reg.db, sql, NULL, NULL, NULL);
    reopen(&reg, path);
    CHECK(registry_count(&reg, "SELECT COUNT(DISTINCT identity) FROM runs WHERE row IN ('row0', 'resumed') AND identity <> ''") == 1,
          "opening the registry gave the rewritten text its identity, that of the same config written today");
    int64_t resumed = registry_begin_run(&reg, exp, "resumed", 1, &cfg, "cpu", NULL);
    registry_forget_metrics_after(&reg, resumed, 6);
    RunSummary summary;
    CHECK(registry_run(&reg, resumed, &summary) && summary.step == 6 && fabs(summary.train_loss - 4.4) < 1e-12,
          "the resumed attempt continues its first attempt (step %d, loss %g), whose steps past 6 are gone", summary.step,
          summary.train_loss);
    int64_t* curve_tokens;
    double* curve_values;
    int points = registry_mean_curve(&reg, &resumed, 1, "train_loss", &curve_tokens, &curve_values);
    CHECK(points == 6 && curve_tokens[5] == 600, "its curve is the first attempt's 6 steps (%d points)", points);
    free(curve_tokens);
    free(curve_values);
    // a run finished by another version of the program, whose checkpoint this one cannot load
    // (a variant it does not have), is not finished, though the file is the one it recorded
    fake_checkpoint(ckpt, &cfg, "another version's");
    int64_t later = registry_begin_run(&reg, exp, "row2", 1, &cfg, "cpu", NULL);
    registry_artifact(&reg, later, "checkpoint", ckpt);
    registry_end_run(&reg, later, RUN_FINISHED);
    CHECK(registry_finished_run(&reg, exp, "row2", 1, &cfg, NULL) == 0, "a finished run whose checkpoint this program cannot load is not finished");
    copy_file(saved, ckpt);

    // a worker killed with SIGKILL leaves its run RUNNING; reaping marks it KILLED, never FINISHED
    pid_t victim = fork();
    if (victim == 0) {
        Registry own;
        registry_open(&own, path);
        registry_begin_run(&own, exp, "victim", 1, &cfg, "cpu", NULL);
        for (;;) pause();
    }
    int64_t running = 0;
    for (int tries = 0; tries < 500 && !running; tries++) {
        usleep(10000);
        sqlite3_prepare_v2(reg.db, "SELECT COUNT(*) FROM runs WHERE row = 'victim' AND status = 'RUNNING'", -1, &st, NULL);
        sqlite3_step(st);
        running = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    kill(victim, SIGKILL);
    waitpid(victim, NULL, 0);
    CHECK(running == 1 && registry_finished_run(&reg, exp, "victim", 1, &cfg, NULL) == 0, "a killed run never shows FINISHED");
    CHECK(registry_reap(&reg) == 1, "reaping finds the dead worker");
    sqlite3_prepare_v2(reg.db, "SELECT status, ended IS NOT NULL FROM runs WHERE row = 'victim'", -1, &st, NULL);
    sqlite3_step(st);
    CHECK(strcmp((const char*)sqlite3_column_text(st, 0), "KILLED") == 0 && sqlite3_column_int(st, 1), "the killed run is marked KILLED");
    sqlite3_finalize(st);
    int64_t second = registry_begin_run(&reg, exp, "victim", 1, &cfg, "cpu", NULL);
    sqlite3_prepare_v2(reg.db, "SELECT attempt FROM runs WHERE id = ?", -1, &st, NULL);
    sqlite3_bind_int64(st, 1, second);
    sqlite3_step(st);
    CHECK(sqlite3_column_int(st, 0) == 2, "a rerun is attempt 2");
    sqlite3_finalize(st);
    // per-window loss sums come back as written, and a second write replaces the first
    WindowLoss w[3] = {{{0}, {0}}}, back[3];
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < WINDOW_SLICES; k++) {
            w[i].sum[k] = 0.1 * i + k + 1.0 / 3;
            w[i].count[k] = 10 * i + k;
        }
    }
    CHECK(registry_window_losses_read(&reg, second, 3, back) == 0, "a run without window losses has none");
    registry_window_losses(&reg, second, 3, w);
    w[1].sum[SLICE_ARHIT] = 42;
    registry_window_losses(&reg, second, 3, w);
    CHECK(registry_window_losses_read(&reg, second, 3, back) == 3 && memcmp(back, w, sizeof(w)) == 0,
          "window losses round-trip bitwise; the second write replaced the first");
    CHECK(registry_window_losses_read(&reg, second, 2, back) == 2 && back[1].sum[SLICE_ARHIT] == 42, "reading the first 2 windows");
    CHECK(registry_window_count(&reg, second) == 3 && registry_window_count(&reg, second + 1000) == 0,
          "the run has 3 windows recorded, an unknown run none");
    registry_close(&reg);
    unlink(path);
}

// A registry from before schema versions (params as text, no `ranks`) is migrated: numbers
// compare as numbers, its runs have one rank, and it says which schema it now has
static void test_registry_migration(void) {
    const char* db = "build/test_train_old.sqlite";
    unlink(db);
    sqlite3* old;
    sqlite3_open(db, &old);
    sqlite3_exec(old, "CREATE TABLE experiments (id INTEGER PRIMARY KEY, name TEXT NOT NULL, preset TEXT NOT NULL,"
                      " recipe_path TEXT NOT NULL, recipe_text TEXT NOT NULL, created TEXT NOT NULL, UNIQUE (name, preset));"
                      "CREATE TABLE runs (id INTEGER PRIMARY KEY, experiment_id INTEGER NOT NULL, row TEXT NOT NULL,"
                      " seed INTEGER NOT NULL, attempt INTEGER NOT NULL, status TEXT NOT NULL, git_commit TEXT NOT NULL,"
                      " git_dirty INTEGER NOT NULL, host TEXT NOT NULL, cpu_model TEXT NOT NULL, threads INTEGER NOT NULL,"
                      " pid INTEGER NOT NULL, pid_start INTEGER NOT NULL, recipe_text TEXT NOT NULL, out_dir TEXT NOT NULL,"
                      " started TEXT NOT NULL, ended TEXT, UNIQUE (experiment_id, row, seed, attempt));"
                      "CREATE TABLE params (run_id INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
                      " PRIMARY KEY (run_id, key));"
                      "CREATE TABLE metrics (run_id INTEGER NOT NULL, key TEXT NOT NULL, step INTEGER NOT NULL,"
                      " tokens INTEGER NOT NULL, value REAL NOT NULL);"
                      "INSERT INTO metrics VALUES (2, 'val_loss', 10, 100, 5.5);"
                      "INSERT INTO experiments VALUES (1, 'table6', 'small', 'x', 'x', 'now');"
                      "INSERT INTO runs VALUES (1, 1, 'diff', 1000, 1, 'FINISHED', 'abc', 0, 'h', 'cpu', 2, 1, 1, 'x', 'o', 'now', 'now');"
                      "INSERT INTO runs VALUES (2, 1, 'diff', 1001, 1, 'FINISHED', 'abc', 0, 'h', 'cpu', 2, 1, 1,"
                      " 'attention = diff\nd_model = 256\nhead_dim = 0\nffn_hidden = 0\nlr = 0.00100000005\n', 'o', 'now', 'now');"
                      "INSERT INTO params VALUES (1, 'n_layer', '10'), (1, 'lr', '0.00100000005'), (1, 'attention', 'diff'),"
                      " (1, 'head_norm', 'true');",
                 NULL, NULL, NULL);
    sqlite3_close(old);
    Registry reg;
    registry_open(&reg, db);
    CHECK(registry_count(&reg, "PRAGMA user_version") == REGISTRY_SCHEMA, "a migrated registry has schema version %d", REGISTRY_SCHEMA);
    CHECK(registry_count(&reg, "SELECT COUNT(*) FROM params WHERE run_id = 1 AND key = 'n_layer' AND value > 9") == 1 &&
              registry_count(&reg, "SELECT COUNT(*) FROM params WHERE run_id = 1 AND key = 'lr' AND value < 0.002 AND typeof(value) = 'real'") == 1,
          "migrated numeric params compare as numbers (10 > 9, not '10' < '9')");
    CHECK(registry_count(&reg, "SELECT COUNT(*) FROM params WHERE run_id = 1 AND typeof(value) = 'text' AND value IN ('diff', 'true')") == 2,
          "text params stay text");
    CHECK(registry_count(&reg, "SELECT ranks FROM runs WHERE id = 1") == 1, "runs from before data parallelism had one rank");
    CHECK(registry_count(&reg, "SELECT COUNT(*) FROM runs WHERE device = 'cpu'") == 2, "runs from before the CUDA backend ran on the cpu");
    CHECK(registry_count(&reg, "SELECT COUNT(*) FROM runs WHERE id = 2 AND recipe_text LIKE '%ffn_hidden = 704%' AND "
                           "recipe_text LIKE '%head_dim = 32%' AND recipe_text LIKE '%lr = 0.001\n%'") == 1 &&
              registry_count(&reg, "SELECT COUNT(*) FROM params WHERE run_id = 2 AND key = 'ffn_hidden' AND value = 704") == 1,
          "configs are rewritten resolved, floats as written");
    CHECK(registry_count(&reg, "SELECT COUNT(*) FROM runs WHERE id = 1 AND recipe_text = 'x'") == 1, "a config it cannot read stays");
    CHECK(registry_count(&reg, "SELECT COUNT(*) FROM metrics WHERE time IS NULL AND value = 5.5") == 1,
          "old metrics gain a time column, empty for them");
    registry_close(&reg);
    unlink(db);
}

// A registry at schema `version` holding one FINISHED run of `row` whose config text is old_text
// (and whatever `extra` SQL writes beside it): opened now, whether that run's text became
// today_text. reg is left open.
static int migrated_text(Registry* reg, const char* db, int version, const char* row, const char* old_text, const char* today_text,
                         const char* extra) {
    unlink(db);
    registry_open(reg, db);
    registry_close(reg);
    sqlite3* old;
    sqlite3_open(db, &old);
    char sql[256];
    snprintf(sql, sizeof(sql), "INSERT INTO experiments (id, name, preset, recipe_path, recipe_text, created) VALUES (1, 'table6', 'small',"
                               " 'x', 'x', 'now'); PRAGMA user_version = %d;", version);
    sqlite3_exec(old, sql, NULL, NULL, NULL);
    sqlite3_stmt* st;
    sqlite3_prepare_v2(old, "INSERT INTO runs (experiment_id, row, seed, attempt, status, git_commit, git_dirty, host, cpu_model, threads,"
                            " ranks, device, pid, pid_start, recipe_text, out_dir, data_dir, data_id, started) VALUES (1, ?, 1000, 1,"
                            " 'FINISHED', 'abc', 0, 'h', 'cpu', 2, 1, 'cpu', 1, 1, ?, 'o', '', '', 'now')", -1, &st, NULL);
    sqlite3_bind_text(st, 1, row, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, old_text, -1, SQLITE_TRANSIENT);
    CHECK(sqlite3_step(st) == SQLITE_DONE, "a version %d run of %s is written", version, row);
    sqlite3_finalize(st);
    if (extra) sqlite3_exec(old, extra, NULL, NULL, NULL);
    sqlite3_close(old);
    registry_open(reg, db);
    sqlite3_prepare_v2(reg->db, "SELECT recipe_text FROM runs WHERE id = 1", -1, &st, NULL);
    int same = sqlite3_step(st) == SQLITE_ROW && strcmp((const char*)sqlite3_column_text(st, 0), today_text) == 0;
    sqlite3_finalize(st);
    return same;
}

// A version 7 registry recorded noise_group = 0 in every config text: opened now, its texts are
// rewritten as today's config text records them (a switch only where a variant uses it), so the
// same config's finished run is found
static void test_registry_v7_migration(void) {
    const char* db = "build/test_train_v7.sqlite";
    Registry reg;
    Config cfg;
    config_defaults(&cfg);
    char* text = config_to_text(&cfg);
    CHECK(!strstr(text, "noise_group") && !strstr(text, "update_rank"), "a diff config's text leaves out the switches it does not use");
    char* v7_text = mallocCheck(strlen(text) + 32);
    char* after = strstr(text, "lambda_init = ");
    snprintf(v7_text, strlen(text) + 32, "%.*snoise_group = 0\n%s", (int)(after - text), text, after);
    int same = migrated_text(&reg, db, 7, "diff", v7_text, text, NULL);
    CHECK(same && strstr(v7_text, "noise_group = 0"), "a version 7 config text loses noise_group = 0 and equals today's text of the same config");
    registry_close(&reg);
    const char* err = config_set(&cfg, "attention", "diff_shared_noise");
    if (!err) err = config_set(&cfg, "noise_group", "2");
    char* grouped = err ? NULL : config_to_text(&cfg);
    CHECK(grouped && strstr(grouped, "noise_group = 2\n") && !strstr(grouped, "update_rank"), "a grouped config's text keeps its noise_group and no update_rank");
    free(grouped);
    free(text);
    free(v7_text);
    unlink(db);
}

// Version 8 called DIFF with shared noise maps `diff_grouped`: opened now, its runs' texts and
// params say diff_shared_noise, so the same config's finished run is found under today's name
static void test_registry_v8_migration(void) {
    const char* db = "build/test_train_v8.sqlite";
    Registry reg;
    Config cfg;
    config_defaults(&cfg);
    CHECK(config_set(&cfg, "attention", "diff_grouped") != NULL, "the old name diff_grouped is no attention variant now");
    CHECK(!config_set(&cfg, "attention", "diff_shared_noise") && !config_set(&cfg, "noise_group", "2"), "diff_shared_noise with G = 2 is set");
    char* text = config_to_text(&cfg);
    const char* name = strstr(text, "diff_shared_noise");
    char* v8_text = mallocCheck(strlen(text) + 1);
    snprintf(v8_text, strlen(text) + 1, "%.*sdiff_grouped%s", (int)(name - text), text, name + strlen("diff_shared_noise"));
    int same = migrated_text(&reg, db, 8, "diff_grouped", v8_text, text,
                             "INSERT INTO params (run_id, key, value) VALUES (1, 'attention', 'diff_grouped');");
    CHECK(same && strstr(v8_text, "attention = diff_grouped\n"), "a version 8 text of diff_grouped equals today's text of diff_shared_noise");
    CHECK(registry_count(&reg, "SELECT COUNT(*) FROM params WHERE key = 'attention' AND value = 'diff_shared_noise'") == 1,
          "its attention param says diff_shared_noise");
    registry_close(&reg);
    free(text);
    free(v8_text);
    unlink(db);
}

int main(void) {
    test_registry();
    test_registry_migration();
    test_registry_v7_migration();
    test_registry_v8_migration();
    return check_summary();
}
