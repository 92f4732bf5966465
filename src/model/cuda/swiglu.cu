// SwiGLU: gate ← silu(gate) ∘ up, in place (the gate buffer becomes
// down_proj's input).
#include <algorithm>

#include "core/cuda/device.hpp"
#include "model/cuda/kernels.hpp"
#include "model/cuda/pdl.cuh"
#include "model/cuda/pointwise.cuh"

namespace cortiq::model::cuda {

namespace {

__global__ void swiglu_kernel(float* gate, const float* up, int64_t n) {
    pdl_start();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        gate[i] = silu_times(gate[i], up[i]);
    }
}

}  // namespace

void swiglu(float* gate, const float* up, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    const int64_t blocks = std::min<int64_t>((n + 255) / 256, 65536);
    launch_pdl(swiglu_kernel, dim3(static_cast<unsigned>(blocks)), 256, 0, stream, gate, up, n);
}

}  // namespace cortiq::model::cuda
