#define _GNU_SOURCE
#include "registry.h"

#include "../run/checkpoint.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../model/backend.h"
#include "../base/dist.h"
#include "../base/util.h"

static const char* SCHEMA =
    "CREATE TABLE IF NOT EXISTS experiments ("
    "  id INTEGER PRIMARY KEY, name TEXT NOT NULL, preset TEXT NOT NULL, recipe_path TEXT NOT NULL,"
    "  recipe_text TEXT NOT NULL, created TEXT NOT NULL, UNIQUE (name, preset));"
    "CREATE TABLE IF NOT EXISTS runs ("
    "  id INTEGER PRIMARY KEY, experiment_id INTEGER NOT NULL REFERENCES experiments(id),"
    "  row TEXT NOT NULL, seed INTEGER NOT NULL, attempt INTEGER NOT NULL,"
    "  status TEXT NOT NULL CHECK (status IN ('RUNNING', 'FINISHED', 'FAILED', 'KILLED')),"
    "  git_commit TEXT NOT NULL, git_dirty INTEGER NOT NULL, host TEXT NOT NULL, cpu_model TEXT NOT NULL,"
    "  threads INTEGER NOT NULL, ranks INTEGER NOT NULL DEFAULT 1, device TEXT NOT NULL DEFAULT 'cpu', pid INTEGER NOT NULL, pid_start INTEGER NOT NULL, recipe_text TEXT NOT NULL,"
    "  identity TEXT NOT NULL DEFAULT '', out_dir TEXT NOT NULL, data_dir TEXT NOT NULL DEFAULT '', data_id TEXT NOT NULL DEFAULT '',"
    "  started TEXT NOT NULL, ended TEXT, UNIQUE (experiment_id, row, seed, attempt));"
    "CREATE TABLE IF NOT EXISTS params (run_id INTEGER NOT NULL REFERENCES runs(id), key TEXT NOT NULL,"
    "  value NUMERIC NOT NULL, PRIMARY KEY (run_id, key));"
    "CREATE TABLE IF NOT EXISTS metrics (run_id INTEGER NOT NULL REFERENCES runs(id), key TEXT NOT NULL,"
    "  step INTEGER NOT NULL, tokens INTEGER NOT NULL, value REAL NOT NULL, time REAL);"
    "CREATE INDEX IF NOT EXISTS metrics_run ON metrics (run_id, key, step);"
    "CREATE TABLE IF NOT EXISTS evaluations (run_id INTEGER NOT NULL REFERENCES runs(id), key TEXT NOT NULL,"
    "  value REAL NOT NULL, PRIMARY KEY (run_id, key));"
    "CREATE TABLE IF NOT EXISTS episodes (run_id INTEGER NOT NULL REFERENCES runs(id), task TEXT NOT NULL,"
    " length INTEGER NOT NULL, n_needles INTEGER NOT NULL, n_queries INTEGER NOT NULL, depth REAL NOT NULL,"
    " sample INTEGER NOT NULL, seed INTEGER NOT NULL, query INTEGER NOT NULL, city TEXT NOT NULL, number INTEGER NOT NULL,"
    " output TEXT, correct INTEGER, answer REAL, noise REAL, question REAL, bos REAL);"
    "CREATE INDEX IF NOT EXISTS episodes_run ON episodes (run_id, task);"
    "CREATE TABLE IF NOT EXISTS window_losses (run_id INTEGER NOT NULL REFERENCES runs(id), window INTEGER NOT NULL,"
    "  slice TEXT NOT NULL, loss_sum REAL NOT NULL, tokens INTEGER NOT NULL, PRIMARY KEY (run_id, window, slice));"
    "CREATE TABLE IF NOT EXISTS artifacts (run_id INTEGER NOT NULL REFERENCES runs(id), kind TEXT NOT NULL,"
    "  path TEXT NOT NULL, sha256 TEXT NOT NULL);";

static void sql_check(Registry* reg, int rc, const char* what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        die("registry '%s': %s: %s", reg->path, what, sqlite3_errmsg(reg->db));
    }
}

static void exec(Registry* reg, const char* sql) {
    char* err = NULL;
    if (sqlite3_exec(reg->db, sql, NULL, NULL, &err) != SQLITE_OK) die("registry '%s': %s", reg->path, err);
}

static sqlite3_stmt* prepare(Registry* reg, const char* sql) {
    sqlite3_stmt* st;
    sql_check(reg, sqlite3_prepare_v2(reg->db, sql, -1, &st, NULL), sql);
    return st;
}

// Steps a query: 1 for a row, 0 at its end; any other outcome (a damaged file, SQLITE_CORRUPT,
// an I/O error) dies naming the registry and `what`, so a damaged registry never reads as empty
static int registry_row(Registry* reg, sqlite3_stmt* st, const char* what) {
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) return 1;
    if (rc != SQLITE_DONE) die("registry '%s': %s: %s", reg->path, what, sqlite3_errmsg(reg->db));
    return 0;
}

static void step_done(Registry* reg, sqlite3_stmt* st, const char* what) {
    sql_check(reg, sqlite3_step(st), what);
    sqlite3_finalize(st);
}

