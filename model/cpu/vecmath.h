// Vectorised exp over an array, from glibc's vector math library (libmvec).
#ifndef VECMATH_H
#define VECMATH_H

#include <stddef.h>

// out[i] = expf(sign * in[i] - shift) for i < n, sign +1 or -1 (an exact product), out == in
// allowed: softmax's shift by the row maximum or log-sum-exp, SiLU's exp(-gate), in one pass
void exp_shifted(float* out, const float* in, size_t n, float sign, float shift);

#endif
