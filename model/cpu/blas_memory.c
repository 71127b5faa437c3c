// OpenBLAS's memory at load time, checked before OpenBLAS loads.
//
// OpenBLAS reserves a buffer of about 128 MB for each of its threads as it loads, and one more
// for the products it then runs: the first product (or a thread's first, where each thread runs
// its own), and the self-check of a restarted program before anything else. When the address
// space is too small for one of them, it retries the mmap forever: the program hangs silently,
// before main or in its first product. Measured with Debian 12's OpenBLAS 0.3.21: it loads in
// about 220 MB with 1 thread and 340 MB with 2, and its first product hung below about 350 and
// 480 MB. Both limits bound these mappings: the address space (ulimit -v, RLIMIT_AS) and the
// data segment (ulimit -d, RLIMIT_DATA, which counts private writable mappings). A program's
// preinit functions run before any shared library's constructor, so this one compares the
// smaller limit with that need and refuses, naming both and what to do, instead of hanging.
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

// OpenBLAS's reservations as it loads (96 MiB and 128 MiB a thread), a 128 MiB buffer for each
// thread's products, for each thread past the first what the C library reserves for it (a 64 MiB
// malloc arena and an 8 MiB stack), and 96 MiB for the program itself: 64 MiB of its libraries'
// own (HDF5, SQLite, oneDNN) and 32 MiB for a small model. Measured, a run's first products of
// a small model hung below 664 MiB with 2 threads (and ran in 352 MiB with 1); a 4-layer model of
// d_model 512 ran out of memory writing its checkpoint in 625 MiB with 1 thread, and ran in 644.
#define PROGRAM_MIB 96
#define LIBRARIES_MIB 64
static size_t blas_need_bytes(int threads) { return (size_t)(96 + 2 * 128 * threads + 72 * (threads - 1) + PROGRAM_MIB) << 20; }

static void refuse_small_address_space(int argc, char** argv, char** envp) {
    (void)argc;
    (void)argv;
    static const struct {
        int resource;
        const char *name, *flag;
    } LIMITS[] = {{RLIMIT_AS, "address-space", "-v"}, {RLIMIT_DATA, "data-segment", "-d"}};
    int threads = blas_load_threads(envp);
    size_t need = blas_need_bytes(threads);
    for (int i = 0; i < 2; i++) {
        struct rlimit limit;
        if (getrlimit(LIMITS[i].resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= need) continue;
        char one_thread[96] = "";
        if (threads > 1) snprintf(one_thread, sizeof(one_thread), ", or use one thread (OMP_NUM_THREADS=1 needs about %zu MiB)", blas_need_bytes(1) >> 20);
        dprintf(STDERR_FILENO,
                "error: the %s limit (ulimit %s) is %llu MiB, but OpenBLAS reserves about %zu MiB with %d thread%s (96 MiB as it "
                "loads, 128 MiB a thread as it loads and as much for its products, the C library 72 MiB for each thread past "
                "the first, and 96 MiB for the program), and below that it waits forever; raise the limit to at least %zu KiB (ulimit %s %zu)%s\n",
                LIMITS[i].name, LIMITS[i].flag, (unsigned long long)(limit.rlim_cur >> 20), need >> 20, threads,
                threads == 1 ? "" : "s", need >> 10, LIMITS[i].flag, need >> 10, one_thread);
        _exit(EXIT_FAILURE);
    }
}

__attribute__((section(".preinit_array"), used)) static void (*const check_address_space)(int, char**, char**) = refuse_small_address_space;

// The bytes the smaller of the address-space and data-segment limits leaves past OpenBLAS's
// reservations (blas_need_bytes), or -1 where neither is set: what a model and its activations
// may take in this process (cpu_memory_bytes)
double cpu_limit_bytes(void) {
    extern char** environ;
    double left = -1;
    static const int LIMITS[] = {RLIMIT_AS, RLIMIT_DATA};
    for (int i = 0; i < 2; i++) {
        struct rlimit limit;
        if (getrlimit(LIMITS[i], &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) continue;
        // past OpenBLAS's buffers and the libraries' own: the program's allowance less theirs
        double after = (double)limit.rlim_cur - (double)blas_need_bytes(blas_load_threads(environ)) +
                       (double)(PROGRAM_MIB - LIBRARIES_MIB) * 1048576;
        if (left < 0 || after < left) left = after > 0 ? after : 0;
    }
    return left;
}
