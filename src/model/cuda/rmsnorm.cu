// RMSNorm: the sum of squares in float64 as on the CPU (model::rmsnorm), so
// the norm itself adds no rounding difference. One warp per row for many
// rows; one block of 256 threads per row for a few (decoding: a lone warp
// walking a 4096-wide row took several µs a call).
#include "core/cuda/device.hpp"
#include "model/cuda/kernels.hpp"
#include "model/cuda/pdl.cuh"
#include "model/cuda/pointwise.cuh"
#include "model/cuda/reduce.cuh"

namespace cortiq::model::cuda {

namespace {

constexpr int kRowsPerBlock = 4;  // warps per block

__global__ void rmsnorm_kernel(const float* x, int64_t rows, int64_t n, const float* w, float eps,
                               float* y) {
    pdl_start();
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;  // whole warps leave; no block-wide sync below
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double ss = 0;
    for (int64_t j = lane; j < n; j += 32) ss += static_cast<double>(xr[j]) * xr[j];
    const float inv = rms_inv(warp_sum(ss), n, eps);
    // Each lane rewrites only what it read, so y may be x.
    for (int64_t j = lane; j < n; j += 32) yr[j] = w[j] * (xr[j] * inv);
}

constexpr int kFewRows = 64;  // at most this many rows: a block per row
constexpr int kRowThreads = 256;

__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_row_kernel(const float* x, int64_t n, const float* w, float eps, float* y) {
    __shared__ double scratch[32];
    pdl_start();
    const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
    float* yr = y + static_cast<int64_t>(blockIdx.x) * n;
    double ss = 0;
    for (int64_t j = threadIdx.x; j < n; j += kRowThreads) ss += static_cast<double>(xr[j]) * xr[j];
    const float inv = rms_inv(block_sum(ss, scratch), n, eps);
    for (int64_t j = threadIdx.x; j < n; j += kRowThreads) yr[j] = w[j] * (xr[j] * inv);
}

}  // namespace

void rmsnorm(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y,
             cudaStream_t stream) {
    if (rows == 0) return;
    if (rows <= kFewRows && n >= 1024) {
        launch_pdl(rmsnorm_row_kernel, dim3(static_cast<unsigned>(rows)), kRowThreads, 0, stream, x,
                   n, w, eps, y);
        return;
    }
    const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
    launch_pdl(rmsnorm_kernel, dim3(static_cast<unsigned>(blocks)), 32 * kRowsPerBlock, 0, stream,
               x, rows, n, w, eps, y);
}

}  // namespace cortiq::model::cuda
