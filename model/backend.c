// The backend selection: the one place that lists the backends built into the program.
#include "backend.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#ifdef DIFFTX_CUDA
#include "cuda/cuda.h"
#endif
#include "../base/util.h"
#include "weight_copies.h"

static const Backend* (*const BUILT[])(void) = {
    backend_cpu,
#ifdef DIFFTX_CUDA
    backend_cuda,
#endif
};
#define N_BUILT ((int)(sizeof(BUILT) / sizeof(BUILT[0])))

const char* const BACKEND_DEVICES[BACKEND_DEVICE_COUNT] = {"cpu", "cuda"};

void backend_select_blas_kernel(char** argv) { cpu_select_blas_kernel(argv); }
const char* backend_blas_kernel_note(void) { return cpu_blas_kernel_note(); }

int backend_count(void) { return N_BUILT; }

const Backend* backend_at(int i) {
    if (i < 0 || i >= N_BUILT) die("backend %d: this program has backends 0..%d", i, N_BUILT - 1);
    return BUILT[i]();
}

const char* const PRECISIONS[PRECISION_COUNT] = {"fp32", "bf16"};

// Every operation of the table, by name: a backend without one is refused when first named,
// not when a run reaches the missing operation. The assertion keeps the list whole.
#define ENTRY(f) {#f, offsetof(Backend, f)}
static const struct {
    const char* name;
    size_t offset;
} ENTRIES[] = {
    ENTRY(init), ENTRY(open), ENTRY(close), ENTRY(device_name), ENTRY(memory_bytes), ENTRY(peak_memory_bytes), ENTRY(synchronize), ENTRY(alloc),
    ENTRY(release), ENTRY(zero), ENTRY(copy), ENTRY(upload), ENTRY(download), ENTRY(matmul_forward), ENTRY(matmul_backward),
    ENTRY(rmsnorm_forward), ENTRY(rmsnorm_backward), ENTRY(rope_apply), ENTRY(swiglu_forward), ENTRY(swiglu_backward),
    ENTRY(embedding_forward), ENTRY(embedding_backward), ENTRY(crossentropy_forward), ENTRY(crossentropy_backward),
    ENTRY(supports), ENTRY(attention_forward), ENTRY(attention_backward), ENTRY(integral_forward), ENTRY(integral_backward),
    ENTRY(attention_maps), ENTRY(lambda_forward), ENTRY(lambda_backward), ENTRY(token_lambda_forward), ENTRY(token_lambda_backward),
    ENTRY(sum_squares), ENTRY(scale), ENTRY(add), ENTRY(sum_across_ranks), ENTRY(adamw_update), ENTRY(matmul_spent), ENTRY(matmul_rate), ENTRY(peak_rate),
    ENTRY(weights_changed), ENTRY(activations_changed), ENTRY(attention_path), ENTRY(timer_mark), ENTRY(timer_read),
};
#define N_ENTRIES (sizeof(ENTRIES) / sizeof(ENTRIES[0]))
_Static_assert(offsetof(Backend, init) + N_ENTRIES * sizeof(void (*)(void)) == offsetof(Backend, precision),
               "ENTRIES must list every operation of the Backend table");

const char* backend_missing_entry(const Backend* b) {
    for (size_t i = 0; i < N_ENTRIES; i++) {
        void (*fn)(void);
        memcpy(&fn, (const char*)b + ENTRIES[i].offset, sizeof(fn));
        if (!fn) return ENTRIES[i].name;
    }
    return NULL;
}

// Each backend's init runs once; its answer is kept
static const char* init_once(int i) {
    static int done[N_BUILT];
    static const char* why[N_BUILT];
    if (!done[i]) {
        static char msg[N_BUILT][160];
        const char* missing = backend_missing_entry(BUILT[i]());
        if (missing) snprintf(msg[i], sizeof(msg[i]), "its operation table has no %s", missing);
        why[i] = missing ? msg[i] : BUILT[i]()->init();
        done[i] = 1;
    }
    return why[i];
}

// the built backend of a device, -1 when this program has none
static int built_index(const char* device) {
    for (int i = 0; i < N_BUILT; i++) {
        if (strcmp(BUILT[i]()->device, device) == 0) return i;
    }
    return -1;
}

int backend_device_index(const char* name) {
    for (int d = 0; d < BACKEND_DEVICE_COUNT; d++) {
        if (strcmp(BACKEND_DEVICES[d], name) == 0) return d;
    }
    return -1;
}

const char* backend_device_refusal(int device) {
    static char msg[512];
    if (device < 0 || device >= BACKEND_DEVICE_COUNT) die("backend: device %d: there are devices 0..%d", device, BACKEND_DEVICE_COUNT - 1);
    const char* name = BACKEND_DEVICES[device];
    int i = built_index(name);
    // the one backend a build can leave out
    const char* why = i < 0 ? "this program was built without CUDA (build it with `make CUDA=1`, see docs/gpu.md)" : init_once(i);
    if (!why) return NULL;
    snprintf(msg, sizeof(msg), "device '%s' cannot run here: %s", name, why);
    return msg;
}

Backend* backend_open(int device, int precision, const char** why) {
    if (precision < 0 || precision >= PRECISION_COUNT) die("backend_open: precision %d: there are precisions 0..%d", precision, PRECISION_COUNT - 1);
    *why = backend_device_refusal(device);
    if (*why) return NULL;
    int i = built_index(BACKEND_DEVICES[device]);
    Backend* be = mallocCheck(sizeof(Backend));
    *be = *BUILT[i]();
    be->precision = precision;
    be->copies = NULL;
    be->description[0] = 0;
    const char* refused = be->open(be);
    if (refused) {
        free(be);
        *why = refused;
        return NULL;
    }
    return be;
}

const char* backend_description(const Backend* be) { return be->description; }

void backend_weights_changed(const Backend* be, const float* w, size_t n) {
    if (be->copies) weight_copies_changed(be->copies, w, n);
}

void backend_activations_changed(const Backend* be, const float* x, size_t n) {
    if (be->copies) weight_copies_activations(be->copies, x, n);
}

void backend_release_copies(Backend* be) { weight_copies_close(be->copies); }

void backend_close(Backend* be) {
    if (!be) return;
    be->close(be);
    free(be);
}
