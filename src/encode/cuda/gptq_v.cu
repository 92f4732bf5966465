// Stage 7, input side, on the device (SPEC §3.7; cpu/gptq_v.cpp). The columns
// of S_V,p in act order, carried in the latent space: b_j = Mᵀ t_j for every
// column is one GEMM up front; a block of columns runs inside one thread block
// (sequential over columns, parallel over r), each column's scaled latent
// error e_j = (b_j − g_j K s_j)/Uc[j,j] feeds the later columns of its block
// from shared memory, and the trailing update of the later blocks is a GEMM.
//
// The search of one column scans its r bits in order and flips a bit when
// (sᵀb)²/sᵀKs rises by more than the tolerance, updating ks = K s. Two
// kernels make the sequential scan's decisions: the batched one
// (gptq_v_batched.cu, the default) and the windowed one here
// (Tuning::gptq_windowed), which splits the bits into windows of 32: one warp
// (the decider) scans a window with the warp's lanes holding its bits — a flip
// updates the window from a 32×32 block of K in shared memory, no barrier —
// while the other warps (helpers) apply the previous window's flips to the
// rest of ks from K's rows in L2 and fetch the next window's K blocks; one
// barrier per window. Measured on the H200 it is slower than the batched
// kernel: 69.7 s against 40.3 s for 4096×11008 and 25.5 s against 15.6 s for
// 11008×4096 (same errors), after the helpers' loads were batched (kLd, kY·kF
// in flight), which halved its time from 3-4x the batched kernel's. Every
// window still waits at the barrier for the helpers' L2 round trips; a deeper
// pipeline (helpers several windows ahead, flags instead of a barrier) would
// have to hide them.
#include <algorithm>
#include <cmath>

#include "encode/cuda/gptq_v_kernels.hpp"
#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

