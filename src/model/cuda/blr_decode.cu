// One kernel per decoded BLR layer (model/cuda/blr_decode.hpp), built from
// the decode product's pieces (sign_gemv_device.cuh).
//
// Work items. Phase 1: (path, span of 1024 columns of x, chunk of t's rows);
// each writes the span's partial sums of S_Vᵀ_p (g_p ∘ x) for its rows.
// Phase 2: (span of 1024 columns of t, chunk of y's rows); for each path it
// tabulates t_p = ℓ_p ∘ (the partials of phase 1 summed in span order) and
// sums its rows of S_U,p, writing the span's partial of every path; the last
// block of a row chunk (an atomic count) adds them: y = β·y + bias + Σ_p h_p ∘
// (Σ_spans partial_p). With a single span the block finishes y itself. The
// grid is one block per multiprocessor (cooperative launch, so the barrier
// between the phases cannot deadlock); a block takes items blockIdx.x,
// blockIdx.x + grid, ...
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.hpp"
#include "model/cuda/blr_decode.hpp"
#include "model/cuda/sign_gemv_device.cuh"

namespace cortiq::model::cuda {

namespace ec = cortiq::cuda;
namespace cg = cooperative_groups;
using gemv::kGroupCols;
using gemv::kLut;
using gemv::kSlabWords;
using gemv::kThreads;

namespace {

struct DecodeParams {
    DecodeLayer w;
    const float* x;
    float* y;
    float beta;
    const float* bias;
    float* part_t;       // paths × spans1 × R × r
    float* part_y;       // paths × spans2 × R × m (spans2 > 1)
    unsigned* counters;  // chunks2
    int spans1, chunks1, spans2, chunks2;
    int64_t chunk1, chunk2;  // rows per chunk of t and of y
};

// Phase 1 item `it`: the partials of t_p over one span of x.
template <int R>
__device__ void phase1_item(const DecodeParams& p, int it, float* lut, uint32_t* const bufs[2]) {
    const auto& w = p.w;
    const int lane = threadIdx.x & 31;
    const int sp = it % p.spans1, rest = it / p.spans1;
    const int ch = rest % p.chunks1, path = rest / p.chunks1;
    const int64_t k0 = int64_t{ch} * p.chunk1, k1 = min(w.r, k0 + p.chunk1);
    const bool live[1] = {int64_t{sp} * 32 + lane < w.ld_v};
    const uint32_t* bits = w.sv + int64_t{path} * w.r * w.ld_v + int64_t{sp} * 32 + lane;
    gemv::copy_slab<1>(bits, w.ld_v, live, k0, k1, bufs[0]);
    __syncthreads();  // the previous item's table is no longer read
    const int64_t c0 = int64_t{sp} * kGroupCols;
    const __half* g = w.g + int64_t{path} * w.n;
    gemv::tabulate<R, 1>(
        [&](int i, int64_t j) {
            j += c0;
            return j < w.n ? p.x[i * w.n + j] * __half2float(g[j]) : 0.0f;
        },
        lut);
    __syncthreads();
    float* part = p.part_t + (int64_t{path} * p.spans1 + sp) * R * w.r;
    gemv::sum_rows<R, 1>(bits, w.ld_v, live, k0, k1, lut + lane, bufs,
                         [&](int i, int64_t k, float sum) { part[i * w.r + k] = sum; });
}

// y[i, k] for path `path` of a single-span layer: the first path starts from
// β·y and the bias, as the per-product path's first S_U product does.
__device__ __forceinline__ void finish_path(const DecodeParams& p, int path, int i, int64_t k,
                                            float sum) {
    float* o = p.y + i * p.w.m + k;
    float v;
    if (path == 0) {
        v = p.beta == 0.0f ? 0.0f : p.beta * *o;
        if (p.bias) v += p.bias[k];
    } else {
        v = *o;
    }
    *o = v + __half2float(p.w.h[int64_t{path} * p.w.m + k]) * sum;
}

// Phase 2 item `it`: every path's partial of y over one span of t. The first
// slab of path 0 of the block's first item is already in bufs[0].
template <int R>
__device__ void phase2_item(const DecodeParams& p, int it, bool first_copied, float* lut,
                            uint32_t* const bufs[2]) {
    const auto& w = p.w;
    const int lane = threadIdx.x & 31;
    const int sp = it % p.spans2, ch = it / p.spans2;
    const int64_t k0 = int64_t{ch} * p.chunk2, k1 = min(w.m, k0 + p.chunk2);
    const bool live[1] = {int64_t{sp} * 32 + lane < w.ld_u};
    const int64_t c0 = int64_t{sp} * kGroupCols;
    for (int path = 0; path < w.paths; ++path) {
        const uint32_t* bits = w.su + int64_t{path} * w.m * w.ld_u + int64_t{sp} * 32 + lane;
        if (path > 0 || !first_copied) gemv::copy_slab<1>(bits, w.ld_u, live, k0, k1, bufs[0]);
        __syncthreads();  // the table is no longer read
        const float* part_t = p.part_t + int64_t{path} * p.spans1 * R * w.r;
        const __half* l = w.l + int64_t{path} * w.r;
        gemv::tabulate<R, 1>(
            [&](int i, int64_t j) {
                j += c0;
                if (j >= w.r) return 0.0f;
                float s = 0.0f;
                for (int s1 = 0; s1 < p.spans1; ++s1)
                    s += __ldcg(part_t + (int64_t{s1} * R + i) * w.r + j);
                return 0.0f + __half2float(l[j]) * s;
            },
            lut);
        __syncthreads();
        float* part = p.part_y + (int64_t{path} * p.spans2 + sp) * R * w.m;
        gemv::sum_rows<R, 1>(bits, w.ld_u, live, k0, k1, lut + lane, bufs,
                             [&](int i, int64_t k, float sum) {
                                 if (p.spans2 == 1)
                                     finish_path(p, path, i, k, sum);
                                 else
                                     part[i * w.m + k] = sum;
                             });
    }
}

// The last block of a row chunk of y adds the spans' partials, path by path.
template <int R>
__device__ void reduce_spans(const DecodeParams& p, int ch) {
    __shared__ bool last;
    const auto& w = p.w;
    if ((threadIdx.x & 31) == 0) __threadfence();  // the lanes that wrote partials
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(p.counters + ch, 1u) == unsigned(p.spans2 - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int64_t k0 = int64_t{ch} * p.chunk2, len = min(w.m, k0 + p.chunk2) - k0;
    for (int64_t t = threadIdx.x; t < R * len; t += kThreads) {
        const int i = static_cast<int>(t / len);
        const int64_t k = k0 + t % len;
        float* o = p.y + i * w.m + k;
        float v = p.beta == 0.0f ? 0.0f : p.beta * *o;
        if (p.bias) v += p.bias[k];
        for (int path = 0; path < w.paths; ++path) {
            float sum = 0.0f;
            for (int sp = 0; sp < p.spans2; ++sp)
                sum += __ldcg(p.part_y + ((int64_t{path} * p.spans2 + sp) * R + i) * w.m + k);
            v = v + __half2float(w.h[int64_t{path} * w.m + k]) * sum;
        }
        *o = v;
    }
    if (threadIdx.x == 0) p.counters[ch] = 0u;  // ready for the next call
}

template <int R>
__global__ void __launch_bounds__(kThreads) blr_decode_kernel(DecodeParams p) {
    extern __shared__ float smem[];  // the table (R × kLut), then three slabs of bits
    float* lut = smem;
    uint32_t* slab = reinterpret_cast<uint32_t*>(smem + R * kLut);
    uint32_t* const bufs1[2] = {slab, slab + kSlabWords};
    uint32_t* const bufs2[2] = {slab + 2 * kSlabWords, slab};
    const int lane = threadIdx.x & 31;
    const int items1 = p.w.paths * p.spans1 * p.chunks1, items2 = p.spans2 * p.chunks2;
    // Phase 2's first slab depends on nothing: its copy flies through phase 1.
    const bool prefetch = static_cast<int>(blockIdx.x) < items2;
    if (prefetch) {
        const int sp = blockIdx.x % p.spans2, ch = blockIdx.x / p.spans2;
        const int64_t k0 = int64_t{ch} * p.chunk2, k1 = min(p.w.m, k0 + p.chunk2);
        const bool live[1] = {int64_t{sp} * 32 + lane < p.w.ld_u};
        gemv::copy_slab<1>(p.w.su + int64_t{sp} * 32 + lane, p.w.ld_u, live, k0, k1, bufs2[0]);
    }
    for (int it = blockIdx.x; it < items1; it += gridDim.x) phase1_item<R>(p, it, lut, bufs1);
    gemv::wait_copies<0>();
    cg::this_grid().sync();  // every partial of t is written
    for (int it = blockIdx.x; it < items2; it += gridDim.x) {
        phase2_item<R>(p, it, prefetch && it == static_cast<int>(blockIdx.x), lut, bufs2);
        if (p.spans2 > 1) reduce_spans<R>(p, it / p.spans2);
    }
}

int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

size_t smem_bytes(int rows) {
    return sizeof(float) * kLut * rows + 3 * sizeof(uint32_t) * kSlabWords;
}

// Blocks that can be resident at once (one per multiprocessor at most, the
// measured optimum of the per-product kernel), found once per row count.
template <int R>
int grid_blocks() {
    static const int n = [] {
        const auto smem = smem_bytes(R);
        CUDA_CHECK(cudaFuncSetAttribute(blr_decode_kernel<R>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
        int dev = 0, sms = 0, per_sm = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, blr_decode_kernel<R>,
                                                                 kThreads, smem));
        CORTIQ_ASSERT(per_sm >= 1, "blr_decode: no block fits a multiprocessor");
        return sms;
    }();
    return n;
}

template <int R>
void launch(const DecodeParams& p, cudaStream_t stream) {
    const int grid = grid_blocks<R>();
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(grid));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem_bytes(R);
    cfg.stream = stream;
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, blr_decode_kernel<R>, p));
}

