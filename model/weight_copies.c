#include "weight_copies.h"

#include <stdlib.h>
#include <string.h>

#include "../base/util.h"

WeightCopies* weight_copies_open(const WeightCopies* kind) {
    WeightCopies* c = mallocCheck(sizeof(WeightCopies));
    *c = *kind;
    memset(c->ranges, 0, sizeof(c->ranges));
    return c;
}

static void forget(WeightCopies* c, int i) {
    if (c->ranges[i].copy) c->release(c->ranges[i].copy);
    c->ranges[i].copy = NULL;
    c->ranges[i].w = NULL;
    c->ranges[i].n = 0;
}

void weight_copies_close(WeightCopies* c) {
    if (!c) return;
    for (int i = 0; i < WEIGHT_COPY_RANGES; i++) forget(c, i);
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

const void* weight_copies_find(const WeightCopies* c, const float* x, size_t n) {
    for (int i = 0; i < WEIGHT_COPY_RANGES; i++) {
        const float* r = c->ranges[i].w;
        if (r && x >= r && x + n <= r + c->ranges[i].n) return (const char*)c->ranges[i].copy + (size_t)(x - r) * c->element;
    }
    return NULL;
}
