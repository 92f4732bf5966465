// Qwen3.5's gated RMSNorm (model::rmsnorm_gated), one warp per row: the sum
// of squares in float64 as on the CPU, then y = w ∘ (x / rms) ∘ silu(z). The
// weight is w itself (not 1 + w: the loader keeps it as stored).
#include "core/cuda/device.hpp"
#include "model/cuda/kernels.hpp"
#include "model/cuda/reduce.cuh"

namespace cortiq::model::cuda {

namespace {

constexpr int kRowsPerBlock = 4;  // warps per block

__global__ void rmsnorm_gated_kernel(const float* x, const float* z, int64_t rows, int64_t n,
                                     const float* w, float eps, float* y) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;  // whole warps leave; no block-wide sync below
    const float* xr = x + r * n;
    const float* zr = z + r * n;
    float* yr = y + r * n;
    double ss = 0;
    for (int64_t j = lane; j < n; j += 32) ss += static_cast<double>(xr[j]) * xr[j];
    ss = warp_sum(ss);
    const float inv = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(n) + eps));
    for (int64_t j = lane; j < n; j += 32) {            // each lane rewrites only what it read
        const float s = zr[j] / (1.0f + expf(-zr[j]));  // silu
        yr[j] = w[j] * (xr[j] * inv) * s;
    }
}

}  // namespace

void rmsnorm_gated(const float* x, const float* z, int64_t rows, int64_t n, const float* w,
                   float eps, float* y, cudaStream_t stream) {
    if (rows == 0) return;
    const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
    rmsnorm_gated_kernel<<<static_cast<unsigned>(blocks), 32 * kRowsPerBlock, 0, stream>>>(
        x, z, rows, n, w, eps, y);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
