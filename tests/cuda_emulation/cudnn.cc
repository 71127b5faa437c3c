// The cuDNN backend API subset of cudnn.h: descriptors keep their attributes; finalizing checks
// what the operations need; the heuristics offer one engine (index 0; none for a graph that writes
// a product to memory in fp32, as below) whose plan interprets the
// operation graph, an operation at a time in the order given, in fp32 (matmuls accumulate in
// double), storing each result in its tensor's type. A tensor the variant pack binds is read
// and written through its pointer and strides, so a stride that leaves its allocation stops at
// the emulator's guard page, named as this call's.
#include "cudnn.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <vector>

#include "cuda_bf16.h"

extern const char* host_call;  // emulator.cc: the host call a fault report names

struct EmuDescriptor {
    cudnnBackendDescriptorType_t type;
    bool finalized = false;
    struct Attribute {
        cudnnBackendAttributeType_t type;
        std::vector<uint8_t> bytes;
        int64_t count;
    };
    std::map<int, Attribute> attributes;
    EmuDescriptor* graph = nullptr;  // an engine configuration's and a plan's operation graph
};

static char last_error[256];

static cudnnStatus_t error(cudnnStatus_t status, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    return status;
}

static size_t type_size(cudnnBackendAttributeType_t type) {
    switch (type) {
        case CUDNN_TYPE_INT64: return 8;
        case CUDNN_TYPE_FLOAT: return 4;
        case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
        case CUDNN_TYPE_CHAR: return 1;
        case CUDNN_TYPE_HANDLE: case CUDNN_TYPE_VOID_PTR: case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(void*);
        default: return 4;  // the enums
    }
}

extern "C" {
size_t cudnnGetVersion(void) { return 91900; }

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
    static char the_handle;
    *handle = (cudnnHandle_t)&the_handle;
    return CUDNN_STATUS_SUCCESS;
}

void cudnnGetLastErrorString(char* message, size_t max_size) { snprintf(message, max_size, "%s", last_error); }

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* descriptor) {
    *descriptor = new EmuDescriptor;
    (*descriptor)->type = type;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
    delete descriptor;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                                       int64_t count, const void* elements) {
    if (!d || d->finalized) return error(CUDNN_STATUS_BAD_PARAM, "attribute %d set on a finalized descriptor", (int)name);
    EmuDescriptor::Attribute a{type, std::vector<uint8_t>((const uint8_t*)elements, (const uint8_t*)elements + count * type_size(type)), count};
    d->attributes[name] = a;
    return CUDNN_STATUS_SUCCESS;
}
}

template <typename T>
static T attribute(const EmuDescriptor* d, int name, int64_t i = 0) {
    auto it = d->attributes.find(name);
    if (it == d->attributes.end() || i >= it->second.count) return T();
    T out;
    memcpy(&out, it->second.bytes.data() + i * sizeof(T), sizeof(T));
    return out;
}
static bool has(const EmuDescriptor* d, int name) { return d->attributes.count(name) != 0; }

extern "C" {
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t d) {
    switch (d->type) {
        case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
            if (!has(d, CUDNN_ATTR_TENSOR_DIMENSIONS) || !has(d, CUDNN_ATTR_TENSOR_STRIDES) || !has(d, CUDNN_ATTR_TENSOR_UNIQUE_ID))
                return error(CUDNN_STATUS_BAD_PARAM, "a tensor without dimensions, strides or id");
            if (d->attributes[CUDNN_ATTR_TENSOR_DIMENSIONS].count != 4 || d->attributes[CUDNN_ATTR_TENSOR_STRIDES].count != 4)
                return error(CUDNN_STATUS_NOT_SUPPORTED, "the emulation interprets 4-D tensors only");
            break;
        case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
            EmuDescriptor* config = attribute<EmuDescriptor*>(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
            if (!config || !config->graph) return error(CUDNN_STATUS_BAD_PARAM, "a plan without an engine configuration");
            d->graph = config->graph;
            break;
        }
        default: break;
    }
    d->finalized = true;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                                       int64_t requested, int64_t* count, void* elements) {
    (void)type;
    if (!d->finalized) return error(CUDNN_STATUS_BAD_PARAM, "attribute %d read before finalizing", (int)name);
    if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {  // one engine configuration, on the heuristics' graph
        // none where a product is written to memory in fp32: on an H200 cuDNN's fused attention
        // engine gave a wrong O declared fp32 (relative L2 1.2) and the right one declared bf16
        const EmuDescriptor* graph = attribute<EmuDescriptor*>(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
        for (int64_t i = 0; i < graph->attributes.at(CUDNN_ATTR_OPERATIONGRAPH_OPS).count; i++) {
            const EmuDescriptor* op = attribute<EmuDescriptor*>(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, i);
            if (op->type != CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) continue;
            const EmuDescriptor* c = attribute<EmuDescriptor*>(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC);
            if (!attribute<bool>(c, CUDNN_ATTR_TENSOR_IS_VIRTUAL) && attribute<cudnnDataType_t>(c, CUDNN_ATTR_TENSOR_DATA_TYPE) != CUDNN_DATA_BFLOAT16) {
                *count = 0;
                return CUDNN_STATUS_SUCCESS;
            }
        }
        *count = 1;
        if (requested >= 1) {
            EmuDescriptor* config = ((EmuDescriptor**)elements)[0];
            config->graph = attribute<EmuDescriptor*>(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
            config->finalized = true;
        }
        return CUDNN_STATUS_SUCCESS;
    }
    if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE || name == CUDNN_ATTR_ENGINE_GLOBAL_INDEX) {
        *count = 1;
        *(int64_t*)elements = 0;
        return CUDNN_STATUS_SUCCESS;
    }
    if (name == CUDNN_ATTR_ENGINECFG_ENGINE) {
        *count = 1;
        ((EmuDescriptor**)elements)[0]->finalized = true;
        return CUDNN_STATUS_SUCCESS;
    }
    return error(CUDNN_STATUS_NOT_SUPPORTED, "attribute %d is not read in the emulation", (int)name);
}
}

