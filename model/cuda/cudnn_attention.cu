// Attention on cuDNN's fused attention for precision = bf16, through cuDNN's backend (graph) API
// from C: no C++ frontend. cuDNN 9.19's own SDPA operation has no causal mask and its backward
// graph does not build, so the graphs here are composites of matmul, pointwise and reduction
// operations that cuDNN's runtime-fusion engines fuse into one kernel each (bf16 operands, the
// probabilities feeding the products bf16, fp32 accumulation and statistics; outputs and
// gradients bf16, the operands' type, as NVIDIA's own graphs declare them: on an H200 an O
// declared fp32 came back wrong, and right once declared bf16):
//   forward, per map:  S = Q K^T, S * scale, causal mask (key j <= query i: CMP_GE computed as
//                      BOOLEAN), m = rowmax, E = exp(S - m), l = rowsum E, stats = m + log l
//                      (packed (B, H, T) per map), P = E / l, O = P V
//   backward, per map: D = rowsum(dO * O) * 1 into memory (fp32 (B, H, T)), S * scale - stats,
//                      then the causal mask, P = exp(.) in fp32, dV = P^T dO (P^T a bf16 reshape
//                      of P), dS = (dO V^T - D) P * scale in fp32, dK = dS^T Q (dS^T a bf16
//                      reshape), dQ = dS K (K an fp32 reshape of the K^T view), dQ written bf16
//                      directly (deterministic: no atomics, no accumulator)
// The backward is the composite NVIDIA's cudnn-frontend (v1.18, CompositeSDPABackwardNode,
// deterministic, without dropout) lowers, tensor by tensor: its types, its order of the mask and
// the statistics, D bound to memory after its product with 1 (where dropout's scale goes), no
// product with 1 after dO V^T (dropped in v1.11); tests/test_cudnn_graphs.c holds the graphs as
// cuDNN reads them to that lowering (tests/golden/cudnn_sdpa_backward.txt). The engines
// recognise attention's backward by its shape, and graphs that differed from it ran on an H200
// not at all (dQ in fp32: "nullptr == dq_ptr") or with wrong gradients (dqkv off by 0.6-1.7 in
// relative L2: dQ through a reordered fp32 accumulator, dS bf16, D without its product with 1).
// Since an engine's reading of a graph shows only in what it computes, a shape takes the graphs
// only after they agree with this
// backend's fp32 kernels on random inputs, once per shape (y and dqkv within 2e-2 relative L2,
// bf16's error being a few 1e-3); else it takes another path, saying why. A map's Q, K and V are
// read in place from a bf16 copy of the packed qkv rows by strides, wherever the variant's layout
// puts each map's sub-heads at one stride apart (standard, DIFF, DIFF V2, Shared DIFF); DIFF is two
// calls, one per map: the first map's output gradient is dy, the second's -lambda dy, dlambda =
// -sum dy . O_2, and each map's gradients are added into dqkv (the value gradients of the maps
// summed). What the graphs cannot express (shared noise maps, GDA's groups, DIFF V2's halves
// pairing, DINT's integral term, quantized logits, the hook, decoding) takes another path
// (attention.cu: the maps written out, else the kernels), as does every shape when libcudnn is
// missing or gives no engine or the graphs disagree; a shape the graphs take is said once on
// stderr, cudnn_attention_refusal says why one is not. libcudnn is opened at run time: a machine
// without it runs everything else. Plans compile when first built (seconds) and are kept per shape.
#include <cuda_bf16.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"

extern "C" {
#include "../../base/util.h"
}

#ifndef CUDNN_LIBRARY_NAME
#define CUDNN_LIBRARY_NAME "libcudnn.so.9"
#endif

typedef cudnnBackendDescriptor_t Desc;

// ---- the library, opened at run time ----
static struct {
    int tried;
    char missing[256];  // why it cannot be used, "" once loaded
    size_t version;
    cudnnHandle_t handle;
    Desc device;  // DEVICEPROP: what plans are made for (this GPU, or a described one)
    decltype(&cudnnGetVersion) GetVersion;
    decltype(&cudnnCreate) Create;
    decltype(&cudnnGetLastErrorString) GetLastErrorString;
    decltype(&cudnnBackendCreateDescriptor) CreateDescriptor;
    decltype(&cudnnBackendDestroyDescriptor) DestroyDescriptor;
    decltype(&cudnnBackendSetAttribute) SetAttribute;
    decltype(&cudnnBackendGetAttribute) GetAttribute;
    decltype(&cudnnBackendFinalize) Finalize;
    decltype(&cudnnBackendExecute) Execute;
} dnn;

