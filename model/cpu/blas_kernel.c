// OpenBLAS's kernel, chosen by what the CPU can do rather than by its model number.
//
// OpenBLAS picks its kernel from a table of CPU models when the library loads, before main
// runs; a model newer than the library gets the SSE3 fallback (Prescott), a third of the
// speed. The only way to change the kernel is OPENBLAS_CORETYPE at load time, so a better
// kernel means starting the program again (same process, same command line) with the variable
// set. Whatever the program starts after that (mpirun's ranks each run main themselves; the
// runners' forked workers keep the loaded library) runs the same kernel. Some OpenBLAS builds
// compute wrong results on some CPUs, so the restarted program adopts the kernel only after
// a numeric self-check, and otherwise restarts once more on OpenBLAS's own choice. The
// self-check runs on one thread: a process whose OpenMP team has run cannot fork a worker
// that computes (the child inherits the team's state but not its threads, and waits forever).
#define _GNU_SOURCE
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../base/util.h"
#include "cpu.h"

// Set only in the restarted program, as "PID KERNEL": the kernel OpenBLAS chose itself, to fall
// back to. exec keeps the process id, so a value with another one (left in the environment by
// hand, or by a program that started this one) is not a restart's and is ignored.
#define FALLBACK_VAR "DIFFTX_OPENBLAS_FALLBACK"

CpuFeatures cpu_features(void) {
    CpuFeatures f = {0};
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();  // libgcc's answers include whether the OS saves the vector registers
    f.sse3 = __builtin_cpu_supports("sse3") != 0;
    f.avx = __builtin_cpu_supports("avx") != 0;
    f.avx2 = __builtin_cpu_supports("avx2") != 0;
    f.fma = __builtin_cpu_supports("fma") != 0;
    f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
    f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
    f.amx_bf16 = __builtin_cpu_supports("amx-bf16") != 0;
#endif
    return f;
}

const char* blas_kernel_for(CpuFeatures f) {
    if (f.avx512_bf16) return "Cooperlake";
    if (f.avx512) return "SkylakeX";
    if (f.avx2 && f.fma) return "Haswell";
    if (f.avx) return "Sandybridge";
    if (f.sse3) return "Prescott";
    return NULL;
}

// OpenBLAS's x86 kernels (its names, as OPENBLAS_CORETYPE takes them and openblas_get_corename
// returns them) ranked by the widest vector instructions their sgemm executes
static const struct {
    const char* name;
    int rank;
} KERNELS[] = {
    {"Unknown", 0}, {"Katmai", 0}, {"Coppermine", 0}, {"Northwood", 0}, {"Banias", 0}, {"Athlon", 0},
    {"Prescott", 1}, {"Core2", 1}, {"Penryn", 1}, {"Dunnington", 1}, {"Nehalem", 1}, {"Atom", 1},
    {"Opteron", 1}, {"Opteron_SSE3", 1}, {"Barcelona", 1}, {"Bobcat", 1}, {"Nano", 1},
    {"Sandybridge", 2}, {"Bulldozer", 2}, {"Piledriver", 2}, {"Steamroller", 2}, {"Excavator", 2},
    {"Haswell", 3}, {"Zen", 3}, {"Dhyana", 3},
    {"SkylakeX", 4},
    {"Cooperlake", 5},
    {"SapphireRapids", 6},
};

int blas_kernel_rank(const char* name) {
    for (size_t i = 0; name && i < sizeof(KERNELS) / sizeof(KERNELS[0]); i++) {
        if (strcasecmp(name, KERNELS[i].name) == 0) return KERNELS[i].rank;
    }
    return -1;
}

const char* blas_kernel_missing(const char* name, CpuFeatures f) {
    int rank = blas_kernel_rank(name);
    if (rank >= 5 && !f.avx512_bf16) return f.avx512 ? "AVX-512 BF16" : "AVX-512 (F, VL, BW, DQ) and AVX-512 BF16";
    if (rank >= 4 && !f.avx512) return "AVX-512 (F, VL, BW, DQ)";
    if (rank >= 3 && !(f.avx2 && f.fma)) return f.avx2 ? "FMA" : f.fma ? "AVX2" : "AVX2 and FMA";
    if (rank >= 2 && !f.avx) return "AVX";
    if (rank >= 1 && !f.sse3) return "SSE3";
    return NULL;
}