// ---- the interpreter ----
struct Tensor {
    cudnnDataType_t type;
    int64_t dims[4], strides[4];
    char* data;   // bound memory, or the storage of a virtual tensor
    std::vector<float> own;  // a virtual tensor's values (packed by its strides)
};

static float load(const Tensor& t, const int64_t* at) {
    int64_t offset = 0;
    for (int i = 0; i < 4; i++) offset += (t.dims[i] == 1 ? 0 : at[i]) * t.strides[i];
    if (!t.own.empty()) return t.own[offset];
    switch (t.type) {
        case CUDNN_DATA_BFLOAT16: return __bfloat162float(((const __nv_bfloat16*)t.data)[offset]);
        case CUDNN_DATA_INT32: return (float)((const int32_t*)t.data)[offset];
        default: return ((const float*)t.data)[offset];
    }
}

// v into t's element at offset (elements from its start), rounded to t's type
static void store_at(Tensor& t, int64_t offset, float v) {
    if (t.type == CUDNN_DATA_BFLOAT16) v = __bfloat162float(__float2bfloat16_rn(v));
    if (t.type == CUDNN_DATA_BOOLEAN) v = v != 0.0f;
    if (!t.own.empty()) t.own[offset] = v;
    else if (t.type == CUDNN_DATA_BFLOAT16) ((__nv_bfloat16*)t.data)[offset] = __float2bfloat16_rn(v);
    else if (t.type == CUDNN_DATA_INT32) ((int32_t*)t.data)[offset] = (int32_t)v;
    else ((float*)t.data)[offset] = v;
}

static int64_t offset_of(const Tensor& t, const int64_t* at) {
    int64_t offset = 0;
    for (int i = 0; i < 4; i++) offset += at[i] * t.strides[i];
    return offset;
}

static void store(Tensor& t, const int64_t* at, float v) { store_at(t, offset_of(t, at), v); }

// every index of dims, in order, as a[4]
template <typename F>
static void each(const int64_t* dims, F f) {
    int64_t a[4];
    for (a[0] = 0; a[0] < dims[0]; a[0]++)
        for (a[1] = 0; a[1] < dims[1]; a[1]++)
            for (a[2] = 0; a[2] < dims[2]; a[2]++)
                for (a[3] = 0; a[3] < dims[3]; a[3]++) f(a);
}

typedef std::map<int64_t, Tensor> Tensors;