// Opens libcudnn and resolves what this file calls; NULL, or why not
static const char* cudnn_open(void) {
    if (dnn.tried) return dnn.missing[0] ? dnn.missing : NULL;
    dnn.tried = 1;
    void* lib = dlopen(CUDNN_LIBRARY_NAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(dnn.missing, sizeof(dnn.missing), "%s", dlerror());
        return dnn.missing;
    }
#define RESOLVE(field, name)                                                                                      \
    if (!(*(void**)&dnn.field = dlsym(lib, #name))) {                                                            \
        snprintf(dnn.missing, sizeof(dnn.missing), "%s has no %s", CUDNN_LIBRARY_NAME ? CUDNN_LIBRARY_NAME : "this program", #name); \
        return dnn.missing;                                                                                       \
    }
    RESOLVE(GetVersion, cudnnGetVersion)
    RESOLVE(Create, cudnnCreate)
    RESOLVE(GetLastErrorString, cudnnGetLastErrorString)
    RESOLVE(CreateDescriptor, cudnnBackendCreateDescriptor)
    RESOLVE(DestroyDescriptor, cudnnBackendDestroyDescriptor)
    RESOLVE(SetAttribute, cudnnBackendSetAttribute)
    RESOLVE(GetAttribute, cudnnBackendGetAttribute)
    RESOLVE(Finalize, cudnnBackendFinalize)
    RESOLVE(Execute, cudnnBackendExecute)
#undef RESOLVE
    dnn.version = dnn.GetVersion();
    return NULL;
}

// ---- building graphs: the first failure is kept, and everything after it does nothing ----
typedef struct {
    Desc made[96];  // every descriptor, destroyed with the graph
    int n_made;
    Desc ops[24];
    int n_ops;
    int64_t next_virtual;
    char why[320];  // "" while every call has succeeded
} Graph;

static void failed(Graph* g, cudnnStatus_t status, const char* what) {
    if (g->why[0]) return;
    char detail[256] = "";
    dnn.GetLastErrorString(detail, sizeof(detail));
    snprintf(g->why, sizeof(g->why), "%s: status %d%s%.200s", what, (int)status, detail[0] ? ": " : "", detail);
}

static Desc make(Graph* g, cudnnBackendDescriptorType_t type) {
    Desc d = NULL;
    if (g->why[0]) return NULL;
    cudnnStatus_t status = dnn.CreateDescriptor(type, &d);
    if (status != CUDNN_STATUS_SUCCESS) {
        failed(g, status, "creating a descriptor");
        return NULL;
    }
    if (g->n_made == (int)(sizeof(g->made) / sizeof(g->made[0]))) die("cuDNN graph: more descriptors than kept");
    g->made[g->n_made++] = d;
    return d;
}

static void set(Graph* g, Desc d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n, const void* value) {
    if (g->why[0]) return;
    cudnnStatus_t status = dnn.SetAttribute(d, name, type, n, value);
    if (status != CUDNN_STATUS_SUCCESS) failed(g, status, "setting an attribute");
}

static void finish(Graph* g, Desc d, const char* what) {
    if (g->why[0]) return;
    cudnnStatus_t status = dnn.Finalize(d);
    if (status != CUDNN_STATUS_SUCCESS) failed(g, status, what);
}

static void graph_free(Graph* g) {
    for (int i = g->n_made - 1; i >= 0; i--) dnn.DestroyDescriptor(g->made[i]);
    g->n_made = 0;
}

// The graphs' tensors that the caller binds to memory, by unique id; virtual tensors take ids
// from VIRTUAL on
enum { T_Q = 1, T_KT, T_V, T_VT, T_O, T_STATS, T_DO, T_DQ, T_DK, T_DV, T_SCALE, T_NEG_INF, T_ONE, T_D, VIRTUAL };

static Desc tensor(Graph* g, int64_t uid, cudnnDataType_t type, const int64_t dims[4], const int64_t strides[4], int is_virtual,
                   int by_value) {
    Desc t = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t alignment = 16;
    bool v = is_virtual, bv = by_value;
    set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    if (by_value) set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &bv);
    finish(g, t, "a tensor");
    return t;
}

// A virtual tensor (a, b, c, d), packed
static Desc temp(Graph* g, cudnnDataType_t type, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t dims[4] = {a, b, c, d}, strides[4] = {b * c * d, c * d, d, 1};
    return tensor(g, g->next_virtual++, type, dims, strides, 1, 0);
}

static void add_op(Graph* g, Desc op) {
    if (g->why[0]) return;
    if (g->n_ops == (int)(sizeof(g->ops) / sizeof(g->ops[0]))) die("cuDNN graph: more operations than kept");
    g->ops[g->n_ops++] = op;
}

// y = mode(x, b) (b NULL for one operand); BINARY_SELECT takes its condition t; GEN_INDEX its axis
static void pointwise(Graph* g, cudnnPointwiseMode_t mode, Desc x, Desc b, Desc y, Desc t, int64_t axis) {
    Desc p = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    cudnnDataType_t precision = mode == CUDNN_POINTWISE_CMP_GE ? CUDNN_DATA_BOOLEAN : CUDNN_DATA_FLOAT;  // the frontend's
    set(g, p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(g, p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) set(g, p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finish(g, p, "a pointwise descriptor");
    Desc op = make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    finish(g, op, "a pointwise operation");
    add_op(g, op);
}

static void reduction(Graph* g, cudnnReduceTensorOp_t op_type, Desc x, Desc y) {
    Desc r = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cudnnDataType_t precision = CUDNN_DATA_FLOAT;
    set(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &op_type);
    set(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &precision);
    finish(g, r, "a reduction descriptor");
    Desc op = make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r);
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    finish(g, op, "a reduction");
    add_op(g, op);
}

// c (.., M, N) = a (.., M, K) b (.., K, N), fp32 accumulation
static void matmul(Graph* g, Desc a, Desc b, Desc c) {
    Desc m = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnnDataType_t precision = CUDNN_DATA_FLOAT;
    set(g, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &precision);
    finish(g, m, "a matmul descriptor");
    Desc op = make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    finish(g, op, "a matmul");
    add_op(g, op);
}

// ---- one map's geometry: where its sub-heads lie in the bf16 qkv rows ----
typedef struct {
    int64_t B, H, T, D, Dv, QKV;
    int64_t hq, hk, hv;      // columns from one head's query (key, value) sub-head to the next's
} Geometry;

// the causal logits of one map, scaled and masked (query i sees key j <= i): s (B, H, T, T) from
// q (.., T, D) and k^T (.., D, T)
// scale Q K^T (B, H, T, T)
static Desc scaled_logits(Graph* g, const Geometry* x, Desc q, Desc kt, Desc scale) {
    Desc raw = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, x->T), scaled = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, x->T);
    matmul(g, q, kt, raw);
    pointwise(g, CUDNN_POINTWISE_MUL, raw, scale, scaled, NULL, 0);
    return scaled;
}

// s with the keys past each query (column > row) set to -inf
static Desc causal_mask(Graph* g, const Geometry* x, Desc s, Desc neg_inf) {
    Desc row = temp(g, CUDNN_DATA_INT32, x->B, x->H, x->T, x->T), col = temp(g, CUDNN_DATA_INT32, x->B, x->H, x->T, x->T);
    Desc keep = temp(g, CUDNN_DATA_BOOLEAN, x->B, x->H, x->T, x->T), masked = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, x->T);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, s, NULL, row, NULL, 2);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, s, NULL, col, NULL, 3);
    pointwise(g, CUDNN_POINTWISE_CMP_GE, row, col, keep, NULL, 0);
    pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, s, neg_inf, masked, keep, 0);
    return masked;
}