// Start time of a process (clock ticks after boot, /proc/PID/stat field 22), or -1 when the
// process is gone or a zombie. With the pid it names a process uniquely, despite pid reuse.
static long long process_start(int pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE* f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char* p = strrchr(buf, ')');  // the command name may hold spaces and parentheses
    if (!p) return -1;
    char state;
    long long start = -1;
    // fields after the name: 3 state ... 22 starttime
    if (sscanf(p + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %lld", &state, &start) != 2) return -1;
    return state == 'Z' || state == 'X' ? -1 : start;
}

static void now_iso(char* buf, size_t n) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

// Adds column to table unless it is there already (a migration a killed process half did)
static void add_column(Registry* reg, const char* table, const char* column, const char* declaration) {
    sqlite3_stmt* st = prepare(reg, "SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ?");
    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, column, -1, SQLITE_STATIC);
    int present = registry_row(reg, st, "read the schema") && sqlite3_column_int(st, 0) > 0;
    sqlite3_finalize(st);
    if (present) return;
    char sql[256];
    snprintf(sql, sizeof(sql), "ALTER TABLE %s ADD COLUMN %s %s;", table, column, declaration);
    exec(reg, sql);
}

// params: one row per key of a config text ("key = value" lines), inside the caller's transaction
static void insert_params(Registry* reg, int64_t run, const char* config_text) {
    char* text = strdup(config_text);
    char* save = NULL;
    for (char* line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char* eq = strstr(line, " = ");
        if (!eq) continue;
        *eq = 0;
        sqlite3_stmt* st = prepare(reg, "INSERT INTO params (run_id, key, value) VALUES (?, ?, ?)");
        sqlite3_bind_int64(st, 1, run);
        sqlite3_bind_text(st, 2, line, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, eq + 3, -1, SQLITE_TRANSIENT);
        step_done(reg, st, "insert param");
    }
    free(text);
}

// A run's identity: the sha256 (64 hex digits) of its config text as this program resolves it
// (read from the defaults and written again: a key an older version lacked takes its default,
// a value is spelt as today), or of the text itself where this program cannot read it (a key
// it does not know). runs.identity holds it, brought up to date whenever a registry is opened
// for writing, so a key added with a default or a value renamed needs no migration step; the
// attempts of one run are the runs of one experiment, row, seed and identity.
static void config_identity(const char* text, char hex[65]) {
    Config cfg;
    char* resolved = config_from_stored_text(&cfg, text) ? NULL : config_to_text(&cfg);
    const char* hashed = resolved ? resolved : text;
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (!EVP_Digest(hashed, strlen(hashed), digest, &n, EVP_sha256(), NULL) || n != 32) die("cannot hash a run's config");
    for (unsigned int i = 0; i < n; i++) sprintf(hex + 2 * i, "%02x", digest[i]);
    free(resolved);
}

// Every run's identity as this program computes it, inside the caller's transaction
static void refresh_identities(Registry* reg) {
    sqlite3_stmt* st = prepare(reg, "SELECT id, recipe_text, identity FROM runs");
    int n = 0, cap = 64;
    int64_t* ids = mallocCheck(cap * sizeof(int64_t));
    char(*now)[65] = mallocCheck(cap * sizeof(*now));
    while (registry_row(reg, st, "read the runs' configs")) {
        char hex[65];
        config_identity((const char*)sqlite3_column_text(st, 1), hex);
        if (strcmp(hex, (const char*)sqlite3_column_text(st, 2)) == 0) continue;
        if (n == cap) {
            cap *= 2;
            ids = realloc(ids, cap * sizeof(int64_t));
            now = realloc(now, cap * sizeof(*now));
            if (!ids || !now) die("out of memory reading '%s'", reg->path);
        }
        ids[n] = sqlite3_column_int64(st, 0);
        memcpy(now[n++], hex, sizeof(hex));
    }
    sqlite3_finalize(st);
    st = prepare(reg, "UPDATE runs SET identity = ? WHERE id = ?");
    for (int i = 0; i < n; i++) {  // written once the reading is done
        sqlite3_bind_text(st, 1, now[i], -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, ids[i]);
        sql_check(reg, sqlite3_step(st), "update a run's identity");
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    free(ids);
    free(now);
}

// Version 2 and older recorded configs with head_dim and ffn_hidden as given (0 for automatic)
// and floats in 9 digits, versions 3 to 7 with earlier key sets (7 wrote noise_group = 0 into
// every text): rewritten as today's config
// text records them, so that a finished run of the same config is still found and curves still
// join across attempts
static void canonical_configs(Registry* reg) {
    sqlite3_stmt* st = prepare(reg, "SELECT id, recipe_text FROM runs");
    int n = 0, cap = 64;
    int64_t* ids = mallocCheck(cap * sizeof(int64_t));
    char** texts = mallocCheck(cap * sizeof(char*));
    while (registry_row(reg, st, "read params")) {
        if (n == cap) {
            cap *= 2;
            ids = realloc(ids, cap * sizeof(int64_t));
            texts = realloc(texts, cap * sizeof(char*));
            if (!ids || !texts) die("out of memory migrating '%s'", reg->path);
        }
        ids[n] = sqlite3_column_int64(st, 0);
        texts[n++] = strdup((const char*)sqlite3_column_text(st, 1));
    }
    sqlite3_finalize(st);
    for (int i = 0; i < n; i++) {
        Config cfg;
        config_defaults(&cfg);
        int ok = 1, keys = 0;
        char* save = NULL;
        for (char* line = strtok_r(texts[i], "\n", &save); line && ok; line = strtok_r(NULL, "\n", &save)) {
            char* eq = strstr(line, " = ");
            if (!eq) continue;
            *eq = 0;
            ok = config_set(&cfg, line, eq + 3) == NULL;
            keys++;
        }
        if (ok && keys) {  // a text this program cannot read stays as it is
            char* text = config_to_text(&cfg);
            st = prepare(reg, "UPDATE runs SET recipe_text = ? WHERE id = ?");
            sqlite3_bind_text(st, 1, text, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(st, 2, ids[i]);
            step_done(reg, st, "rewrite a run's config");
            st = prepare(reg, "DELETE FROM params WHERE run_id = ?");
            sqlite3_bind_int64(st, 1, ids[i]);
            step_done(reg, st, "rewrite a run's params");
            insert_params(reg, ids[i], text);
            free(text);
        }
        free(texts[i]);
    }
    free(ids);
    free(texts);
}

void registry_path(char* path, size_t n, const char* results) { path_printf(path, n, "%s/registry.sqlite", results); }

void registry_open(Registry* reg, const char* path) {
    snprintf(reg->path, sizeof(reg->path), "%s", path);
    if (sqlite3_open_v2(path, &reg->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
        die("cannot open registry '%s': %s", path, reg->db ? sqlite3_errmsg(reg->db) : "out of memory");
    }
    sqlite3_busy_timeout(reg->db, 60000);
    // FULL: a committed transaction is on disk (WAL synced at each commit), a power loss included
    exec(reg, "PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;");
    exec(reg, "BEGIN IMMEDIATE;");
    sqlite3_stmt* st = prepare(reg, "PRAGMA user_version");
    int version = registry_row(reg, st, "read the schema version") ? sqlite3_column_int(st, 0) : 0;
    sqlite3_finalize(st);
    if (version > REGISTRY_SCHEMA) {
        die("registry '%s' has schema version %d, newer than this program's %d: use the difftx that wrote it, or a newer "
            "one", path, version, REGISTRY_SCHEMA);
    }
    st = prepare(reg, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'runs'");
    int existing = registry_row(reg, st, "read the schema") && sqlite3_column_int(st, 0) > 0;
    sqlite3_finalize(st);
    exec(reg, SCHEMA);
    if (existing && version < 9) {
        // attention = diff_grouped was DIFF with shared noise maps, not the published grouped
        // differential attention (gda): version 9 calls it by what it is
        exec(reg, "UPDATE runs SET recipe_text = replace(recipe_text, 'attention = diff_grouped' || char(10), "
                  "'attention = diff_shared_noise' || char(10));"
                  "UPDATE params SET value = 'diff_shared_noise' WHERE key = 'attention' AND value = 'diff_grouped';");
    }
    if (existing && version < 2) {
        // version 0, from before schema versions: runs without `ranks` (they had one), and
        // params stored as text, which compared as text ('10' < '9')
        add_column(reg, "runs", "ranks", "INTEGER NOT NULL DEFAULT 1");
        exec(reg, "CREATE TABLE params_numeric (run_id INTEGER NOT NULL REFERENCES runs(id), key TEXT NOT NULL,"
                  "  value NUMERIC NOT NULL, PRIMARY KEY (run_id, key));"
                  "INSERT INTO params_numeric SELECT run_id, key, value FROM params; DROP TABLE params;"
                  "ALTER TABLE params_numeric RENAME TO params;");
    }
    if (existing && version < 3) {
        // metrics gain the time they were measured at (NULL in older rows)
        add_column(reg, "metrics", "time", "REAL");
        canonical_configs(reg);
    }
    if (existing && version < 4) add_column(reg, "runs", "device", "TEXT NOT NULL DEFAULT 'cpu'");  // before CUDA
    if (existing && version < 5) {
        // before data identities: the folder stays in such runs' config text
        add_column(reg, "runs", "data_dir", "TEXT NOT NULL DEFAULT ''");
        add_column(reg, "runs", "data_id", "TEXT NOT NULL DEFAULT ''");
    }
    // version 6 adds window_losses, which the schema above creates
    // versions 3 to 6 had no noise_group, 7 wrote noise_group = 0 into every text; today's texts
    // hold a switch only some variants use only where it is set
    if (existing && version >= 3 && version < 8) canonical_configs(reg);
    if (existing && version < 10) add_column(reg, "runs", "identity", "TEXT NOT NULL DEFAULT ''");  // filled below
    refresh_identities(reg);
    if (existing && version < REGISTRY_SCHEMA) {
        fprintf(stderr, "registry '%s': migrated from schema version %d to %d\n", path, version, REGISTRY_SCHEMA);
    }
    char pragma[64];
    snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %d;", REGISTRY_SCHEMA);
    exec(reg, pragma);
    exec(reg, "COMMIT;");
}

// PRAGMA user_version, or -1 when the database cannot be read
static int schema_version(sqlite3* db) {
    sqlite3_stmt* st;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK) return -1;
    int version = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
    sqlite3_finalize(st);
    return version;
}

void registry_open_read(Registry* reg, const char* path) {
    snprintf(reg->path, sizeof(reg->path), "%s", path);
    int version = -1;
    if (sqlite3_open_v2(path, &reg->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, NULL) == SQLITE_OK) version = schema_version(reg->db);
    if (version < 0) {
        // a WAL database needs its shared-memory file beside it, which a read-only folder cannot
        // get: read it as immutable (nothing can write there while we read)
        sqlite3_close(reg->db);
        char full[PATH_MAX], uri[3 * PATH_MAX + 32];
        if (!realpath(path, full)) die("cannot open registry '%s': %s", path, strerror(errno));
        size_t k = (size_t)snprintf(uri, sizeof(uri), "file:");
        for (const unsigned char* p = (const unsigned char*)full; *p; p++) {  // percent-encoded: '?', '#', '%' stay path
            if (isalnum(*p) || strchr("/-_.~", *p)) uri[k++] = (char)*p;
            else k += (size_t)snprintf(uri + k, sizeof(uri) - k, "%%%02X", *p);
        }
        snprintf(uri + k, sizeof(uri) - k, "?immutable=1");
        if (sqlite3_open_v2(uri, &reg->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_FULLMUTEX, NULL) == SQLITE_OK) {
            version = schema_version(reg->db);
        }
        if (version < 0) die("cannot read registry '%s': %s", path, sqlite3_errmsg(reg->db));
    }
    if (version > REGISTRY_SCHEMA) {
        die("registry '%s' has schema version %d, newer than this program's %d: use the difftx that wrote it, or a newer "
            "one", path, version, REGISTRY_SCHEMA);
    }
    if (version < REGISTRY_SCHEMA) {
        die("registry '%s' has schema version %d and cannot be migrated to %d while it is read-only: open it once with a "
            "difftx command where it can be written", path, version, REGISTRY_SCHEMA);
    }
}

void registry_close(Registry* reg) { sqlite3_close(reg->db); }

int64_t registry_experiment(Registry* reg, const char* name, const char* preset, const char* recipe_path,
                            const char* recipe_text) {
    char now[32];
    now_iso(now, sizeof(now));
    exec(reg, "BEGIN IMMEDIATE;");
    sqlite3_stmt* st = prepare(reg, "INSERT INTO experiments (name, preset, recipe_path, recipe_text, created) "
                                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (name, preset) DO UPDATE SET "
                                    "recipe_path = excluded.recipe_path, recipe_text = excluded.recipe_text");
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, preset, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, recipe_path, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, recipe_text, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 5, now, -1, SQLITE_TRANSIENT);
    step_done(reg, st, "insert experiment");
    st = prepare(reg, "SELECT id FROM experiments WHERE name = ? AND preset = ?");
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, preset, -1, SQLITE_TRANSIENT);
    sql_check(reg, sqlite3_step(st), "select experiment");
    int64_t id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    exec(reg, "COMMIT;");
    return id;
}

int registry_reap(Registry* reg) {
    char host[256] = "", now[32];
    gethostname(host, sizeof(host) - 1);
    now_iso(now, sizeof(now));
    exec(reg, "BEGIN IMMEDIATE;");
    sqlite3_stmt* st = prepare(reg, "SELECT id, pid, pid_start FROM runs WHERE status = 'RUNNING' AND host = ?");
    sqlite3_bind_text(st, 1, host, -1, SQLITE_TRANSIENT);
    int reaped = 0;
    while (registry_row(reg, st, "find interrupted runs")) {
        int64_t id = sqlite3_column_int64(st, 0);
        if (process_start(sqlite3_column_int(st, 1)) == sqlite3_column_int64(st, 2)) continue;  // still running
        sqlite3_stmt* up = prepare(reg, "UPDATE runs SET status = 'KILLED', ended = ? WHERE id = ?");
        sqlite3_bind_text(up, 1, now, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(up, 2, id);
        step_done(reg, up, "mark killed run");
        reaped++;
    }
    sqlite3_finalize(st);
    exec(reg, "COMMIT;");
    return reaped;
}

// The file's sha256 as 64 hex digits into hex; 0 when it cannot be opened. Streamed: a
// paper-size checkpoint is tens of GB.
static int file_sha256(const char* path, char hex[2 * EVP_MAX_MD_SIZE + 1]) {
    FILE* f = fopen(path, "rb");
    if (!f) return 0;
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) die("cannot hash '%s'", path);
    static char chunk[1 << 20];
    size_t got;
    while ((got = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (!EVP_DigestUpdate(ctx, chunk, got)) die("cannot hash '%s'", path);
    }
    if (ferror(f)) die("cannot read '%s' to hash it", path);
    fcloseCheck(f, path);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    if (!EVP_DigestFinal_ex(ctx, digest, &dlen)) die("cannot hash '%s'", path);
    EVP_MD_CTX_free(ctx);
    for (unsigned int i = 0; i < dlen; i++) sprintf(hex + 2 * i, "%02x", digest[i]);
    return 1;
}

// Whether the checkpoint cfg points at is the file the run recorded when it finished; says
// on stderr why not
static int checkpoint_is_runs(Registry* reg, int64_t run, const char* row, int seed, const Config* cfg) {
    char path[4200], hex[2 * EVP_MAX_MD_SIZE + 1];
    config_checkpoint_path(cfg, path, sizeof(path));
    sqlite3_stmt* st = prepare(reg, "SELECT sha256 FROM artifacts WHERE run_id = ? AND kind = 'checkpoint' ORDER BY rowid DESC LIMIT 1");
    sqlite3_bind_int64(st, 1, run);
    char recorded[2 * EVP_MAX_MD_SIZE + 1] = "";
    if (registry_row(reg, st, "read an artifact")) snprintf(recorded, sizeof(recorded), "%s", (const char*)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    const char* why = NULL;
    if (!recorded[0]) why = "recorded no checkpoint";
    else if (!file_sha256(path, hex)) why = "its checkpoint is gone";
    else if (strcmp(hex, recorded) != 0) why = "its checkpoint is no longer the file it wrote (the sha256 differs)";
    char unreadable[900];
    const char* problem = why ? NULL : checkpoint_unloadable(path);
    if (problem) {  // finished by another version of the program: never called finished by this one
        snprintf(unreadable, sizeof(unreadable), "this program cannot load its checkpoint (%s)", problem);
        why = unreadable;
    }
    if (why) {
        fprintf(stderr, "warning: run %lld (%s, seed %d) of %s finished, but %s: '%s'; it does not count as finished\n",
                (long long)run, row, seed, reg->path, why, path);
    }
    return why == NULL;
}

// Whether a stored run's config text (as this version writes it) is the text of the run now
// asked for: equal, or equal but
// for the paths a study puts under its results folder (`out`, `init_from`), written where the
// folder was before it was copied or moved whole: each such stored path ends with the part of
// today's path below the registry's folder (root)
static int same_run_text(const char* stored, const char* current, const char* root) {
    size_t root_n = strlen(root);
    while (*stored || *current) {
        size_t a = strcspn(stored, "\n"), b = strcspn(current, "\n");
        if (a != b || strncmp(stored, current, a) != 0) {
            static const char* const KEYS[] = {"out = ", "init_from = "};
            int moved = 0;
            for (int k = 0; k < 2 && !moved; k++) {
                size_t kn = strlen(KEYS[k]);
                if (a <= kn || b <= kn || strncmp(stored, KEYS[k], kn) != 0 || strncmp(current, KEYS[k], kn) != 0) continue;
                const char* now = current + kn;
                if (strncmp(now, root, root_n) != 0 || now[root_n] != '/') continue;
                const char* below = now + root_n;  // "/table6/smoke/diff/seed1000"
                size_t below_n = b - kn - root_n;
                moved = a - kn > below_n && strncmp(stored + a - below_n, below, below_n) == 0;
            }
            if (!moved) return 0;
        }
        stored += a + (stored[a] == '\n');
        current += b + (current[b] == '\n');
    }
    return 1;
}

int64_t registry_finished_run(Registry* reg, int64_t experiment, const char* row, int seed, const Config* cfg,
                              const char* data_id) {
    char* text = config_to_text(cfg);
    char identity[65];
    config_identity(text, identity);
    char root[4200];
    snprintf(root, sizeof(root), "%s", reg->path);
    char* slash = strrchr(root, '/');
    if (slash) *slash = 0;
    else snprintf(root, sizeof(root), ".");
    sqlite3_stmt* st = prepare(reg, "SELECT id, recipe_text, identity FROM runs WHERE experiment_id = ? AND row = ? AND seed = ? AND "
                                    "status = 'FINISHED' AND data_id = ? ORDER BY attempt DESC");
    sqlite3_bind_int64(st, 1, experiment);
    sqlite3_bind_text(st, 2, row, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 3, seed);
    sqlite3_bind_text(st, 4, data_id ? data_id : "", -1, SQLITE_TRANSIENT);
    int64_t id = 0;
    int rc;
    while (!id && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (strcmp((const char*)sqlite3_column_text(st, 2), identity) == 0) {
            id = sqlite3_column_int64(st, 0);
            continue;
        }
        // another identity may still be this run in a results folder copied or moved whole
        const char* stored = (const char*)sqlite3_column_text(st, 1);
        Config then;
        if (!stored || config_from_stored_text(&then, stored)) continue;  // a key this version does not know: another run
        char* today = config_to_text(&then);
        if (same_run_text(today, text, root)) id = sqlite3_column_int64(st, 0);
        free(today);
    }
    if (!id) sql_check(reg, rc, "find a finished run");
    sqlite3_finalize(st);
    free(text);
    return id && checkpoint_is_runs(reg, id, row, seed, cfg) ? id : 0;
}

int64_t registry_begin_run(Registry* reg, int64_t experiment, const char* row, int seed, const Config* cfg,
                           const char* device, const char* data_id) {
    char data_dir[PATH_MAX] = "";
    if (data_id && !realpath(cfg->data, data_dir)) die("key 'data': cannot resolve '%s': %s", cfg->data, strerror(errno));
    char now[32], machine[600], host[256] = "";
    now_iso(now, sizeof(now));
    machine_description(machine, sizeof(machine));
    gethostname(host, sizeof(host) - 1);
    const char* cpu = strstr(machine, ", ") ? strstr(machine, ", ") + 2 : machine;
    char* text = config_to_text(cfg);
    char identity[65];
    config_identity(text, identity);
    exec(reg, "BEGIN IMMEDIATE;");
    sqlite3_stmt* st = prepare(reg,
        "INSERT INTO runs (experiment_id, row, seed, attempt, status, git_commit, git_dirty, host, cpu_model, threads,"
        " ranks, device, pid, pid_start, recipe_text, identity, out_dir, data_dir, data_id, started) VALUES (?1, ?2, ?3, (SELECT"
        " COALESCE(MAX(attempt), 0) + 1 FROM runs WHERE experiment_id = ?1 AND row = ?2 AND seed = ?3), 'RUNNING', ?4, ?5,"
        " ?6, ?7, ?8, ?14, ?15, ?9, ?13, ?10, ?18, ?11, ?16, ?17, ?12)");
    sqlite3_bind_int64(st, 1, experiment);
    sqlite3_bind_text(st, 2, row, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 3, seed);
    sqlite3_bind_text(st, 4, GIT_COMMIT, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, strstr(GIT_COMMIT, "dirty") != NULL);
    sqlite3_bind_text(st, 6, host, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 7, cpu, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 8, omp_get_max_threads());
    sqlite3_bind_int(st, 9, (int)getpid());
    sqlite3_bind_text(st, 10, text, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 11, cfg->out, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 12, now, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 13, process_start((int)getpid()));
    sqlite3_bind_int(st, 14, dist_ranks());
    sqlite3_bind_text(st, 15, device, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 16, data_dir, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 17, data_id ? data_id : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 18, identity, -1, SQLITE_STATIC);
    step_done(reg, st, "insert run");
    int64_t run = sqlite3_last_insert_rowid(reg->db);
    insert_params(reg, run, text);
    exec(reg, "COMMIT;");
    free(text);
    return run;
}

const char* run_status_name(RunStatus status) {
    static const char* names[] = {"RUNNING", "FINISHED", "FAILED", "KILLED"};
    return names[status];
}

void registry_end_run(Registry* reg, int64_t run, RunStatus status) {
    char now[32];
    now_iso(now, sizeof(now));
    exec(reg, "BEGIN IMMEDIATE;");
    sqlite3_stmt* st = prepare(reg, "UPDATE runs SET status = ?, ended = ? WHERE id = ?");
    sqlite3_bind_text(st, 1, run_status_name(status), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, now, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, run);
    step_done(reg, st, "end run");
    exec(reg, "COMMIT;");
}

void registry_end_pid(Registry* reg, int pid, RunStatus status) {
    char now[32], host[256] = "";
    now_iso(now, sizeof(now));
    gethostname(host, sizeof(host) - 1);
    exec(reg, "BEGIN IMMEDIATE;");
    sqlite3_stmt* st = prepare(reg, "UPDATE runs SET status = ?, ended = ? WHERE status = 'RUNNING' AND pid = ? AND host = ?");
    sqlite3_bind_text(st, 1, run_status_name(status), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, now, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 3, pid);
    sqlite3_bind_text(st, 4, host, -1, SQLITE_TRANSIENT);
    step_done(reg, st, "end runs of a worker");
    exec(reg, "COMMIT;");
}

void registry_metrics(Registry* reg, int64_t run, int n, const char* const* keys, const int* steps,
                      const int64_t* tokens, const double* values, const double* times) {
    exec(reg, "BEGIN IMMEDIATE;");
    sqlite3_stmt* st = prepare(reg, "INSERT INTO metrics (run_id, key, step, tokens, value, time) VALUES (?, ?, ?, ?, ?, ?)");
    for (int i = 0; i < n; i++) {
        sqlite3_bind_int64(st, 1, run);
        sqlite3_bind_text(st, 2, keys[i], -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 3, steps[i]);
        sqlite3_bind_int64(st, 4, tokens[i]);
        sqlite3_bind_double(st, 5, values[i]);
        sqlite3_bind_double(st, 6, times[i]);
        sql_check(reg, sqlite3_step(st), "insert metric");
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    exec(reg, "COMMIT;");
}

void registry_forget_metrics_after(Registry* reg, int64_t run, int step) {
    exec(reg, "BEGIN IMMEDIATE;");
    sqlite3_stmt* st = prepare(reg,
        "DELETE FROM metrics WHERE step > ?2 AND run_id IN (SELECT a.id FROM runs a JOIN runs r ON r.id = ?1 WHERE"
        " a.experiment_id = r.experiment_id AND a.row = r.row AND a.seed = r.seed AND a.identity = r.identity)");
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int(st, 2, step);
    step_done(reg, st, "forget metrics past the resumed step");
    exec(reg, "COMMIT;");
}

void registry_evaluation(Registry* reg, int64_t run, const char* key, double value) {
    exec(reg, "BEGIN IMMEDIATE;");
    sqlite3_stmt* st = prepare(reg, "INSERT OR REPLACE INTO evaluations (run_id, key, value) VALUES (?, ?, ?)");
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_text(st, 2, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 3, value);
    step_done(reg, st, "insert evaluation");
    exec(reg, "COMMIT;");
}

double registry_evaluation_value(Registry* reg, int64_t run, const char* key) {
    sqlite3_stmt* st = prepare(reg, "SELECT value FROM evaluations WHERE run_id = ? AND key = ?");
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_text(st, 2, key, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    sql_check(reg, rc, "select evaluation");
    double v = rc == SQLITE_ROW ? sqlite3_column_double(st, 0) : NAN;
    sqlite3_finalize(st);
    return v;
}

void registry_window_losses(Registry* reg, int64_t run, int n, const WindowLoss* w) {
    exec(reg, "BEGIN IMMEDIATE;");
    sqlite3_stmt* del = prepare(reg, "DELETE FROM window_losses WHERE run_id = ?");
    sqlite3_bind_int64(del, 1, run);
    step_done(reg, del, "delete window losses");
    sqlite3_stmt* st = prepare(reg, "INSERT INTO window_losses (run_id, window, slice, loss_sum, tokens) VALUES (?, ?, ?, ?, ?)");
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < WINDOW_SLICES; k++) {
            sqlite3_bind_int64(st, 1, run);
            sqlite3_bind_int(st, 2, i);
            sqlite3_bind_text(st, 3, window_slice_name(k), -1, SQLITE_STATIC);
            sqlite3_bind_double(st, 4, w[i].sum[k]);
            sqlite3_bind_int64(st, 5, w[i].count[k]);
            sql_check(reg, sqlite3_step(st), "insert window loss");
            sqlite3_reset(st);
        }
    }
    sqlite3_finalize(st);
    exec(reg, "COMMIT;");
}

int registry_window_count(Registry* reg, int64_t run) {
    sqlite3_stmt* st = prepare(reg, "SELECT COUNT(DISTINCT window) FROM window_losses WHERE run_id = ?");
    sqlite3_bind_int64(st, 1, run);
    int rc = sqlite3_step(st);
    sql_check(reg, rc, "count window losses");
    int n = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
    sqlite3_finalize(st);
    return n;
}

int registry_window_losses_read(Registry* reg, int64_t run, int n, WindowLoss* w) {
    memset(w, 0, (size_t)n * sizeof(*w));
    sqlite3_stmt* st = prepare(reg, "SELECT window, slice, loss_sum, tokens FROM window_losses WHERE run_id = ? AND window < ?");
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int(st, 2, n);
    int found = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int i = sqlite3_column_int(st, 0);
        const char* slice = (const char*)sqlite3_column_text(st, 1);
        // a sum no evaluation writes (inf, NaN, text, a negative count) would read as a gap of
        // inf beside a finite mean: an error naming the run, not a number in a table
        int numeric = sqlite3_column_type(st, 2) == SQLITE_FLOAT || sqlite3_column_type(st, 2) == SQLITE_INTEGER;
        double sum = sqlite3_column_double(st, 2);
        int64_t tokens = sqlite3_column_int64(st, 3);
        if (!numeric || !isfinite(sum) || sum < 0 || tokens < 0 || i < 0) {
            die("registry '%s': run %lld's window %d (slice %s) holds a loss sum of %s over %lld tokens, which no evaluation writes: "
                "the registry was edited or damaged", reg->path, (long long)run, i, slice ? slice : "NULL",
                numeric ? (const char*)sqlite3_column_text(st, 2) : "(not a number)", (long long)tokens);
        }
        for (int k = 0; k < WINDOW_SLICES; k++) {
            if (slice && strcmp(slice, window_slice_name(k)) == 0) {
                w[i].sum[k] = sum;
                w[i].count[k] = tokens;
            }
        }
        if (i + 1 > found) found = i + 1;
    }
    sql_check(reg, rc, "select window losses");
    sqlite3_finalize(st);
    return found;
}

// The (tokens, value) rows of a prepared curve query, which it finalizes; returns their count
static int read_curve(Registry* reg, sqlite3_stmt* st, int64_t** tokens, double** values) {
    int n = 0, size = 64, rc;
    *tokens = mallocCheck(size * sizeof(int64_t));
    *values = mallocCheck(size * sizeof(double));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == size) {
            size *= 2;
            *tokens = realloc(*tokens, size * sizeof(int64_t));
            *values = realloc(*values, size * sizeof(double));
            if (!*tokens || !*values) die("out of memory reading a curve from '%s'", reg->path);
        }
        (*tokens)[n] = sqlite3_column_int64(st, 0);
        (*values)[n] = sqlite3_column_double(st, 1);
        n++;
    }
    sql_check(reg, rc, "select a curve");
    sqlite3_finalize(st);
    return n;
}

int registry_run_curve(Registry* reg, int64_t run, const char* key, int64_t** tokens, double** values) {
    sqlite3_stmt* st = prepare(reg,
        "WITH attempts AS (SELECT a.id, a.attempt FROM runs a JOIN runs f ON f.id = ?1 WHERE a.experiment_id = f.experiment_id"
        " AND a.row = f.row AND a.seed = f.seed AND a.out_dir = f.out_dir AND a.attempt <= f.attempt),"
        " points AS (SELECT m.step, m.tokens, m.value, t.attempt FROM metrics m JOIN attempts t ON t.id = m.run_id WHERE m.key = ?2)"
        " SELECT p.tokens, p.value FROM points p WHERE p.attempt = (SELECT MAX(q.attempt) FROM points q WHERE q.step = p.step)"
        " ORDER BY p.step");
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_text(st, 2, key, -1, SQLITE_TRANSIENT);
    return read_curve(reg, st, tokens, values);
}

// Binds runs (n) to parameter i of st as a JSON array, which json_each reads as a table
static void bind_ids(sqlite3_stmt* st, int i, const int64_t* runs, int n) {
    size_t cap = 3 + 24 * (size_t)n, len = 1;  // "[", the ids, "]" and the NUL, for no runs too
    char* ids = mallocCheck(cap);
    strcpy(ids, "[");
    for (int k = 0; k < n; k++) len += (size_t)snprintf(ids + len, cap - len, "%s%lld", k ? "," : "", (long long)runs[k]);
    snprintf(ids + len, cap - len, "]");
    sqlite3_bind_text(st, i, ids, -1, SQLITE_TRANSIENT);
    free(ids);
}

int registry_mean_curve(Registry* reg, const int64_t* runs, int n_runs, const char* key, int64_t** tokens, double** values) {
    sqlite3_stmt* st = prepare(reg,
        "SELECT m.tokens, AVG(m.value) FROM metrics m JOIN runs a ON a.id = m.run_id JOIN runs f ON f.experiment_id ="
        " a.experiment_id AND f.row = a.row AND f.seed = a.seed AND f.identity = a.identity WHERE f.id IN"
        " (SELECT value FROM json_each(?)) AND m.key = ? GROUP BY m.step ORDER BY m.step");
    bind_ids(st, 1, runs, n_runs);
    sqlite3_bind_text(st, 2, key, -1, SQLITE_TRANSIENT);
    return read_curve(reg, st, tokens, values);
}

void registry_artifact(Registry* reg, int64_t run, const char* kind, const char* path) {
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    if (!file_sha256(path, hex)) die("cannot open '%s' to hash it: %s", path, strerror(errno));
    exec(reg, "BEGIN IMMEDIATE;");
    sqlite3_stmt* st = prepare(reg, "INSERT INTO artifacts (run_id, kind, path, sha256) VALUES (?, ?, ?, ?)");
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, path, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, hex, -1, SQLITE_TRANSIENT);
    step_done(reg, st, "insert artifact");
    exec(reg, "COMMIT;");
}

