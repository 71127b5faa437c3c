#include "profile.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../base/util.h"

const char* const PROFILE_OP_NAMES[PROFILE_OPS] = {
    "zero", "copy", "upload", "download", "matmul_forward", "matmul_backward", "rmsnorm_forward", "rmsnorm_backward",
    "rope_apply", "swiglu_forward", "swiglu_backward", "embedding_forward", "embedding_backward", "crossentropy_forward",
    "crossentropy_backward", "attention_forward", "attention_backward", "integral_forward", "integral_backward",
    "attention_maps", "lambda_forward", "lambda_backward", "token_lambda_forward", "token_lambda_backward", "sum_squares",
    "scale", "add", "sum_across_ranks", "adamw_update", "weights_changed",
};

// The one profile in progress: the table's entries are plain functions, so the wrapper's state
// is the file's
static struct {
    Profile* profile;
    const Model* model;
    const Backend* inner;
    Backend table;
    int recording;       // between profile_step_begin and profile_step_end
    int n;               // calls of the step so far
    int capacity;
    int* call_op;        // (capacity) each call's operation
    int* call_layer;     // (capacity) and layer (-1: outside)
    double* call_bytes;  // (capacity) the least traffic each call needs (call_begin)
    double* call_flops;  // (capacity) and the products' FLOPs
    double* marks;       // (2 capacity) read at the step's end
} now;

// Marks call k of the step: 2k before it, 2k + 1 after. bytes: the least memory traffic the call
// needs, each operand it reads read once and each result written once, in the model's fp32
// storage (what a device's memory must move at the least); flops: the multiply-adds x 2 of the
// products (weights' and attention's), 0 for the other operations
static int call_begin(ProfileOp op, double bytes, double flops) {
    if (!now.recording) return -1;
    if (now.n == now.capacity) {
        now.capacity = 2 * now.capacity + 256;
        now.call_op = realloc(now.call_op, (size_t)now.capacity * sizeof(int));
        now.call_layer = realloc(now.call_layer, (size_t)now.capacity * sizeof(int));
        now.call_bytes = realloc(now.call_bytes, (size_t)now.capacity * sizeof(double));
        now.call_flops = realloc(now.call_flops, (size_t)now.capacity * sizeof(double));
        now.marks = realloc(now.marks, 2 * (size_t)now.capacity * sizeof(double));
        if (!now.call_op || !now.call_layer || !now.call_bytes || !now.call_flops || !now.marks) die("out of memory profiling a step");
    }
    int k = now.n++;
    now.call_op[k] = op;
    now.call_layer[k] = now.model->layer_now;
    now.call_bytes[k] = bytes;
    now.call_flops[k] = flops;
    now.inner->timer_mark(2 * k);
    return k;
}
static void call_end(int k) {
    if (k >= 0) now.inner->timer_mark(2 * k + 1);
}
#define TIMED(op, bytes, flops, call)                   \
    do {                                                \
        int k_ = call_begin(op, (bytes), (flops));      \
        call;                                           \
        call_end(k_);                                   \
    } while (0)
#define W4 4.0  // bytes of an fp32 value (and of an int)

// Attention's products: the scores of each query sub-head and the product with V, over the
// causal (query, key) pairs of query rows q0..T-1; x2 for the backward
static double attention_flops(const AttnShape* s) {
    double pairs = 0.5 * ((double)s->T * (s->T + 1) - (double)s->q0 * (s->q0 + 1));
    return 2.0 * s->B * pairs * ((double)attention_query_heads(s) * s->D + (double)s->H * attention_value_width(s));
}
// Forward: qkv read, y (and DINT's o1) written, the statistics (B, H, M, T) kept
static double attention_forward_bytes(const AttnShape* s, int o1, int lse) {
    double rows = (double)s->B * (s->T - s->q0), out = (double)s->H * attention_value_width(s);
    return W4 * ((double)s->B * s->T * attention_qkv_width(s) + (1.0 + o1) * rows * out + (lse ? (double)s->B * s->H * s->M * s->T : 0.0));
}
// Backward: dy (and dy0), qkv and the statistics read, dqkv written
static double attention_backward_bytes(const AttnShape* s, int dy0) {
    double N = (double)s->B * s->T;
    return W4 * ((1.0 + dy0) * N * s->H * attention_value_width(s) + 2.0 * N * attention_qkv_width(s) + (double)s->B * s->H * s->M * s->T);
}