static void graph_forward(Graph* g, const Geometry* x) {
    int64_t one[4] = {1, 1, 1, 1};
    int64_t q_dims[4] = {x->B, x->H, x->T, x->D}, q_strides[4] = {x->T * x->QKV, x->hq, x->QKV, 1};
    int64_t kt_dims[4] = {x->B, x->H, x->D, x->T}, kt_strides[4] = {x->T * x->QKV, x->hk, 1, x->QKV};
    int64_t v_dims[4] = {x->B, x->H, x->T, x->Dv}, v_strides[4] = {x->T * x->QKV, x->hv, x->QKV, 1};
    int64_t o_strides[4] = {x->T * x->H * x->Dv, x->Dv, x->H * x->Dv, 1};
    int64_t st_dims[4] = {x->B, x->H, x->T, 1}, st_strides[4] = {x->H * x->T, x->T, 1, 1};
    Desc q = tensor(g, T_Q, CUDNN_DATA_BFLOAT16, q_dims, q_strides, 0, 0);
    Desc kt = tensor(g, T_KT, CUDNN_DATA_BFLOAT16, kt_dims, kt_strides, 0, 0);
    Desc v = tensor(g, T_V, CUDNN_DATA_BFLOAT16, v_dims, v_strides, 0, 0);
    Desc o = tensor(g, T_O, CUDNN_DATA_BFLOAT16, v_dims, o_strides, 0, 0);
    Desc stats = tensor(g, T_STATS, CUDNN_DATA_FLOAT, st_dims, st_strides, 0, 0);
    Desc scale = tensor(g, T_SCALE, CUDNN_DATA_FLOAT, one, one, 0, 1), neg_inf = tensor(g, T_NEG_INF, CUDNN_DATA_FLOAT, one, one, 0, 1);
    Desc s = causal_mask(g, x, scaled_logits(g, x, q, kt, scale), neg_inf);
    Desc mx = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, 1), centred = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, x->T);
    Desc e = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, x->T), sum = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, 1);
    Desc log_sum = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, 1), p = temp(g, CUDNN_DATA_BFLOAT16, x->B, x->H, x->T, x->T);
    reduction(g, CUDNN_REDUCE_TENSOR_MAX, s, mx);
    pointwise(g, CUDNN_POINTWISE_SUB, s, mx, centred, NULL, 0);
    pointwise(g, CUDNN_POINTWISE_EXP, centred, NULL, e, NULL, 0);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, sum);
    pointwise(g, CUDNN_POINTWISE_LOG, sum, NULL, log_sum, NULL, 0);
    pointwise(g, CUDNN_POINTWISE_ADD, mx, log_sum, stats, NULL, 0);
    pointwise(g, CUDNN_POINTWISE_DIV, e, sum, p, NULL, 0);
    matmul(g, p, v, o);
}

// y, a view of x's memory under y's dimensions and strides (a transpose, where they are x's
// swapped), converted to y's type
static void reshape(Graph* g, Desc x, Desc y) {
    Desc op = make(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    finish(g, op, "a reshape");
    add_op(g, op);
}

static void graph_backward(Graph* g, const Geometry* x) {
    int64_t one[4] = {1, 1, 1, 1};
    int64_t q_dims[4] = {x->B, x->H, x->T, x->D}, qt_dims[4] = {x->B, x->H, x->D, x->T};
    int64_t q_strides[4] = {x->T * x->QKV, x->hq, x->QKV, 1};
    int64_t k_strides[4] = {x->T * x->QKV, x->hk, x->QKV, 1}, kt_strides[4] = {x->T * x->QKV, x->hk, 1, x->QKV};
    int64_t v_dims[4] = {x->B, x->H, x->T, x->Dv}, vt_dims[4] = {x->B, x->H, x->Dv, x->T};
    int64_t vt_strides[4] = {x->T * x->QKV, x->hv, 1, x->QKV};
    int64_t o_strides[4] = {x->T * x->H * x->Dv, x->Dv, x->H * x->Dv, 1};
    int64_t row_dims[4] = {x->B, x->H, x->T, 1}, row_strides[4] = {x->H * x->T, x->T, 1, 1};
    int64_t dq_strides[4] = {x->T * x->H * x->D, x->D, x->H * x->D, 1};
    int64_t map_dims[4] = {x->B, x->H, x->T, x->T}, map_t_strides[4] = {x->H * x->T * x->T, x->T * x->T, 1, x->T};
    Desc q = tensor(g, T_Q, CUDNN_DATA_BFLOAT16, q_dims, q_strides, 0, 0);
    Desc kt = tensor(g, T_KT, CUDNN_DATA_BFLOAT16, qt_dims, kt_strides, 0, 0);
    Desc vt = tensor(g, T_VT, CUDNN_DATA_BFLOAT16, vt_dims, vt_strides, 0, 0);
    Desc o = tensor(g, T_O, CUDNN_DATA_BFLOAT16, v_dims, o_strides, 0, 0);
    Desc d_o = tensor(g, T_DO, CUDNN_DATA_BFLOAT16, v_dims, o_strides, 0, 0);
    Desc stats = tensor(g, T_STATS, CUDNN_DATA_FLOAT, row_dims, row_strides, 0, 0);
    Desc dq = tensor(g, T_DQ, CUDNN_DATA_BFLOAT16, q_dims, dq_strides, 0, 0);
    Desc dk = tensor(g, T_DK, CUDNN_DATA_BFLOAT16, q_dims, dq_strides, 0, 0);
    Desc dv = tensor(g, T_DV, CUDNN_DATA_BFLOAT16, v_dims, o_strides, 0, 0);
    Desc scale = tensor(g, T_SCALE, CUDNN_DATA_FLOAT, one, one, 0, 1), neg_inf = tensor(g, T_NEG_INF, CUDNN_DATA_FLOAT, one, one, 0, 1);
    Desc unit = tensor(g, T_ONE, CUDNN_DATA_FLOAT, one, one, 0, 1);
    // D = rowsum(dO * O) * 1 into memory (the 1 stands where dropout's inverse scale goes); dO * O
    // strided as the frontend declares it, rows H Dv apart
    int64_t d_o_o_strides[4] = {x->H * x->T * x->Dv, x->T * x->Dv, x->H * x->Dv, 1};
    Desc d_o_o = tensor(g, g->next_virtual++, CUDNN_DATA_FLOAT, v_dims, d_o_o_strides, 1, 0);
    Desc sums = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, 1);
    Desc d_rows = tensor(g, T_D, CUDNN_DATA_FLOAT, row_dims, row_strides, 0, 0);
    pointwise(g, CUDNN_POINTWISE_MUL, d_o, o, d_o_o, NULL, 0);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, d_o_o, sums);
    pointwise(g, CUDNN_POINTWISE_MUL, sums, unit, d_rows, NULL, 0);
    // P = exp(scale Q K^T - stats), the causal mask after the statistics, in fp32
    Desc centred = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, x->T), p = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, x->T);
    pointwise(g, CUDNN_POINTWISE_SUB, scaled_logits(g, x, q, kt, scale), stats, centred, NULL, 0);
    pointwise(g, CUDNN_POINTWISE_EXP, causal_mask(g, x, centred, neg_inf), NULL, p, NULL, 0);
    // dV = P^T dO, P^T a bf16 reshape of P
    Desc pt = tensor(g, g->next_virtual++, CUDNN_DATA_BFLOAT16, map_dims, map_t_strides, 1, 0);
    reshape(g, p, pt);
    matmul(g, pt, d_o, dv);
    // dS = (dO V^T - D) * P * scale
    Desc dp = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, x->T), diff = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, x->T);
    Desc ds_unscaled = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, x->T), ds = temp(g, CUDNN_DATA_FLOAT, x->B, x->H, x->T, x->T);
    matmul(g, d_o, vt, dp);
    pointwise(g, CUDNN_POINTWISE_SUB, dp, d_rows, diff, NULL, 0);
    pointwise(g, CUDNN_POINTWISE_MUL, diff, p, ds_unscaled, NULL, 0);
    pointwise(g, CUDNN_POINTWISE_MUL, ds_unscaled, scale, ds, NULL, 0);
    // dK = dS^T Q (dS^T a bf16 reshape), dQ = dS K (K an fp32 reshape of the K^T view)
    Desc dst = tensor(g, g->next_virtual++, CUDNN_DATA_BFLOAT16, map_dims, map_t_strides, 1, 0);
    reshape(g, ds, dst);
    matmul(g, dst, q, dk);
    Desc k = tensor(g, g->next_virtual++, CUDNN_DATA_FLOAT, q_dims, k_strides, 1, 0);
    reshape(g, kt, k);
    matmul(g, ds, k, dq);
}

