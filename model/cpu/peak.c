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

#include "../../base/util.h"
#include "cpu.h"

#if defined(__x86_64__)
// Cycles per second of this thread: 256 dependent adds per round
static double clock_hz(void) {
    uint64_t x = 1;
    long rounds = 1 << 15;
    double t0 = wall_time();
    for (long r = 0; r < rounds; r++) __asm__ volatile(".rept 256\n\taddq %0, %0\n\t.endr" : "+r"(x));
    return (double)rounds * 256 / (wall_time() - t0);
}

// `rounds` rounds of 12 independent FMA chains (more than latency 4-5 x 2 units in flight) on
// the vector registers named reg ("ymm": 8 lanes, "zmm": 16), from zeros so that no denormal
// slows them; in assembly, so the compiler neither drops nor reorders them
#define FMA_CHAINS 12
#define FMA_ROUNDS(reg, rounds)                                                                       \
    __asm__ volatile(".irp i,0,1,2,3,4,5,6,7,8,9,10,11,12,13\n\tvxorps %%xmm\\i, %%xmm\\i, %%xmm\\i\n\t.endr\n" \
                     "1:\n\t.irp i,0,1,2,3,4,5,6,7,8,9,10,11\n\t"                                        \
                     "vfmadd231ps %%" reg "12, %%" reg "13, %%" reg "\\i\n\t.endr\n\t"                     \
                     "dec %0\n\tjnz 1b\n\tvzeroupper"                                                    \
                     : "+r"(rounds)                                                                   \
                     :                                                                                \
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",  \
                       "xmm10", "xmm11", "xmm12", "xmm13", "cc")

// FLOP/s of this thread's FMAs at the given vector width (8 or 16 lanes)
static double fma_rate(int lanes) {
    long rounds = 1 << 20, left = rounds;
    double t0 = wall_time();
    if (lanes == 16) FMA_ROUNDS("zmm", left);
    else FMA_ROUNDS("ymm", left);
    return (double)rounds * FMA_CHAINS * lanes * 2 / (wall_time() - t0);
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
        double rate = 0.0;
        for (int rep = 0; rep < 3; rep++) {  // the best of three: the first also wakes the clock
            double r = fma_rate(lanes);
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
