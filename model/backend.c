// The backend selection: the one place that lists the backends built into the program.
#include "backend.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cpu/cpu.h"
#ifdef DIFFTX_CUDA
#include "cuda/cuda.h"
#endif
#include "../base/util.h"

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
    ENTRY(init), ENTRY(device_name), ENTRY(memory_bytes), ENTRY(peak_memory_bytes), ENTRY(synchronize), ENTRY(alloc),
    ENTRY(release), ENTRY(zero), ENTRY(copy), ENTRY(upload), ENTRY(download), ENTRY(matmul_forward), ENTRY(matmul_backward),
    ENTRY(rmsnorm_forward), ENTRY(rmsnorm_backward), ENTRY(rope_apply), ENTRY(swiglu_forward), ENTRY(swiglu_backward),
    ENTRY(embedding_forward), ENTRY(embedding_backward), ENTRY(crossentropy_forward), ENTRY(crossentropy_backward),
    ENTRY(supports), ENTRY(attention_forward), ENTRY(attention_backward), ENTRY(integral_forward), ENTRY(integral_backward),
    ENTRY(attention_maps), ENTRY(lambda_forward), ENTRY(lambda_backward), ENTRY(token_lambda_forward), ENTRY(token_lambda_backward),
    ENTRY(sum_squares), ENTRY(scale), ENTRY(add), ENTRY(sum_across_ranks), ENTRY(adamw_update), ENTRY(matmul_spent), ENTRY(matmul_rate), ENTRY(peak_rate),
    ENTRY(set_precision), ENTRY(weights_changed), ENTRY(attention_path), ENTRY(timer_mark), ENTRY(timer_read),
};
#define N_ENTRIES (sizeof(ENTRIES) / sizeof(ENTRIES[0]))
_Static_assert(offsetof(Backend, init) + N_ENTRIES * sizeof(void (*)(void)) == sizeof(Backend),
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

const char* backend_unusable(const char* device) {
    static char msg[512];
    int i = built_index(device);
    if (i >= 0) {
        const char* why = init_once(i);
        if (!why) return NULL;
        snprintf(msg, sizeof(msg), "device '%.40s' cannot run here: %s", device, why);
        return msg;
    }
    int known = 0;
    for (int d = 0; d < BACKEND_DEVICE_COUNT; d++) known |= strcmp(BACKEND_DEVICES[d], device) == 0;
    if (known) {
        // the one backend a build can leave out
        snprintf(msg, sizeof(msg), "device '%.40s': this program was built without CUDA (build it with `make CUDA=1`, see docs/gpu.md)", device);
    } else {
        int n = snprintf(msg, sizeof(msg), "device '%.40s' is not a backend of this program (", device);
        for (int b = 0; b < N_BUILT; b++) n += snprintf(msg + n, sizeof(msg) - n, "%s%s", b ? ", " : "", BUILT[b]()->device);
        snprintf(msg + n, sizeof(msg) - n, ")");
    }
    return msg;
}

const Backend* backend_named(const char* device) {
    const char* why = backend_unusable(device);
    if (why) die("%s", why);
    return BUILT[built_index(device)]();
}

const Backend* backend_of_device(int i) {
    if (i < 0 || i >= BACKEND_DEVICE_COUNT) die("device %d: there are devices 0..%d", i, BACKEND_DEVICE_COUNT - 1);
    return backend_named(BACKEND_DEVICES[i]);
}
