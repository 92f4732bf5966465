// The DeltaNet's depthwise causal convolution with SiLU
// (model::causal_conv1d_silu) on a batch of sequences: one thread per (row,
// channel) sums its K taps (rows before the sequence's first from the cached
// state, or zeros); then, with a state, one thread per channel shifts the
// last K − 1 inputs into it. Consecutive threads take consecutive channels,
// so every row read is coalesced.
#include <algorithm>

#include "core/cuda/device.hpp"
#include "core/error.hpp"
#include "model/cuda/kernels.hpp"

namespace cortiq::model::cuda {

namespace {

constexpr int kMaxKernel = 8;

__global__ void conv_kernel(const float* x, int64_t rows, int64_t T, int64_t C, const float* w,
                            int K, const float* state, float* y) {
    const int64_t total = rows * C, P = K - 1;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = i / C, c = i % C, t = r % T, seq0 = r - t;  // seq0: the sequence's row 0
        float acc = 0;
        for (int k = 0; k < K; ++k) {
            const int64_t tau = t - P + k;  // the input's position in its sequence
            const float in = tau >= 0 ? x[(seq0 + tau) * C + c]
                             : state  ? state[((r / T) * P + P + tau) * C + c]
                                      : 0.0f;
            acc += w[c * K + k] * in;
        }
        y[i] = acc / (1.0f + expf(-acc));  // silu, as the CPU
    }
}

// Sequence b's state (P × C, blockIdx.y = b) ← its inputs at positions
// T − P .. T − 1; a row taken from the old state (r + T) is read before it is
// overwritten, as each thread walks its channel in ascending order.
__global__ void conv_state_kernel(const float* x, int64_t T, int64_t C, int P, float* state) {
    const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (c >= C) return;
    x += blockIdx.y * T * C;
    state += blockIdx.y * static_cast<int64_t>(P) * C;
    for (int64_t r = 0; r < P; ++r) {
        const int64_t tau = T - P + r;
        state[r * C + c] = tau >= 0 ? x[tau * C + c] : state[(r + T) * C + c];
    }
}

}  // namespace

void causal_conv1d_silu(const float* x, int64_t batch, int64_t T, int64_t C, const float* w,
                        int64_t K, float* state, float* y, cudaStream_t stream) {
    CORTIQ_ASSERT(K >= 1 && K <= kMaxKernel && C > 0, "conv width {} (at most {}), {} channels", K,
                  kMaxKernel, C);
    CORTIQ_ASSERT(batch <= 65535, "{} sequences", batch);
    const int64_t total = batch * T * C;
    if (total == 0) return;
    const int64_t blocks = std::min<int64_t>((total + 255) / 256, 65536);
    conv_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(x, batch * T, T, C, w,
                                                                   static_cast<int>(K), state, y);
    CUDA_LAUNCH_CHECK();
    if (!state || K == 1) return;
    const dim3 grid(static_cast<unsigned>((C + 255) / 256), static_cast<unsigned>(batch));
    conv_state_kernel<<<grid, 256, 0, stream>>>(x, T, C, static_cast<int>(K - 1), state);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