// The operation graph of g's operations, and cuDNN's heuristics for it on the device `device`:
// the engine configurations it offers, in its order of preference, into configs (up to max);
// their count, or -1 with g->why
static int64_t engine_configs(Graph* g, Desc device, Desc* configs, int64_t max) {
    Desc og = make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->n_ops, g->ops);
    finish(g, og, "the operation graph");
    Desc heur = make(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    set(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og);
    set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    set(g, heur, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &device);
    finish(g, heur, "the heuristics");
    if (g->why[0]) return -1;
    int64_t count = 0;
    for (int64_t i = 0; i < max; i++) configs[i] = make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (g->why[0]) return -1;
    cudnnStatus_t status = dnn.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, max, &count, configs);
    if (status != CUDNN_STATUS_SUCCESS) {
        failed(g, status, "reading the heuristics' results");
        return -1;
    }
    return count;
}

// A DEVICEPROP descriptor from a JSON description of a GPU, or from this process's GPU
static const char* device_properties(Desc* out, const char* json) {
    cudnnStatus_t status = dnn.CreateDescriptor(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, out);
    if (status == CUDNN_STATUS_SUCCESS) {
        if (json) status = dnn.SetAttribute(*out, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, (int64_t)strlen(json), json);
        else status = dnn.SetAttribute(*out, CUDNN_ATTR_DEVICEPROP_HANDLE, CUDNN_TYPE_HANDLE, 1, &dnn.handle);
    }
    if (status == CUDNN_STATUS_SUCCESS) status = dnn.Finalize(*out);
    if (status == CUDNN_STATUS_SUCCESS) return NULL;
    static char why[320];
    char detail[256] = "";
    dnn.GetLastErrorString(detail, sizeof(detail));
    snprintf(why, sizeof(why), "cuDNN's device properties: status %d: %.250s", (int)status, detail);
    return why;
}

// The execution plan of one engine configuration for the device `device` (compiled there and
// then, seconds for a runtime-fusion engine), or NULL with g->why
static Desc finalized_plan(Graph* g, Desc config, Desc device) {
    Desc plan = NULL;
    cudnnStatus_t status = dnn.CreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
    if (status == CUDNN_STATUS_SUCCESS) status = dnn.SetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config);
    if (status == CUDNN_STATUS_SUCCESS) status = dnn.SetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &device);
    if (status == CUDNN_STATUS_SUCCESS) status = dnn.Finalize(plan);
    if (status == CUDNN_STATUS_SUCCESS) {
        g->why[0] = 0;
        return plan;
    }
    failed(g, status, "no engine's plan finalized; the first");
    if (plan) dnn.DestroyDescriptor(plan);
    return NULL;
}

