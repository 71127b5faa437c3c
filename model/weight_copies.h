// The weights' bf16 copies a backend keeps for precision = bf16: ranges of float weights, each
// with a rounded twin the products read. The bookkeeping is shared by the backends; the twins'
// memory and the rounding are each backend's own (host memory on the CPU, device memory on CUDA).
#ifndef WEIGHT_COPIES_H
#define WEIGHT_COPIES_H

#include <stddef.h>

#define WEIGHT_COPY_RANGES 8

typedef struct {
    // a twin of n elements, its release, and w (n) rounded into it
    void* (*alloc)(size_t n);
    void (*release)(void* copy);
    void (*round)(void* copy, const float* w, size_t n);
    size_t element;  // bytes of one element of a twin
    struct {
        const float* w;  // NULL: a free slot
        size_t n;
        void* copy;
    } ranges[WEIGHT_COPY_RANGES];
} WeightCopies;

// w (n floats) holds weights that changed: its twin is made again where keep is set, else
// forgotten (n = 0 forgets it too: its model is freed). A range overlapping w that starts
// elsewhere is a freed model's, forgotten, so no product reads it.
void weight_copies_changed(WeightCopies* c, const float* w, size_t n, int keep);
// The twin of x (n floats) where x lies inside a range, else NULL
const void* weight_copies_find(const WeightCopies* c, const float* x, size_t n);

#endif
