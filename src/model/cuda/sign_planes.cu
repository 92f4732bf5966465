// Inputs of the binary tensor-core products as bit planes (sign_mma.hpp):
// a block of 512 threads per chunk of 512 inputs of one row of one job.
// Thread j reads v_j = g_j·in_j (or g_j·RMSNorm(in)_j, the block summing the
// row's squares first; or g_j·silu(in_j)·up_j), the block finds σ = max|v| / 32767 and
// Σ q (and Σ |q|), and each warp turns its 32 q's into 16 words with 16 ballots (bit p
// of every lane's q), lane p storing plane p's word.
#include <algorithm>

#include "core/error.hpp"
#include "model/cuda/decode_input.cuh"
#include "model/cuda/sign_launch.hpp"
#include "model/cuda/sign_mma.hpp"

namespace cortiq::model::cuda {

namespace {

using namespace sign_detail;

constexpr int kThreads = kPlaneChunk;
constexpr int kMaxJobs = 16;

struct Params {
    PlaneJob job[kMaxJobs];
    int first_block[kMaxJobs + 1];
    int count;
};

// One block of 512 threads, thread x holding input x of its chunk:
// σ = max|v| / 32767, q = rint(v / σ) in [−32767, 32767]; plane p of word w
// at planes[16·p + w]; *info = {σ, σ·Σq} (the arithmetic of
// blr::planes_of, bit for bit). A chunk of zeros has σ = 0, one with a
// non-finite value σ = NaN, so that products come out NaN as a dense one would.
__global__ void __launch_bounds__(kThreads) sign_planes_kernel(const __grid_constant__ Params p) {
    __shared__ float warp_max[kThreads / 32];
    __shared__ int warp_sum[kThreads / 32], warp_abs[kThreads / 32];
    __shared__ double norm_scratch[32];
    int k = 0;
    while (k + 1 < p.count && int(blockIdx.x) >= p.first_block[k + 1]) ++k;
    const PlaneJob& jb = p.job[k];
    const int64_t chunks = plane_chunks(jb.cols);
    const int64_t local = int(blockIdx.x) - p.first_block[k];
    const int64_t i = local / chunks, c = local % chunks;
    const int64_t j = c * kPlaneChunk + threadIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // weights: before the wait
    const float g = jb.g && j < jb.cols ? jb.g[j] : 1.0f;
    const float nw = jb.norm_w && j < jb.cols ? jb.norm_w[j] : 1.0f;
#if __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();  // the products may copy their weights
    cudaGridDependencySynchronize();            // in: the previous kernel's output
#endif
    const float v = decode_input<kThreads>(jb, i, j, g, nw, norm_scratch);
    // fmaxf drops NaN: a non-finite value makes the maximum infinite
    float mx = isfinite(v) ? fabsf(v) : __int_as_float(0x7f800000);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) warp_max[warp] = mx;
    __syncthreads();
    mx = warp_max[0];
#pragma unroll
    for (int w = 1; w < kThreads / 32; ++w) mx = fmaxf(mx, warp_max[w]);
    constexpr float kQMax = 32767.0f;
    const bool ok = mx > 0.0f && isfinite(mx);
    const float sigma = ok ? mx / kQMax : isfinite(mx) ? 0.0f : __int_as_float(0x7fc00000);
    const float inv = ok ? kQMax / mx : 0.0f;
    const int q = ok ? max(-32767, min(32767, __float2int_rn(v * inv))) : 0;
    uint32_t mine = 0;
#pragma unroll
    for (int b = 0; b < kPlanes; ++b) {
        const uint32_t word = __ballot_sync(0xffffffffu, (q >> b) & 1);
        if (lane == b) mine = word;
    }
    uint32_t* planes = jb.planes + i * plane_words(jb.cols) + c * blr::kPlaneChunkWords;
    if (lane < kPlanes) planes[lane * 16 + warp] = mine;
    int qs = q, qa = abs(q);
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
        for (int w = 0; w < kThreads / 32; ++w) {
            sum += warp_sum[w];
            sum_abs += warp_abs[w];
        }
        jb.info[i * chunks + c] = make_float2(sigma, sigma * static_cast<float>(sum));
        if (jb.abs_info) jb.abs_info[i * chunks + c] = sigma * static_cast<float>(sum_abs);
    }
}

}  // namespace

void sign_planes(const PlaneJob* jobs, int count, int rows, cudaStream_t stream) {
    CORTIQ_ASSERT(rows >= 1 && rows <= kPlaneDecodeRows, "sign_planes takes 1 to {} rows, not {}",
                  kPlaneDecodeRows, rows);
    for (int c0 = 0; c0 < count; c0 += kMaxJobs) {
        Params p{};
        int blocks = 0;
        for (int i = c0; i < std::min(count, c0 + kMaxJobs); ++i) {
            if (jobs[i].cols == 0) continue;
            p.job[p.count] = jobs[i];
            p.first_block[p.count] = blocks;
            blocks += static_cast<int>(rows * plane_chunks(jobs[i].cols));
            ++p.count;
        }
        if (p.count == 0) continue;
        p.first_block[p.count] = blocks;
        launch_pdl(sign_planes_kernel, dim3(static_cast<unsigned>(blocks)), kThreads, 0, stream, p);
    }
}

}  // namespace cortiq::model::cuda
