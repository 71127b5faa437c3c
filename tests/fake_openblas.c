// Loaded with LD_PRELOAD by tests/test_cli.sh, it makes OpenBLAS look as it does on a CPU
// model OpenBLAS does not know, so that difftx's choice of kernel runs end to end on any CPU:
// - openblas_get_corename says "Prescott" (the SSE3 fallback) while OPENBLAS_CORETYPE is unset,
//   and OpenBLAS's own answer once it is set;
// - cblas_sgemm is wrong by one part in a thousand while OPENBLAS_CORETYPE equals
//   FAKE_OPENBLAS_WRONG_KERNEL, as an OpenBLAS build broken on this CPU would be.
#define _GNU_SOURCE
#include <cblas.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

char* openblas_get_corename(void) {
    const char* forced = getenv("OPENBLAS_CORETYPE");
    if (!forced || !*forced) return "Prescott";
    char* (*real)(void) = (char* (*)(void))dlsym(RTLD_NEXT, "openblas_get_corename");
    return real();
}

void cblas_sgemm(OPENBLAS_CONST enum CBLAS_ORDER order, OPENBLAS_CONST enum CBLAS_TRANSPOSE ta,
                 OPENBLAS_CONST enum CBLAS_TRANSPOSE tb, OPENBLAS_CONST blasint M, OPENBLAS_CONST blasint N,
                 OPENBLAS_CONST blasint K, OPENBLAS_CONST float alpha, OPENBLAS_CONST float* A, OPENBLAS_CONST blasint lda,
                 OPENBLAS_CONST float* B, OPENBLAS_CONST blasint ldb, OPENBLAS_CONST float beta, float* C,
                 OPENBLAS_CONST blasint ldc) {
    typedef void (*Sgemm)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint, float,
                          const float*, blasint, const float*, blasint, float, float*, blasint);
    Sgemm real = (Sgemm)dlsym(RTLD_NEXT, "cblas_sgemm");
    real(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    const char* forced = getenv("OPENBLAS_CORETYPE");
    const char* wrong = getenv("FAKE_OPENBLAS_WRONG_KERNEL");
    if (forced && wrong && strcmp(forced, wrong) == 0) C[0] *= 1.001f;
}