namespace {

constexpr int kWin = 32;
constexpr int kBlockFloats = 2 * kWin * kWin;  // one buffer: the diagonal and the cross block

__global__ void __launch_bounds__(512) k_gptq_windowed(GptqArgs a, int nb) {
    extern __shared__ float sm[];
    const int64_t r = a.r;
    const int T = blockDim.x, t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int64_t nwin = (r + kWin - 1) / kWin;
    float* ks = sm;
    float* bv = ks + r;
    float* sg = bv + r;
    float* kd = sg + r;
    float* kblk = kd + r;                 // [2][diag 32×32, cross 32×32]
    float* eb = kblk + 2 * kBlockFloats;  // nb × r errors of this block's columns
    float* ucol = eb + nb * r;            // Uc[j0 + q, j] of the current column
    __shared__ int flist[2][kWin];        // flips of the last two windows (absolute bit)
    __shared__ float fold[2][kWin];       // and the signs they had
    __shared__ int fcount[2];
    __shared__ double red[2][32];
    __shared__ double ab[2];
    __shared__ int pass_flips;

    for (int64_t y = t; y < r; y += T) kd[y] = a.kd[y];
    const int ht = t - kWin, hthreads = T - kWin;  // helper index (warps 1..)

    // K[rows0 + i][cols0 + jx] for the 32×32 block into dst (helpers or all).
    // The loads of a thread are issued together (kLd in flight) before any
    // store: the helpers' work is a few L2 round trips, not one per element.
    constexpr int kLd = 4;
    auto load_block = [&](float* dst, int64_t rows0, int64_t cols0, int idx0, int stride) {
        for (int e0 = idx0; e0 < kWin * kWin; e0 += kLd * stride) {
            float v[kLd];
#pragma unroll
            for (int i = 0; i < kLd; ++i) {
                const int e = e0 + i * stride;
                const int64_t row = rows0 + e / kWin, col = cols0 + e % kWin;
                v[i] = e < kWin * kWin && row >= 0 && row < r && col < r
                           ? __ldg(a.k + row * r + col)
                           : 0.f;
            }
#pragma unroll
            for (int i = 0; i < kLd; ++i)
                if (e0 + i * stride < kWin * kWin) dst[e0 + i * stride] = v[i];
        }
    };
    // ks[y] −= 2 Σ_f old_f K[f][y] for the flips of one list, y outside [lo, hi):
    // kY entries of ks per thread and kF flips at a time, all kY·kF loads in
    // flight before the sums (the flips are summed in list order, as before).
    constexpr int kY = 4, kF = 8;
    auto apply = [&](int list, int64_t lo, int64_t hi, int idx0, int stride) {
        const int pc = fcount[list];
        if (pc == 0) return;
        for (int64_t y0 = idx0; y0 < r; y0 += static_cast<int64_t>(kY) * stride) {
            float acc[kY] = {};
            for (int q0 = 0; q0 < pc; q0 += kF) {
                float kv[kF][kY];
#pragma unroll
                for (int i = 0; i < kF; ++i) {
                    const int64_t row =
                        q0 + i < pc ? static_cast<int64_t>(flist[list][q0 + i]) * r : -1;
#pragma unroll
                    for (int e = 0; e < kY; ++e) {
                        const int64_t y = y0 + static_cast<int64_t>(e) * stride;
                        kv[i][e] = row >= 0 && y < r ? __ldg(a.k + row + y) : 0.f;
                    }
                }
#pragma unroll
                for (int i = 0; i < kF; ++i) {
                    const float f = q0 + i < pc ? fold[list][q0 + i] : 0.f;
#pragma unroll
                    for (int e = 0; e < kY; ++e) acc[e] += f * kv[i][e];
                }
            }
#pragma unroll
            for (int e = 0; e < kY; ++e) {
                const int64_t y = y0 + static_cast<int64_t>(e) * stride;
                if (y < r && (y < lo || y >= hi)) ks[y] -= 2.f * acc[e];
            }
        }
    };

    unsigned long long total = 0, npass = 0;
    for (int64_t j = a.j0; j < a.j1; ++j) {
        double alpha, beta;  // α = sᵀb, β = sᵀKs (the decider's copy is current)
        gptq_load_column(a, j, ucol, eb, bv, ks, sg, red, alpha, beta);
        for (int pass = 0; pass < a.passes; ++pass) {
            ++npass;
            load_block(kblk, 0, 0, t, T);  // window 0's diagonal block into buffer 0
            if (t == 0) fcount[1] = 0;     // no flips before window 0
            __syncthreads();
            int nflip = 0;
            for (int64_t w = 0; w < nwin; ++w) {
                const int cur = static_cast<int>(w & 1), prev = cur ^ 1;
                const int64_t base = w * kWin;
                if (warp == 0) {
                    // the decider: bit base + lane of this window per lane
                    const int64_t y = base + lane;
                    const bool valid = y < r;
                    float ks_l = valid ? ks[y] : 0.f;
                    const float bv_l = valid ? bv[y] : 0.f, kd_l = valid ? kd[y] : 1.f;
                    float sg_l = valid ? sg[y] : 1.f;
                    const float* kdiag = kblk + cur * kBlockFloats;
                    const float* kcross = kdiag + kWin * kWin;
                    // the previous window's flips reach this window through K[w-1, w]
                    for (int q = 0; q < fcount[prev]; ++q)
                        ks_l -= 2.f * fold[prev][q] *
                                kcross[(flist[prev][q] - (base - kWin)) * kWin + lane];
                    int from = 0, nloc = 0;
                    while (true) {
                        const bool c = valid && lane >= from &&
                                       gptq_gain(sg_l, bv_l, ks_l, kd_l, alpha, beta, a.tol);
                        const unsigned mk = __ballot_sync(0xffffffffu, c);
                        if (!mk) break;
                        const int cb = __ffs(mk) - 1;
                        const float old = __shfl_sync(0xffffffffu, sg_l, cb);
                        const float bc = __shfl_sync(0xffffffffu, bv_l, cb);
                        const float ksc = __shfl_sync(0xffffffffu, ks_l, cb);
                        const float kdc = __shfl_sync(0xffffffffu, kd_l, cb);
                        alpha = alpha - 2.0 * old * bc;
                        beta = beta - 4.0 * old * ksc + 4.0 * kdc;
                        ks_l -= 2.f * old * kdiag[cb * kWin + lane];
                        if (lane == cb) sg_l = -sg_l;
                        if (lane == 0) {
                            flist[cur][nloc] = static_cast<int>(base + cb);
                            fold[cur][nloc] = old;
                        }
                        ++nloc;
                        from = cb + 1;
                    }
                    if (lane == 0) fcount[cur] = nloc;
                    if (valid) {
                        ks[y] = ks_l;
                        sg[y] = sg_l;
                    }
                    nflip += nloc;
                } else {
                    // helpers: the previous window's flips to all of ks but windows w-1 and w
                    apply(prev, base - kWin, base + kWin, ht, hthreads);
                    if (w + 1 < nwin) {  // the next window's blocks: K[w+1, w+1], K[w, w+1]
                        float* dst = kblk + prev * kBlockFloats;
                        load_block(dst, base + kWin, base + kWin, ht, hthreads);
                        load_block(dst + kWin * kWin, base, base + kWin, ht, hthreads);
                    }
                }
                __syncthreads();
            }
            // the last window's flips to every other window
            const int last = static_cast<int>((nwin - 1) & 1);
            apply(last, (nwin - 1) * kWin, nwin * kWin, t, T);
            if (t == 0) {
                ab[0] = alpha;
                ab[1] = beta;
                pass_flips = nflip;
            }
            __syncthreads();
            alpha = ab[0];
            beta = ab[1];
            const int pf = pass_flips;
            total += static_cast<unsigned long long>(pf);
            __syncthreads();  // pass_flips and ab are read before they are rewritten
            if (pf == 0) break;
        }
        gptq_store_column(a, j, eb, bv, ks, sg, alpha, beta);
    }
    if (t == 0 && total) atomicAdd(a.flips, total);
    if (t == 0) atomicAdd(a.passes_run, npass);
}

}  // namespace

