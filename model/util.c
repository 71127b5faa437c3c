#define _GNU_SOURCE
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void die_at(const char* src, int line, const char* fmt, ...) {
    fprintf(stderr, "error: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  (raised at %s:%d)\n", src, line);
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

void fclose_check(FILE* f, const char* path, const char* src, int line) {
    if (fclose(f) != 0) die_at(src, line, "cannot close '%s': %s", path, strerror(errno));
}

void tmp_path(char* buf, size_t n, const char* path) {
    if ((size_t)snprintf(buf, n, "%s.tmp", path) >= n) die("path too long: %s", path);
}

void rename_check(const char* from, const char* to, const char* src, int line) {
    if (rename(from, to) != 0) die_at(src, line, "cannot rename '%s' to '%s': %s", from, to, strerror(errno));
}

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

double wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
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
