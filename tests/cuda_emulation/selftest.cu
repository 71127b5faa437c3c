// The emulator's own test (run by tests/test_cuda_emulation.sh): `selftest ok` checks what the
// warp operations return and that launch limits are refused as a GPU refuses them; every
// other case is a kernel with one defect, which the emulator must report (the script checks
// the words of each report). Built only for the emulation; the CUDA backend's kernels are
// checked by the backend and device tests.
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "check.h"

#define FULL 0xffffffffu

static float* device_floats(size_t n) {
    void* p = NULL;
    if (cudaMallocAsync(&p, n * sizeof(float), 0) != cudaSuccess || cudaMemsetAsync(p, 0, n * sizeof(float), 0) != cudaSuccess) {
        fprintf(stderr, "selftest: cannot allocate\n");
        exit(2);
    }
    return (float*)p;
}

// out (32, 8): per lane, its value from each warp operation
__global__ void warp_ops_kernel(float* out) {
    int lane = threadIdx.x;
    float v = 10.0f * lane;
    float* o = out + lane * 8;
    o[0] = __shfl_sync(FULL, v, 3);
    o[1] = __shfl_xor_sync(FULL, v, 1);
    o[2] = __shfl_up_sync(FULL, v, 2);
    o[3] = __shfl_down_sync(FULL, v, 2);
    o[4] = (float)__popc(__ballot_sync(FULL, lane % 3 == 0));
    o[5] = (float)__all_sync(FULL, lane < 32);
    o[6] = (float)__any_sync(FULL, lane == 7);
    o[7] = __shfl_sync(FULL, v, lane + 1, 8);  // within segments of 8 lanes
}

// a block sum through shared memory: every thread's value and a tree with barriers
__global__ void block_sum_kernel(float* out) {
    __shared__ float part[256];
    part[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

__global__ void barrier_after_exit_kernel(float* out) {
    if (threadIdx.x >= 16) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

__global__ void shuffle_after_exit_kernel(float* out) {
    if (threadIdx.x == 5) return;
    out[threadIdx.x] = __shfl_sync(FULL, 1.0f * threadIdx.x, 0);
}

__global__ void deadlock_kernel(float* out) {
    float v = threadIdx.x;
    if (threadIdx.x < 16) {
        __syncthreads();
    } else {
        v = __shfl_sync(FULL, v, 0);
        __syncthreads();
    }
    out[threadIdx.x] = v;
}

__global__ void two_barriers_kernel(float* out) {
    if (threadIdx.x < 32) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1.0f;
}

__global__ void unwritten_shared_kernel(float* out) {
    __shared__ float s[64];
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = 2.0f * s[threadIdx.x + 32];  // only 32 threads wrote s
}

__global__ void out_of_bounds_kernel(float* out, int n) {
    out[threadIdx.x] = 1.0f;  // n + 1 threads
    (void)n;
}

__global__ void dynamic_shared_kernel(float* out) {
    extern __shared__ float smem[];
    smem[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = smem[threadIdx.x];
}

static void ok(void) {
    float* d = device_floats(32 * 8);
    warp_ops_kernel<<<1, 32>>>(d);
    CHECK(cudaGetLastError() == cudaSuccess, "warp_ops_kernel launches");
    float got[32 * 8];
    cudaMemcpy(got, d, sizeof(got), cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int l = 0; l < 32; l++) {
        const float* o = got + l * 8;
        float want[8] = {30.0f, 10.0f * (l ^ 1), 10.0f * (l >= 2 ? l - 2 : l), 10.0f * (l < 30 ? l + 2 : l), 11.0f, 1.0f, 1.0f,
                         10.0f * ((l & ~7) + ((l + 1) & 7))};
        for (int k = 0; k < 8; k++) {
            if (o[k] != want[k]) {
                if (bad++ < 5) printf("lane %d operation %d: %g, want %g\n", l, k, o[k], want[k]);
            }
        }
    }
    CHECK(bad == 0, "shuffles (index, xor, up, down, segments of 8), ballot, all and any give each lane its value (%d wrong)", bad);

    float* sums = device_floats(3);
    block_sum_kernel<<<3, 256>>>(sums);
    float s[3];
    cudaMemcpy(s, sums, sizeof(s), cudaMemcpyDeviceToHost);
    CHECK(s[0] == 32640.0f && s[1] == 32640.0f && s[2] == 32640.0f, "a block's tree sum through shared memory: %g %g %g (32640)", s[0],
          s[1], s[2]);

    // launch limits, refused as on a GPU: the error comes from cudaGetLastError and nothing runs
    block_sum_kernel<<<1, 2048>>>(sums);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "2048 threads per block: invalid configuration");
    block_sum_kernel<<<0, 32>>>(sums);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "an empty grid: invalid configuration");
    block_sum_kernel<<<dim3(1, 70000), 32>>>(sums);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "a grid of 70000 in y: invalid configuration");
    dynamic_shared_kernel<<<1, 32, 64 * 1024>>>(sums);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue, "64 KiB of dynamic shared memory without the opt-in: refused");
    CHECK(cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) == cudaSuccess,
          "the opt-in to 64 KiB is accepted");
    float* out = device_floats(32);
    dynamic_shared_kernel<<<1, 32, 64 * 1024>>>(out);
    CHECK(cudaGetLastError() == cudaSuccess, "and then the launch runs");
    CHECK(cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024) == cudaErrorInvalidValue,
          "an opt-in past 227 KiB is refused");
}

int main(int argc, char** argv) {
    const char* what = argc > 1 ? argv[1] : "ok";
    float* d = device_floats(64);
    if (strcmp(what, "ok") == 0) {
        ok();
        return check_summary();
    } else if (strcmp(what, "barrier_after_exit") == 0) {
        barrier_after_exit_kernel<<<1, 64>>>(d);
    } else if (strcmp(what, "shuffle_after_exit") == 0) {
        shuffle_after_exit_kernel<<<1, 32>>>(d);
    } else if (strcmp(what, "deadlock") == 0) {
        deadlock_kernel<<<1, 32>>>(d);
    } else if (strcmp(what, "two_barriers") == 0) {
        two_barriers_kernel<<<1, 64>>>(d);
    } else if (strcmp(what, "unwritten_shared") == 0) {
        unwritten_shared_kernel<<<1, 32>>>(d);
    } else if (strcmp(what, "out_of_bounds") == 0) {
        out_of_bounds_kernel<<<1, 65>>>(d, 64);
    } else if (strcmp(what, "batch_overlap") == 0) {
        // two entries of one batched product writing the same 2 x 2 output
        cublasHandle_t handle;
        cublasCreate(&handle);
        const float* a[2] = {d, d + 4};
        float* c[2] = {d + 8, d + 9};  // columns 2 apart (ldc 2) overlapping in one element
        const float** da = (const float**)device_floats(4);
        float** dc = (float**)device_floats(4);
        cudaMemcpy(da, a, sizeof(a), cudaMemcpyHostToDevice);
        cudaMemcpy(dc, c, sizeof(c), cudaMemcpyHostToDevice);
        const float one = 1.0f, zero = 0.0f;
        cublasSgemmBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, da, 2, da, 2, &zero, dc, 2, 2);
    } else if (strcmp(what, "host_pointer") == 0) {
        float host[64];
        out_of_bounds_kernel<<<1, 32>>>(host, 64);
    } else {
        fprintf(stderr, "selftest: no case '%s'\n", what);
        return 2;
    }
    printf("the defect was not reported\n");
    return 0;
}
