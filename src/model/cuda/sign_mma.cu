// Sign products on the binary tensor cores (sign_mma.hpp): the launches of
// the block bodies in sign_mma_body.cuh, with programmatic dependent launch
// (the weights of a block's first chunks are loaded before the wait for the
// previous kernel).
#include <algorithm>

#include "core/error.hpp"
#include "model/cuda/sign_mma_body.cuh"

namespace cortiq::model::cuda {

namespace mma_detail {

// Warps per tile: about two chunks each, at most 8 (CORTIQ_MMA_SPLIT: at
// most that many). Measured on the H200 at 1 bpw (bench_blr_gpu, one token):
// a warp per chunk (8 for S_U's 6 chunks at 4096×11008 and S_Vᵀ's 8 at
// 11008×4096) took 8.3 / 9.5 µs and the 32-layer model 1.150 ms; at most 4
// warps, 10.2 / 7.7 µs and 1.131 ms (4096×11008's 22-chunk S_Vᵀ then lacks
// warps); at most 2, 14.2 / 8.8 µs.
int split_for(int chunks) {
    static const int most = knob("CORTIQ_MMA_SPLIT", kWarps, 1, kWarps);
    int s = 1;
    while (s < most && 2 * s < chunks) s *= 2;
    return s;
}

Params mma_params(const MmaProduct* products, int count, bool wide, int* blocks) {
    Params p{};
    *blocks = 0;
    CORTIQ_ASSERT(count <= kMaxMmaProducts, "sign_mma: {} products in one launch", count);
    for (int i = 0; i < count; ++i) {
        const MmaProduct& pr = products[i];
        CORTIQ_ASSERT(pr.pieces == 1 || pr.pieces == 2, "sign_mma: {} pieces", pr.pieces);
        for (int pc = 0; pc < pr.pieces; ++pc)
            CORTIQ_ASSERT(pr.piece[pc].s.ld % 4 == 0 && pr.piece[pc].s.rows == pr.piece[0].s.rows,
                          "sign_mma: rows of {} words (a multiple of 4), {} rows",
                          pr.piece[pc].s.ld, pr.piece[pc].s.rows);
        const bool planes_out = pr.planes_out.planes != nullptr;
        CORTIQ_ASSERT(!planes_out || (!wide && pr.pieces == 1 && pr.beta == 0.0f && !pr.bias &&
                                      pr.piece[0].in.abs_info),
                      "sign_mma: wide planes out of one narrow piece, β = 0, no bias");
        const int64_t m = pr.piece[0].s.rows;
        if (m == 0) continue;
        int chunks = 0;
        for (int pc = 0; pc < pr.pieces; ++pc)
            chunks += static_cast<int>(plane_chunks(pr.piece[pc].s.cols));
        // wide planes: every tile of the last chunk, to zero its tail
        const int split = split_for(chunks);
        const int tiles = static_cast<int>(planes_out ? wide_tiles(m) : ceil_div(m, 16));
        p.prod[p.count] = pr;
        p.split[p.count] = split;
        p.first_block[p.count] = *blocks;
        *blocks += static_cast<int>(ceil_div(tiles, kWarps / split));
        ++p.count;
    }
    p.first_block[p.count] = *blocks;
    return p;
}

namespace {

// Three blocks an SM for one token (80 registers); two for two tokens, whose
// sums and fragments need more.
template <int R, bool kWide>
__global__ void __launch_bounds__(kThreads, R == 1 ? 3 : 2)
    sign_mma_kernel(const __grid_constant__ Params p) {
    mma_block<R, kWide>(p, static_cast<int>(blockIdx.x), [] {
#if __CUDA_ARCH__ >= 900
        cudaTriggerProgrammaticLaunchCompletion();
        cudaGridDependencySynchronize();
#endif
    });
}

template <bool kWide>
void launch_mma(const MmaProduct* products, int count, int rows, cudaStream_t stream) {
    CORTIQ_ASSERT(rows == 1 || rows == 2, "sign_mma takes 1 or 2 rows, not {}", rows);
    for (int c0 = 0; c0 < count; c0 += kMaxMmaProducts) {
        int blocks = 0;
        const Params p =
            mma_params(products + c0, std::min(count - c0, kMaxMmaProducts), kWide, &blocks);
        if (p.count == 0) continue;
        const dim3 grid(static_cast<unsigned>(blocks));
        if (rows == 1)
            launch_pdl(sign_mma_kernel<1, kWide>, grid, kThreads, 0, stream, p);
        else
            launch_pdl(sign_mma_kernel<2, kWide>, grid, kThreads, 0, stream, p);
    }
}

}  // namespace

}  // namespace mma_detail

void sign_mma(const MmaProduct* products, int count, int rows, cudaStream_t stream) {
    mma_detail::launch_mma<false>(products, count, rows, stream);
}

void sign_mma_wide(const MmaProduct* products, int count, int rows, cudaStream_t stream) {
    mma_detail::launch_mma<true>(products, count, rows, stream);
}

}  // namespace cortiq::model::cuda
