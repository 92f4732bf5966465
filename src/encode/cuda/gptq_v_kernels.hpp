// The column-search kernels of gptq_v (internal to src/encode/cuda/).
#pragma once

#include <cstdint>

#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

struct GptqArgs {
    const float* b;    // n × r targets Mᵀt_j (permuted, trailing updates applied)
    float* s;          // n × r signs (permuted), updated
    const float* ks0;  // n × r, K s_j of the starting signs
    const float* k;    // r × r
    const float* kd;   // diag K
    const float* uc;   // n × n
    float* e;          // n × r scaled latent errors (out)
    float* g;          // n (out, permuted order)
    int64_t n, r, j0, j1;
    double tol;
    int passes;
    int feedback;
    unsigned long long* flips;
    unsigned long long* passes_run;  // passes executed, summed over the columns
    int64_t ldk;                     // row stride of k (lazy kernel: r padded to 32, zeros)
    unsigned long long* stats;       // lazy kernel: chunk visits, log entries applied from
                                     // the near blocks and from L2, waits for blocks
    int log_cap = 0;                 // lazy kernel: entries of its flip-log ring (0: all 4,096)
    int multi = 0;                   // multi kernel: flips per round (1..kMaxGptqMulti)
};

// A launch plan: threads per block, columns per block (bounded by shared memory).
struct GptqPlan {
    int threads = 256;
    int nb = 0;
    int ept = 1;       // batched kernel: elements of r per thread (a power of two)
    int prefetch = 1;  // batched kernel: candidates whose K rows one batch fetches
    size_t smem = 0;
    int grid = 1;  // blocks per launch: 1 takes the columns in order; more, one column each
};

// Options::gptq_group: a launch of several blocks gives each one column of
// [j0, j1), searched from the targets the launch found (no feedback among
// them); a launch of one block takes them all in order.
__device__ inline void block_columns(GptqArgs& a) {
    if (gridDim.x > 1) {
        a.j0 += blockIdx.x;
        a.j1 = a.j0 + 1;
    }
}

// The plan's nb (columns per block, 0 to block) and smem: `fixed` bytes, then
// r + 1 floats per column (its errors and its Uc entries) in what the device
// lets one block have, less `reserve` bytes for the kernel's static shared
// memory. Every plan_* ends with it.
void fit_columns(GptqPlan& l, const Gpu& g, int64_t r, int block, int64_t fixed, int64_t reserve);

// Raises a kernel's dynamic shared-memory limit to the device's opt-in
// maximum less its static shared memory: the same value from every thread, as
// tensors encoded concurrently (encode_many) with different ranks would
// otherwise race, one lowering the limit below what another's launch needs.
// Every prepare_* calls it for the kernels it may launch.
template <class Kernel>
void raise_smem_limit(Kernel kernel) {
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaFuncAttributes fa{};
    CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    optin - static_cast<int>(fa.sharedSizeBytes)));
}

GptqPlan plan_lazy(const Gpu& g, int64_t r, int block);
// threads: per block (0: 256 up to r = 256, else 512); prefetch: candidates per
// batch (0: as many as 32 registers hold, else at most this, a power of two)
GptqPlan plan_batched(const Gpu& g, int64_t r, int block, int threads = 0, int prefetch = 0);
// Sets the kernel's shared-memory limit and returns the launcher of one block
// of columns [a.j0, a.j1) on the Gpu's stream.
void launch_lazy(const Gpu& g, const GptqArgs& a, const GptqPlan& p);
void launch_batched(const Gpu& g, const GptqArgs& a, const GptqPlan& p);
void prepare_lazy(const GptqPlan& p);
// The rounds of simultaneous flips (gptq_v_multi.cu), a.multi per round.
GptqPlan plan_multi(const Gpu& g, int64_t r, int block);
void prepare_multi(const GptqPlan& p);
void launch_multi(const Gpu& g, const GptqArgs& a, const GptqPlan& p);
void prepare_batched(const GptqPlan& p);

