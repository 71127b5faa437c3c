// The CPU's peak fp32 rate, what an honest MFU is also measured against: threads x FMA lanes x
// FMA units x 2 x clock. Nothing here trusts a nominal figure: a virtual machine reports its
// host's base clock in /proc/cpuinfo (2.6 GHz on a CPU running at 4.5), and how many vector
// FMAs a core issues per cycle is not in cpuid. So both are measured, on every thread at
// once: the clock by a chain of dependent integer adds (one cycle each on every x86-64 core),
// the FMA units by independent FMA chains at the widest vector width, rounded to a whole
// number of units. Where a core slows under wide vector load the peak is, if anything, high,
// so MFU against it errs low.
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>

#include "../util.h"
#include "cpu.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#if defined(__x86_64__)
#define CHAINS 12  // independent FMA chains: more than latency (4-5 cycles) x units (2) in flight

// Cycles per second of this thread: 256 dependent adds per round
static double clock_hz(void) {
    uint64_t x = 1;
    long rounds = 1 << 15;
    double t0 = wall_time();
    for (long r = 0; r < rounds; r++) __asm__ volatile(".rept 256\n\taddq %0, %0\n\t.endr" : "+r"(x));
    return (double)rounds * 256 / (wall_time() - t0);
}

// FLOP/s of this thread's FMAs at 16 lanes (AVX-512) or 8 (AVX2)
__attribute__((target("avx512f"))) static double fma_rate_avx512(long rounds) {
    __m512 acc[CHAINS], m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
    for (int k = 0; k < CHAINS; k++) acc[k] = _mm512_set1_ps((float)k);
    double t0 = wall_time();
    for (long r = 0; r < rounds; r++) {
        #pragma GCC unroll 16
        for (int k = 0; k < CHAINS; k++) acc[k] = _mm512_fmadd_ps(acc[k], m, c);
    }
    double dt = wall_time() - t0;
    for (int k = 1; k < CHAINS; k++) acc[0] = _mm512_add_ps(acc[0], acc[k]);
    volatile float keep = _mm512_reduce_add_ps(acc[0]);  // the chains' results are used
    (void)keep;
    return (double)rounds * CHAINS * 16 * 2 / dt;
}

__attribute__((target("avx2,fma"))) static double fma_rate_avx2(long rounds) {
    __m256 acc[CHAINS], m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);
    for (int k = 0; k < CHAINS; k++) acc[k] = _mm256_set1_ps((float)k);
    double t0 = wall_time();
    for (long r = 0; r < rounds; r++) {
        #pragma GCC unroll 16
        for (int k = 0; k < CHAINS; k++) acc[k] = _mm256_fmadd_ps(acc[k], m, c);
    }
    double dt = wall_time() - t0;
    for (int k = 1; k < CHAINS; k++) acc[0] = _mm256_add_ps(acc[0], acc[k]);
    float lanes[8];
    _mm256_storeu_ps(lanes, acc[0]);
    volatile float keep = lanes[0];
    (void)keep;
    return (double)rounds * CHAINS * 8 * 2 / dt;
}

double cpu_peak_rate(int threads, char* how, size_t n) {
    CpuFeatures f = cpu_features();
    int lanes = f.avx512 ? 16 : f.avx2 && f.fma ? 8 : 0;
    if (!lanes) {
        snprintf(how, n, "no peak model for a CPU without AVX2 and FMA");
        return 0.0;
    }
    double hz_sum = 0.0, fma_sum = 0.0;
    #pragma omp parallel num_threads(threads) reduction(+ : hz_sum, fma_sum)
    {
        long rounds = 1 << 20;
        double rate = 0.0;
        for (int rep = 0; rep < 3; rep++) {  // the best of three: the first also wakes the clock
            double r = lanes == 16 ? fma_rate_avx512(rounds) : fma_rate_avx2(rounds);
            rate = r > rate ? r : rate;
        }
        #pragma omp barrier
        double hz = 0.0;
        for (int rep = 0; rep < 3; rep++) {
            double h = clock_hz();
            hz = h > hz ? h : hz;
        }
        hz_sum += hz;
        fma_sum += rate;
    }
    double hz = hz_sum / threads;
    double per_cycle = fma_sum / threads / hz;  // flop per cycle of one thread
    int units = (int)lround(per_cycle / (2.0 * lanes));
    if (units < 1) units = 1;
    snprintf(how, n, "%d threads x %d-lane %s FMA x %d per cycle (measured) x 2 x %.2f GHz (measured by dependent adds)",
             threads, lanes, lanes == 16 ? "AVX-512" : "AVX2", units, hz / 1e9);
    return threads * (double)lanes * units * 2.0 * hz / 1e9;
}
#else
double cpu_peak_rate(int threads, char* how, size_t n) {
    (void)threads;
    snprintf(how, n, "no peak model for this architecture");
    return 0.0;
}
#endif