static Tensor& tensor_of(Tensors& tensors, const EmuDescriptor* d, const std::map<int64_t, void*>& bound) {
    int64_t uid = attribute<int64_t>(d, CUDNN_ATTR_TENSOR_UNIQUE_ID);
    auto it = tensors.find(uid);
    if (it != tensors.end()) return it->second;
    Tensor& t = tensors[uid];
    t.type = attribute<cudnnDataType_t>(d, CUDNN_ATTR_TENSOR_DATA_TYPE);
    int64_t span = 1;
    for (int i = 0; i < 4; i++) {
        t.dims[i] = attribute<int64_t>(d, CUDNN_ATTR_TENSOR_DIMENSIONS, i);
        t.strides[i] = attribute<int64_t>(d, CUDNN_ATTR_TENSOR_STRIDES, i);
        span += (t.dims[i] - 1) * t.strides[i];
    }
    if (attribute<bool>(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL)) {
        // A virtual tensor whose declared strides overlap (NVIDIA's frontend declares dO * O of the
        // backward with rows H Dv apart in a (B, H, T, Dv) tensor) is never laid out in memory by
        // cuDNN: the emulation stores it packed, so that its elements stay apart (a stride of 0,
        // a head shared by broadcast, is kept)
        int order[4] = {0, 1, 2, 3};
        std::sort(order, order + 4, [&](int a, int b) { return t.strides[a] < t.strides[b]; });
        bool overlap = false;
        int64_t reach = 1;  // elements the smaller strides' dimensions cover
        for (int k = 0; k < 4; k++) {
            int i = order[k];
            if (t.dims[i] == 1 || t.strides[i] == 0) continue;  // a stride of 0 broadcasts, by intent
            overlap |= t.strides[i] < reach;
            reach = t.strides[i] * t.dims[i];
        }
        if (overlap) {
            span = 1;
            for (int i = 3; i >= 0; i--) t.strides[i] = span, span *= t.dims[i];
        }
        t.own.assign(span, 0.0f);
        t.data = nullptr;
    } else {
        auto b = bound.find(uid);
        if (b == bound.end()) {
            fprintf(stderr, "cudnnBackendExecute: tensor %lld has no pointer in the variant pack\n", (long long)uid);
            abort();
        }
        t.data = (char*)b->second;
        if (attribute<bool>(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE)) {  // a host scalar, read once
            t.own.assign(1, *(const float*)t.data);
            for (int i = 0; i < 4; i++) t.strides[i] = 0;
        }
    }
    return t;
}

