#define _GNU_SOURCE
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <dirent.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void (*die_handler)(void);
void on_die(void (*handler)(void)) { die_handler = handler; }

// The temporaries this process is writing: tmp_path's names not yet renamed into place. die
// removes them, so a failed write (a full disk, most often) leaves nothing half-written to
// keep the disk full. Whole-file writes are sequential, so a few slots are enough.
#define MAX_PENDING 8
static char pending[MAX_PENDING][PATH_MAX];

static void pending_add(const char* tmp) {
    int free_slot = -1;
    for (int i = 0; i < MAX_PENDING; i++) {
        if (strcmp(pending[i], tmp) == 0) return;
        if (!pending[i][0] && free_slot < 0) free_slot = i;
    }
    if (free_slot < 0) die("more than %d files written at once (writing '%s')", MAX_PENDING, tmp);
    snprintf(pending[free_slot], PATH_MAX, "%s", tmp);
}

static void pending_drop(const char* tmp) {
    for (int i = 0; i < MAX_PENDING; i++) {
        if (strcmp(pending[i], tmp) == 0) pending[i][0] = 0;
    }
}

// Never dies: it runs while dying
static int remove_quietly(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
    (void)st; (void)flag; (void)ftw;
    remove(path);
    return 0;
}

static void remove_pending(void) {
    for (int i = 0; i < MAX_PENDING; i++) {
        if (!pending[i][0]) continue;
        nftw(pending[i], remove_quietly, 16, FTW_DEPTH | FTW_PHYS);
        pending[i][0] = 0;
    }
}

