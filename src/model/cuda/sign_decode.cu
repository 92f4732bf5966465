// The fused decode (sign_mma.hpp, sign_decode_fused): one persistent launch
// for a group's three phases, so that a layer pays for one launch and two
// grid barriers instead of three dependent launches. Each block:
//   1. copies the weights of its first block of t's products (before the
//      wait for the previous kernel: programmatic dependent launch);
//   2. waits for the previous kernel (its output is x), builds its share of
//      x's planes (planes_block, 256 threads, two inputs a thread), grid barrier;
//   3. runs its blocks of t's products (mma_block), then copies the weights
//      of its first block of y's products, grid barrier;
//   4. runs its blocks of y's products.
// The grid is at most what is resident at once (the occupancy of this
// kernel), so the barriers cannot wait on a block that has no SM.
#include <algorithm>

#include "core/cuda/grid_barrier.cuh"
#include "core/error.hpp"
#include "model/cuda/sign_mma_body.cuh"
#include "model/cuda/sign_planes_body.cuh"

namespace cortiq::model::cuda {

namespace {

struct FusedParams {
    planes_detail::Params planes;
    mma_detail::Params first, second;
    int planes_blocks, first_blocks, second_blocks;
    unsigned* barrier;
};

constexpr int kThreads = mma_detail::kThreads;

// Blocks [b, end) of a phase, a grid stride apart; the first one's wait() is
// `wait`, the others' none. A block with none of the phase calls wait alone.
template <class Body, class Wait>
__device__ __forceinline__ void phase(int end, Body&& body, Wait&& wait) {
    const int b0 = static_cast<int>(blockIdx.x), stride = static_cast<int>(gridDim.x);
    if (b0 >= end) {
        wait();
        return;
    }
    body(b0, wait);
    for (int b = b0 + stride; b < end; b += stride) body(b, [] {});
}

// kMinBlocks a multiprocessor: 3 (80 registers) spills a little for one
// token; 2 (128) holds everything in registers for one or two.
template <int R, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    sign_decode_kernel(const __grid_constant__ FusedParams p) {
#if __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();  // the next kernel may copy its weights
#endif
    const int b0 = static_cast<int>(blockIdx.x), stride = static_cast<int>(gridDim.x);
    auto x_planes = [&] {
#if __CUDA_ARCH__ >= 900
        cudaGridDependencySynchronize();  // x: the previous kernel's output
#endif
        for (int b = b0; b < p.planes_blocks; b += stride)
            planes_detail::planes_block<kThreads>(p.planes, b, [] {});
        cortiq::cuda::grid_barrier(p.barrier);
    };
    phase(
        p.first_blocks,
        [&](int b, auto&& wait) { mma_detail::mma_block<R, false>(p.first, b, wait); }, x_planes);
    phase(
        p.second_blocks,
        [&](int b, auto&& wait) { mma_detail::mma_block<R, true>(p.second, b, wait); },
        [&] { cortiq::cuda::grid_barrier(p.barrier); });
}

template <int R, int kMinBlocks>
int resident_blocks() {
    static const int n = [] {
        int per_sm = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, sign_decode_kernel<R, kMinBlocks>, kThreads, 0));
        return per_sm * sign_detail::sm_count();
    }();
    return n;
}

template <int R, int kMinBlocks>
void launch_fused(const FusedParams& p, int want, cudaStream_t stream) {
    const int resident = resident_blocks<R, kMinBlocks>();
    CORTIQ_ASSERT(resident > 0, "sign_decode_fused: no block of the kernel fits an SM");
    const dim3 grid(static_cast<unsigned>(std::min(want, resident)));
    sign_detail::launch_pdl(sign_decode_kernel<R, kMinBlocks>, grid, kThreads, 0, stream, p);
}

}  // namespace

bool sign_decode_fused(const PlaneJob* jobs, int job_count, const MmaProduct* first,
                       int first_count, const MmaProduct* second, int second_count, int rows,
                       unsigned* barrier, cudaStream_t stream) {
    CORTIQ_ASSERT(rows == 1 || rows == 2, "sign_decode_fused takes 1 or 2 rows, not {}", rows);
    if (job_count > planes_detail::kMaxJobs || first_count > kMaxMmaProducts ||
        second_count > kMaxMmaProducts)
        return false;
    FusedParams p{};
    p.planes = planes_detail::planes_params(jobs, job_count, rows, &p.planes_blocks);
    p.first = mma_detail::mma_params(first, first_count, false, &p.first_blocks);
    p.second = mma_detail::mma_params(second, second_count, true, &p.second_blocks);
    p.barrier = barrier;
    const int want = std::max({p.planes_blocks, p.first_blocks, p.second_blocks});
    if (want == 0) return true;
    // CORTIQ_FUSED_BLOCKS=2|3: blocks a multiprocessor for one token
    static const int one_token = sign_detail::knob("CORTIQ_FUSED_BLOCKS", 3, 2, 3);
    if (rows == 2)
        launch_fused<2, 2>(p, want, stream);
    else if (one_token == 3)
        launch_fused<1, 3>(p, want, stream);
    else
        launch_fused<1, 2>(p, want, stream);
    return true;
}

}  // namespace cortiq::model::cuda
