// Bias add after a cuBLAS GEMM (cuBLAS has no broadcast epilogue in its
// plain sgemm). Residual adds need no kernel: o_proj and down_proj
// accumulate into the residual stream with beta = 1.
#include <algorithm>

#include "core/cuda/device.hpp"
#include "model/cuda/kernels.hpp"

namespace cortiq::model::cuda {

namespace {

__global__ void add_bias_kernel(float* y, const float* b, int64_t rows, int64_t m) {
    const int64_t n = rows * m;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] += b[i % m];
}

}  // namespace

void add_bias(float* y, const float* b, int64_t rows, int64_t m, cudaStream_t stream) {
    const int64_t n = rows * m;
    if (n == 0) return;
    const int64_t blocks = std::min<int64_t>((n + 255) / 256, 65536);
    add_bias_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(y, b, rows, m);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