static void run_pointwise(Tensors& tensors, const EmuDescriptor* op, const std::map<int64_t, void*>& bound) {
    const EmuDescriptor* pw = attribute<EmuDescriptor*>(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
    cudnnPointwiseMode_t mode = attribute<cudnnPointwiseMode_t>(pw, CUDNN_ATTR_POINTWISE_MODE);
    int64_t axis = attribute<int64_t>(pw, CUDNN_ATTR_POINTWISE_AXIS);
    Tensor& x = tensor_of(tensors, attribute<EmuDescriptor*>(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC), bound);
    EmuDescriptor *bd = attribute<EmuDescriptor*>(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC),
                  *td = attribute<EmuDescriptor*>(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC);
    Tensor* b = bd ? &tensor_of(tensors, bd, bound) : nullptr;
    Tensor* t = td ? &tensor_of(tensors, td, bound) : nullptr;
    Tensor& y = tensor_of(tensors, attribute<EmuDescriptor*>(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC), bound);
    each(y.dims, [&](const int64_t* at) {
        float a = mode == CUDNN_POINTWISE_GEN_INDEX ? (float)at[axis] : load(x, at), bv = b ? load(*b, at) : 0.0f, v;
        switch (mode) {
            case CUDNN_POINTWISE_ADD: v = a + bv; break;
            case CUDNN_POINTWISE_MUL: v = a * bv; break;
            case CUDNN_POINTWISE_DIV: v = a / bv; break;
            case CUDNN_POINTWISE_SUB: v = a - bv; break;
            case CUDNN_POINTWISE_EXP: v = expf(a); break;
            case CUDNN_POINTWISE_LOG: v = logf(a); break;
            case CUDNN_POINTWISE_CMP_GT: v = a > bv; break;
            case CUDNN_POINTWISE_CMP_GE: v = a >= bv; break;
            case CUDNN_POINTWISE_GEN_INDEX: v = a; break;
            case CUDNN_POINTWISE_BINARY_SELECT: v = load(*t, at) != 0.0f ? a : bv; break;
            default: fprintf(stderr, "cudnnBackendExecute: pointwise mode %d is not emulated\n", (int)mode); abort();
        }
        store(y, at, v);
    });
}

static void run_reduction(Tensors& tensors, const EmuDescriptor* op, const std::map<int64_t, void*>& bound) {
    const EmuDescriptor* r = attribute<EmuDescriptor*>(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC);
    bool max = attribute<cudnnReduceTensorOp_t>(r, CUDNN_ATTR_REDUCTION_OPERATOR) == CUDNN_REDUCE_TENSOR_MAX;
    Tensor& x = tensor_of(tensors, attribute<EmuDescriptor*>(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC), bound);
    Tensor& y = tensor_of(tensors, attribute<EmuDescriptor*>(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC), bound);
    std::vector<double> acc(y.dims[0] * y.dims[1] * y.dims[2] * y.dims[3], max ? -INFINITY : 0.0);  // by y's flat index
    each(x.dims, [&](const int64_t* at) {
        int64_t to = 0;
        for (int i = 0; i < 4; i++) to = to * y.dims[i] + (y.dims[i] == 1 ? 0 : at[i]);
        double v = load(x, at);
        acc[to] = max ? fmax(acc[to], v) : acc[to] + v;
    });
    each(y.dims, [&](const int64_t* at) {
        int64_t to = 0;
        for (int i = 0; i < 4; i++) to = to * y.dims[i] + at[i];
        store(y, at, (float)acc[to]);
    });
}

static void run_matmul(Tensors& tensors, const EmuDescriptor* op, const std::map<int64_t, void*>& bound) {
    Tensor& a = tensor_of(tensors, attribute<EmuDescriptor*>(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC), bound);
    Tensor& b = tensor_of(tensors, attribute<EmuDescriptor*>(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC), bound);
    Tensor& c = tensor_of(tensors, attribute<EmuDescriptor*>(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC), bound);
    int64_t K = a.dims[3];
    if (b.dims[2] != K || c.dims[2] != a.dims[2] || c.dims[3] != b.dims[3]) {
        fprintf(stderr, "cudnnBackendExecute: matmul of (%lld x %lld) and (%lld x %lld) into (%lld x %lld)\n", (long long)a.dims[2],
                (long long)K, (long long)b.dims[2], (long long)b.dims[3], (long long)c.dims[2], (long long)c.dims[3]);
        abort();
    }
    each(c.dims, [&](const int64_t* at) {
        double sum = 0;
        int64_t ia[4] = {at[0], at[1], at[2], 0}, ib[4] = {at[0], at[1], 0, at[3]};
        for (int64_t k = 0; k < K; k++) {
            ia[3] = k;
            ib[2] = k;
            sum += (double)load(a, ia) * load(b, ib);
        }
        store(c, at, (float)sum);
    });
}

// y views x's memory under its own dimensions and strides: each element of x goes to the same
// offset in y (a transpose where y's strides are x's swapped), converted to y's type
static void run_reshape(Tensors& tensors, const EmuDescriptor* op, const std::map<int64_t, void*>& bound) {
    Tensor& x = tensor_of(tensors, attribute<EmuDescriptor*>(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC), bound);
    Tensor& y = tensor_of(tensors, attribute<EmuDescriptor*>(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC), bound);
    int64_t x_span = 1, y_span = 1;
    for (int i = 0; i < 4; i++) x_span *= x.dims[i], y_span *= y.dims[i];
    if (x_span != y_span) {
        fprintf(stderr, "cudnnBackendExecute: a reshape of %lld elements into %lld\n", (long long)x_span, (long long)y_span);
        abort();
    }
    if (!y.own.empty()) {  // a virtual y spans what x's offsets reach
        int64_t reach = 1;
        for (int i = 0; i < 4; i++) reach += (x.dims[i] - 1) * x.strides[i];
        if ((int64_t)y.own.size() < reach) y.own.resize(reach);
    }
    each(x.dims, [&](const int64_t* at) { store_at(y, offset_of(x, at), load(x, at)); });
}

extern "C" cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack) {
    if (!handle || !plan->finalized || !pack->finalized) return error(CUDNN_STATUS_BAD_PARAM, "execute before finalizing");
    std::map<int64_t, void*> bound;
    int64_t n = pack->attributes[CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS].count;
    if (n != pack->attributes[CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS].count) return error(CUDNN_STATUS_BAD_PARAM, "ids and pointers differ in number");
    for (int64_t i = 0; i < n; i++)
        bound[attribute<int64_t>(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, i)] = attribute<void*>(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, i);
    const EmuDescriptor* graph = plan->graph;
    Tensors tensors;
    host_call = "cudnnBackendExecute";
    for (int64_t i = 0; i < graph->attributes.at(CUDNN_ATTR_OPERATIONGRAPH_OPS).count; i++) {
        const EmuDescriptor* op = attribute<EmuDescriptor*>(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, i);
        switch (op->type) {
            case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: run_pointwise(tensors, op, bound); break;
            case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: run_reduction(tensors, op, bound); break;
            case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: run_matmul(tensors, op, bound); break;
            case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: run_reshape(tensors, op, bound); break;
            default: host_call = nullptr; return error(CUDNN_STATUS_NOT_SUPPORTED, "operation type %d is not emulated", (int)op->type);
        }
    }
    host_call = nullptr;
    return CUDNN_STATUS_SUCCESS;
}