static void p_zero(void* buf, size_t bytes) { TIMED(OP_ZERO, (double)bytes, 0, now.inner->zero(buf, bytes)); }
static void p_copy(void* dst, const void* src, size_t bytes) { TIMED(OP_COPY, 2.0 * bytes, 0, now.inner->copy(dst, src, bytes)); }
static void p_upload(void* dst, const void* host, size_t bytes) { TIMED(OP_UPLOAD, (double)bytes, 0, now.inner->upload(dst, host, bytes)); }
static void p_download(void* host, const void* src, size_t bytes) {
    TIMED(OP_DOWNLOAD, (double)bytes, 0, now.inner->download(host, src, bytes));
}
static void p_matmul_forward(const Backend* be, float* out, const float* inp, const float* w, int N, int IC, int OC, int accumulate) {
    (void)be;  // the wrapper's, a copy of the inner instance
    double bytes = W4 * ((double)N * IC + (double)OC * IC + (1.0 + (accumulate != 0)) * N * OC);  // out read too when accumulating
    TIMED(OP_MATMUL_FORWARD, bytes, 2.0 * N * IC * OC, now.inner->matmul_forward(now.inner, out, inp, w, N, IC, OC, accumulate));
}
static void p_matmul_backward(const Backend* be, float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int IC,
                              int OC) {
    (void)be;
    double bytes = W4 * ((double)N * OC + 2.0 * N * IC + 3.0 * OC * IC);  // dout, inp, w read; dinp written; dw read and written
    TIMED(OP_MATMUL_BACKWARD, bytes, 4.0 * N * IC * OC, now.inner->matmul_backward(now.inner, dinp, dw, dout, inp, w, N, IC, OC));
}
static void p_rmsnorm_forward(const Backend* be, float* out, float* rstd, const float* inp, const float* weight, float out_scale, int rows,
                              int W) {
    (void)be;
    TIMED(OP_RMSNORM_FORWARD, W4 * (2.0 * rows * W + W + rows), 0,
          now.inner->rmsnorm_forward(now.inner, out, rstd, inp, weight, out_scale, rows, W));
}
static void p_rmsnorm_backward(const Backend* be, float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                               const float* rstd, float out_scale, int rows, int W) {
    (void)be;
    double bytes = W4 * (4.0 * rows * W + 3.0 * W + rows);  // dout, inp, weight, rstd read; dinp and dweight read and written
    TIMED(OP_RMSNORM_BACKWARD, bytes, 0, now.inner->rmsnorm_backward(now.inner, dinp, dweight, dout, inp, weight, rstd, out_scale, rows, W));
}
static void p_rope_apply(float* x, const float* cos_sin, int rows, int T, int heads, int D, int stride, int inverse) {
    double bytes = W4 * (2.0 * rows * heads * D + (double)T * D);
    TIMED(OP_ROPE_APPLY, bytes, 0, now.inner->rope_apply(x, cos_sin, rows, T, heads, D, stride, inverse));
}
static void p_swiglu_forward(const Backend* be, float* h, const float* gate_up, int N, int F) {
    (void)be;
    TIMED(OP_SWIGLU_FORWARD, W4 * 3.0 * N * F, 0, now.inner->swiglu_forward(now.inner, h, gate_up, N, F));
}
static void p_swiglu_backward(const Backend* be, float* dgate_up, const float* dh, const float* gate_up, int N, int F) {
    (void)be;
    TIMED(OP_SWIGLU_BACKWARD, W4 * 5.0 * N * F, 0, now.inner->swiglu_backward(now.inner, dgate_up, dh, gate_up, N, F));
}
static void p_embedding_forward(float* x, const int* tokens, const float* tok_embedding, int N, int C) {
    TIMED(OP_EMBEDDING_FORWARD, W4 * (N + 2.0 * N * C), 0, now.inner->embedding_forward(x, tokens, tok_embedding, N, C));
}
static void p_embedding_backward(float* dtok_embedding, const float* dx, const int* tokens, int N, int C) {
    TIMED(OP_EMBEDDING_BACKWARD, W4 * (N + 3.0 * N * C), 0, now.inner->embedding_backward(dtok_embedding, dx, tokens, N, C));
}
static double p_crossentropy_forward(const float* logits, float* row_stats, float* row_loss, const int* targets, int N, int V) {
    double loss;
    double bytes = W4 * ((double)N * V + 4.0 * N);  // logits, targets read; row stats, row losses written
    TIMED(OP_CROSSENTROPY_FORWARD, bytes, 0, loss = now.inner->crossentropy_forward(logits, row_stats, row_loss, targets, N, V));
    return loss;
}
static void p_crossentropy_backward(const Backend* be, float* logits_inout, const float* row_stats, const int* targets, float dloss, int N,
                                    int V) {
    (void)be;
    double bytes = W4 * (2.0 * N * V + 3.0 * N);  // logits read and written; row stats, targets read
    TIMED(OP_CROSSENTROPY_BACKWARD, bytes, 0, now.inner->crossentropy_backward(now.inner, logits_inout, row_stats, targets, dloss, N, V));
}
static void p_attention_forward(const Backend* be, float* y, float* o1, float* lse, const float* qkv, const float* lambda, const AttnShape* s,
                                HookSite hook) {
    (void)be;
    double bytes = attention_forward_bytes(s, o1 != NULL, lse != NULL);
    TIMED(OP_ATTENTION_FORWARD, bytes, attention_flops(s), now.inner->attention_forward(now.inner, y, o1, lse, qkv, lambda, s, hook));
}
static void p_attention_backward(const Backend* be, float* dqkv, float* dlambda, const float* dy, const float* dy0, const float* qkv, const float* lse,
                                 const float* lambda, const AttnShape* s, HookSite hook) {
    (void)be;
    double bytes = attention_backward_bytes(s, dy0 != NULL);
    TIMED(OP_ATTENTION_BACKWARD, bytes, 2.0 * attention_flops(s),
          now.inner->attention_backward(now.inner, dqkv, dlambda, dy, dy0, qkv, lse, lambda, s, hook));
}
static void p_integral_forward(float* y, float* o1, const float* prior, const float* lambda, int B, int T, int H, int Dv, int pos) {
    TIMED(OP_INTEGRAL_FORWARD, W4 * 4.0 * B * T * H * Dv, 0, now.inner->integral_forward(y, o1, prior, lambda, B, T, H, Dv, pos));
}
static void p_integral_backward(float* dy0, float* dlambda, const float* dy, const float* sums, const float* lambda, int B, int T, int H,
                                int Dv) {
    TIMED(OP_INTEGRAL_BACKWARD, W4 * 3.0 * B * T * H * Dv, 0, now.inner->integral_backward(dy0, dlambda, dy, sums, lambda, B, T, H, Dv));
}
static void p_attention_maps(const Backend* be, float* P, const float* qkv, const AttnShape* s, int h, HookSite hook) {
    (void)be;
    double bytes = W4 * ((double)s->T * attention_qkv_width(s) + (double)s->M * (s->T - s->q0) * s->T);  // sequence 0's qkv; P
    TIMED(OP_ATTENTION_MAPS, bytes, 0, now.inner->attention_maps(now.inner, P, qkv, s, h, hook));
}
static void p_lambda_forward(float* lambda, const float* lam, float lambda_init, int D) {
    TIMED(OP_LAMBDA_FORWARD, W4 * (4.0 * D + 1), 0, now.inner->lambda_forward(lambda, lam, lambda_init, D));
}
static void p_lambda_backward(float* dlam, const float* dlambda, const float* lam, int D) {
    TIMED(OP_LAMBDA_BACKWARD, W4 * (8.0 * D + 1), 0, now.inner->lambda_backward(dlam, dlambda, lam, D));
}
static void p_token_lambda_forward(float* qkv, int N, const AttnShape* s) {
    TIMED(OP_TOKEN_LAMBDA_FORWARD, W4 * 2.0 * N * s->H, 0, now.inner->token_lambda_forward(qkv, N, s));
}
static void p_token_lambda_backward(float* dqkv, const float* qkv, int N, const AttnShape* s) {
    TIMED(OP_TOKEN_LAMBDA_BACKWARD, W4 * 3.0 * N * s->H, 0, now.inner->token_lambda_backward(dqkv, qkv, N, s));
}
static double p_sum_squares(const float* x, size_t n) {
    double sum;
    TIMED(OP_SUM_SQUARES, W4 * n, 0, sum = now.inner->sum_squares(x, n));
    return sum;
}
static void p_scale(float* x, size_t n, float factor) { TIMED(OP_SCALE, W4 * 2.0 * n, 0, now.inner->scale(x, n, factor)); }
static void p_add(float* y, const float* x, size_t n) { TIMED(OP_ADD, W4 * 3.0 * n, 0, now.inner->add(y, x, n)); }
static void p_sum_across_ranks(float* x, size_t n) { TIMED(OP_SUM_ACROSS_RANKS, W4 * 2.0 * n, 0, now.inner->sum_across_ranks(x, n)); }
static int p_adamw_update(const Backend* be, float* p, const float* g, float* m, float* v, size_t n, const AdamWStep* step) {
    (void)be;
    int twin;
    TIMED(OP_ADAMW_UPDATE, W4 * 7.0 * n, 0, twin = now.inner->adamw_update(now.inner, p, g, m, v, n, step));
    return twin;
}
static void p_weights_changed(const Backend* be, const float* w, size_t n) {
    (void)be;
    TIMED(OP_WEIGHTS_CHANGED, now.inner->copies ? (W4 + 2.0) * n : 0, 0, now.inner->weights_changed(now.inner, w, n));
}

