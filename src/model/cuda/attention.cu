// Causal grouped-query attention with an optional sliding window, one warp
// per (query row, head), online softmax over chunks of 32 keys: lane t
// scores key j0 + t (a whole dot product per lane, no shuffles per key),
// then every lane accumulates its own output dimensions. Nothing of size
// T × T is stored, so long contexts cost no memory. Simple rather than
// flash-fast: these models are small and the GEMMs dominate.
#include <algorithm>
#include <cmath>

#include "core/cuda/device.hpp"
#include "core/error.hpp"
#include "model/cuda/kernels.hpp"
#include "model/cuda/reduce.cuh"

namespace cortiq::model::cuda {

namespace {

constexpr int kWarps = 4;  // query rows per block, all of one head
constexpr int kMaxHeadDim = 256;
constexpr int kDimsPerLane = kMaxHeadDim / 32;

// q · k over d values; q in shared memory (already scaled by 1/sqrt(d)).
__device__ __forceinline__ float dot(const float* q, const float* k, int d) {
    float s = 0;
    if ((d & 3) == 0) {  // rows start at multiples of 4 floats: 16-byte loads
        const float4* q4 = reinterpret_cast<const float4*>(q);
        const float4* k4 = reinterpret_cast<const float4*>(k);
        for (int i = 0; i < d / 4; ++i) {
            const float4 a = q4[i], b = __ldg(k4 + i);
            s += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
        }
    } else {
        for (int i = 0; i < d; ++i) s += q[i] * __ldg(k + i);
    }
    return s;
}

__global__ void attention_kernel(const float* q, const float* k, const float* v, float* out,
                                 int64_t T, int64_t kv_rows, int heads, int kv_heads, int hd,
                                 int64_t pos0, int64_t window, float scale) {
    extern __shared__ float4 smem4[];  // kWarps rows of hd floats (float4: 16-byte aligned)
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
    if (i >= T) return;  // whole warps leave; only warp-level syncs below
    const int h = blockIdx.y, g = h / (heads / kv_heads);
    const int64_t b = blockIdx.z;
    const int64_t q_dim = static_cast<int64_t>(heads) * hd;
    const int64_t kv_dim = static_cast<int64_t>(kv_heads) * hd;

    float* qs = reinterpret_cast<float*>(smem4) + warp * hd;
    const float* qrow = q + (b * T + i) * q_dim + static_cast<int64_t>(h) * hd;
    for (int d = lane; d < hd; d += 32) qs[d] = qrow[d] * scale;
    __syncwarp();

    const int64_t p = pos0 + i;  // this row's position: keys lo..p are visible
    const int64_t lo = window > 0 ? max(int64_t{0}, p - window + 1) : 0;
    const float* kb = k + b * kv_rows * kv_dim + static_cast<int64_t>(g) * hd;
    const float* vb = v + b * kv_rows * kv_dim + static_cast<int64_t>(g) * hd;

    float m = -INFINITY, l = 0;  // running max and Σ exp(s − m)
    float acc[kDimsPerLane];
#pragma unroll
    for (int c = 0; c < kDimsPerLane; ++c) acc[c] = 0;
    for (int64_t j0 = lo; j0 <= p; j0 += 32) {
        const int64_t j = j0 + lane;
        const float s = j <= p ? dot(qs, kb + j * kv_dim, hd) : -INFINITY;
        const float m_new = fmaxf(m, warp_max(s));  // finite: key j0 is visible
        const float corr = expf(m - m_new);         // 0 on the first chunk
        const float pj = j <= p ? expf(s - m_new) : 0.0f;
        l = l * corr + warp_sum(pj);
#pragma unroll
        for (int c = 0; c < kDimsPerLane; ++c) acc[c] *= corr;
        const int nk = static_cast<int>(min(int64_t{32}, p - j0 + 1));  // same in every lane
        for (int t = 0; t < nk; ++t) {
            const float pt = __shfl_sync(kFullMask, pj, t);
            const float* vr = vb + (j0 + t) * kv_dim;
#pragma unroll
            for (int c = 0; c < kDimsPerLane; ++c) {
                const int d = lane + 32 * c;
                if (d < hd) acc[c] += pt * __ldg(vr + d);
            }
        }
        m = m_new;
    }
    const float inv = 1.0f / l;
    float* orow = out + (b * T + i) * q_dim + static_cast<int64_t>(h) * hd;
#pragma unroll
    for (int c = 0; c < kDimsPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d < hd) orow[d] = acc[c] * inv;
    }
}

}  // namespace

void attention(const float* q, const float* k, const float* v, float* out, int64_t batch, int64_t T,
               int64_t kv_rows, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t pos0,
               int64_t window, cudaStream_t stream) {
    CORTIQ_ASSERT(head_dim > 0 && head_dim <= kMaxHeadDim, "head_dim {} (at most {})", head_dim,
                  kMaxHeadDim);
    CORTIQ_ASSERT(kv_heads > 0 && heads % kv_heads == 0 && batch <= 65535 && heads <= 65535);
    CORTIQ_ASSERT(kv_rows >= pos0 + T, "{} key rows for positions up to {}", kv_rows, pos0 + T);
    if (batch == 0 || T == 0) return;
    const dim3 grid(static_cast<unsigned>((T + kWarps - 1) / kWarps), static_cast<unsigned>(heads),
                    static_cast<unsigned>(batch));
    const size_t smem = sizeof(float) * kWarps * static_cast<size_t>(head_dim);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    attention_kernel<<<grid, 32 * kWarps, smem, stream>>>(
        q, k, v, out, T, kv_rows, static_cast<int>(heads), static_cast<int>(kv_heads),
        static_cast<int>(head_dim), pos0, window, scale);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
