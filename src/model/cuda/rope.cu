// RoPE with the CPU's cos/sin table (model::rope_table), so that llama3 and
// linear scaling and the float32 angle rounding are the CPU's exactly.
#include <algorithm>

#include "core/cuda/device.hpp"
#include "core/error.hpp"
#include "model/cuda/kernels.hpp"
#include "model/cuda/pdl.cuh"

namespace cortiq::model::cuda {

namespace {

// One thread per (row, head, j < half) of q and then of k: rotates the pair
// (j, j + half); a head's dims from 2·half on are left as they are (partial
// rotary). Rows of q hold q_heads heads, rows of k k_heads.
__global__ void rope_kernel(float* q, int64_t q_heads, float* k, int64_t k_heads, int64_t rows,
                            int64_t T, int64_t head_dim, int64_t half, const float* cos,
                            const float* sin, int64_t pos0, const int32_t* pos_of) {
    pdl_start();
    const int64_t heads = q_heads + k_heads, per_row = heads * half;
    const int64_t total = rows * per_row;
    for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
         t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = t / per_row, h = (t % per_row) / half, j = t % half;
        const int64_t pos = (pos_of ? static_cast<int64_t>(pos_of[r / T]) : pos0) + r % T;
        const float c = cos[pos * half + j], s = sin[pos * half + j];
        float* p = h < q_heads ? q + (r * q_heads + h) * head_dim
                               : k + (r * k_heads + h - q_heads) * head_dim;
        const float x1 = p[j], x2 = p[j + half];
        p[j] = x1 * c - x2 * s;
        p[j + half] = x2 * c + x1 * s;
    }
}

}  // namespace

void rope_qk(float* q, int64_t q_heads, float* k, int64_t k_heads, int64_t rows, int64_t T,
             int64_t head_dim, int64_t half, const float* cos, const float* sin, int64_t pos0,
             const int32_t* pos, cudaStream_t stream) {
    CORTIQ_ASSERT(half > 0 && 2 * half <= head_dim, "rotary half {} for head_dim {}", half,
                  head_dim);
    const int64_t total = rows * (q_heads + k_heads) * half;
    if (total == 0) return;
    const int64_t blocks = std::min<int64_t>((total + 255) / 256, 65536);
    launch_pdl(rope_kernel, dim3(static_cast<unsigned>(blocks)), 256, 0, stream, q, q_heads, k,
               k_heads, rows, T, head_dim, half, cos, sin, pos0, pos);
}

}  // namespace cortiq::model::cuda