// Executes plan on the tensors bound by uids and pointers; NULL, or why not
static const char* run_plan(Desc plan, int64_t workspace_size, const int64_t* uids, void* const* pointers, int n) {
    static char why[320];
    Graph g;
    memset(&g, 0, sizeof(g));
    Desc pack = make(&g, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    void* workspace = workspace_size ? cuda_scratch(SCRATCH_CUDNN_WORK, (size_t)workspace_size) : NULL;
    set(&g, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    set(&g, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, pointers);
    set(&g, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    finish(&g, pack, "the variant pack");
    if (!g.why[0]) {
        cudnnStatus_t status = dnn.Execute(dnn.handle, plan, pack);
        if (status != CUDNN_STATUS_SUCCESS) failed(&g, status, "executing a plan");
    }
    graph_free(&g);
    if (!g.why[0]) return NULL;
    snprintf(why, sizeof(why), "%s", g.why);
    return why;
}

// the tensors a variant pack binds, in the order of the pointers given with them
static const int64_t FORWARD_UIDS[] = {T_Q, T_KT, T_V, T_O, T_STATS, T_SCALE, T_NEG_INF};
static const int64_t BACKWARD_UIDS[] = {T_Q, T_KT, T_VT, T_O, T_DO, T_STATS, T_DQ, T_DK, T_DV, T_SCALE, T_NEG_INF, T_ONE, T_D};
#define N_UIDS(uids) ((int)(sizeof(uids) / sizeof(uids[0])))

// ---- records kept for the process's life, each found by the key it opens with ----
// Callers keep pointers to records while later ones are added, so each is its own allocation.
typedef struct {
    void** records;
    int n, capacity;
} Kept;

// The record whose first key_size bytes equal key's, or a new zeroed one of size bytes that opens
// with key (*made says which). Keys are compared as bytes: the caller zeroes a key's padding.
static void* kept_record(Kept* kept, const void* key, size_t key_size, size_t size, int* made) {
    for (int i = 0; i < kept->n; i++) {
        if (!memcmp(kept->records[i], key, key_size)) {
            *made = 0;
            return kept->records[i];
        }
    }
    if (kept->n == kept->capacity) {
        kept->capacity = kept->capacity ? 2 * kept->capacity : 16;
        kept->records = (void**)realloc(kept->records, kept->capacity * sizeof(void*));
        if (!kept->records) die("out of memory keeping cuDNN's plans and decisions");
    }
    void* record = calloc(1, size);
    if (!record) die("out of memory keeping cuDNN's plans and decisions");
    memcpy(record, key, key_size);
    kept->records[kept->n++] = record;
    *made = 1;
    return record;
}

// ---- plans, one per geometry and direction, kept ----
#define MAX_CONFIGS 16
typedef struct {
    Geometry x;
    int backward;
} PlanKey;
typedef struct {
    PlanKey key;
    Graph graph;     // the descriptors, kept alive with the plan
    Desc plan;       // NULL where none could be made
    int64_t workspace;
    int64_t engine;  // cuDNN's global index of the engine that runs it
    char why[320];   // why not, where plan is NULL
} Plan;

static const Plan* plan_for(const Geometry* x, int backward) {
    static Kept plans;
    PlanKey key;
    memset(&key, 0, sizeof(key));
    memcpy(&key.x, x, sizeof(*x));
    key.backward = backward;
    int made;
    Plan* p = (Plan*)kept_record(&plans, &key, sizeof(key), sizeof(Plan), &made);
    if (!made) return p;
    Graph* g = &p->graph;
    g->next_virtual = VIRTUAL;
    if (backward) graph_backward(g, x);
    else graph_forward(g, x);
    Desc configs[MAX_CONFIGS];
    int64_t count = engine_configs(g, dnn.device, configs, MAX_CONFIGS);
    if (count == 0) snprintf(g->why, sizeof(g->why), "cuDNN's heuristics offer no engine for this graph");
    for (int64_t i = 0; i < count && !p->plan; i++) {
        p->plan = finalized_plan(g, configs[i], dnn.device);
        if (!p->plan) continue;
        int64_t n = 0;
        dnn.GetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &p->workspace);
        Desc engine = NULL;
        p->engine = -1;
        if (dnn.CreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) == CUDNN_STATUS_SUCCESS) {
            if (dnn.GetAttribute(configs[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine) == CUDNN_STATUS_SUCCESS)
                dnn.GetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &p->engine);
            dnn.DestroyDescriptor(engine);
        }
    }
    if (!p->plan) {
        snprintf(p->why, sizeof(p->why), "%s", g->why[0] ? g->why : "no plan");
        graph_free(g);
    }
    return p;
}

// ---- which calls take the graphs ----
// The bf16 copy's row: qkv's columns, padded to a multiple of 8 so that every row starts on a
// 16-byte boundary (DIFF V2's H lambda columns make qkv's own width odd)
static int padded_width(const AttnShape* s) { return (attention_qkv_width(s) + 7) / 8 * 8; }

// The geometry of map m of s, or why s cannot take the graphs
static const char* geometry_of(const AttnShape* s, int m, Geometry* x) {
    if (s->quant.bits) return "quantized logits";
    if (s->q0) return "decoding (rows after cached ones)";
    if (s->integral) return "DINT's integral term";
    int QKV = padded_width(s), Dv = attention_value_width(s);
    x->B = s->B, x->H = s->H, x->T = s->T, x->D = s->D, x->Dv = Dv, x->QKV = QKV;
    int q0 = attention_q_col(s, 0, m), k0 = attention_k_col(s, 0, m), v0 = attention_v_col(s, 0, m);
    x->hq = s->H > 1 ? attention_q_col(s, 1, m) - q0 : s->D;
    x->hk = s->H > 1 ? attention_k_col(s, 1, m) - k0 : s->D;
    x->hv = s->H > 1 ? attention_v_col(s, 1, m) - v0 : Dv;
    for (int h = 0; h < s->H; h++) {
        if (attention_q_col(s, h, m) != q0 + h * x->hq || attention_k_col(s, h, m) != k0 + h * x->hk ||
            attention_v_col(s, h, m) != v0 + h * x->hv)
            return "a map's sub-heads are not one stride apart (shared noise maps, GDA's groups, DIFF V2's halves pairing)";
    }
    // 16-byte aligned bf16 operands: every column offset and stride a multiple of 8 elements
    if (s->D % 8 || QKV % 8 || q0 % 8 || k0 % 8 || v0 % 8 || x->hq % 8 || x->hk % 8 || x->hv % 8)
        return "columns not on 16-byte boundaries (head width not a multiple of 8)";
    return NULL;
}

static const char* agreement(const AttnShape* s, const Plan* const* fwd, const Plan* const* bwd, int with_backward);

// Why s does not take the graphs, or NULL when it does:
// plans for every map made (or found made), in both directions where training needs its
// backward (a forward whose backward recomputes on the kernels would see other statistics), and
// their results in agreement with the kernels'
static const char* fallback_reason(const AttnShape* s, const Plan** fwd, const Plan** bwd, int with_backward) {
    const char* missing = cudnn_open();
    if (missing) return missing;
    if (!dnn.handle) {
        if (dnn.Create(&dnn.handle) != CUDNN_STATUS_SUCCESS) return "cudnnCreate failed";
        const char* why = device_properties(&dnn.device, NULL);
        if (why) return why;
    }
    for (int m = 0; m < s->M; m++) {
        Geometry x;
        memset(&x, 0, sizeof(x));
        const char* why = geometry_of(s, m, &x);
        if (why) return why;
        fwd[m] = plan_for(&x, 0);
        if (!fwd[m]->plan) return fwd[m]->why;
        if (!with_backward) continue;
        bwd[m] = plan_for(&x, 1);
        if (!bwd[m]->plan) return bwd[m]->why;
    }
    return agreement(s, fwd, bwd, with_backward);
}

// Each shape and kind of call (training, or forward only) is decided once, in bf16: its plans,
// or why another path runs it
typedef struct {
    AttnShape s;
    int with_backward;
} DecisionKey;
typedef struct {
    DecisionKey key;
    const Plan *fwd[2], *bwd[2];
    char why[900];  // "" where the graphs run it
    int said;       // its path told on stderr
} Decision;

static Decision* decision_for(const AttnShape* s, int with_backward) {
    static Kept decisions;
    DecisionKey key;
    memset(&key, 0, sizeof(key));
    memcpy(&key.s, s, sizeof(*s));
    key.with_backward = with_backward;
    int made;
    Decision* d = (Decision*)kept_record(&decisions, &key, sizeof(key), sizeof(Decision), &made);
    if (!made) return d;
    const char* why = fallback_reason(s, d->fwd, d->bwd, with_backward);
    snprintf(d->why, sizeof(d->why), "%s", why ? why : "");
    return d;
}

// The graphs' plans for s into fwd and bwd, saying once per shape and kind of call where the
// graphs take it; NULL, or why they do not
static const char* decide(const AttnShape* s, const Plan** fwd, const Plan** bwd, int with_backward) {
    Decision* d = decision_for(s, with_backward);
    const char* calls = with_backward ? "training" : "forward only";
    if (!d->said && !d->why[0]) {
        fprintf(stderr, "attention B=%d T=%d H=%d D=%d, %d map(s), %s: cuDNN %zu fused graphs (engine %lld forward%s%lld)\n", s->B,
                s->T, s->H, s->D, s->M, calls, dnn.version, (long long)d->fwd[0]->engine, with_backward ? ", backward " : "",
                with_backward ? (long long)d->bwd[0]->engine : 0LL);
    }
    d->said = 1;
    memcpy(fwd, d->fwd, sizeof(d->fwd));
    memcpy(bwd, d->bwd, sizeof(d->bwd));
    return d->why[0] ? d->why : NULL;
}

const char* cudnn_attention_refusal(const AttnShape* s) {
    const Decision* d = decision_for(s, 1);
    return d->why[0] ? d->why : NULL;
}

// ---- the kernels around the graphs ----
// rows (N, QKV) into rows QKVp apart, the padding zero
__global__ void rows_to_bf16_kernel(__nv_bfloat16* out, const float* qkv, size_t N, int QKV, int QKVp) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * QKVp) return;
    size_t n = i / QKVp;
    int c = (int)(i % QKVp);
    out[i] = __float2bfloat16_rn(c < QKV ? qkv[n * QKV + c] : 0.0f);
}

