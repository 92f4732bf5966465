// Causal grouped-query attention forward and backward on the device, the twin
// of tune::attention_forward / attention_backward: the products are cuBLAS
// GEMMs batched over the windows (one call per head), the softmax and its
// backward one warp per score row. Probabilities are kept (windows × heads ×
// L × L), as on the CPU: tuning windows are short, memory is not the limit.
#include <cmath>

#include "core/error.hpp"
#include "model/cuda/reduce.cuh"
#include "tune/cuda/grad_ops.hpp"

namespace cortiq::tune::cuda {

// the runtime's warp reductions (model/cuda/reduce.cuh)
using model::cuda::warp_max;
using model::cuda::warp_sum;

namespace {

constexpr int kRowsPerBlock = 4;

// Row r of the scores (rows of L; row i = r mod L of its window and head):
// P = softmax over keys 0..i, zeros after.
__global__ void causal_softmax_kernel(float* p, int64_t rows, int64_t L) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const int64_t i = r % L;
    float* pr = p + r * L;
    float mx = -INFINITY;
    for (int64_t j = lane; j <= i; j += 32) mx = fmaxf(mx, pr[j]);
    mx = warp_max(mx);
    double sum = 0;
    for (int64_t j = lane; j <= i; j += 32) {
        const float e = expf(pr[j] - mx);
        pr[j] = e;
        sum += e;
    }
    sum = warp_sum(sum);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = lane; j < L; j += 32) pr[j] = j <= i ? pr[j] * inv : 0.0f;
}

// dS = P ∘ (dP − rowsum(dP ∘ P)) · scale in place of dP; zeros after key i.
__global__ void causal_softmax_backward_kernel(float* ds, const float* p, int64_t rows, int64_t L,
                                               float scale) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const int64_t i = r % L;
    float* dr = ds + r * L;
    const float* pr = p + r * L;
    double dot = 0;
    for (int64_t j = lane; j <= i; j += 32) dot += static_cast<double>(dr[j]) * pr[j];
    const float d = static_cast<float>(warp_sum(dot));
    for (int64_t j = lane; j < L; j += 32) dr[j] = j <= i ? pr[j] * (dr[j] - d) * scale : 0.0f;
}

unsigned row_blocks(int64_t rows) {
    return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

void attention_forward(const Gpu& g, const float* q, const float* k, const float* v,
                       int64_t windows, int64_t L, int64_t heads, int64_t kv_heads, int64_t d,
                       float* out, float* probs) {
    CORTIQ_ASSERT(kv_heads > 0 && heads % kv_heads == 0, "heads {} not a multiple of kv heads {}",
                  heads, kv_heads);
    if (windows == 0 || L == 0) return;
    const int64_t group = heads / kv_heads, ldq = heads * d, ldk = kv_heads * d;
    const int64_t sq = L * ldq, sk = L * ldk, sp = heads * L * L;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    for (int64_t h = 0; h < heads; ++h) {  // S_h = q_h k_gᵀ / √d, every window at once
        const int64_t kg = (h / group) * d;
        gemm_batched(g, false, true, L, L, d, scale, q + h * d, ldq, sq, k + kg, ldk, sk, 0.0f,
                     probs + h * L * L, L, sp, windows);
    }
    const int64_t rows = windows * heads * L;
    causal_softmax_kernel<<<row_blocks(rows), 32 * kRowsPerBlock, 0, g.stream()>>>(probs, rows, L);
    CUDA_LAUNCH_CHECK();
    for (int64_t h = 0; h < heads; ++h) {  // out_h = P_h v_g
        const int64_t kg = (h / group) * d;
        gemm_batched(g, false, false, L, d, L, 1.0f, probs + h * L * L, L, sp, v + kg, ldk, sk,
                     0.0f, out + h * d, ldq, sq, windows);
    }
}

void attention_backward(const Gpu& g, const float* dout, const float* q, const float* k,
                        const float* v, const float* probs, int64_t windows, int64_t L,
                        int64_t heads, int64_t kv_heads, int64_t d, float* dq, float* dk, float* dv,
                        float* ds) {
    if (windows == 0 || L == 0) return;
    const int64_t group = heads / kv_heads, ldq = heads * d, ldk = kv_heads * d;
    const int64_t sq = L * ldq, sk = L * ldk, sp = heads * L * L;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    const cudaStream_t st = g.stream();
    CUDA_CHECK(cudaMemsetAsync(dk, 0, sizeof(float) * windows * L * ldk, st));
    CUDA_CHECK(cudaMemsetAsync(dv, 0, sizeof(float) * windows * L * ldk, st));
    for (int64_t h = 0; h < heads; ++h) {
        const int64_t kg = (h / group) * d;
        // dv_g += P_hᵀ dout_h
        gemm_batched(g, true, false, L, d, L, 1.0f, probs + h * L * L, L, sp, dout + h * d, ldq, sq,
                     1.0f, dv + kg, ldk, sk, windows);
        // dP = dout_h v_gᵀ
        gemm_batched(g, false, true, L, L, d, 1.0f, dout + h * d, ldq, sq, v + kg, ldk, sk, 0.0f,
                     ds + h * L * L, L, sp, windows);
    }
    const int64_t rows = windows * heads * L;
    causal_softmax_backward_kernel<<<row_blocks(rows), 32 * kRowsPerBlock, 0, st>>>(ds, probs, rows,
                                                                                    L, scale);
    CUDA_LAUNCH_CHECK();
    for (int64_t h = 0; h < heads; ++h) {
        const int64_t kg = (h / group) * d;
        // dq_h = dS k_g (the 1/√d is in dS); dk_g += dSᵀ q_h
        gemm_batched(g, false, false, L, d, L, 1.0f, ds + h * L * L, L, sp, k + kg, ldk, sk, 0.0f,
                     dq + h * d, ldq, sq, windows);
        gemm_batched(g, true, false, L, d, L, 1.0f, ds + h * L * L, L, sp, q + h * d, ldq, sq, 1.0f,
                     dk + kg, ldk, sk, windows);
    }
}

}  // namespace cortiq::tune::cuda
