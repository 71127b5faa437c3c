// Reductions over a row in 16 fixed lanes. A sum written as one running total is one chain of
// dependent adds (4 cycles each) that the compiler may not reorder; these keep 16 running
// totals, element i in lane i % 16, and add the lanes in a fixed tree at the end. The order is
// written out here, not left to the compiler (the files including this are built without
// -ffast-math), so the result is the same bits on any vector width (SSE, AVX2, AVX-512) and
// any thread count, while the compiler turns each lane step into one vector instruction.
#ifndef LANES_H
#define LANES_H

#include <stddef.h>

#define LANES 16

// acc's 16 lanes added pairwise: (0+8, 1+9, ...), then (0+4, ...), (0+2, ...), 0+1
static inline float lanes_total(float* acc) {
    for (int w = LANES / 2; w > 0; w /= 2) {
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    }
    return acc[0];
}

// sum of x[i] * y[i]
static inline float dot_lanes(const float* x, const float* y, size_t n) {
    float acc[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int l = 0; l < LANES; l++) acc[l] += x[i + l] * y[i + l];
    }
    for (int l = 0; i + l < n; l++) acc[l] += x[i + l] * y[i + l];
    return lanes_total(acc);
}

// sum of x[i] * y[i] * z[i]
static inline float dot3_lanes(const float* x, const float* y, const float* z, size_t n) {
    float acc[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int l = 0; l < LANES; l++) acc[l] += x[i + l] * y[i + l] * z[i + l];
    }
    for (int l = 0; i + l < n; l++) acc[l] += x[i + l] * y[i + l] * z[i + l];
    return lanes_total(acc);
}

// sum of x[i]
static inline float sum_lanes(const float* x, size_t n) {
    float acc[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int l = 0; l < LANES; l++) acc[l] += x[i + l];
    }
    for (int l = 0; i + l < n; l++) acc[l] += x[i + l];
    return lanes_total(acc);
}

// the largest x[i] (n >= 1); a maximum is exact in any order
static inline float max_lanes(const float* x, size_t n) {
    float acc[LANES];
    for (int l = 0; l < LANES; l++) acc[l] = x[0];
    size_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int l = 0; l < LANES; l++) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
    }
    for (int l = 0; i + l < n; l++) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
    float m = acc[0];
    for (int l = 1; l < LANES; l++) m = acc[l] > m ? acc[l] : m;
    return m;
}

// sum of x[i]^2 in double (the gradient norm of millions of parameters)
static inline double sum_squares_lanes(const float* x, size_t n) {
    double acc[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int l = 0; l < LANES; l++) acc[l] += (double)x[i + l] * x[i + l];
    }
    for (int l = 0; i + l < n; l++) acc[l] += (double)x[i + l] * x[i + l];
    for (int w = LANES / 2; w > 0; w /= 2) {
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    }
    return acc[0];
}

#endif
