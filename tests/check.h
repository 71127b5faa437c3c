// Minimal test harness: CHECK counts, grad_check compares analytic gradients with central
// finite differences, every test program ends with "N passed, M failed".
#ifndef CHECK_H
#define CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int checks_passed, checks_failed;

#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (cond) {                                                   \
            checks_passed++;                                          \
        } else {                                                      \
            checks_failed++;                                          \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);               \
            printf(__VA_ARGS__);                                      \
            printf("\n");                                             \
        }                                                             \
    } while (0)

static inline int check_summary(void) {
    printf("%d passed, %d failed\n", checks_passed, checks_failed);
    return checks_failed ? 1 : 0;
}

typedef double (*LossFn)(void* ctx);

// Perturbs up to `samples` coordinates of x (all of them when n <= samples) by +-h and
// compares (f(x+h) - f(x-h)) / 2h with analytic; one CHECK for the whole tensor, passing when
// every coordinate has |a - n| <= atol + rtol * max(|a|, |n|).
static inline void grad_check(const char* what, LossFn f, void* ctx, float* x, const float* analytic, size_t n,
                              int samples, double h, double rtol, double atol) {
    double worst = 0.0;
    size_t worst_i = 0, count = n < (size_t)samples ? n : (size_t)samples;
    double worst_a = 0, worst_n = 0;
    for (size_t s = 0; s < count; s++) {
        size_t i = n <= (size_t)samples ? s : (s * 2654435761u + 17) % n;
        float saved = x[i];
        x[i] = saved + (float)h;
        double up = f(ctx);
        x[i] = saved - (float)h;
        double down = f(ctx);
        x[i] = saved;
        double numeric = (up - down) / (2.0 * h), a = analytic[i];
        double excess = fabs(a - numeric) / (atol + rtol * fmax(fabs(a), fabs(numeric)));
        if (excess > worst) { worst = excess; worst_i = i; worst_a = a; worst_n = numeric; }
    }
    CHECK(worst <= 1.0, "%s: gradient mismatch at %zu: analytic %.6g, numeric %.6g", what, worst_i, worst_a, worst_n);
    printf("  %-36s %5zu coords, worst |a-n| / tolerance = %.3f\n", what, count, worst);
}

#endif
