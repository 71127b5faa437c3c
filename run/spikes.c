#include "spikes.h"

#include <math.h>

double spike_watch(SpikeWatch* w, double x) {
    double z = NAN;
    if (w->n >= SPIKE_MIN) {
        double mean = 0, var = 0;
        for (int i = 0; i < w->n; i++) mean += w->v[i];
        mean /= w->n;
        for (int i = 0; i < w->n; i++) var += (w->v[i] - mean) * (w->v[i] - mean);
        double std = sqrt(var / w->n);
        if (std > 0) z = (x - mean) / std;
    }
    w->v[w->next] = x;
    w->next = (w->next + 1) % SPIKE_WINDOW;
    if (w->n < SPIKE_WINDOW) w->n++;
    return z;
}
