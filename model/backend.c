// The backend selection: the one place that lists the backends built into the program.
#include "backend.h"

#include <string.h>

#include "cpu/cpu.h"
#include "util.h"

static const Backend* (*const BUILT[])(void) = {backend_cpu};
#define N_BUILT ((int)(sizeof(BUILT) / sizeof(BUILT[0])))

int backend_count(void) { return N_BUILT; }

const Backend* backend_at(int i) {
    if (i < 0 || i >= N_BUILT) die("backend %d: this program has backends 0..%d", i, N_BUILT - 1);
    return BUILT[i]();
}

const Backend* backend_named(const char* name) {
    char names[256] = "";
    for (int i = 0; i < N_BUILT; i++) {
        const Backend* b = BUILT[i]();
        if (strcmp(b->name, name) == 0) return b;
        snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? ", " : "", b->name);
    }
    die("backend '%s' is not built into this program (it has: %s)", name, names);
}
