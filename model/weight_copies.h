// The bf16 copies an instance keeps for precision = bf16: blocks of float weights, each with a
// rounded twin the products read; and blocks of activations, in which the rounding of a
// product's input made by the forward pass is kept for the backward product that reads the
// same rows, so that each activation is rounded once a step, not twice. The bookkeeping is
// shared by the backends; the twins' memory and the rounding are each backend's own (host
// memory on the CPU, device memory on CUDA). Each instance has its own (backend.h), so two
// models of different precision in one process never see each other's.
#ifndef WEIGHT_COPIES_H
#define WEIGHT_COPIES_H

#include <stddef.h>

// blocks at once: a model registers its parameters and, for DIFF's composed projections, one
// more; an instance serves the models computing on it
#define WEIGHT_COPY_RANGES 8

struct WeightCopies {
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
    // blocks of activations (a model's, one block each); NULL x: a free slot
    struct {
        const float* x;
        size_t n;
    } blocks[WEIGHT_COPY_RANGES];
    // the roundings kept in them, one per product input (x, n): the rows x .. x + n
    struct KeptRounding {
        const float* x;
        size_t n;
        void* copy;
        int fresh;  // written by the operation that wrote the rows, no forward product has read it since
    }* kept;
    int n_kept;
};
typedef struct WeightCopies WeightCopies;

// An empty set of twins made and rounded by the functions of `kind` (its ranges unused)
WeightCopies* weight_copies_open(const WeightCopies* kind);
// Releases every twin and the set; NULL does nothing
void weight_copies_close(WeightCopies* c);
// w (n floats) holds weights that changed: its twin is made again (n = 0 forgets it: its
// model is freed). A range overlapping w that starts elsewhere is a freed model's, forgotten,
// so no product reads it.
void weight_copies_changed(WeightCopies* c, const float* w, size_t n);
// The twin of x (n floats) where x lies inside a range of weights or a rounding of exactly
// these rows is kept, else NULL
const void* weight_copies_find(const WeightCopies* c, const float* x, size_t n);

// The twin of weights w (n floats) inside a range, for an operation that changes them to write
// their rounding into as it writes them (AdamW); NULL where no range holds them
void* weight_copies_weights_twin(WeightCopies* c, const float* w, size_t n);

// x (n floats) is a block of a model's activations (or of its backward's gradients), allocated
// again (its old roundings forgotten), or n = 0: freed (its roundings released). The model promises that rows a
// forward product read do not change before the backward product that reads them, unless a
// forward product reads them again.
void weight_copies_activations(WeightCopies* c, const float* x, size_t n);
// Where x (n floats) lies inside a block of activations: the twin a forward product reads x
// from, kept for find (made, or the one of these rows reused; a kept rounding overlapping these
// rows otherwise is released), with *ready = 1 where the operation that wrote these rows wrote
// their rounding there too and no forward product has read it since (it is read as it is), else
// 0 (the product rounds x into it); NULL outside every block
void* weight_copies_keep(WeightCopies* c, const float* x, size_t n, int* ready);
// Where x (n floats) lies inside a block of activations: the twin an operation writing these
// rows writes their rounding into as it writes them, for the forward product that reads them
// next (which then rounds nothing) and the backward product after it; else NULL. The rows must
// not change between that operation and that forward product.
void* weight_copies_write(WeightCopies* c, const float* x, size_t n);

#endif