void registry_episodes(Registry* reg, int64_t run, const char* task, int n, const EpisodeRecord* rec) {
    exec(reg, "BEGIN IMMEDIATE;");
    sqlite3_stmt* del = prepare(reg, "DELETE FROM episodes WHERE run_id = ? AND task = ?");
    sqlite3_bind_int64(del, 1, run);
    sqlite3_bind_text(del, 2, task, -1, SQLITE_STATIC);
    step_done(reg, del, "delete episodes");
    sqlite3_stmt* st = prepare(reg, "INSERT INTO episodes (run_id, task, length, n_needles, n_queries, depth, sample, seed,"
                                    " query, city, number, output, correct, answer, noise, question, bos)"
                                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    for (int i = 0; i < n; i++) {
        const EpisodeRecord* r = &rec[i];
        sqlite3_bind_int64(st, 1, run);
        sqlite3_bind_text(st, 2, task, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 3, r->length);
        sqlite3_bind_int(st, 4, r->n_needles);
        sqlite3_bind_int(st, 5, r->n_queries);
        sqlite3_bind_double(st, 6, r->depth);
        sqlite3_bind_int(st, 7, r->sample);
        sqlite3_bind_int64(st, 8, (sqlite3_int64)r->seed);
        sqlite3_bind_int(st, 9, r->query);
        sqlite3_bind_text(st, 10, r->city, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 11, r->number);
        if (r->correct >= 0) {
            sqlite3_bind_text(st, 12, r->output, -1, SQLITE_STATIC);
            sqlite3_bind_int(st, 13, r->correct);
        } else {
            sqlite3_bind_null(st, 12);
            sqlite3_bind_null(st, 13);
        }
        const double alloc[4] = {r->answer, r->noise, r->question, r->bos};
        for (int k = 0; k < 4; k++) {
            if (r->correct < 0) sqlite3_bind_double(st, 14 + k, alloc[k]);
            else sqlite3_bind_null(st, 14 + k);
        }
        sql_check(reg, sqlite3_step(st), "insert episode");
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    exec(reg, "COMMIT;");
}

// ---- what `difftx runs`, `compare` and `lambda` read ----

// A resumed attempt's steps and losses include the attempts before it (each step is stored once)
#define ATTEMPTS_SO_FAR                                                                                                 \
    " FROM metrics m JOIN runs f ON f.id = m.run_id WHERE f.experiment_id = r.experiment_id AND f.row = r.row AND"     \
    " f.seed = r.seed AND f.identity = r.identity AND f.attempt <= r.attempt AND m.key = "
#define SUMMARY_COLUMNS                                                                                              \
    "SELECT r.id, x.name, x.preset, r.row, r.seed, r.status,"                                                        \
    " (SELECT MAX(m.step)" ATTEMPTS_SO_FAR "'train_loss'),"                                                          \
    " (SELECT value FROM params p WHERE p.run_id = r.id AND p.key = 'steps'),"                                       \
    " (SELECT m.value" ATTEMPTS_SO_FAR "'train_loss' ORDER BY m.step DESC LIMIT 1),"                                 \
    " (SELECT m.value" ATTEMPTS_SO_FAR "'val_loss' ORDER BY m.step DESC LIMIT 1),"                                   \
    " (SELECT value FROM evaluations e WHERE e.run_id = r.id AND e.key = 'tokens_per_second'), r.started,"          \
    " (SELECT COUNT(*)" ATTEMPTS_SO_FAR "'spike_loss') + (SELECT COUNT(*)" ATTEMPTS_SO_FAR "'spike_grad_norm')"      \
    " FROM runs r JOIN experiments x ON x.id = r.experiment_id "

static double column_or_nan(sqlite3_stmt* st, int col) {
    return sqlite3_column_type(st, col) == SQLITE_NULL ? NAN : sqlite3_column_double(st, col);
}

static void read_summary(sqlite3_stmt* st, RunSummary* r) {
    r->id = sqlite3_column_int64(st, 0);
    snprintf(r->experiment, sizeof(r->experiment), "%s", (const char*)sqlite3_column_text(st, 1));
    snprintf(r->preset, sizeof(r->preset), "%s", (const char*)sqlite3_column_text(st, 2));
    snprintf(r->row, sizeof(r->row), "%s", (const char*)sqlite3_column_text(st, 3));
    r->seed = sqlite3_column_int(st, 4);
    snprintf(r->status, sizeof(r->status), "%s", (const char*)sqlite3_column_text(st, 5));
    r->step = sqlite3_column_int(st, 6);
    r->steps = sqlite3_column_int(st, 7);
    r->train_loss = column_or_nan(st, 8);
    r->val_loss = column_or_nan(st, 9);
    r->tokens_per_second = column_or_nan(st, 10);
    snprintf(r->started, sizeof(r->started), "%s", (const char*)sqlite3_column_text(st, 11));
    r->spikes = sqlite3_column_int(st, 12);
}

int registry_runs(Registry* reg, const char* experiment, const char* preset, const char* status, RunSummary** runs) {
    sqlite3_stmt* st = prepare(reg, SUMMARY_COLUMNS "WHERE (?1 IS NULL OR x.name = ?1) AND (?2 IS NULL OR x.preset = ?2) AND"
                                                    " (?3 IS NULL OR r.status = ?3) ORDER BY r.id");
    const char* values[3] = {experiment, preset, status};
    for (int i = 0; i < 3; i++) {
        if (values[i]) sqlite3_bind_text(st, i + 1, values[i], -1, SQLITE_STATIC);
    }
    int n = 0, cap = 16;
    *runs = mallocCheck(cap * sizeof(RunSummary));
    while (registry_row(reg, st, "list runs")) {
        if (n == cap) {
            cap *= 2;
            RunSummary* more = realloc(*runs, cap * sizeof(RunSummary));
            if (!more) die("out of memory listing the runs of '%s'", reg->path);
            *runs = more;
        }
        read_summary(st, &(*runs)[n++]);
    }
    sqlite3_finalize(st);
    return n;
}

int registry_run(Registry* reg, int64_t id, RunSummary* run) {
    sqlite3_stmt* st = prepare(reg, SUMMARY_COLUMNS "WHERE r.id = ?");
    sqlite3_bind_int64(st, 1, id);
    int found = registry_row(reg, st, "read a run");
    if (found) read_summary(st, run);
    sqlite3_finalize(st);
    return found;
}

// The first column of every row of st as strings into *out (the caller frees each and the array)
static int read_texts(Registry* reg, sqlite3_stmt* st, const char* what, char*** out) {
    int n = 0, cap = 16;
    *out = mallocCheck(cap * sizeof(char*));
    while (registry_row(reg, st, what)) {
        if (n == cap) {
            cap *= 2;
            char** more = realloc(*out, cap * sizeof(char*));
            if (!more) die("out of memory reading '%s'", reg->path);
            *out = more;
        }
        (*out)[n++] = strdup((const char*)sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    return n;
}

int registry_experiment_values(Registry* reg, int presets, char*** values) {
    sqlite3_stmt* st = prepare(reg, presets ? "SELECT DISTINCT preset FROM experiments ORDER BY preset"
                                            : "SELECT DISTINCT name FROM experiments ORDER BY name");
    return read_texts(reg, st, "read the experiments", values);
}

char* registry_param(Registry* reg, int64_t run, const char* key) {
    sqlite3_stmt* st = prepare(reg, "SELECT CAST(value AS TEXT) FROM params WHERE run_id = ? AND key = ?");
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
    char* value = strdup(registry_row(reg, st, "read a parameter") ? (const char*)sqlite3_column_text(st, 0) : "");
    sqlite3_finalize(st);
    return value;
}

int registry_param_keys(Registry* reg, const int64_t* runs, int n_runs, char*** keys) {
    sqlite3_stmt* st = prepare(reg,
        "SELECT p.key FROM params p JOIN json_each(?) l ON l.value = p.run_id GROUP BY p.key"
        " ORDER BY MIN(l.key * 4294967296 + p.rowid)");
    bind_ids(st, 1, runs, n_runs);
    return read_texts(reg, st, "read the runs' keys", keys);
}

char* registry_run_config(Registry* reg, int64_t run) {
    sqlite3_stmt* st = prepare(reg, "SELECT recipe_text FROM runs WHERE id = ?");
    sqlite3_bind_int64(st, 1, run);
    char* text = registry_row(reg, st, "read a run's config") ? strdup((const char*)sqlite3_column_text(st, 0)) : NULL;
    sqlite3_finalize(st);
    return text;
}

double registry_recorded_eval_tokens(const char* path, const char* run_dir) {
    char want[PATH_MAX];
    if (access(path, R_OK) != 0 || !realpath(run_dir, want)) return 0;
    Registry reg;
    snprintf(reg.path, sizeof(reg.path), "%s", path);
    double tokens = 0;
    if (sqlite3_open_v2(path, &reg.db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_stmt* st;
        // the folders as recorded may be spelled otherwise (relative, through links): compared resolved
        if (sqlite3_prepare_v2(reg.db, "SELECT r.out_dir, e.value FROM evaluations e JOIN runs r ON r.id = e.run_id WHERE"
                                       " e.key = 'eval_tokens' AND r.status = 'FINISHED' ORDER BY r.id DESC", -1, &st, NULL) == SQLITE_OK) {
            while (!tokens && registry_row(&reg, st, "find a run's evaluation")) {
                char got[PATH_MAX];
                const char* dir = (const char*)sqlite3_column_text(st, 0);
                if (dir && realpath(dir, got) && strcmp(got, want) == 0) tokens = sqlite3_column_double(st, 1);
            }
            sqlite3_finalize(st);
        }
    }
    sqlite3_close(reg.db);
    return tokens;
}