// dO of map 1: -lambda dy, lambda per layer (lam_col < 0) or per token and head (qkv's column)
__global__ void scaled_grad_kernel(__nv_bfloat16* out, const float* dy, const float* lambda, const float* qkv, int lam_col, int QKV,
                                   size_t N, int H, int Dv) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * H * Dv) return;
    size_t n = i / ((size_t)H * Dv);
    int h = (int)(i / Dv % H);
    float lam = lam_col < 0 ? *lambda : qkv[n * QKV + lam_col + h];
    out[i] = __float2bfloat16_rn(-lam * dy[i]);
}

// y = O_0 - lambda O_1 (O_1 NULL: y = O_0)
__global__ void combine_kernel(float* y, const __nv_bfloat16* o0, const __nv_bfloat16* o1, const float* lambda, const float* qkv, int lam_col, int QKV,
                               size_t N, int H, int Dv) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * H * Dv) return;
    float out = __bfloat162float(o0[i]);
    if (o1) {
        size_t n = i / ((size_t)H * Dv);
        int h = (int)(i / Dv % H);
        float lam = lam_col < 0 ? *lambda : qkv[n * QKV + lam_col + h];
        out -= lam * __bfloat162float(o1[i]);
    }
    y[i] = out;
}

// One thread per (token, head): -dy . O_1 of the row, into rows (N, H): DIFF V2's per-token
// lambda gradients, or the terms of the layer's dlambda
__global__ void lambda_rows_kernel(float* rows, const __nv_bfloat16* o, const float* dy, size_t N, int H, int Dv) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * H) return;
    float lam = 0.0f;
    for (int c = 0; c < Dv; c++) lam -= dy[i * Dv + c] * __bfloat162float(o[i * Dv + c]);
    rows[i] = lam;
}

// dqkv's columns col0 + h * stride + c of every row += src (N, H, W)
__global__ void add_heads_kernel(float* dqkv, const __nv_bfloat16* src, size_t N, int H, int W, int QKV, int col0, int stride) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * H * W) return;
    size_t n = i / ((size_t)H * W);
    int h = (int)(i / W % H), c = (int)(i % W);
    dqkv[n * QKV + col0 + (size_t)h * stride + c] += __bfloat162float(src[i]);
}

// per-token lambda gradients (N, H) into dqkv's lambda columns
__global__ void lambda_columns_kernel(float* dqkv, const float* rows, size_t N, int H, int QKV, int lam_col) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * H) return;
    dqkv[i / H * QKV + lam_col + i % H] = rows[i];
}

static const __nv_bfloat16* qkv_bf16(const float* qkv, const AttnShape* s) {
    size_t N = (size_t)s->B * s->T, n = N * padded_width(s);
    __nv_bfloat16* out = (__nv_bfloat16*)cuda_scratch(SCRATCH_CUDNN_QKV, n * sizeof(__nv_bfloat16));
    rows_to_bf16_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS>>>(out, qkv, N, attention_qkv_width(s), padded_width(s));
    cudaCheckLaunch();
    return out;
}

// lse (B, H, M, T) from each map's packed statistics (M, B, H, T)
__global__ void unpack_stats_kernel(float* lse, const float* packed, size_t rows, int M, int T) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // over (m, b h, t)
    if (i >= (size_t)M * rows) return;
    size_t m = i / rows, bh = i % rows / T, t = i % T;
    lse[(bh * M + m) * T + t] = packed[i];
}

// Map m's forward into o (B*T, H, Dv) and stats (B, H, T), packed as the frontend's; NULL, or why not
static const char* forward_map(const Plan* p, const AttnShape* s, int m, const __nv_bfloat16* qb, __nv_bfloat16* o, float* stats) {
    float scale = 1.0f / sqrtf((float)s->D), neg_inf = -INFINITY;
    void* pointers[] = {(void*)(qb + attention_q_col(s, 0, m)), (void*)(qb + attention_k_col(s, 0, m)), (void*)(qb + attention_v_col(s, 0, m)),
                        o, stats, &scale, &neg_inf};
    return run_plan(p->plan, p->workspace, FORWARD_UIDS, pointers, N_UIDS(FORWARD_UIDS));
}

// The forward on the graphs fwd (one per map): y (B*T, H*Dv) and, where lse is given, its
// statistics; NULL, or why not
static const char* graphs_forward(float* y, float* lse, const float* qkv, const float* lambda, const AttnShape* s, const Plan* const* fwd) {
    size_t N = (size_t)s->B * s->T, HDv = (size_t)s->H * attention_value_width(s);
    const __nv_bfloat16* qb = qkv_bf16(qkv, s);
    __nv_bfloat16* o = (__nv_bfloat16*)cuda_scratch(SCRATCH_CUDNN_O, 2 * N * HDv * sizeof(__nv_bfloat16));
    size_t rows = (size_t)s->B * s->H * s->T;
    float* stats = (float*)cuda_scratch(SCRATCH_CUDNN_ROWS, s->M * rows * sizeof(float));
    for (int m = 0; m < s->M; m++) {
        const char* why = forward_map(fwd[m], s, m, qb, o + m * N * HDv, stats + m * rows);
        if (why) return why;
    }
    if (lse) {
        unpack_stats_kernel<<<cuda_blocks(s->M * rows, CUDA_THREADS), CUDA_THREADS>>>(lse, stats, rows, s->M, s->T);
        cudaCheckLaunch();
    }
    int lam_col = s->token_lambda ? attention_lambda_offset(s) : -1;
    combine_kernel<<<cuda_blocks(N * HDv, CUDA_THREADS), CUDA_THREADS>>>(y, o, s->M == 2 ? o + N * HDv : NULL, lambda, qkv, lam_col,
                                                                         attention_qkv_width(s), N, s->H, attention_value_width(s));
    cudaCheckLaunch();
    return NULL;
}

