// The choice of OpenBLAS's kernel as logic, on any CPU: instruction sets to kernel, when OpenBLAS's
// own choice is replaced (never over `OPENBLAS_CORETYPE`, never for a kernel name it does not
// know), the sgemm self-check passing two correct summation orders and refusing a dropped k, an
// ignored beta, one element off by 1e-3 and a NaN; the CPU's peak within what 1-2 FMA units at 1-6
// GHz allow. `test_cli` runs the restart end to end through `tests/fake_openblas.c`, an
// `LD_PRELOAD` OpenBLAS that answers as on a CPU model it does not know: the widest kernel runs and
// is recorded, a kernel that fails the self-check gives way with one warning, the user's variable
// stands, and `bench` reports and records both MFUs. A kernel the user names whose instructions the
// CPU lacks is refused at start.
#include <string.h>

#include "../model/cpu/cpu.h"
#include "check.h"

static const char* name_or_none(const char* s) { return s ? s : "(none)"; }

static void test_kernel_for_features(void) {
    struct {
        CpuFeatures f;
        const char* kernel;
    } cases[] = {
        {{0}, NULL},
        {{.sse3 = 1}, "Prescott"},
        {{.sse3 = 1, .avx = 1}, "Sandybridge"},
        {{.sse3 = 1, .avx = 1, .avx2 = 1}, "Sandybridge"},  // AVX2 without FMA: no Haswell kernel
        {{.sse3 = 1, .avx = 1, .fma = 1}, "Sandybridge"},
        {{.sse3 = 1, .avx = 1, .avx2 = 1, .fma = 1}, "Haswell"},
        {{.sse3 = 1, .avx = 1, .avx2 = 1, .fma = 1, .avx512 = 1}, "SkylakeX"},
        {{.sse3 = 1, .avx = 1, .avx2 = 1, .fma = 1, .avx512 = 1, .avx512_bf16 = 1}, "Cooperlake"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char* got = blas_kernel_for(cases[i].f);
        CHECK((got == NULL) == (cases[i].kernel == NULL) && (!got || strcmp(got, cases[i].kernel) == 0),
              "features case %zu: kernel %s, expected %s", i, name_or_none(got), name_or_none(cases[i].kernel));
    }
}

static void test_ranks(void) {
    const char* widening[] = {"Prescott", "Sandybridge", "Haswell", "SkylakeX", "Cooperlake"};
    for (int i = 0; i + 1 < 5; i++) {
        CHECK(blas_kernel_rank(widening[i]) < blas_kernel_rank(widening[i + 1]), "rank of %s below %s's", widening[i], widening[i + 1]);
    }
    CHECK(blas_kernel_rank("Zen") == blas_kernel_rank("Haswell"), "Zen runs Haswell's sgemm width");
    CHECK(blas_kernel_rank("nehalem") == blas_kernel_rank("Prescott"), "names compare as OpenBLAS compares them (any case)");
    CHECK(blas_kernel_rank("NEOVERSEN1") == -1 && blas_kernel_rank(NULL) == -1, "another architecture's kernel is unknown");
}

static void test_upgrade(void) {
    CpuFeatures bf16 = {.sse3 = 1, .avx = 1, .avx2 = 1, .fma = 1, .avx512 = 1, .avx512_bf16 = 1};
    CpuFeatures avx2 = {.sse3 = 1, .avx = 1, .avx2 = 1, .fma = 1};
    struct {
        const char* user;
        const char* current;
        CpuFeatures f;
        const char* expected;
        const char* why;
    } cases[] = {
        {NULL, "Prescott", bf16, "Cooperlake", "a CPU model OpenBLAS does not know, with AVX-512 BF16"},
        {"", "Prescott", bf16, "Cooperlake", "an empty OPENBLAS_CORETYPE is no choice"},
        {NULL, "Prescott", avx2, "Haswell", "an AVX2 CPU on the fallback"},
        {NULL, "Unknown", avx2, "Haswell", "OpenBLAS's generic kernel"},
        {NULL, "SkylakeX", bf16, "Cooperlake", "SkylakeX on a BF16 CPU"},
        {"Prescott", "Prescott", bf16, NULL, "the user's OPENBLAS_CORETYPE stands, even a slow one"},
        {"Haswell", "Haswell", bf16, NULL, "the user's choice stands"},
        {NULL, "Cooperlake", bf16, NULL, "OpenBLAS's choice is already the best"},
        {NULL, "Zen", avx2, NULL, "Zen is as wide as Haswell"},
        {NULL, "SapphireRapids", bf16, NULL, "a wider kernel than the table's choice is kept"},
        {NULL, "NEOVERSEN1", bf16, NULL, "a kernel this table does not know is not second-guessed"},
        {NULL, "Prescott", (CpuFeatures){0}, NULL, "no x86 instruction sets read (another architecture)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char* got = blas_kernel_upgrade(cases[i].user, cases[i].current, cases[i].f);
        CHECK((got == NULL) == (cases[i].expected == NULL) && (!got || strcmp(got, cases[i].expected) == 0),
              "%s: upgrade to %s, expected %s", cases[i].why, name_or_none(got), name_or_none(cases[i].expected));
    }
}

// A kernel named by the user (OPENBLAS_CORETYPE) whose instructions the CPU lacks would die of
// SIGILL mid-run: which instructions are missing, for every kernel width and CPU here
static void test_missing(void) {
    CpuFeatures bf16 = {.sse3 = 1, .avx = 1, .avx2 = 1, .fma = 1, .avx512 = 1, .avx512_bf16 = 1};
    CpuFeatures avx512 = {.sse3 = 1, .avx = 1, .avx2 = 1, .fma = 1, .avx512 = 1};
    CpuFeatures avx2 = {.sse3 = 1, .avx = 1, .avx2 = 1, .fma = 1};
    CpuFeatures avx2_no_fma = {.sse3 = 1, .avx = 1, .avx2 = 1};
    CpuFeatures sse3 = {.sse3 = 1};
    struct {
        const char* kernel;
        CpuFeatures f;
        const char* missing;
    } cases[] = {
        {"Cooperlake", bf16, NULL},
        {"SapphireRapids", bf16, NULL},
        {"Cooperlake", avx512, "AVX-512 BF16"},
        {"SkylakeX", avx512, NULL},
        {"SkylakeX", avx2, "AVX-512 (F, VL, BW, DQ)"},
        {"cooperlake", avx2, "AVX-512 (F, VL, BW, DQ) and AVX-512 BF16"},
        {"Haswell", avx2, NULL},
        {"Zen", avx2_no_fma, "FMA"},
        {"Haswell", sse3, "AVX2 and FMA"},
        {"Sandybridge", sse3, "AVX"},
        {"Prescott", sse3, NULL},
        {"Prescott", (CpuFeatures){0}, "SSE3"},
        {"NEOVERSEN1", sse3, NULL},  // another architecture's name: not judged here
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char* got = blas_kernel_missing(cases[i].kernel, cases[i].f);
        CHECK((got == NULL) == (cases[i].missing == NULL) && (!got || strcmp(got, cases[i].missing) == 0),
              "kernel %s, case %zu: missing %s, expected %s", cases[i].kernel, i, name_or_none(got), name_or_none(cases[i].missing));
    }
}

// Plain sgemm in float, k in order: a correct kernel of another summation order
static void plain_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                        float beta, float* C, int ldc) {
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            float sum = 0.0f;
            for (int k = 0; k < K; k++) sum += (ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) * (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
            C[(size_t)i * ldc + j] = alpha * sum + beta * C[(size_t)i * ldc + j];
        }
    }
}

