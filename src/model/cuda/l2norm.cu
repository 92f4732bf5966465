// Per-head L2 normalisation of the DeltaNet's q and k (model::l2norm_heads),
// one warp per (row, head): the sum of squares in float64 as on the CPU.
#include "core/cuda/device.hpp"
#include "model/cuda/kernels.hpp"
#include "model/cuda/reduce.cuh"

namespace cortiq::model::cuda {

namespace {

constexpr int kWarps = 4;  // (row, head) pairs per block

__global__ void l2norm_heads_kernel(float* x, int64_t pairs, int64_t ld, int64_t heads, int64_t d,
                                    float eps) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (i >= pairs) return;  // whole warps leave
    float* p = x + (i / heads) * ld + (i % heads) * d;
    double ss = 0;
    for (int64_t j = lane; j < d; j += 32) ss += static_cast<double>(p[j]) * p[j];
    ss = warp_sum(ss);
    const float inv = static_cast<float>(1.0 / sqrt(ss + eps));
    for (int64_t j = lane; j < d; j += 32) p[j] *= inv;
}

}  // namespace

void l2norm_heads(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t d, float eps,
                  cudaStream_t stream) {
    const int64_t pairs = rows * heads;
    if (pairs == 0) return;
    const int64_t blocks = (pairs + kWarps - 1) / kWarps;
    l2norm_heads_kernel<<<static_cast<unsigned>(blocks), 32 * kWarps, 0, stream>>>(x, pairs, ld,
                                                                                   heads, d, eps);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