void die_at(const char* src, int line, const char* fmt, ...) {
    fprintf(stderr, "error: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (src) fprintf(stderr, "\n  (raised at %s:%d)\n", src, line);
    else fprintf(stderr, "\n");
    remove_pending();
    if (die_handler) die_handler();
    exit(EXIT_FAILURE);
}

void* malloc_check(size_t size, const char* src, int line) {
    void* p = malloc(size ? size : 1);
    if (!p) die_at(src, line, "out of memory allocating %zu bytes", size);
    return p;
}

void* calloc_check(size_t n, size_t size, const char* src, int line) {
    void* p = calloc(n ? n : 1, size ? size : 1);
    if (!p) die_at(src, line, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

FILE* fopen_check(const char* path, const char* mode, const char* src, int line) {
    FILE* f = fopen(path, mode);
    if (!f) die_at(src, line, "cannot open '%s' (mode %s): %s", path, mode, strerror(errno));
    return f;
}

void fread_check(void* ptr, size_t size, size_t n, FILE* f, const char* path, const char* src, int line) {
    size_t got = fread(ptr, size, n, f);
    if (got != n) {
        die_at(src, line, "'%s': %s (read %zu of %zu items)", path,
               feof(f) ? "file is truncated" : strerror(errno), got, n);
    }
}

void fwrite_check(const void* ptr, size_t size, size_t n, FILE* f, const char* path, const char* src, int line) {
    if (fwrite(ptr, size, n, f) != n) die_at(src, line, "cannot write '%s': %s", path, strerror(errno));
}

// A write that failed while stdio flushed its buffer leaves only the stream's error flag:
// fclose alone would report success if the last flush worked
void fclose_check(FILE* f, const char* path, const char* src, int line) {
    int failed_before = ferror(f);
    int saved = errno;
    if (fclose(f) != 0) die_at(src, line, "cannot close '%s': %s", path, strerror(errno));
    if (failed_before) die_at(src, line, "cannot write '%s': %s", path, strerror(saved ? saved : EIO));
}

void path_printf(char* buf, size_t n, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= n) die("path too long (more than %zu bytes): %.80s...", n - 1, buf);
}

// The first of "<path>.tmp", "<path>.tmp.1", ... that this call creates itself (O_EXCL), as a
// file, or as a folder (stale_mark: a name whose folder holds that file is an interrupted
// writer's of this program, removed and taken). Never a path that existed: a user's own
// "OUT.tmp" is neither written over nor deleted.
static void own_temporary(char* buf, size_t n, const char* path, int folder, const char* stale_mark) {
    for (int k = 0; k < 1000; k++) {
        int len = k ? snprintf(buf, n, "%s.tmp.%d", path, k) : snprintf(buf, n, "%s.tmp", path);
        if (len < 0 || (size_t)len >= n || (size_t)len >= PATH_MAX) die("path too long: %s", path);
        if (folder && stale_mark) {
            char mark[PATH_MAX + 64];
            snprintf(mark, sizeof(mark), "%s/%s", buf, stale_mark);
            struct stat st;
            if (lstat(buf, &st) == 0 && S_ISDIR(st.st_mode) && access(mark, F_OK) == 0) remove_tree(buf);
        }
        int made;
        if (folder) {
            made = mkdir(buf, 0777) == 0;
        } else {
            int fd = open(buf, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
            made = fd >= 0;
            if (made) close(fd);
        }
        if (made) {
            pending_add(buf);
            return;
        }
        if (errno != EEXIST) die("cannot create '%s': %s", buf, strerror(errno));
    }
    die("cannot write '%s': '%s.tmp' and 999 other temporary names beside it exist", path, path);
}

void tmp_path(char* buf, size_t n, const char* path) { own_temporary(buf, n, path, 0, NULL); }

// fsync of a file or folder by path
static void sync_path(const char* path, int flags, const char* src, int line) {
    int fd = open(path, flags);
    if (fd < 0) die_at(src, line, "cannot open '%s' to sync it: %s", path, strerror(errno));
    if (fsync(fd) != 0) die_at(src, line, "cannot sync '%s' to disk: %s", path, strerror(errno));
    close(fd);
}

void rename_check(const char* from, const char* to, const char* src, int line) {
    sync_path(from, O_RDONLY, src, line);  // the data reaches the disk before the name does
    if (rename(from, to) != 0) die_at(src, line, "cannot rename '%s' to '%s': %s", from, to, strerror(errno));
    pending_drop(from);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", to);
    sync_path(dirname(dir), O_RDONLY | O_DIRECTORY, src, line);  // and the rename itself
}

static int remove_entry(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
    (void)st; (void)flag; (void)ftw;
    if (remove(path) != 0) die("cannot remove '%s': %s", path, strerror(errno));
    return 0;
}

void remove_tree(const char* path) {
    if (access(path, F_OK) != 0) return;
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) die("cannot remove '%s'", path);
}

// The lock tmp_folder takes on the output's parent folder, held until replace_folder
static int folder_writer_lock = -1;

#define WRITING_MARK ".difftx-writing"

void tmp_folder(char* buf, size_t n, const char* path) {
    // two writers of one folder would take each other's temporary for an interrupted one's, so
    // each waits for the one before it (an flock on the parent folder, which the process's end
    // releases however it ends)
    char parent[4096];
    path_printf(parent, sizeof(parent), "%s", path);
    mkdir_p(dirname(parent));
    path_printf(parent, sizeof(parent), "%s", path);
    const char* dir = dirname(parent);
    if (folder_writer_lock >= 0) die("cannot write '%s': this process is writing another folder", path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) die("cannot open the folder '%s' to lock it: %s", dir, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) die("cannot lock the folder '%s': %s", dir, strerror(errno));
        fprintf(stderr, "waiting for another difftx process writing a folder in '%s'\n", dir);
        if (flock(fd, LOCK_EX) != 0) die("cannot lock the folder '%s': %s", dir, strerror(errno));
    }
    folder_writer_lock = fd;
    // a folder of its own beside path, marked as this program's while it is written, so that what
    // an interrupted writer left is known for its own and taken again (under the lock above)
    own_temporary(buf, n, path, 1, WRITING_MARK);
    char mark[PATH_MAX + 64];
    path_printf(mark, sizeof(mark), "%s/%s", buf, WRITING_MARK);
    FILE* f = fopenCheck(mark, "w");
    fcloseCheck(f, mark);
}

void replace_folder(const char* tmp, const char* path) {
    char mark[PATH_MAX + 64];
    path_printf(mark, sizeof(mark), "%s/%s", tmp, WRITING_MARK);
    if (remove(mark) != 0) die("cannot remove '%s': %s", mark, strerror(errno));
    if (access(path, F_OK) == 0) {
        // one atomic exchange: a reader sees the old folder or the new one, never a mix
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_EXCHANGE) != 0) {
            die("cannot replace '%s' with '%s': %s", path, tmp, strerror(errno));
        }
        remove_tree(tmp);  // now the old one
    } else if (rename(tmp, path) != 0) {
        die("cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    }
    pending_drop(tmp);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    int fd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (fd < 0 || fsync(fd) != 0) die("cannot sync the folder of '%s': %s", path, strerror(errno));
    close(fd);
    if (folder_writer_lock >= 0) close(folder_writer_lock);
    folder_writer_lock = -1;
}

int lock_folder(const char* dir, const char* what) {
    char path[4200];
    path_printf(path, sizeof(path), "%s/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) die("cannot open the lock '%s': %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char holder[32] = "";
        ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
        holder[n > 0 ? n : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
        die("%s '%s' is in use by another difftx process (pid %s); wait for it to end, or use another folder", what, dir,
            holder[0] ? holder : "unknown");
    }
    char pid[32];
    int len = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) die("cannot write the lock '%s': %s", path, strerror(errno));
    return fd;
}

void unlock_folder(int fd) { close(fd); }

void mkdir_p(const char* path) {
    char buf[4096];
    if (strlen(path) >= sizeof(buf)) die("path too long: %s", path);
    strcpy(buf, path);
    for (char* p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) die("cannot create directory '%s': %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) die("cannot create directory '%s': %s", buf, strerror(errno));
}

// path made absolute and resolved as far as it exists: its longest existing ancestor through
// realpath, the rest appended as written
static void resolve_path(const char* path, char* out, size_t n) {
    char head[PATH_MAX + 1], rest[PATH_MAX + 1] = "";
    path_printf(head, sizeof(head), "%s", path);
    for (;;) {
        char real[PATH_MAX];
        if (realpath(head, real)) {
            path_printf(out, n, "%s%s", real, rest);
            return;
        }
        char* slash = strrchr(head, '/');
        char tail[PATH_MAX + 1];
        if (!slash) {  // a relative name with no existing part: from the working folder
            path_printf(tail, sizeof(tail), "/%s%s", head, rest);
            snprintf(rest, sizeof(rest), "%s", tail);
            snprintf(head, sizeof(head), ".");
            continue;
        }
        path_printf(tail, sizeof(tail), "%s%s", slash, rest);
        snprintf(rest, sizeof(rest), "%s", tail);
        if (slash == head) snprintf(head, sizeof(head), "/");
        else *slash = 0;
    }
}

// a is b or lies inside it
static int path_within(const char* a, const char* b) {
    size_t n = strlen(b);
    if (n == 1 && b[0] == '/') return 1;
    return strncmp(a, b, n) == 0 && (a[n] == 0 || a[n] == '/');
}

void refuse_output_over_input(const char* what, const char* output, const char* const* inputs, int n_inputs) {
    char out[PATH_MAX + 2];
    resolve_path(output, out, sizeof(out));
    for (int i = 0; i < n_inputs; i++) {
        char in[PATH_MAX + 2];
        resolve_path(inputs[i], in, sizeof(in));
        if (path_within(out, in) || path_within(in, out)) {
            die("%s '%s' %s the input '%s': choose an output outside what the command reads", what, output,
                strcmp(in, out) == 0 ? "is" : path_within(out, in) ? "lies inside" : "contains", inputs[i]);
        }
    }
}

void refuse_replacing_non_file(const char* what, const char* path) {
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        die("%s '%s' exists and is not a regular file: this command replaces only a file it wrote", what, path);
    }
}

void refuse_replacing_foreign_folder(const char* what, const char* path, const char* marker) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (!S_ISDIR(st.st_mode)) die("%s '%s' exists and is not a folder: this command replaces only a folder it made", what, path);
    char file[PATH_MAX + 64];
    path_printf(file, sizeof(file), "%s/%s", path, marker);
    if (access(file, F_OK) == 0) return;
    DIR* d = opendir(path);
    if (!d) die("cannot read the folder '%s': %s", path, strerror(errno));
    int empty = 1;
    for (struct dirent* e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) empty = 0;
    }
    closedir(d);
    if (!empty) die("%s '%s' is a folder with files but no %s: not one this program made, so it is not replaced", what, path, marker);
}

