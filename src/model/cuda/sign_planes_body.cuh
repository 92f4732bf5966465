// The body of sign_planes (sign_mma.hpp), shared by its kernel (a block of
// 512 threads per chunk) and the fused decode (sign_decode.cu, blocks of 256
// threads, two inputs a thread): the launch's layout (Params, planes_params)
// and one block's chunk (planes_block). Included by CUDA sources only.
#pragma once

#include <cstdint>

#include "model/cuda/sign_launch.hpp"
#include "model/cuda/sign_mma.hpp"

namespace cortiq::model::cuda::planes_detail {

constexpr int kMaxJobs = 16;

struct Params {
    PlaneJob job[kMaxJobs];
    int first_block[kMaxJobs + 1];
    int count;
};

// Jobs [0, count) (count ≤ kMaxJobs) for `rows` rows: a block per chunk of a
// row; p.count = 0 when all are empty.
Params planes_params(const PlaneJob* jobs, int count, int rows, int* blocks);

// Chunk `block` of the launch, by kThreadsT threads (512 / kThreadsT inputs
// each; warp w holds words w, w + kThreadsT / 32, … of the chunk):
// σ = max|v| / 32767, q = rint(v / σ) in [−32767, 32767]; plane p of word w
// at planes[16·p + w]; *info = {σ, σ·Σq} (the arithmetic of
// blr::planes_of, bit for bit, whatever kThreadsT: the maximum and the
// integer sums do not depend on the order). A chunk of zeros has σ = 0, one
// with a non-finite value σ = NaN, so that products come out NaN as a dense
// one would. wait() is called by every thread before the inputs are read.
template <int kThreadsT, class Wait>
__device__ __forceinline__ void planes_block(const Params& p, int block, Wait&& wait) {
    constexpr int kWarpsT = kThreadsT / 32, kPer = kPlaneChunk / kThreadsT;
    static_assert(kPlaneChunk % kThreadsT == 0 && kWarpsT <= 16);
    __shared__ float warp_max[kWarpsT];
    __shared__ int warp_sum[kWarpsT], warp_abs[kWarpsT];
    int k = 0;
    while (k + 1 < p.count && block >= p.first_block[k + 1]) ++k;
    const PlaneJob& jb = p.job[k];
    const int64_t chunks = plane_chunks(jb.cols);
    const int64_t local = block - p.first_block[k];
    const int64_t i = local / chunks, c = local % chunks;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float g[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u) {  // a weight: before the wait
        const int64_t j = c * kPlaneChunk + threadIdx.x + u * kThreadsT;
        g[u] = jb.g && j < jb.cols ? jb.g[j] : 1.0f;
    }
    wait();
    float v[kPer];
    // fmaxf drops NaN: a non-finite value makes the maximum infinite
    float mx = 0.0f;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
        const int64_t j = c * kPlaneChunk + threadIdx.x + u * kThreadsT;
        v[u] = j < jb.cols ? g[u] * jb.in[i * jb.ld_in + j] : 0.0f;
        mx = fmaxf(mx, isfinite(v[u]) ? fabsf(v[u]) : __int_as_float(0x7f800000));
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    __syncthreads();  // a block that runs several chunks: the last one's reads are done
    if (lane == 0) warp_max[warp] = mx;
    __syncthreads();
    mx = warp_max[0];
#pragma unroll
    for (int w = 1; w < kWarpsT; ++w) mx = fmaxf(mx, warp_max[w]);
    constexpr float kQMax = 32767.0f;
    const bool ok = mx > 0.0f && isfinite(mx);
    const float sigma = ok ? mx / kQMax : isfinite(mx) ? 0.0f : __int_as_float(0x7fc00000);
    const float inv = ok ? kQMax / mx : 0.0f;
    uint32_t* planes = jb.planes + i * plane_words(jb.cols) + c * blr::kPlaneChunkWords;
    int qs = 0, qa = 0;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
        const int q = ok ? max(-32767, min(32767, __float2int_rn(v[u] * inv))) : 0;
        uint32_t mine = 0;
#pragma unroll
        for (int b = 0; b < kPlanes; ++b) {
            const uint32_t word = __ballot_sync(0xffffffffu, (q >> b) & 1);
            if (lane == b) mine = word;
        }
        if (lane < kPlanes) planes[lane * 16 + warp + u * kWarpsT] = mine;
        qs += q;
        qa += abs(q);
    }
    for (int o = 16; o > 0; o >>= 1) {
        qs += __shfl_xor_sync(0xffffffffu, qs, o);
        qa += __shfl_xor_sync(0xffffffffu, qa, o);
    }
    if (lane == 0) {
        warp_sum[warp] = qs;
        warp_abs[warp] = qa;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int sum = 0, sum_abs = 0;  // |Σ| ≤ 512·32767 < 2^24: exact in float too
#pragma unroll
        for (int w = 0; w < kWarpsT; ++w) {
            sum += warp_sum[w];
            sum_abs += warp_abs[w];
        }
        jb.info[i * chunks + c] = make_float2(sigma, sigma * static_cast<float>(sum));
        if (jb.abs_info) jb.abs_info[i * chunks + c] = sigma * static_cast<float>(sum_abs);
    }
}

}  // namespace cortiq::model::cuda::planes_detail