void profile_attach(Profile* p, Model* m) {
    if (now.profile) die("profile_attach: a profile is already attached");
    memset(p, 0, sizeof(*p));
    p->layers = m->L;
    p->calls = callocCheck((size_t)PROFILE_OPS * (m->L + 1), sizeof(double));
    p->seconds = callocCheck((size_t)PROFILE_OPS * (m->L + 1), sizeof(double));
    p->bytes = callocCheck((size_t)PROFILE_OPS * (m->L + 1), sizeof(double));
    p->flops = callocCheck((size_t)PROFILE_OPS * (m->L + 1), sizeof(double));
    now.profile = p;
    now.model = m;
    now.inner = m->be;
    now.table = *m->be;  // what is not an operation of a step (memory, rates, paths) stays the backend's own
    Backend* t = &now.table;
    t->zero = p_zero, t->copy = p_copy, t->upload = p_upload, t->download = p_download;
    t->matmul_forward = p_matmul_forward, t->matmul_backward = p_matmul_backward;
    t->rmsnorm_forward = p_rmsnorm_forward, t->rmsnorm_backward = p_rmsnorm_backward, t->rope_apply = p_rope_apply;
    t->swiglu_forward = p_swiglu_forward, t->swiglu_backward = p_swiglu_backward;
    t->embedding_forward = p_embedding_forward, t->embedding_backward = p_embedding_backward;
    t->crossentropy_forward = p_crossentropy_forward, t->crossentropy_backward = p_crossentropy_backward;
    t->attention_forward = p_attention_forward, t->attention_backward = p_attention_backward;
    t->integral_forward = p_integral_forward, t->integral_backward = p_integral_backward, t->attention_maps = p_attention_maps;
    t->lambda_forward = p_lambda_forward, t->lambda_backward = p_lambda_backward;
    t->token_lambda_forward = p_token_lambda_forward, t->token_lambda_backward = p_token_lambda_backward;
    t->sum_squares = p_sum_squares, t->scale = p_scale, t->add = p_add, t->sum_across_ranks = p_sum_across_ranks;
    t->adamw_update = p_adamw_update, t->weights_changed = p_weights_changed;
    m->be = &now.table;
}