GptqPlan plan_windowed(const Gpu& g, int64_t r, int block) {
    GptqPlan l;
    l.threads = r <= 1024 ? 256 : 512;
    const int64_t fixed = (4 * r + 2 * kBlockFloats) * static_cast<int64_t>(sizeof(float));
    const int64_t avail = static_cast<int64_t>(g.smem_optin()) - fixed - 2048;
    const int64_t per_col = (r + 1) * static_cast<int64_t>(sizeof(float));
    l.nb = static_cast<int>(std::clamp<int64_t>(avail / per_col, 0, std::max(block, 1)));
    l.smem = static_cast<size_t>(fixed + l.nb * per_col);
    return l;
}

void prepare_windowed(const GptqPlan& p) {
    (void)p;  // the device maximum, the same from every thread (see prepare_batched)
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaFuncAttributes fa{};
    CUDA_CHECK(cudaFuncGetAttributes(&fa, k_gptq_windowed));
    CUDA_CHECK(cudaFuncSetAttribute(k_gptq_windowed, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    optin - static_cast<int>(fa.sharedSizeBytes)));
}

void launch_windowed(const Gpu& g, const GptqArgs& a, const GptqPlan& p) {
    k_gptq_windowed<<<1, p.threads, p.smem, g.stream()>>>(a, p.nb);
    CUDA_LAUNCH_CHECK();
}

int64_t gptq_v_max_rank() {
    return 16384;  // 4 r floats of shared memory per block (227 KiB on sm_90)
}

