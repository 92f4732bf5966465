// Inputs of the binary tensor-core products as bit planes (sign_mma.hpp):
// a block of 512 threads per chunk of 512 inputs of one row of one job.
// Thread j reads v_j = g_j·in_j, the block finds σ = max|v| / 32767 and
// Σ q, and each warp turns its 32 q's into 16 words with 16 ballots (bit p
// of every lane's q), lane p storing plane p's word.
#include <algorithm>

#include "core/error.hpp"
#include "model/cuda/sign_launch.hpp"
#include "model/cuda/sign_mma.hpp"

namespace cortiq::model::cuda {

namespace {

using namespace sign_detail;

constexpr int kThreads = kPlaneChunk;
constexpr int kMaxJobs = 16;

template <int NT>
struct ChunkShared {
    float max[NT / 32];
    int sum[NT / 32];
};

// σ = max|v| / 32767, q = rint(v / σ) in [−32767, 32767]; plane p of word w
// at planes[16·p + w]; *info = {σ, σ·Σq}. A chunk of zeros has σ = 0, one
// with a non-finite value σ = NaN, so that products come out NaN as a dense
// one would. Every thread of the block calls it (it has barriers).
template <int NT, int V>
__device__ __forceinline__ void chunk_planes(const float (&v)[V], uint32_t* planes, float2* info,
                                             ChunkShared<NT>& sh) {
    static_assert(NT * V == kPlaneChunk);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float mx = 0.0f;
#pragma unroll
    for (int h = 0; h < V; ++h) mx = fmaxf(mx, fabsf(v[h]));
    // fmaxf drops NaN: keep it visible
    bool bad = false;
#pragma unroll
    for (int h = 0; h < V; ++h) bad |= !isfinite(v[h]);
    if (bad) mx = __int_as_float(0x7f800000);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) sh.max[warp] = mx;
    __syncthreads();
    mx = sh.max[0];
#pragma unroll
    for (int w = 1; w < NT / 32; ++w) mx = fmaxf(mx, sh.max[w]);
    constexpr float kQMax = 32767.0f;
    const bool ok = mx > 0.0f && isfinite(mx);
    const float sigma = ok ? mx / kQMax : isfinite(mx) ? 0.0f : __int_as_float(0x7fc00000);
    const float inv = ok ? kQMax / mx : 0.0f;
    int qs = 0;
#pragma unroll
    for (int h = 0; h < V; ++h) {
        const int q = ok ? max(-32767, min(32767, __float2int_rn(v[h] * inv))) : 0;
        qs += q;
        uint32_t mine = 0;
#pragma unroll
        for (int b = 0; b < kPlanes; ++b) {
            const uint32_t word = __ballot_sync(0xffffffffu, (q >> b) & 1);
            if (lane == b) mine = word;
        }
        if (lane < kPlanes) planes[lane * 16 + h * (NT / 32) + warp] = mine;
    }
    for (int o = 16; o > 0; o >>= 1) qs += __shfl_xor_sync(0xffffffffu, qs, o);
    if (lane == 0) sh.sum[warp] = qs;
    __syncthreads();
    if (threadIdx.x == 0) {
        int sum = 0;
#pragma unroll
        for (int w = 0; w < NT / 32; ++w) sum += sh.sum[w];
        *info = make_float2(sigma, sigma * static_cast<float>(sum));
    }
}

struct Params {
    PlaneJob job[kMaxJobs];
    int first_block[kMaxJobs + 1];
    int count;
    int rows;
};

__global__ void __launch_bounds__(kThreads) sign_planes_kernel(const __grid_constant__ Params p) {
    __shared__ ChunkShared<kThreads> sh;
    int k = 0;
    while (k + 1 < p.count && int(blockIdx.x) >= p.first_block[k + 1]) ++k;
    const PlaneJob& jb = p.job[k];
    const int64_t chunks = plane_chunks(jb.cols);
    const int64_t local = int(blockIdx.x) - p.first_block[k];
    const int64_t i = local / chunks, c = local % chunks;
    const int64_t j = c * kPlaneChunk + threadIdx.x;
    const float g = jb.g && j < jb.cols ? jb.g[j] : 1.0f;  // a weight: before the wait
#if __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();  // the products may copy their weights
    cudaGridDependencySynchronize();            // in: the previous kernel's output
#endif
    float v[1] = {j < jb.cols ? g * jb.in[i * jb.ld_in + j] : 0.0f};
    chunk_planes<kThreads, 1>(v, jb.planes + i * plane_words(jb.cols) + c * (kPlanes * 16),
                              jb.info + i * chunks + c, sh);
}

}  // namespace

void sign_planes(const PlaneJob* jobs, int count, int rows, cudaStream_t stream) {
    CORTIQ_ASSERT(rows == 1 || rows == 2, "sign_planes takes 1 or 2 rows, not {}", rows);
    for (int c0 = 0; c0 < count; c0 += kMaxJobs) {
        Params p{};
        p.rows = rows;
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