void profile_detach(Profile* p, Model* m) {
    if (now.profile != p || now.model != m) die("profile_detach: this profile is not attached to this model");
    m->be = now.inner;
    free(now.call_op);
    free(now.call_layer);
    free(now.call_bytes);
    free(now.call_flops);
    free(now.marks);
    memset(&now, 0, sizeof(now));
}

void profile_free(Profile* p) {
    free(p->calls);
    free(p->seconds);
    free(p->bytes);
    free(p->flops);
    p->calls = p->seconds = p->bytes = p->flops = NULL;
}

void profile_step_begin(Profile* p) {
    if (now.profile != p || now.recording) die("profile_step_begin: not attached, or a step already begun");
    now.recording = 1;
    now.n = 0;
}

void profile_step_end(Profile* p) {
    if (now.profile != p || !now.recording) die("profile_step_end: no step begun");
    now.recording = 0;
    if (!now.n) return;
    now.inner->timer_read(now.marks, 2 * now.n);
    int rows = p->layers + 1;
    for (int k = 0; k < now.n; k++) {
        int layer = now.call_layer[k] < 0 ? p->layers : now.call_layer[k];
        size_t at = (size_t)now.call_op[k] * rows + layer;
        p->calls[at] += 1;
        p->seconds[at] += now.marks[2 * k + 1] - now.marks[2 * k];
        p->bytes[at] += now.call_bytes[k];
        p->flops[at] += now.call_flops[k];
    }
    p->steps++;
    p->step_seconds += now.marks[2 * now.n - 1];
}