// The same, backwards over k: the rounding of a different blocking
static void reversed_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                           float beta, float* C, int ldc) {
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            float sum = 0.0f;
            for (int k = K - 1; k >= 0; k--) sum += (ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) * (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
            C[(size_t)i * ldc + j] = alpha * sum + beta * C[(size_t)i * ldc + j];
        }
    }
}

// Broken kernels, each as one real failure mode: a lost last k step, an ignored beta, an
// element off by one part in a thousand, a NaN
static void drops_last_k(int ta, int tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                         float beta, float* C, int ldc) {
    plain_sgemm(ta, tb, M, N, K - 1, alpha, A, lda, B, ldb, beta, C, ldc);
}
static void ignores_beta(int ta, int tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                         float beta, float* C, int ldc) {
    (void)beta;
    plain_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc);
}
static void one_element_off(int ta, int tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                            float beta, float* C, int ldc) {
    plain_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    C[(size_t)(M / 2) * ldc + N / 3] *= 1.001f;
}
static void one_nan(int ta, int tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                    float beta, float* C, int ldc) {
    plain_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    C[ldc + 1] = NAN;
}

static void test_self_check(void) {
    struct {
        SgemmFn sgemm;
        int passes;
        const char* what;
    } cases[] = {
        {plain_sgemm, 1, "a correct sgemm summing k in order"},
        {reversed_sgemm, 1, "a correct sgemm summing k backwards"},
        {drops_last_k, 0, "an sgemm that drops the last k"},
        {ignores_beta, 0, "an sgemm that ignores beta"},
        {one_element_off, 0, "an sgemm with one element off by 1e-3"},
        {one_nan, 0, "an sgemm writing a NaN"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        double worst = blas_self_check(cases[i].sgemm);
        CHECK((worst <= 1.0) == cases[i].passes, "%s: self-check error %.3g times the bound, expected to %s", cases[i].what,
              worst, cases[i].passes ? "pass" : "fail");
    }
}

static void test_peak(void) {
    char how[256];
    double peak = cpu_peak_rate(2, how, sizeof(how));
    CpuFeatures f = cpu_features();
    if (f.avx2 && f.fma) {
        // a core issues 1 or 2 vector FMAs a cycle at 1-6 GHz
        double lanes = f.avx512 ? 16 : 8, low = 2 * lanes * 1 * 2 * 1.0, high = 2 * lanes * 2 * 2 * 6.0;
        CHECK(peak >= low && peak <= high, "peak %.1f GFLOP/s of 2 threads lies in %.0f..%.0f (%s)", peak, low, high, how);
        CHECK(strstr(how, "2 threads x ") == how && strstr(how, "GHz (measured"), "the peak says how it was found: %s", how);
    } else {
        CHECK(peak == 0.0 && strstr(how, "no peak model"), "no FMA: no peak claimed (%s)", how);
    }
    printf("peak of 2 threads: %.1f GFLOP/s = %s\n", peak, how);
}

int main(void) {
    test_kernel_for_features();
    test_ranks();
    test_upgrade();
    test_missing();
    test_self_check();
    test_peak();
    return check_summary();
}
