// Vectorised exp over an array, from glibc's vector math library (libmvec).
#ifndef VECMATH_H
#define VECMATH_H

#include <stddef.h>

// x[i] = expf(x[i]) for i < n
void exp_inplace(float* x, size_t n);

#endif
