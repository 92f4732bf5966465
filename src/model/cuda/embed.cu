// Embedding gather: one block per token row.
#include "core/cuda/device.hpp"
#include "model/cuda/kernels.hpp"

namespace cortiq::model::cuda {

namespace {

__global__ void embed_kernel(const int32_t* tokens, const float* table, int64_t d, float* out) {
    const int64_t r = blockIdx.x;
    const float* src = table + static_cast<int64_t>(tokens[r]) * d;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) out[r * d + c] = src[c];
}

}  // namespace

void embed(const int32_t* tokens, const float* table, int64_t rows, int64_t d, float* out,
           cudaStream_t stream) {
    if (rows == 0) return;
    embed_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(tokens, table, d, out);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
