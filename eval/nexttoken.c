#include "nexttoken.h"

#include <math.h>
#include <stdlib.h>

#include "../base/util.h"

NextToken evaluate_next_token(Model* model, const Shard* val, int T, int n_windows, int batch) {
    if (n_windows < 1 || batch < 1) die("evaluate_next_token: %d windows in batches of %d", n_windows, batch);
    size_t N = (size_t)batch * T;
    int V = model->V;
    int* inputs = mallocCheck(N * sizeof(int));
    int* targets = mallocCheck(N * sizeof(int));
    float* logits = mallocCheck((size_t)V * sizeof(float));
    double loss = 0;
    long right = 0, n = 0;
    for (int first = 0; first < n_windows; first += batch) {
        int rows = n_windows - first < batch ? n_windows - first : batch;
        loader_eval_rows(val, T, first, rows, inputs, targets);
        model_forward(model, inputs, NULL, rows, T, 0);
        for (int r = 0; r < rows * T; r++) {
            model_logits(model, r, logits);
            int best = 0;
            float max = logits[0];
            for (int v = 1; v < V; v++) {
                if (logits[v] > max) { max = logits[v]; best = v; }
            }
            double sum = 0;
            for (int v = 0; v < V; v++) sum += exp((double)logits[v] - max);
            loss += max + log(sum) - logits[targets[r]];
            right += best == targets[r];
            n++;
        }
    }
    free(inputs);
    free(targets);
    free(logits);
    NextToken out = {loss / n, (double)right / n, n};
    return out;
}