int64_t gptq_v(Model& md, const TensorContext& c, size_t p, double tol, int passes, int block,
               bool feedback) {
    StageTimer timer(c, "gptq_v");
    const cudaStream_t st = c.stream();
    const int64_t n = md.n, r = md.r;
    const bool windowed = c.tuning.gptq_windowed;
    const GptqPlan l = windowed ? plan_windowed(c.gpu, r, block)
                                : plan_batched(c.gpu, r, block, c.tuning.gptq_threads);
    CORTIQ_CHECK(r <= gptq_v_max_rank() && l.nb >= 1,
                 "gptq_v: rank {} is above the device column search's limit ({} bytes of shared "
                 "memory per block); use the CPU encoder",
                 r, c.gpu.smem_optin());
    Path& path = md.paths[p];
    const DMat mm_p = md.hsl(st, p);
    const DMat k = mm(c.gpu, mm_p, true, mm_p, false, c.big(md.m));
    DVec kd(r, st);
    diag_of(st, k.data(), kd.get(), r);
    // Mᵀ t_j for every column: (W − Σ_{q≠p} Ŵ_q)ᵀ M
    DMat bn = mm(c.gpu, c.d.w, true, mm_p, false, c.big(md.m));
    for (size_t q = 0; q < md.paths.size(); ++q) {
        if (q == p) continue;
        const DMat t = mm(c.gpu, md.hsl(st, q), true, mm_p, false, c.big(md.m));
        mm_into(c.gpu, -1.f, md.gs(st, q), false, t, false, 1.f, bn, c.big(r));
    }
    DMat b(n, r, st), s(n, r, st);
    permute_rows(st, bn.data(), b.data(), c.ic.perm_d.get(), n, r, false);
    bn = DMat();
    permute_rows(st, path.sv.data(), s.data(), c.ic.perm_d.get(), n, r, false);
    const DMat ks0 = mm(c.gpu, s, false, k, false, c.big(r), kExactA);
    DMat e(n, r, st);
    DVec gv(n, st);
    DeviceBuffer<unsigned long long> counts(2, st);  // flips, passes run
    CUDA_CHECK(cudaMemsetAsync(counts.get(), 0, 2 * sizeof(unsigned long long), st));
    GptqArgs a{b.data(),
               s.data(),
               ks0.data(),
               k.data(),
               kd.get(),
               c.ic.uc.data(),
               e.data(),
               gv.get(),
               n,
               r,
               0,
               0,
               flip_tol_f32(tol),
               passes,
               feedback ? 1 : 0,
               counts.get(),
               counts.get() + 1};
    if (windowed)
        prepare_windowed(l);
    else
        prepare_batched(l);
    for (int64_t j0 = 0; j0 < n; j0 += l.nb) {
        const int64_t j1 = std::min(n, j0 + l.nb);
        a.j0 = j0;
        a.j1 = j1;
        if (windowed)
            launch_windowed(c.gpu, a, l);
        else
            launch_batched(c.gpu, a, l);
        if (!feedback || j1 >= n) continue;
        // trailing update: B[j1:] −= Uc[j0:j1, j1:]ᵀ E[j0:j1]
        gemm(c.gpu, true, false, n - j1, r, j1 - j0, -1.f, c.ic.uc.data() + j0 * n + j1, n,
             e.data() + j0 * r, r, 1.f, b.data() + j1 * r, r);
    }
    permute_rows(st, s.data(), path.sv.data(), c.ic.perm_d.get(), n, r, true);
    scatter(st, gv.get(), path.g.get(), c.ic.perm_d.get(), n);
    path.invalidate();
    unsigned long long total[2] = {0, 0};
    CUDA_CHECK(cudaMemcpyAsync(total, counts.get(), sizeof total, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    if (c.prof) {
        c.prof->add("gptq_v.flips", 0, static_cast<long long>(total[0]));
        c.prof->add("gptq_v.passes", 0, static_cast<long long>(total[1]));
    }
    return static_cast<int64_t>(total[0]);
}

}  // namespace cortiq::encode::cuda