const char* blas_kernel_upgrade(const char* user_choice, const char* current, CpuFeatures f) {
    if (user_choice && *user_choice) return NULL;  // the user's own choice always stands
    const char* best = blas_kernel_for(f);
    int have = blas_kernel_rank(current);
    // a kernel this table does not know (another architecture's, or a newer library's) is
    // not second-guessed
    if (!best || have < 0 || blas_kernel_rank(best) <= have) return NULL;
    return best;
}

// Row-major C = alpha op(A) op(B) + beta C through cblas_sgemm
static void openblas_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                           const float* B, int ldb, float beta, float* C, int ldc) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc);
}

double blas_self_check(SgemmFn sgemm) {
    // a small product (OpenBLAS's small-matrix kernels) and products past its blocking sizes
    // with odd edges, in every transposition the model uses, with and without beta
    static const struct {
        int M, N, K, trans_a, trans_b;
        float alpha, beta;
    } CASES[] = {
        {7, 5, 3, 0, 1, 1.0f, 0.0f},
        {131, 147, 133, 0, 0, 1.0f, 0.0f},
        {150, 67, 141, 0, 1, 0.5f, 1.0f},
        {97, 140, 163, 1, 0, 1.0f, 1.0f},
    };
    double worst = 0.0;
    for (size_t c = 0; c < sizeof(CASES) / sizeof(CASES[0]); c++) {
        int M = CASES[c].M, N = CASES[c].N, K = CASES[c].K, ta = CASES[c].trans_a, tb = CASES[c].trans_b;
        float alpha = CASES[c].alpha, beta = CASES[c].beta;
        float* A = mallocCheck((size_t)M * K * sizeof(float));  // (M, K), or (K, M) when transposed
        float* B = mallocCheck((size_t)K * N * sizeof(float));  // (K, N), or (N, K) when transposed
        float* C = mallocCheck((size_t)M * N * sizeof(float));  // (M, N)
        uint64_t rng = hash64(c + 1);
        for (size_t i = 0; i < (size_t)M * K; i++) A[i] = (float)rng_uniform(&rng) * 2.0f - 1.0f;
        for (size_t i = 0; i < (size_t)K * N; i++) B[i] = (float)rng_uniform(&rng) * 2.0f - 1.0f;
        for (size_t i = 0; i < (size_t)M * N; i++) C[i] = (float)rng_uniform(&rng) * 2.0f - 1.0f;
        float* C0 = mallocCheck((size_t)M * N * sizeof(float));
        memcpy(C0, C, (size_t)M * N * sizeof(float));
        sgemm(ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, C, N);
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++) {
                double exact = beta * (double)C0[(size_t)i * N + j], magnitude = fabs(beta * (double)C0[(size_t)i * N + j]);
                for (int k = 0; k < K; k++) {
                    double a = ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
                    double b = tb ? B[(size_t)j * K + k] : B[(size_t)k * N + j];
                    exact += alpha * a * b;
                    magnitude += fabs(alpha * a * b);
                }
                // the fp32 bound of a K-term sum in any order, with room for rounding a, b
                // and the beta term (unit roundoff 2^-24)
                double bound = 2.0 * (K + 2) * ldexp(1.0, -24) * magnitude + 1e-30;
                double ratio = fabs((double)C[(size_t)i * N + j] - exact) / bound;
                if (!(ratio <= worst)) worst = isnan(ratio) ? INFINITY : ratio;
            }
        }
        free(A);
        free(B);
        free(C);
        free(C0);
    }
    return worst;
}