// Does flipping bit a raise φ = α²/β by more than the tolerance? (the CPU's
// phi2 > phi·(1+tol) + 1e-300, multiplied through by β·β' > 0)
__device__ inline bool gptq_gain(float sa, float ba, float ksa, float kaa, double alpha,
                                 double beta, double tol) {
    const double alpha2 = alpha - 2.0 * sa * ba;
    const double beta2 = beta - 4.0 * sa * ksa + 4.0 * kaa;
    if (!(beta2 > 0)) return false;
    if (!(beta > 0)) return alpha2 * alpha2 > 1e-300 * beta2;
    return alpha2 * alpha2 * beta > alpha * alpha * beta2 * (1 + tol) + 1e-300 * beta * beta2;
}

// The column's state in shared memory before its search (both kernels): the
// target b_j less the feedback of this block's earlier columns (SPEC §3.7,
// b_j −= Σ_q Uc[q, j] e_q), the starting signs and K s_j. Returns α = sᵀb and
// β = sᵀKs, summed in a fixed order and known to every thread; `red` is
// 2 × 32 doubles of shared memory.
__device__ inline void gptq_load_column(const GptqArgs& a, int64_t j, float* ucol, const float* eb,
                                        float* bv, float* ks, float* sg, double (*red)[32],
                                        double& alpha, double& beta) {
    const int T = blockDim.x, t = threadIdx.x, lane = t & 31, warp = t >> 5, nw = T >> 5;
    const int64_t r = a.r, jj = j - a.j0;
    for (int64_t q = t; q < jj; q += T) ucol[q] = a.feedback ? a.uc[(a.j0 + q) * a.n + j] : 0.f;
    __syncthreads();
    double pa = 0, pb = 0;
    for (int64_t y = t; y < r; y += T) {
        float bvv = a.b[j * r + y];
        if (a.feedback)
            for (int64_t q = 0; q < jj; ++q) bvv -= ucol[q] * eb[q * r + y];
        const float sv = a.s[j * r + y], kv = a.ks0[j * r + y];
        bv[y] = bvv;
        ks[y] = kv;
        sg[y] = sv;
        pa += static_cast<double>(sv) * bvv;
        pb += static_cast<double>(sv) * kv;
    }
    for (int o = 16; o > 0; o >>= 1) {
        pa += __shfl_xor_sync(0xffffffffu, pa, o);
        pb += __shfl_xor_sync(0xffffffffu, pb, o);
    }
    if (lane == 0) {
        red[0][warp] = pa;
        red[1][warp] = pb;
    }
    __syncthreads();
    alpha = 0;
    beta = 0;
    for (int w = 0; w < nw; ++w) {
        alpha += red[0][w];
        beta += red[1][w];
    }
}

// After the search (both kernels): g_j = α/β in closed form, the scaled latent
// error e_j = (b_j − g_j K s_j)/Uc[j, j] (in shared memory for the block's
// later columns, in global memory for the trailing update) and the signs.
__device__ inline void gptq_store_column(const GptqArgs& a, int64_t j, float* eb, const float* bv,
                                         const float* ks, const float* sg, double alpha,
                                         double beta) {
    const int T = blockDim.x, t = threadIdx.x;
    const int64_t r = a.r, jj = j - a.j0;
    const double gj = beta > 0 ? alpha / beta : 0.0;
    const float inv = 1.f / a.uc[j * a.n + j];
    for (int64_t y = t; y < r; y += T) {
        const float ev = (bv[y] - static_cast<float>(gj) * ks[y]) * inv;
        eb[jj * r + y] = ev;
        a.e[j * r + y] = ev;
        a.s[j * r + y] = sg[y];
    }
    if (t == 0) a.g[j] = static_cast<float>(gj);
    __syncthreads();
}

}  // namespace cortiq::encode::cuda
