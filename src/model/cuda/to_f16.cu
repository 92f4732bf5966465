// float32 → fp16 (round to nearest) for the dense fp16 runtime's GEMM inputs.
#include <algorithm>

#include "core/cuda/device.hpp"
#include "model/cuda/kernels.hpp"
#include "model/cuda/pdl.cuh"

namespace cortiq::model::cuda {

namespace {

__global__ void to_f16_kernel(const float* x, int64_t n, __half* y) {
    pdl_start();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] = __float2half_rn(x[i]);
}

}  // namespace

void to_f16(const float* x, int64_t n, __half* y, cudaStream_t stream) {
    if (n == 0) return;
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65536)));
    launch_pdl(to_f16_kernel, grid, 256, 0, stream, x, n, y);
}

}  // namespace cortiq::model::cuda
