// AR-Hit classification on hand-made windows; the registry under concurrent writers and
// interrupted runs.
#define _DEFAULT_SOURCE
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../eval/arhit.h"
#include "../experiments/registry.h"
#include "../model/base/util.h"
#include "check.h"

static void test_arhit(void) {
    BigramTable table = {8, callocCheck(64, sizeof(uint32_t)), 2.0};
    table.counts[5 * 8 + 6] = 1;  // rare: AR hit when repeated
    table.counts[1 * 8 + 2] = 3;  // frequent in training: never an AR hit
    //            i: 0  1  2  3  4  5  6  7  8
    int window[9] = {5, 6, 1, 2, 5, 6, 1, 2, 6};
    unsigned char hit[8];
    arhit_classify(&table, window, 8, hit);
    // hit[t] is about token window[t + 1]: (5,6) repeats at t = 4, (1,2) repeats at t = 6 but
    // is frequent, (6,1) repeats at t = 5 with count 0 (rare); (2,6) at t = 7 is new
    unsigned char expect[8] = {0, 0, 0, 0, 1, 1, 0, 0};
    CHECK(memcmp(hit, expect, 8) == 0, "AR hits %d%d%d%d%d%d%d%d", hit[0], hit[1], hit[2], hit[3], hit[4], hit[5], hit[6], hit[7]);
    // the earlier occurrence must lie strictly before: a bigram overlapping itself (7,7,7) hits at its second occurrence
    int run[4] = {7, 7, 7, 7};
    arhit_classify(&table, run, 3, hit);
    CHECK(hit[0] == 0 && hit[1] == 1 && hit[2] == 1, "repeated (7,7): %d %d %d", hit[0], hit[1], hit[2]);
    CHECK(fabs(arhit_threshold(10000000000ull) - 1250.0) < 1e-9 && fabs(arhit_threshold(4808481) - 0.601060125) < 1e-6,
          "threshold rescales 1250 per 10B tokens");
    bigrams_free(&table);
}

static void write_text(const char* path, const char* text) {
    FILE* f = fopenCheck(path, "w");
    fputs(text, f);
    fcloseCheck(f, path);
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
    write_text(ckpt, "weights");
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
    other.lr *= 2;
    CHECK(registry_finished_run(&reg, exp, "row0", 1, &other, NULL) == 0, "a run with another config does not count as finished");
    unlink(ckpt);
    CHECK(registry_finished_run(&reg, exp, "row0", 1, &cfg, NULL) == 0, "a finished run whose checkpoint is gone does not count");
    write_text(ckpt, "another run's weights");
    CHECK(registry_finished_run(&reg, exp, "row0", 1, &cfg, NULL) == 0, "nor one whose checkpoint another run replaced");
    write_text(ckpt, "weights");
    CHECK(registry_finished_run(&reg, exp, "row0", 1, &cfg, NULL) > 0, "the file it recorded, byte for byte, counts again");

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
    registry_close(&reg);
    unlink(path);
}

int main(void) {
    test_arhit();
    test_registry();
    return check_summary();
}
