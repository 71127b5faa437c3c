// Where a step's time goes, operation by operation and layer by layer: the model's backend table
// wrapped so that two timer marks (backend.h) bracket every call, on the device's own clock (a
// GPU's events), read once at the end of the step; each call is credited to its operation and
// to the layer the model was in (Model.layer_now). The marks wait for nothing: a GPU keeps its
// queue full, so what a call is credited with is the time the device spent on it.
#ifndef PROFILE_H
#define PROFILE_H

#include <stdio.h>

#include "model.h"

// The operations of the backend table a step calls, by name (PROFILE_OP_NAMES)
typedef enum {
    OP_ZERO, OP_COPY, OP_UPLOAD, OP_DOWNLOAD, OP_MATMUL_FORWARD, OP_MATMUL_BACKWARD, OP_RMSNORM_FORWARD, OP_RMSNORM_BACKWARD,
    OP_ROPE_APPLY, OP_SWIGLU_FORWARD, OP_SWIGLU_BACKWARD, OP_EMBEDDING_FORWARD, OP_EMBEDDING_BACKWARD, OP_CROSSENTROPY_FORWARD,
    OP_CROSSENTROPY_BACKWARD, OP_ATTENTION_FORWARD, OP_ATTENTION_BACKWARD, OP_INTEGRAL_FORWARD, OP_INTEGRAL_BACKWARD,
    OP_ATTENTION_MAPS, OP_LAMBDA_FORWARD, OP_LAMBDA_BACKWARD, OP_TOKEN_LAMBDA_FORWARD, OP_TOKEN_LAMBDA_BACKWARD, OP_SUM_SQUARES,
    OP_SCALE, OP_ADD, OP_SUM_ACROSS_RANKS, OP_ADAMW_UPDATE, OP_WEIGHTS_CHANGED, PROFILE_OPS
} ProfileOp;
extern const char* const PROFILE_OP_NAMES[PROFILE_OPS];

typedef struct {
    int layers;            // the model's; row `layers` of the tables is "outside the layers"
    int steps;             // steps profiled
    double step_seconds;   // their time, each from before its first call to after its last
    double* calls;         // (PROFILE_OPS, layers + 1) calls, summed over the steps
    double* seconds;       // (PROFILE_OPS, layers + 1) the calls' time
    double* bytes;         // (PROFILE_OPS, layers + 1) the least traffic the calls need (profile.c)
    double* flops;         // (PROFILE_OPS, layers + 1) the products' FLOPs among them
} Profile;

// Puts the profile between model m and its backend until profile_detach; one model is profiled
// at a time in a process
void profile_attach(Profile* p, Model* m);
void profile_detach(Profile* p, Model* m);
void profile_free(Profile* p);
// Around one step: begin before its first call, end after its last (it reads the marks)
void profile_step_begin(Profile* p);
void profile_step_end(Profile* p);
// calls and seconds per step of operation op (all layers), and the sum over every operation
double profile_op_seconds(const Profile* p, ProfileOp op, double* calls);
double profile_total_seconds(const Profile* p);
// The least bytes per step operation op must move (each operand read once, each result written
// once, in fp32: a memory-bound operation's time at the device's bandwidth), and its FLOPs
// (matmul and attention: the products'; 0 for the rest) into *flops
double profile_op_bytes(const Profile* p, ProfileOp op, double* flops);
// The table by operation (calls per step, ms per step, % of the step, least MB, the GB/s and
// GFLOP/s they mean, and what lies between the calls), to out
void profile_print(const Profile* p, FILE* out);
// operation,layer,calls_per_step,ms_per_step,percent_of_step,least_bytes_per_step,flop_per_step
// per (operation, layer) with calls,
// layer "-" outside the layers; written whole (a temporary file renamed)
void profile_write_csv(const Profile* p, const char* path);

#endif
