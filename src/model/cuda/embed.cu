// Embedding gather from a float32 or fp16 table: one block per token row.
#include "core/cuda/device.hpp"
#include "model/cuda/kernels.hpp"

namespace cortiq::model::cuda {

namespace {

__device__ __forceinline__ float as_float(float x) {
    return x;
}
__device__ __forceinline__ float as_float(__half x) {
    return __half2float(x);
}

template <class E>
__global__ void embed_kernel(const int32_t* tokens, const E* table, int64_t d, float* out) {
    const int64_t r = blockIdx.x;
    const E* src = table + static_cast<int64_t>(tokens[r]) * d;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) out[r * d + c] = as_float(src[c]);
}

}  // namespace

void embed(const int32_t* tokens, const float* table, int64_t rows, int64_t d, float* out,
           cudaStream_t stream) {
    if (rows == 0) return;
    embed_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(tokens, table, d, out);
    CUDA_LAUNCH_CHECK();
}

void embed(const int32_t* tokens, const __half* table, int64_t rows, int64_t d, float* out,
           cudaStream_t stream) {
    if (rows == 0) return;
    embed_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(tokens, table, d, out);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
