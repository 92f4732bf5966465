// Inputs of the binary tensor-core products as bit planes (sign_mma.hpp):
// a block of 512 threads per chunk of 512 inputs of one row of one job
// (sign_planes_body.cuh). Thread j reads v_j = g_j·in_j, the block finds
// σ = max|v| / 32767 and Σ q (and Σ |q|), and each warp turns its 32 q's into
// 16 words with 16 ballots (bit p of every lane's q), lane p storing plane p's
// word.
#include <algorithm>

#include "core/error.hpp"
#include "model/cuda/sign_planes_body.cuh"

namespace cortiq::model::cuda {

namespace planes_detail {

Params planes_params(const PlaneJob* jobs, int count, int rows, int* blocks) {
    CORTIQ_ASSERT(count <= kMaxJobs, "sign_planes: {} jobs in one launch", count);
    Params p{};
    *blocks = 0;
    for (int i = 0; i < count; ++i) {
        if (jobs[i].cols == 0) continue;
        p.job[p.count] = jobs[i];
        p.first_block[p.count] = *blocks;
        *blocks += static_cast<int>(rows * plane_chunks(jobs[i].cols));
        ++p.count;
    }
    p.first_block[p.count] = *blocks;
    return p;
}

namespace {

constexpr int kThreads = kPlaneChunk;

__global__ void __launch_bounds__(kThreads) sign_planes_kernel(const __grid_constant__ Params p) {
    planes_block<kThreads>(p, static_cast<int>(blockIdx.x), [] {
#if __CUDA_ARCH__ >= 900
        cudaTriggerProgrammaticLaunchCompletion();  // the products may copy their weights
        cudaGridDependencySynchronize();            // in: the previous kernel's output
#endif
    });
}

}  // namespace

}  // namespace planes_detail

void sign_planes(const PlaneJob* jobs, int count, int rows, cudaStream_t stream) {
    using namespace planes_detail;
    CORTIQ_ASSERT(rows == 1 || rows == 2, "sign_planes takes 1 or 2 rows, not {}", rows);
    for (int c0 = 0; c0 < count; c0 += kMaxJobs) {
        int blocks = 0;
        const Params p = planes_params(jobs + c0, std::min(count - c0, kMaxJobs), rows, &blocks);
        if (p.count == 0) continue;
        sign_detail::launch_pdl(sign_planes_kernel, dim3(static_cast<unsigned>(blocks)), kThreads,
                                0, stream, p);
    }
}

}  // namespace cortiq::model::cuda