// Starts this program again with the environment as it now is; returns only if that fails.
// The command line is the one the process was started with (/proc/self/cmdline), not argv:
// started through the dynamic loader (ld-linux.so [OPTIONS] PROGRAM ARGS), /proc/self/exe is
// the loader, and only the whole original command line, its options included, starts the
// program again the same way.
static void restart(char** argv) {
    size_t n = 0;
    char* line = NULL;
    FILE* f = fopen("/proc/self/cmdline", "rb");
    if (f) {
        size_t cap = 0;
        for (;;) {
            if (n == cap) {
                cap = cap ? 2 * cap : 4096;
                char* grown = realloc(line, cap);
                if (!grown) die("out of memory reading /proc/self/cmdline");
                line = grown;
            }
            size_t got = fread(line + n, 1, cap - n, f);
            n += got;
            if (got == 0) break;
        }
        fclose(f);
    }
    char** args = argv;
    if (n > 0 && line[n - 1] == '\0') {
        size_t count = 0;
        for (size_t i = 0; i < n; i++) count += line[i] == '\0';
        args = mallocCheck((count + 1) * sizeof(char*));
        size_t k = 0;
        for (size_t i = 0; i < n; i += strlen(line + i) + 1) args[k++] = line + i;
        args[k] = NULL;
    }
    execv("/proc/self/exe", args);
    fprintf(stderr, "warning: cannot restart %s to change OpenBLAS's kernel: %s\n", argv[0], strerror(errno));
    if (args != argv) free(args);
    free(line);
}

// The self-check on one thread, leaving OpenMP's and OpenBLAS's thread counts as they were
static double self_check_one_thread(void) {
    int omp_threads = omp_get_max_threads(), blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
    double worst = blas_self_check(openblas_sgemm);
    openblas_set_num_threads(blas_threads);
    omp_set_num_threads(omp_threads);
    return worst;
}

// The kernel OpenBLAS chose, when this process is a restart that set FALLBACK_VAR
static int restarted_from(char* kernel, size_t n) {
    const char* value = getenv(FALLBACK_VAR);
    if (!value) return 0;
    char* end;
    errno = 0;
    long pid = strtol(value, &end, 10);
    int ours = errno == 0 && end != value && *end == ' ' && pid == (long)getpid();
    if (ours) snprintf(kernel, n, "%s", end + 1);
    unsetenv(FALLBACK_VAR);  // the programs this one starts are not restarts
    return ours;
}

void cpu_select_blas_kernel(char** argv) {
    const char* current = openblas_get_corename();
    const char* user = getenv("OPENBLAS_CORETYPE");
    char fallback[64];
    if (restarted_from(fallback, sizeof(fallback))) {
        // this is the restarted program, on the kernel OPENBLAS_CORETYPE names
        double worst = self_check_one_thread();
        if (worst <= 1.0) {
            fprintf(stderr, "OpenBLAS kernel %s, which this CPU's instructions allow (OpenBLAS chose %s; "
                    "OPENBLAS_CORETYPE overrides)\n", current, fallback);
            return;
        }
        fprintf(stderr, "warning: OpenBLAS kernel %s failed its self-check (error %.3g times the fp32 bound); "
                "running OpenBLAS's own choice %s\n", current, worst, fallback);
        setenv("OPENBLAS_CORETYPE", fallback, 1);
        restart(argv);
        return;
    }
    // the user's kernel stands, but one this CPU cannot execute would die of SIGILL mid-run
    const char* missing = user && *user ? blas_kernel_missing(user, cpu_features()) : NULL;
    if (missing) die("OPENBLAS_CORETYPE=%.40s names a kernel this CPU cannot run: it lacks %s (unset the variable to let difftx choose)", user, missing);
    const char* better = blas_kernel_upgrade(user, current, cpu_features());
    if (!better) return;
    char mark[96];
    snprintf(mark, sizeof(mark), "%ld %s", (long)getpid(), current);
    setenv("OPENBLAS_CORETYPE", better, 1);
    setenv(FALLBACK_VAR, mark, 1);
    restart(argv);
    unsetenv("OPENBLAS_CORETYPE");  // the restart failed: this process runs OpenBLAS's choice
    unsetenv(FALLBACK_VAR);
}

const char* cpu_blas_kernel_note(void) {
    static char note[200];
    const char* user = getenv("OPENBLAS_CORETYPE");
    if (!user || !*user) return NULL;
    // what difftx would choose had OpenBLAS picked the user's kernel itself
    const char* better = blas_kernel_upgrade(NULL, user, cpu_features());
    if (!better) return NULL;
    snprintf(note, sizeof(note), "OPENBLAS_CORETYPE=%.40s is set; this CPU's instructions allow %s (unset it to let difftx choose)",
             user, better);
    return note;
}
