// The golden lowering of tests/golden/cudnn_sdpa_{forward,backward}.json: NVIDIA's
// cudnn-frontend (v1.18.0, headers only, not part of this project) lowers causal bf16 SDPA,
// forward and backward (deterministic), at the 124M standard shape with Q, K and V read in place
// from packed qkv rows, for an H200's description and without a GPU; cuDNN logs the operation
// graph it read. Not built by make; to regenerate, with the frontend's include/ at FE:
//   g++ -std=c++17 -I FE/include -I $CUDA_HOME/include tests/golden/frontend_sdpa.cpp -o fe_sdpa \
//       -L$CUDA_HOME/lib64 -lcudnn -lcudart
//   ln -s $CUDA_HOME/lib64/stubs/libcuda.so stub/libcuda.so.1
//   CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=backward.log LD_LIBRARY_PATH=stub ./fe_sdpa tests/gpus/h200.json backward
// and the first apiLog "operationGraph" whose finalizeMode is SDPA_BWD (SDPA_FWD) is the golden
// graph (docs/gpu.md).
#include <cstring>
#include <cudnn_frontend.h>
#include <fstream>
#include <iostream>
#include <sstream>
namespace fe = cudnn_frontend;
// No GPU here: the frontend's validation asks CUDA for the device, answered as an H200's
extern "C" cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
extern "C" cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    memset(p, 0, sizeof(*p));
    p->major = 9, p->minor = 0, p->multiProcessorCount = 132;
    p->sharedMemPerBlockOptin = 232448;
    return cudaSuccess;
}
int main(int argc, char** argv) {
    std::ifstream f(argv[1]);
    std::stringstream ss; ss << f.rdbuf();
    std::string json = ss.str();
    std::vector<uint8_t> buf(json.begin(), json.end());
    auto dp = std::make_shared<fe::DeviceProperties>();
    auto e = dp->deserialize(buf);
    if (e.is_bad()) { std::cerr << "deserialize: " << e.get_message() << "\n"; return 1; }
    int64_t B = 8, H = 12, T = 1024, D = 64, QKV = 2304, C = 768;
    bool backward = argc > 2 && std::string(argv[2]) == "backward";
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
    g->set_device_properties(dp);
    g->set_sm_version(90);
    g->set_sm_count(132);
    auto in = [&](const char* name, int64_t uid, std::vector<int64_t> stride) {
        return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({B, H, T, D}).set_stride(stride));
    };
    std::vector<int64_t> qkv_s = {T * QKV, D, QKV, 1}, o_s = {T * C, D, C, 1};
    auto Q = in("Q", 1, qkv_s), K = in("K", 2, qkv_s), V = in("V", 3, qkv_s);
    if (!backward) {
        auto opt = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(0.125f)
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
        auto [O, Stats] = g->sdpa(Q, K, V, opt);
        O->set_output(true).set_uid(4).set_dim({B, H, T, D}).set_stride(o_s);
        Stats->set_output(true).set_uid(5).set_data_type(fe::DataType_t::FLOAT).set_dim({B, H, T, 1}).set_stride({H * T, T, 1, 1});
    } else {
        auto O = in("O", 4, o_s), dO = in("dO", 101, o_s);
        auto Stats = g->tensor(fe::graph::Tensor_attributes().set_name("Stats").set_uid(5).set_dim({B, H, T, 1}).set_stride({H * T, T, 1, 1}).set_data_type(fe::DataType_t::FLOAT));
        auto opt = fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(0.125f).set_deterministic_algorithm(true)
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
        auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, Stats, opt);
        dQ->set_output(true).set_uid(102).set_dim({B, H, T, D}).set_stride(o_s);
        dK->set_output(true).set_uid(103).set_dim({B, H, T, D}).set_stride(o_s);
        dV->set_output(true).set_uid(104).set_dim({B, H, T, D}).set_stride(o_s);
    }
    e = g->validate();
    if (e.is_bad()) { std::cerr << "validate: " << e.get_message() << "\n"; return 1; }
    e = g->build_operation_graph();
    if (e.is_bad()) { std::cerr << "build_operation_graph: " << e.get_message() << "\n"; return 1; }
    e = g->create_execution_plans({fe::HeurMode_t::A});
    if (e.is_bad()) { std::cerr << "create_execution_plans: " << e.get_message() << "\n"; return 1; }
    int64_t n = 0;
    if (g->get_engine_count(n).is_bad()) return 1;
    std::cout << (backward ? "backward" : "forward") << ": engines " << n << "\n";
    return 0;
}
