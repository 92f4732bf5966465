// Inputs of the fp16 tensor-core products as fp16 chunks (sign_hmma.hpp): a
// block of 512 threads per chunk of 512 inputs of one row of one job. Thread
// j reads v_j (decode_input.cuh, as sign_planes does), the block finds the
// chunk's largest |v| and the power of two 2^e that puts it in [2^14, 2^15),
// and thread j stores fp16(v_j·2^e) at its place (half_index); thread 0
// stores σ = 2^−e and σ·Σ|q| (the lanes', then the warps' sums in order).
// The rows past R up to half_rows(R) get zeros.
#include <algorithm>

#include "core/error.hpp"
#include "model/cuda/decode_input.cuh"
#include "model/cuda/sign_hmma.hpp"
#include "model/cuda/sign_launch.hpp"

namespace cortiq::model::cuda {

namespace {

constexpr int kThreads = kPlaneChunk;
constexpr int kMaxJobs = 16;

struct Params {
    HalfJob job[kMaxJobs];
    int first_block[kMaxJobs + 1];
    int count;
    int rows;
};

// A chunk of zeros has σ = 1 (its q are zeros), one with a non-finite value
// σ = NaN, so that products come out NaN as a dense one would.
__global__ void __launch_bounds__(kThreads) half_inputs_kernel(const __grid_constant__ Params p) {
    __shared__ float part[kThreads / 32];
    __shared__ double norm_scratch[32];
    int k = 0;
    while (k + 1 < p.count && int(blockIdx.x) >= p.first_block[k + 1]) ++k;
    const HalfJob& jb = p.job[k];
    const int64_t chunks = plane_chunks(jb.cols);
    const int64_t local = int(blockIdx.x) - p.first_block[k];
    const int64_t i = local / chunks, c = local % chunks;
    const int64_t j = c * kPlaneChunk + threadIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // weights: before the wait
    const float g = jb.g && j < jb.cols ? jb.g[j] : 1.0f;
    const float nw = jb.norm_w && j < jb.cols ? jb.norm_w[j] : 1.0f;
    pdl_start();
    __half* q_at = jb.q + half_index(i, j, p.rows);
    if (i >= p.rows) {  // a row of zeros past R (the block's branch)
        *q_at = __float2half_rn(0.0f);
        return;
    }
    const float v = decode_input<kThreads>(jb, i, j, g, nw, norm_scratch);
    // fmaxf drops NaN: a non-finite value makes the maximum infinite
    float mx = warp_max(isfinite(v) ? fabsf(v) : __int_as_float(0x7f800000));
    if (lane == 0) part[warp] = mx;
    __syncthreads();
    mx = part[0];
#pragma unroll
    for (int w = 1; w < kThreads / 32; ++w) mx = fmaxf(mx, part[w]);
    // mx = f·2^E, f ∈ [0.5, 1): mx·2^(15−E) ∈ [2^14, 2^15)
    int e = 0;
    if (mx > 0.0f && isfinite(mx)) {
        int E = 0;
        frexpf(mx, &E);
        e = min(max(15 - E, -100), 100);
    }
    const __half q = __float2half_rn(ldexpf(v, e));
    *q_at = q;
    float a = warp_sum(fabsf(__half2float(q)));
    __syncthreads();  // part is read above
    if (lane == 0) part[warp] = a;
    __syncthreads();
    if (threadIdx.x != 0) return;
    const float sigma = isfinite(mx) ? ldexpf(1.0f, -e) : __int_as_float(0x7fc00000);
    jb.sigma[i * chunks + c] = sigma;
    if (!jb.abs_info) return;
    a = 0.0f;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) a += part[w];
    jb.abs_info[i * chunks + c] = sigma * a;
}

}  // namespace

void half_inputs(const HalfJob* jobs, int count, int rows, cudaStream_t stream) {
    CORTIQ_ASSERT(rows >= 1 && rows <= kPlaneDecodeRows, "half_inputs takes 1 to {} rows, not {}",
                  kPlaneDecodeRows, rows);
    for (int c0 = 0; c0 < count; c0 += kMaxJobs) {
        Params p{};
        p.rows = rows;
        int blocks = 0;
        for (int i = c0; i < std::min(count, c0 + kMaxJobs); ++i) {
            if (jobs[i].cols == 0) continue;
            p.job[p.count] = jobs[i];
            p.first_block[p.count] = blocks;
            blocks += static_cast<int>(half_rows(rows) * plane_chunks(jobs[i].cols));
            ++p.count;
        }
        if (p.count == 0) continue;
        p.first_block[p.count] = blocks;
        launch_pdl(half_inputs_kernel, dim3(static_cast<unsigned>(blocks)), kThreads, 0, stream, p);
    }
}

}  // namespace cortiq::model::cuda
