// OpenBLAS's memory at load time, checked before OpenBLAS loads.
//
// OpenBLAS's library constructor reserves a buffer of about 128 MB for each of its threads and,
// when the address space is too small for it (`ulimit -v`), retries the mmap forever: before
// main, the program hangs silently. Measured with Debian 12's OpenBLAS 0.3.21: it loads in
// about 220 MB with 1 thread and 340 MB with 2. A program's preinit functions run before any
// shared library's constructor, so this one compares the limit with that need and refuses,
// naming both and what to do, instead of hanging.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

// A variable of envp: getenv cannot be trusted before the C library has started
static const char* env_value(char** envp, const char* name) {
    size_t n = strlen(name);
    for (char** e = envp; e && *e; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
    }
    return NULL;
}

// The threads OpenBLAS will start: its own variables first, then OpenMP's, then every CPU
static int blas_load_threads(char** envp) {
    static const char* const vars[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"};
    long cpus = sysconf(_SC_NPROCESSORS_ONLN), threads = 0;
    for (int i = 0; i < 3 && threads <= 0; i++) {
        const char* v = env_value(envp, vars[i]);
        if (v) threads = strtol(v, NULL, 10);  // OMP_NUM_THREADS may be a list: its first entry
    }
    if (threads <= 0 || threads > cpus) threads = cpus;  // OpenBLAS uses no more threads than CPUs
    return threads < 1 ? 1 : (int)threads;
}

static size_t blas_load_bytes(int threads) { return (size_t)(96 + 128 * threads) << 20; }

static void refuse_small_address_space(int argc, char** argv, char** envp) {
    (void)argc;
    (void)argv;
    struct rlimit limit;
    if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
    int threads = blas_load_threads(envp);
    size_t need = blas_load_bytes(threads);
    if (limit.rlim_cur >= need) return;
    char one_thread[96] = "";
    if (threads > 1) snprintf(one_thread, sizeof(one_thread), ", or use one thread (OMP_NUM_THREADS=1 needs about %zu MiB)", blas_load_bytes(1) >> 20);
    dprintf(STDERR_FILENO,
            "error: the address-space limit (ulimit -v) is %llu MiB, but OpenBLAS reserves about %zu MiB as it loads with %d "
            "thread%s (96 MiB and 128 MiB a thread), and below that it waits forever; raise the limit to at least %zu KiB "
            "(ulimit -v %zu)%s\n",
            (unsigned long long)(limit.rlim_cur >> 20), need >> 20, threads, threads == 1 ? "" : "s", need >> 10, need >> 10, one_thread);
    _exit(EXIT_FAILURE);
}

__attribute__((section(".preinit_array"), used)) static void (*const check_address_space)(int, char**, char**) = refuse_small_address_space;
