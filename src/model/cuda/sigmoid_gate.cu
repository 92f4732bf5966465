// The attention output gate of Qwen3.5: x ← x ∘ σ(gate), in place
// (model::sigmoid_gate computes x / (1 + e^−gate) the same way).
#include <algorithm>

#include "core/cuda/device.hpp"
#include "model/cuda/kernels.hpp"

namespace cortiq::model::cuda {

namespace {

__global__ void sigmoid_gate_kernel(float* x, const float* gate, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        x[i] = x[i] / (1.0f + expf(-gate[i]));
}

}  // namespace

void sigmoid_gate(float* x, const float* gate, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    const int64_t blocks = std::min<int64_t>((n + 255) / 256, 65536);
    sigmoid_gate_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(x, gate, n);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