char* read_text_file(const char* path, size_t* len) {
    FILE* f = fopenCheck(path, "rb");
    if (fseek(f, 0, SEEK_END) != 0) die("cannot seek '%s': %s", path, strerror(errno));
    long size = ftell(f);
    if (size < 0) die("cannot size '%s': %s", path, strerror(errno));
    rewind(f);
    char* text = mallocCheck((size_t)size + 1);
    freadCheck(text, 1, (size_t)size, f, path);
    fcloseCheck(f, path);
    text[size] = 0;
    if (len) *len = (size_t)size;
    return text;
}

void printable_text(char* out, size_t n, const char* text) {
    size_t k = 0;
    for (const unsigned char* p = (const unsigned char*)text; *p && k + 5 < n; p++) {
        if (*p == '\n') k += (size_t)snprintf(out + k, n - k, "\\n");
        else if (*p == '\t') k += (size_t)snprintf(out + k, n - k, "\\t");
        else if (*p < 32 || *p >= 127) k += (size_t)snprintf(out + k, n - k, "\\x%02X", *p);
        else out[k++] = (char)*p;
    }
    out[k] = 0;
}

int plain_number(const char* text, int fraction) {
    const char* c = text;
    if (*c == '-') c++;
    int digits = 0, point = 0;
    for (; (*c >= '0' && *c <= '9') || (fraction && *c == '.' && !point); c++) {
        if (*c == '.') point = 1;
        else digits++;
    }
    if (!digits) return 0;
    if (fraction && (*c == 'e' || *c == 'E')) {
        c++;
        if (*c == '-' || *c == '+') c++;
        if (!(*c >= '0' && *c <= '9')) return 0;
        while (*c >= '0' && *c <= '9') c++;
    }
    return *c == 0;
}

double wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int compare_doubles(const void* x, const void* y) {
    double a = *(const double*)x, b = *(const double*)y;
    return (a > b) - (a < b);
}

void sort_doubles(double* x, size_t n) { qsort(x, n, sizeof(double), compare_doubles); }

void format_duration(char* buf, size_t n, double seconds) {
    long s = (long)seconds;
    if (s >= 3600) snprintf(buf, n, "%ldh%02ldm", s / 3600, s / 60 % 60);
    else snprintf(buf, n, "%ldm%02lds", s / 60, s % 60);
}

void machine_description(char* buf, size_t n) {
    char host[256] = "unknown-host", cpu[256] = "unknown CPU", line[512];
    gethostname(host, sizeof(host) - 1);
    FILE* f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof(line), f)) {
        char* colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            snprintf(cpu, sizeof(cpu), "%s", colon + 2);
            cpu[strcspn(cpu, "\n")] = 0;
            break;
        }
    }
    if (f) fclose(f);
    snprintf(buf, n, "%s, %s", host, cpu);
}

double machine_memory_bytes(void) { return (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE); }

size_t peak_rss_bytes(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return (size_t)usage.ru_maxrss * 1024;  // Linux reports KiB
}

uint64_t hash64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t fnv1a(uint64_t h, const void* bytes, size_t n) {
    const unsigned char* p = bytes;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

uint64_t rng_next(uint64_t* state) {
    uint64_t out = hash64(*state);
    *state += 0x9E3779B97F4A7C15ull;
    return out;
}

float rng_uniform(uint64_t* state) { return (rng_next(state) >> 40) * (1.0f / 16777216.0f); }

float rng_normal(uint64_t* state) {
    // 1 - u keeps the log argument in (0, 1]
    float u1 = 1.0f - rng_uniform(state);
    float u2 = rng_uniform(state);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

// Edit distance (insertions, deletions, substitutions), for names under 64 bytes
static int edit_distance(const char* a, const char* b) {
    size_t n = strlen(a), m = strlen(b);
    if (n >= 64 || m >= 64) return 64;
    int row[64], prev[64];
    for (size_t j = 0; j <= m; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int best = prev[j - 1] + (a[i - 1] != b[j - 1]);
            if (prev[j] + 1 < best) best = prev[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
        }
        memcpy(prev, row, (m + 1) * sizeof(int));
    }
    return prev[m];
}

const char* closest_name(const char* word, const char* const* names, int n) {
    const char* best = NULL;
    int best_distance = (int)strlen(word) / 3 + 2;  // more edits than strlen / 3 + 1 is another word
    for (int i = 0; i < n; i++) {
        int d = edit_distance(word, names[i]);
        if (d < best_distance) {
            best = names[i];
            best_distance = d;
        }
    }
    return best;
}

void copy_file(const char* from, const char* to) {
    size_t len;
    char* bytes = read_text_file(from, &len);
    char tmp[4096];
    tmp_path(tmp, sizeof(tmp), to);
    FILE* f = fopenCheck(tmp, "wb");
    fwriteCheck(bytes, 1, len, f, tmp);
    fcloseCheck(f, tmp);
    renameCheck(tmp, to);
    free(bytes);
}

// The file this code was loaded from: the mapping of /proc/self/maps that holds this function.
// Not /proc/self/exe, which is the dynamic loader when the program was started through it
// (ld-linux.so PROGRAM ARGS). Returns 0 when it cannot be read.
static int program_file(char* out, size_t n) {
    FILE* f = fopen("/proc/self/maps", "r");
    if (!f) return 0;
    uintptr_t here = (uintptr_t)&program_file;
    char line[4096 + 256];
    int found = 0;
    while (!found && fgets(line, sizeof(line), f)) {
        unsigned long start, end;
        int path_at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &start, &end, &path_at) < 2 || path_at == 0) continue;
        if (here < start || here >= end || line[path_at] != '/') continue;
        line[strcspn(line, "\n")] = 0;
        found = snprintf(out, n, "%s", line + path_at) < (int)n;
    }
    fclose(f);
    return found;
}

void source_file_path(char* out, size_t n, const char* relative) {
    char exe[4096];
    if (!program_file(exe, sizeof(exe))) die("cannot find this program's folder (/proc/self/maps) to locate %s", relative);
    const char* dir = dirname(exe);
    for (int up = 1; up <= 2; up++) {
        path_printf(out, n, "%s/%s/%s", dir, up == 1 ? ".." : "../..", relative);
        if (access(out, R_OK) == 0) return;
    }
    die("%s is missing beside the program's folder '%s'", relative, dir);
}
