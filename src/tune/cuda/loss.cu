// The block loss of tune_block on the device: the squared error to the
// targets and its reference Σ‖y − x‖², summed in float64, and the gradient
// scale · (out − y) that the backward starts from.
#include <algorithm>

#include "tune/cuda/block_tune.hpp"

namespace cortiq::tune::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void block_loss_kernel(const float* out, const float* y, const float* x, int64_t n,
                                  double* sums, float scale, float* dout) {
    __shared__ double part[2][kThreads / 32];
    double err = 0, ref = 0;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float e = out[i] - y[i];
        if (dout) dout[i] = scale * e;
        const double de = static_cast<double>(out[i]) - y[i], dr = static_cast<double>(y[i]) - x[i];
        err += de * de;
        ref += dr * dr;
    }
    if (!sums) return;  // the whole block leaves together: no sync below is reached
    for (int o = 16; o > 0; o >>= 1) {
        err += __shfl_xor_sync(0xffffffffu, err, o);
        ref += __shfl_xor_sync(0xffffffffu, ref, o);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
        part[0][warp] = err;
        part[1][warp] = ref;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double e = 0, r = 0;
        for (int w = 0; w < kThreads / 32; ++w) {
            e += part[0][w];
            r += part[1][w];
        }
        atomicAdd(sums, e);
        atomicAdd(sums + 1, r);
    }
}

}  // namespace

void block_loss(const Gpu& g, const float* out, const float* y, const float* x, int64_t n,
                double* sums, float scale, float* dout) {
    if (n == 0) return;
    const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 1024);
    block_loss_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, g.stream()>>>(
        out, y, x, n, sums, scale, dout);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::tune::cuda