// The backward on the graphs fwd and bwd: dqkv (B*T, QKV) and dlambda; NULL, or why not
static const char* graphs_backward(float* dqkv, float* dlambda, const float* dy, const float* qkv, const float* lambda, const AttnShape* s,
                                   const Plan* const* fwd, const Plan* const* bwd) {
    int QKV = attention_qkv_width(s), Dv = attention_value_width(s), H = s->H, D = s->D;
    size_t N = (size_t)s->B * s->T, HDv = (size_t)H * Dv, rows = (size_t)s->B * H * s->T;
    const __nv_bfloat16* qb = qkv_bf16(qkv, s);
    // the maps' outputs and statistics again: the backend contract keeps only lse
    __nv_bfloat16* o = (__nv_bfloat16*)cuda_scratch(SCRATCH_CUDNN_O, 2 * N * HDv * sizeof(__nv_bfloat16));
    float* buf = (float*)cuda_scratch(SCRATCH_CUDNN_ROWS, ((s->M + 1) * rows + N * H) * sizeof(float));
    float *stats = buf, *d_rows = buf + s->M * rows, *lam_rows = d_rows + rows;  // stats (M, B, H, T), D (B, H, T)
    for (int m = 0; m < s->M; m++) {
        const char* why = forward_map(fwd[m], s, m, qb, o + m * N * HDv, stats + m * rows);
        if (why) return why;
    }
    __nv_bfloat16* d_o = (__nv_bfloat16*)cuda_scratch(SCRATCH_CUDNN_DO, N * HDv * sizeof(__nv_bfloat16));
    __nv_bfloat16* dq = (__nv_bfloat16*)cuda_scratch(SCRATCH_CUDNN_GRADS, N * H * (2 * (size_t)D + Dv) * sizeof(__nv_bfloat16));
    __nv_bfloat16 *dk = dq + N * H * D, *dv = dk + N * H * D;
    int lam_col = s->token_lambda ? attention_lambda_offset(s) : -1;
    float scale = 1.0f / sqrtf((float)D), neg_inf = -INFINITY, unit = 1.0f;
    cudaCheck(cudaMemsetAsync(dqkv, 0, N * QKV * sizeof(float), 0));
    for (int m = 0; m < s->M; m++) {
        const __nv_bfloat16* om = o + m * N * HDv;
        if (m == 0) {
            cuda_round_bf16(d_o, dy, N * HDv);
        } else {
            scaled_grad_kernel<<<cuda_blocks(N * HDv, CUDA_THREADS), CUDA_THREADS>>>(d_o, dy, lambda, qkv, lam_col, QKV, N, H, Dv);
            cudaCheckLaunch();
        }
        if (m == 1) {
            lambda_rows_kernel<<<cuda_blocks(N * H, CUDA_THREADS), CUDA_THREADS>>>(lam_rows, om, dy, N, H, Dv);
            cudaCheckLaunch();
        }
        void* pointers[] = {(void*)(qb + attention_q_col(s, 0, m)), (void*)(qb + attention_k_col(s, 0, m)), (void*)(qb + attention_v_col(s, 0, m)),
                            (void*)om, d_o, stats + m * rows, dq, dk, dv, &scale, &neg_inf, &unit, d_rows};
        const char* why = run_plan(bwd[m]->plan, bwd[m]->workspace, BACKWARD_UIDS, pointers, N_UIDS(BACKWARD_UIDS));
        if (why) return why;
        add_heads_kernel<<<cuda_blocks(N * H * D, CUDA_THREADS), CUDA_THREADS>>>(dqkv, dq, N, H, D, QKV, attention_q_col(s, 0, m),
                                                                                 H > 1 ? attention_q_col(s, 1, m) - attention_q_col(s, 0, m) : D);
        add_heads_kernel<<<cuda_blocks(N * H * D, CUDA_THREADS), CUDA_THREADS>>>(dqkv, dk, N, H, D, QKV, attention_k_col(s, 0, m),
                                                                                 H > 1 ? attention_k_col(s, 1, m) - attention_k_col(s, 0, m) : D);
        add_heads_kernel<<<cuda_blocks(N * H * Dv, CUDA_THREADS), CUDA_THREADS>>>(dqkv, dv, N, H, Dv, QKV, attention_v_col(s, 0, m),
                                                                                  H > 1 ? attention_v_col(s, 1, m) - attention_v_col(s, 0, m) : Dv);
        cudaCheckLaunch();
    }
    if (s->M == 2 && lam_col >= 0) {
        lambda_columns_kernel<<<cuda_blocks(N * H, CUDA_THREADS), CUDA_THREADS>>>(dqkv, lam_rows, N, H, QKV, lam_col);
        cudaCheckLaunch();
    } else if (s->M == 2 && dlambda) {
        cuda_sum_fixed_order(dlambda, lam_rows, 1, N * H, N * H, 1.0f);
    }
    return NULL;
}

// ||a - b|| / ||b|| over n floats of device memory
static double relative_l2(const float* a, const float* b, size_t n) {
    float* host = (float*)malloc(2 * n * sizeof(float));
    if (!host) die("out of memory checking cuDNN's attention");
    cuda_download(host, a, n * sizeof(float));
    cuda_download(host + n, b, n * sizeof(float));
    double diff = 0, ref = 0;
    for (size_t i = 0; i < n; i++) diff += ((double)host[i] - host[n + i]) * ((double)host[i] - host[n + i]), ref += (double)host[n + i] * host[n + i];
    free(host);
    return sqrt(diff / ref);
}

// Each map's dQ, dK and dV of dqkv (N, QKV) against the reference's, relative L2 over the map's
// sub-heads' columns, as text: what a disagreement is made of
static void parts_text(char* out, size_t n, const float* dqkv, const float* ref, const AttnShape* s) {
    size_t N = (size_t)s->B * s->T, QKV = attention_qkv_width(s);
    float* host = (float*)malloc(2 * N * QKV * sizeof(float));
    if (!host) die("out of memory checking cuDNN's attention");
    cuda_download(host, dqkv, N * QKV * sizeof(float));
    cuda_download(host + N * QKV, ref, N * QKV * sizeof(float));
    out[0] = 0;
    static const char* const NAMES[3] = {"dQ", "dK", "dV"};
    for (int m = 0; m < s->M; m++) {
        for (int k = 0; k < 3; k++) {
            double diff = 0, size = 0;
            for (int h = 0; h < s->H; h++) {
                int col = k == 0 ? attention_q_col(s, h, m) : k == 1 ? attention_k_col(s, h, m) : attention_v_col(s, h, m);
                int width = k == 2 ? attention_value_width(s) : s->D;
                for (size_t r = 0; r < N; r++) {
                    for (int c = col; c < col + width; c++) {
                        double a = host[r * QKV + c], b = host[N * QKV + r * QKV + c];
                        diff += (a - b) * (a - b), size += b * b;
                    }
                }
            }
            snprintf(out + strlen(out), n - strlen(out), "%smap %d %s %.2g", m || k ? ", " : "", m, NAMES[k], sqrt(diff / (size + 1e-300)));
        }
    }
    free(host);
}

