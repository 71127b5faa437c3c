// Sampling text from a trained model (`difftx sample`), through the model's public functions
#ifndef SAMPLE_H
#define SAMPLE_H

#include <stdint.h>
#include <stdio.h>

#include "../data/tokenizer.h"
#include "../model/model.h"

// Writes prompt and then up to n_tokens tokens to out as they come, stopping at <|endoftext|>,
// and a newline. The context is the model's last seq_len tokens. temperature 0: greedy; else
// softmax(logits / temperature) sampled from a generator seeded by seed.
void sample_text(Model* model, const Tokenizer* tok, const char* prompt, int n_tokens, float temperature, uint64_t seed,
                 FILE* out);

#endif
