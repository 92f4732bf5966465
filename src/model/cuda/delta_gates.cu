// The DeltaNet's decay and write gates (model::delta_gates), one thread per
// (row, value head): β = σ(b), g = −e^{A_log} · softplus(a + dt_bias), with
// torch's softplus (z > 20 kept as it is).
#include <algorithm>

#include "core/cuda/device.hpp"
#include "model/cuda/kernels.hpp"

namespace cortiq::model::cuda {

namespace {

__global__ void delta_gates_kernel(const float* a, const float* b, int64_t n, int64_t heads,
                                   const float* a_log, const float* dt_bias, float* g,
                                   float* beta) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t h = i % heads;
        const float z = a[i] + dt_bias[h];
        const float softplus = z > 20.0f ? z : log1pf(expf(z));
        g[i] = -expf(a_log[h]) * softplus;
        beta[i] = 1.0f / (1.0f + expf(-b[i]));
    }
}

}  // namespace

void delta_gates(const float* a, const float* b, int64_t rows, int64_t heads, const float* a_log,
                 const float* dt_bias, float* g, float* beta, cudaStream_t stream) {
    const int64_t n = rows * heads;
    if (n == 0) return;
    const int64_t blocks = std::min<int64_t>((n + 255) / 256, 65536);
    delta_gates_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(a, b, n, heads, a_log,
                                                                          dt_bias, g, beta);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