// The graphs against this backend's fp32 kernels on random qkv (and dy), lambda 0.5: NULL where
// y (and dqkv, dlambda) agree within 2e-2 relative L2, else why not, with each part's error (y,
// the statistics, each map's dQ, dK and dV, dlambda)
static const char* agreement(const AttnShape* s, const Plan* const* fwd, const Plan* const* bwd, int with_backward) {
    static char why[900];
    const double tolerance = 2e-2;
    size_t N = (size_t)s->B * s->T, QKV = attention_qkv_width(s), HDv = (size_t)s->H * attention_value_width(s);
    size_t lse_n = (size_t)s->B * s->H * s->M * s->T;
    size_t sizes[] = {N * QKV, HDv * N, 1, HDv * N, HDv * N, lse_n, lse_n, N * QKV, N * QKV, 1, 1};
    enum { QKV_IN, DY, LAMBDA, Y_REF, Y, LSE_REF, LSE, DQKV_REF, DQKV, DLAMBDA_REF, DLAMBDA, N_BUFFERS };
    float* b[N_BUFFERS];
    for (int i = 0; i < N_BUFFERS; i++) b[i] = (float*)cuda_alloc(sizes[i] * sizeof(float));
    cuda_fill(b[QKV_IN], N * QKV, 0x9e3779b9u);
    cuda_fill(b[DY], N * HDv, 0x85ebca6bu);
    float half = 0.5f;
    cuda_upload(b[LAMBDA], &half, sizeof(float));
    const char* failed = NULL;
    double e_y = 0, e_dqkv = 0, e_dlambda = 0, e_lse = 0;
    char parts[400] = "";
    cuda_attention_forward_kernels(b[Y_REF], NULL, b[LSE_REF], b[QKV_IN], b[LAMBDA], s);
    failed = graphs_forward(b[Y], b[LSE], b[QKV_IN], b[LAMBDA], s, fwd);
    if (!failed) e_y = relative_l2(b[Y], b[Y_REF], N * HDv);
    if (!failed) e_lse = relative_l2(b[LSE], b[LSE_REF], lse_n);
    if (!failed && with_backward) {
        cuda_attention_backward_kernels(b[DQKV_REF], b[DLAMBDA_REF], b[DY], NULL, b[QKV_IN], b[LSE_REF], b[LAMBDA], s);
        failed = graphs_backward(b[DQKV], b[DLAMBDA], b[DY], b[QKV_IN], b[LAMBDA], s, fwd, bwd);
        if (!failed) {
            e_dqkv = relative_l2(b[DQKV], b[DQKV_REF], N * QKV);
            parts_text(parts, sizeof(parts), b[DQKV], b[DQKV_REF], s);
            if (s->M == 2 && !s->token_lambda) e_dlambda = relative_l2(b[DLAMBDA], b[DLAMBDA_REF], 1);
        }
    }
    cudaCheck(cudaDeviceSynchronize());
    for (int i = 0; i < N_BUFFERS; i++) cuda_release(b[i]);
    if (failed) {
        snprintf(why, sizeof(why), "%s", failed);
        return why;
    }
    if (e_y <= tolerance && e_dqkv <= tolerance && e_dlambda <= tolerance) return NULL;
    snprintf(why, sizeof(why), "cuDNN's graphs disagree with this backend's kernels on random inputs: relative L2 y %.2g, lse %.2g", e_y,
             e_lse);
    if (with_backward)
        snprintf(why + strlen(why), sizeof(why) - strlen(why), ", dqkv %.2g (%s), dlambda %.2g (at most %.0e)", e_dqkv, parts, e_dlambda,
                 tolerance);
    return why;
}

// Takes the call to the graphs where s allows; 0 when another path is to run it
int cudnn_attention_forward(float* y, float* lse, const float* qkv, const float* lambda, const AttnShape* s) {
    const Plan *fwd[2], *bwd[2];
    if (decide(s, fwd, bwd, lse != NULL)) return 0;
    const char* why = graphs_forward(y, lse, qkv, lambda, s, fwd);
    if (why) die("cuDNN: %s", why);
    return 1;
}

int cudnn_attention_backward(float* dqkv, float* dlambda, const float* dy, const float* qkv, const float* lambda, const AttnShape* s) {
    const Plan *fwd[2], *bwd[2];
    if (decide(s, fwd, bwd, 1)) return 0;
    const char* why = graphs_backward(dqkv, dlambda, dy, qkv, lambda, s, fwd, bwd);
    if (why) die("cuDNN: %s", why);
    return 1;
}

// ---- without a GPU: the graphs against a described one ----
extern "C" int cudnn_attention_engines(const AttnShape* s, int backward, const char* device_json, const char** why) {
    static char reason[400];
    const char* missing = cudnn_open();
    if (missing) {
        snprintf(reason, sizeof(reason), "%s", missing);
        *why = reason;
        return -2;
    }
    Desc device;
    const char* bad = device_properties(&device, device_json);
    if (bad) {
        *why = bad;
        return -1;
    }
    int64_t total = 0;
    for (int m = 0; m < s->M; m++) {
        Geometry x;
        memset(&x, 0, sizeof(x));
        const char* not_graph = geometry_of(s, m, &x);
        if (not_graph) {
            snprintf(reason, sizeof(reason), "%s", not_graph);
            *why = reason;
            dnn.DestroyDescriptor(device);
            return -1;
        }
        Graph g;
        memset(&g, 0, sizeof(g));
        g.next_virtual = VIRTUAL;
        if (backward) graph_backward(&g, &x);
        else graph_forward(&g, &x);
        Desc configs[MAX_CONFIGS];
        int64_t count = engine_configs(&g, device, configs, MAX_CONFIGS);
        if (count < 0) {
            snprintf(reason, sizeof(reason), "%s", g.why);
            *why = reason;
            graph_free(&g);
            dnn.DestroyDescriptor(device);
            return -1;
        }
        total = m == 0 || count < total ? count : total;
        graph_free(&g);
    }
    dnn.DestroyDescriptor(device);
    *why = NULL;
    return (int)total;
}

extern "C" size_t cudnn_version(void) { return cudnn_open() ? 0 : dnn.version; }
