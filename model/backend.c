// The backend selection: the one place that lists the backends built into the program.
#include "backend.h"

#include <stdio.h>
#include <string.h>

#include "cpu/cpu.h"
#ifdef DIFFTX_CUDA
#include "cuda/cuda.h"
#endif
#include "util.h"

static const Backend* (*const BUILT[])(void) = {
    backend_cpu,
#ifdef DIFFTX_CUDA
    backend_cuda,
#endif
};
#define N_BUILT ((int)(sizeof(BUILT) / sizeof(BUILT[0])))

void backend_select_blas_kernel(char** argv) { cpu_select_blas_kernel(argv); }
const char* backend_blas_kernel_note(void) { return cpu_blas_kernel_note(); }

int backend_count(void) { return N_BUILT; }

const Backend* backend_at(int i) {
    if (i < 0 || i >= N_BUILT) die("backend %d: this program has backends 0..%d", i, N_BUILT - 1);
    return BUILT[i]();
}

// A backend answers its own name; the test programs built with the CUDA kernels under the CPU
// emulation (tests/cuda_emulation) answer `cuda` with that emulation, so a config naming the
// GPU runs its kernels there
static int answers(const Backend* b, const char* device) {
    return strcmp(b->name, device) == 0 || (strcmp(device, "cuda") == 0 && strcmp(b->name, "cuda-emulated") == 0);
}

// Each backend's init runs once; its answer is kept
static const char* init_once(int i) {
    static int done[N_BUILT];
    static const char* why[N_BUILT];
    if (!done[i]) {
        why[i] = BUILT[i]()->init();
        done[i] = 1;
    }
    return why[i];
}

const char* backend_unusable(const char* device) {
    static char msg[512];
    for (int i = 0; i < N_BUILT; i++) {
        if (!answers(BUILT[i](), device)) continue;
        const char* why = init_once(i);
        if (!why) return NULL;
        snprintf(msg, sizeof(msg), "device '%.40s' cannot run here: %s", device, why);
        return msg;
    }
    if (strcmp(device, "cuda") == 0) {
        snprintf(msg, sizeof(msg), "device 'cuda': this program was built without CUDA (build it with `make CUDA=1`, see docs/gpu.md)");
    } else {
        snprintf(msg, sizeof(msg), "device '%.40s' is not a backend of this program (cpu%s)", device, N_BUILT > 1 ? ", cuda" : "");
    }
    return msg;
}

const Backend* backend_named(const char* device) {
    const char* why = backend_unusable(device);
    if (why) die("%s", why);
    for (int i = 0; i < N_BUILT; i++) {
        if (answers(BUILT[i](), device)) return BUILT[i]();
    }
    die("device '%s': no such backend", device);
}
