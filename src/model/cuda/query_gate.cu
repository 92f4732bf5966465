// Qwen3.5's q_proj output split into the query and the output gate, per head
// (model::split_query_gate): [query_h | gate_h] → q, gate.
#include <algorithm>

#include "core/cuda/device.hpp"
#include "model/cuda/kernels.hpp"

namespace cortiq::model::cuda {

namespace {

// One thread per output value (row, head, j < d), written to q and gate.
__global__ void split_query_gate_kernel(const float* qg, int64_t total, int64_t d, float* q,
                                        float* gate) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t rh = i / d, j = i % d;  // rh = row · heads + head
        const float* src = qg + rh * 2 * d;
        q[i] = src[j];
        gate[i] = src[d + j];
    }
}

}  // namespace

void split_query_gate(const float* qg, int64_t rows, int64_t heads, int64_t d, float* q,
                      float* gate, cudaStream_t stream) {
    const int64_t total = rows * heads * d;
    if (total == 0) return;
    const int64_t blocks = std::min<int64_t>((total + 255) / 256, 65536);
    split_query_gate_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(qg, total, d, q,
                                                                               gate);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
