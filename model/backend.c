// The backend selection: the one place that lists the backends built into the program.
#include "backend.h"

#include "cpu/cpu.h"
#include "util.h"

static const Backend* (*const BUILT[])(void) = {backend_cpu};
#define N_BUILT ((int)(sizeof(BUILT) / sizeof(BUILT[0])))

int backend_count(void) { return N_BUILT; }

const Backend* backend_at(int i) {
    if (i < 0 || i >= N_BUILT) die("backend %d: this program has backends 0..%d", i, N_BUILT - 1);
    return BUILT[i]();
}
