#include "weight_copies.h"

#include <stdlib.h>
#include <string.h>

#include "../base/util.h"

WeightCopies* weight_copies_open(const WeightCopies* kind) {
    WeightCopies* c = mallocCheck(sizeof(WeightCopies));
    *c = *kind;
    memset(c->ranges, 0, sizeof(c->ranges));
    memset(c->blocks, 0, sizeof(c->blocks));
    c->kept = NULL;
    c->n_kept = 0;
    return c;
}

static void forget(WeightCopies* c, int i) {
    if (c->ranges[i].copy) c->release(c->ranges[i].copy);
    c->ranges[i].copy = NULL;
    c->ranges[i].w = NULL;
    c->ranges[i].n = 0;
}

// the kept roundings that overlap x .. x + n (all of them where x is NULL) released, unless
// they are exactly those rows
static void release_kept(WeightCopies* c, const float* x, size_t n, int keep_exact) {
    int j = 0;
    for (int i = 0; i < c->n_kept; i++) {
        struct KeptRounding* k = &c->kept[i];
        int overlaps = !x || (k->x < x + n && x < k->x + k->n);
        if (overlaps && !(keep_exact && k->x == x && k->n == n)) c->release(k->copy);
        else c->kept[j++] = *k;
    }
    c->n_kept = j;
}

void weight_copies_close(WeightCopies* c) {
    if (!c) return;
    for (int i = 0; i < WEIGHT_COPY_RANGES; i++) forget(c, i);
    release_kept(c, NULL, 0, 0);
    free(c->kept);
    free(c);
}

void weight_copies_changed(WeightCopies* c, const float* w, size_t n) {
    int slot = -1;
    for (int i = 0; i < WEIGHT_COPY_RANGES; i++) {
        const float* r = c->ranges[i].w;
        if (r == w) slot = i;
        else if (r && n && r < w + n && w < r + c->ranges[i].n) forget(c, i);
    }
    if (n == 0) {
        if (slot >= 0) forget(c, slot);
        return;
    }
    for (int i = 0; slot < 0 && i < WEIGHT_COPY_RANGES; i++) {
        if (!c->ranges[i].w) slot = i;
    }
    if (slot < 0) die("bf16 products: more than %d blocks of weights at once", WEIGHT_COPY_RANGES);
    if (c->ranges[slot].n != n) {
        forget(c, slot);
        c->ranges[slot].copy = c->alloc(n);
        c->ranges[slot].n = n;
    }
    c->ranges[slot].w = w;
    c->round(c->ranges[slot].copy, w, n);
}

// the twin of weights w (n) inside a range, else NULL
static void* range_twin(const WeightCopies* c, const float* w, size_t n) {
    for (int i = 0; i < WEIGHT_COPY_RANGES; i++) {
        const float* r = c->ranges[i].w;
        if (r && w >= r && w + n <= r + c->ranges[i].n) return (char*)c->ranges[i].copy + (size_t)(w - r) * c->element;
    }
    return NULL;
}

const void* weight_copies_find(const WeightCopies* c, const float* x, size_t n) {
    const void* twin = range_twin(c, x, n);
    if (twin) return twin;
    // exactly these rows: a rounding of rows that merely contain them was a different product's
    for (int i = 0; i < c->n_kept; i++) {
        if (c->kept[i].x == x && c->kept[i].n == n) return c->kept[i].copy;
    }
    return NULL;
}

void* weight_copies_weights_twin(WeightCopies* c, const float* w, size_t n) { return range_twin(c, w, n); }

void weight_copies_activations(WeightCopies* c, const float* x, size_t n) {
    int slot = -1;
    for (int i = 0; i < WEIGHT_COPY_RANGES; i++) {
        const float* b = c->blocks[i].x;
        if (!b) continue;
        // its block again, or one overlapping it (a freed block's memory reused): either way
        // what was rounded there is forgotten
        if (b == x || (n && b < x + n && x < b + c->blocks[i].n)) {
            release_kept(c, b, c->blocks[i].n, 0);
            c->blocks[i].x = NULL;
            c->blocks[i].n = 0;
        }
    }
    if (n == 0) return;
    for (int i = 0; slot < 0 && i < WEIGHT_COPY_RANGES; i++) {
        if (!c->blocks[i].x) slot = i;
    }
    if (slot < 0) die("bf16 products: more than %d blocks of activations at once", WEIGHT_COPY_RANGES);
    c->blocks[slot].x = x;
    c->blocks[slot].n = n;
}

// The kept rounding of exactly the rows x (n), made where none is (those overlapping them
// released); NULL where x lies outside every block of activations
static struct KeptRounding* kept_rows(WeightCopies* c, const float* x, size_t n) {
    int inside = 0;
    for (int i = 0; i < WEIGHT_COPY_RANGES && !inside; i++) {
        const float* b = c->blocks[i].x;
        inside = b && x >= b && x + n <= b + c->blocks[i].n;
    }
    if (!inside) return NULL;
    release_kept(c, x, n, 1);
    for (int i = 0; i < c->n_kept; i++) {
        if (c->kept[i].x == x) return &c->kept[i];  // overlapping and kept: exactly these rows
    }
    struct KeptRounding* grown = realloc(c->kept, (size_t)(c->n_kept + 1) * sizeof(*c->kept));
    if (!grown) die("out of memory keeping a bf16 rounding of %zu activations", n);
    c->kept = grown;
    struct KeptRounding* k = &c->kept[c->n_kept++];
    *k = (struct KeptRounding){x, n, c->alloc(n), 0};
    return k;
}

void* weight_copies_keep(WeightCopies* c, const float* x, size_t n, int* ready) {
    struct KeptRounding* k = kept_rows(c, x, n);
    *ready = k && k->fresh;
    if (!k) return NULL;
    k->fresh = 0;
    return k->copy;
}

void* weight_copies_write(WeightCopies* c, const float* x, size_t n) {
    struct KeptRounding* k = kept_rows(c, x, n);
    if (!k) return NULL;
    k->fresh = 1;
    return k->copy;
}
