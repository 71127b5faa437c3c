// Training health: a loss or gradient norm far above its recent values. Each value gets its
// z-score against the SPIKE_WINDOW values before it (their mean and standard deviation, as
// llm.c's outlier detector takes them); a z-score above SPIKE_Z is a spike, which training
// prints with its step and records as a metric (spike_loss, spike_grad_norm), so the registry
// counts them and `difftx runs` / `compare` show the count.
#ifndef SPIKES_H
#define SPIKES_H

#define SPIKE_WINDOW 128
#define SPIKE_MIN 32  // fewer values before it: no z-score yet
#define SPIKE_Z 5.0

typedef struct {
    double v[SPIKE_WINDOW];
    int n, next;
} SpikeWatch;

// The z-score of x against the values before it (NaN while they are fewer than SPIKE_MIN, or
// all equal), then x joins them. A resumed run replays its log's steps through it first, so
// it sees what a run that never stopped saw.
double spike_watch(SpikeWatch* w, double x);

#endif
