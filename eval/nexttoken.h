// Next-token loss and accuracy on validation windows: the language-modelling metrics of the
// quantization study (Figure 8), measured with whatever the model is set to (logit
// quantization included).
#ifndef NEXTTOKEN_H
#define NEXTTOKEN_H

#include "../data/dataset.h"
#include "../model/model.h"

typedef struct {
    double loss;      // mean cross-entropy (nats)
    double accuracy;  // fraction of tokens whose target is the arg max of the logits
    long tokens;
} NextToken;

// Windows 0..n_windows-1 of T tokens of val, taken as evaluate_slices takes them (the same
// windows for every model), in batches of `batch`
NextToken evaluate_next_token(Model* model, const Shard* val, int T, int n_windows, int batch);

#endif