double profile_op_seconds(const Profile* p, ProfileOp op, double* calls) {
    double s = 0, c = 0;
    for (int l = 0; l <= p->layers; l++) s += p->seconds[(size_t)op * (p->layers + 1) + l], c += p->calls[(size_t)op * (p->layers + 1) + l];
    if (calls) *calls = p->steps ? c / p->steps : 0;
    return p->steps ? s / p->steps : 0;
}

double profile_op_bytes(const Profile* p, ProfileOp op, double* flops) {
    double b = 0, f = 0;
    for (int l = 0; l <= p->layers; l++) b += p->bytes[(size_t)op * (p->layers + 1) + l], f += p->flops[(size_t)op * (p->layers + 1) + l];
    if (flops) *flops = p->steps ? f / p->steps : 0;
    return p->steps ? b / p->steps : 0;
}

double profile_total_seconds(const Profile* p) {
    double total = 0;
    for (int op = 0; op < PROFILE_OPS; op++) total += profile_op_seconds(p, (ProfileOp)op, NULL);
    return total;
}

// "GB/s" and "GFLOP/s" of a part that moved bytes and did flops in s seconds, "-" where it did none
static void rates(char* gbs, char* gflops, size_t n, double bytes, double flops, double s) {
    snprintf(gbs, n, "-");
    snprintf(gflops, n, "-");
    if (s > 0 && bytes > 0) snprintf(gbs, n, "%.1f", bytes / s / 1e9);
    if (s > 0 && flops > 0) snprintf(gflops, n, "%.1f", flops / s / 1e9);
}

void profile_print(const Profile* p, FILE* out) {
    double step = p->steps ? p->step_seconds / p->steps : 0, total = profile_total_seconds(p);
    fprintf(out, "  profile of %d step%s (%.1f ms a step from its first call to its last, on the device's clock):\n", p->steps,
            p->steps == 1 ? "" : "s", 1e3 * step);
    fprintf(out, "  %-24s %10s %12s %8s %10s %9s %9s\n", "operation", "calls", "ms", "%", "least MB", "GB/s", "GFLOP/s");
    for (int op = 0; op < PROFILE_OPS; op++) {
        double calls, flops, s = profile_op_seconds(p, (ProfileOp)op, &calls), bytes = profile_op_bytes(p, (ProfileOp)op, &flops);
        char gbs[32], gflops[32];
        rates(gbs, gflops, sizeof(gbs), bytes, flops, s);
        if (calls > 0) {
            fprintf(out, "  %-24s %10.0f %12.3f %8.1f %10.1f %9s %9s\n", PROFILE_OP_NAMES[op], calls, 1e3 * s, step > 0 ? 100.0 * s / step : 0.0,
                    bytes / 1e6, gbs, gflops);
        }
    }
    fprintf(out, "  %-24s %10s %12.3f %8.1f\n", "(between the calls)", "", 1e3 * (step - total), step > 0 ? 100.0 * (step - total) / step : 0.0);
    fprintf(out, "  least MB: what each operation must move at the least (operands read once, results written once, fp32);\n"
                 "  GB/s and GFLOP/s: that traffic and the products' FLOPs over its time\n");
}

void profile_write_csv(const Profile* p, const char* path) {
    refuse_replacing_non_file("the profile", path);
    char tmp[PATH_MAX + 8];
    tmp_path(tmp, sizeof(tmp), path);
    FILE* f = fopenCheck(tmp, "w");
    double step = p->steps ? p->step_seconds / p->steps : 0;
    fprintf(f, "operation,layer,calls_per_step,ms_per_step,percent_of_step,least_bytes_per_step,flop_per_step\n");
    for (int op = 0; op < PROFILE_OPS; op++) {
        for (int l = 0; l <= p->layers; l++) {
            size_t at = (size_t)op * (p->layers + 1) + l;
            if (!p->calls[at]) continue;
            double s = p->seconds[at] / p->steps;
            char layer[16] = "-";
            if (l < p->layers) snprintf(layer, sizeof(layer), "%d", l);
            fprintf(f, "%s,%s,%g,%.6f,%.3f,%.0f,%.0f\n", PROFILE_OP_NAMES[op], layer, p->calls[at] / p->steps, 1e3 * s,
                    step > 0 ? 100.0 * s / step : 0.0, p->bytes[at] / p->steps, p->flops[at] / p->steps);
        }
    }
    fprintf(f, "(between the calls),-,0,%.6f,%.3f,0,0\n", 1e3 * (step - profile_total_seconds(p)),
            step > 0 ? 100.0 * (step - profile_total_seconds(p)) / step : 0.0);
    fcloseCheck(f, tmp);
    renameCheck(tmp, path);
}