// Chunks of `rows` rows so that about `blocks` items of `per` spans exist, a
// chunk at least 16 rows (two per warp).
void split_rows(int64_t rows, int64_t per, int blocks, int& chunks, int64_t& chunk) {
    int64_t c = std::clamp<int64_t>(blocks / std::max<int64_t>(per, 1), 1,
                                    std::max<int64_t>(1, ceil_div(rows, 16)));
    chunk = ceil_div(rows, c);
    chunks = static_cast<int>(ceil_div(rows, chunk));
}

template <class T>
void ensure(ec::DeviceBuffer<T>& b, int64_t n, cudaStream_t stream) {
    if (b.size() < n) b = ec::DeviceBuffer<T>(n, stream);
}

}  // namespace

void blr_decode(const DecodeLayer& w, const float* x, int rows, float* y, float beta,
                const float* bias, DecodeScratch& ws, cudaStream_t stream) {
    CORTIQ_ASSERT(rows == 1 || rows == 2, "blr_decode takes 1 or 2 rows, not {}", rows);
    CORTIQ_ASSERT(
        w.paths >= 1 && w.r >= 1 && w.ld_v >= ceil_div(w.n, 32) && w.ld_u >= ceil_div(w.r, 32),
        "blr_decode: inconsistent layer {}x{} r{} P{}", w.m, w.n, w.r, w.paths);
    if (w.m == 0) return;
    const int grid = rows == 1 ? grid_blocks<1>() : grid_blocks<2>();
    DecodeParams p{w, x, y, beta, bias, nullptr, nullptr, nullptr, 0, 0, 0, 0, 0, 0};
    p.spans1 = static_cast<int>(std::max<int64_t>(1, ceil_div(w.n, kGroupCols)));
    p.spans2 = static_cast<int>(std::max<int64_t>(1, ceil_div(w.r, kGroupCols)));
    split_rows(w.r, int64_t{w.paths} * p.spans1, grid, p.chunks1, p.chunk1);
    split_rows(w.m, p.spans2, grid, p.chunks2, p.chunk2);
    ensure(ws.part_t, int64_t{w.paths} * p.spans1 * rows * w.r, stream);
    if (p.spans2 > 1) {
        ensure(ws.part_y, int64_t{w.paths} * p.spans2 * rows * w.m, stream);
        if (ws.counters.size() < p.chunks2) {
            ws.counters = ec::DeviceBuffer<unsigned>(std::max(p.chunks2, 1024), stream);
            CUDA_CHECK(cudaMemsetAsync(ws.counters.get(), 0,
                                       sizeof(unsigned) * static_cast<size_t>(ws.counters.size()),
                                       stream));
        }
        p.part_y = ws.part_y.get();
        p.counters = ws.counters.get();
    }
    p.part_t = ws.part_t.get();
    if (rows == 1)
        launch<1>(p, stream);
    else
        launch<2>(p, stream);
}

}  // namespace cortiq::model::cuda
