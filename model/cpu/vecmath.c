// The only file built with -ffast-math: that flag is what makes glibc declare expf as a SIMD
// function, so GCC calls libmvec's 16-lane AVX-512 (or 8-lane AVX2) expf here. Softmax and
// SiLU spend a tenth of a training step in exp, and the scalar expf is several times slower.
// The loop does nothing but one exact product (by +-1), one subtraction and expf, so
// fast-math's no-NaN/no-inf assumptions cannot change a result: inputs are not bounded
// (SwiGLU passes -gate; attention's backward subtracts the log-sum-exp, not the row maximum),
// and libmvec's expf overflows to +inf and underflows to 0 exactly as the scalar expf does.
#include "vecmath.h"

#include <math.h>

void exp_shifted(float* out, const float* in, size_t n, float sign, float shift) {
    for (size_t i = 0; i < n; i++) out[i] = expf(sign * in[i] - shift);
}
