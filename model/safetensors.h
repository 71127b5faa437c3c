// Weights alone in the safetensors format (huggingface/safetensors), for PyTorch users:
// an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and
// byte range, then the bytes. Names and shapes are the checkpoint's (docs/checkpoint.md);
// docs/export.md states the layout a PyTorch model needs to use them.
#ifndef SAFETENSORS_H
#define SAFETENSORS_H

#include "model.h"

// metadata: n_meta (key, value) string pairs for the header's __metadata__. Written to a
// temporary file and renamed.
void safetensors_write(const char* path, const Model* model, const char* const (*metadata)[2], int n_meta);

#endif
