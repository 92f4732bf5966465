// The row-window column-search kernel of gptq_v (Tuning::gptq_rows). The
// batched kernel (gptq_v_batched.cu) pays one L2 round trip for the K row of
// nearly every flip: each flip changes α, β and so the gain of every later
// bit, and its prefetched candidates rarely survive. Here the block finds the
// first candidate c of the scan, then fetches the K rows of the W bits
// c .. c+W−1 into shared memory at once; one warp decides those W bits in scan
// order from registers and those rows (a flip updates the window's K s from
// the row in shared memory, no barrier), and then every thread applies the
// window's flips to the rest of K s. The decisions are the sequential scan's
// (bits before c are no candidates in the current state; inside the window
// every decision sees every earlier flip): one L2 round trip per window of W
// bits instead of per flip. Measured on the H200 (1.0 bpw, paths auto) it is
// 2-2.4x slower than the batched kernel (4096x11008: 96.9 s against 40.1 s;
// 11008x4096: 30.7 s against 15.8 s, the same held-out errors): fetching W
// whole rows per window costs more L2 bandwidth than the round trips it
// saves, as a window holds few flips. Kept as a measured alternative.
#include <algorithm>

#include "encode/cuda/gptq_v_kernels.hpp"

namespace cortiq::encode::cuda {

namespace {

constexpr int kThreads = 512;

template <int Ept, int W>
__global__ void __launch_bounds__(kThreads) k_gptq_rows(GptqArgs a, int nb) {
    static_assert(W <= 32, "one warp decides a window");
    extern __shared__ float sm[];
    const int64_t r = a.r;
    const int T = blockDim.x, t = threadIdx.x, lane = t & 31, warp = t >> 5, nw = T >> 5;
    float* ks = sm;
    float* bv = ks + r;
    float* sg = bv + r;
    float* kd = sg + r;
    float* rows = kd + r;       // W × r: K rows of the window's bits
    float* eb = rows + W * r;   // nb × r errors of this block's columns
    float* ucol = eb + nb * r;  // Uc[j0 + q, j] of the current column
    __shared__ unsigned wmask[32];
    __shared__ int first;
    __shared__ int nflip_w;
    __shared__ int flist[W];
    __shared__ float fold[W];
    __shared__ double ab[2];
    __shared__ double red[2][32];

    for (int k = 0; k < Ept; ++k) {
        const int64_t y = t + static_cast<int64_t>(k) * T;
        if (y < r) kd[y] = a.kd[y];
    }
    unsigned long long total = 0;
    for (int64_t j = a.j0; j < a.j1; ++j) {
        const int64_t jj = j - a.j0;
        for (int64_t q = t; q < jj; q += T) ucol[q] = a.feedback ? a.uc[(a.j0 + q) * a.n + j] : 0.f;
        __syncthreads();
        double pa = 0, pb = 0;
        for (int k = 0; k < Ept; ++k) {
            const int64_t y = t + static_cast<int64_t>(k) * T;
            if (y >= r) break;
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
        // α = sᵀb, β = sᵀKs, summed in a fixed order, known to every thread
        for (int o = 16; o > 0; o >>= 1) {
            pa += __shfl_xor_sync(0xffffffffu, pa, o);
            pb += __shfl_xor_sync(0xffffffffu, pb, o);
        }
        if (lane == 0) {
            red[0][warp] = pa;
            red[1][warp] = pb;
        }
        __syncthreads();
        double alpha = 0, beta = 0;
        for (int w = 0; w < nw; ++w) {
            alpha += red[0][w];
            beta += red[1][w];
        }
        for (int pass = 0; pass < a.passes; ++pass) {
            int nflip = 0;
            int64_t pos = 0;
            while (pos < r) {
                __syncthreads();  // the last window's updates are visible
                {
                    const int64_t x = pos + t;
                    const bool c =
                        x < r && gptq_gain(sg[x], bv[x], ks[x], kd[x], alpha, beta, a.tol);
                    const unsigned mk = __ballot_sync(0xffffffffu, c);
                    if (lane == 0) wmask[warp] = mk;
                }
                __syncthreads();
                if (t == 0) {
                    int f = -1;
                    for (int w = 0; w < nw && f < 0; ++w)
                        if (wmask[w]) f = w * 32 + __ffs(wmask[w]) - 1;
                    first = f;
                }
                __syncthreads();
                if (first < 0) {
                    pos += T;
                    continue;
                }
                const int64_t c0 = pos + first;
                const int nwin = static_cast<int>(r - c0 < W ? r - c0 : W);
                // the K rows of bits c0 .. c0 + nwin − 1 (coalesced, all threads)
                for (int i = 0; i < nwin; ++i) {
#pragma unroll
                    for (int k = 0; k < Ept; ++k) {
                        const int64_t y = t + static_cast<int64_t>(k) * T;
                        if (y < r) rows[i * r + y] = __ldg(a.k + (c0 + i) * r + y);
                    }
                }
                __syncthreads();
                if (warp == 0) {
                    // lane i holds bit c0 + i; decisions in scan order
                    const int64_t x = c0 + lane;
                    const bool in = lane < nwin;
                    float msg = in ? sg[x] : 0.f, mbv = in ? bv[x] : 0.f;
                    float mks = in ? ks[x] : 0.f, mkd = in ? kd[x] : 0.f;
                    double al = alpha, be = beta;
                    int nf = 0;
                    for (int i = 0; i < nwin; ++i) {
                        const bool take = lane == i && gptq_gain(msg, mbv, mks, mkd, al, be, a.tol);
                        if (!__ballot_sync(0xffffffffu, take)) continue;
                        const float old = __shfl_sync(0xffffffffu, msg, i);
                        const float bvi = __shfl_sync(0xffffffffu, mbv, i);
                        const float ksi = __shfl_sync(0xffffffffu, mks, i);
                        const float kdi = __shfl_sync(0xffffffffu, mkd, i);
                        al = al - 2.0 * old * bvi;
                        be = be - 4.0 * old * ksi + 4.0 * kdi;
                        if (lane == i) msg = -old;
                        if (in) mks -= 2.f * old * rows[i * r + x];
                        if (lane == 0) {
                            flist[nf] = i;
                            fold[nf] = old;
                        }
                        ++nf;
                    }
                    if (in) sg[x] = msg;
                    if (lane == 0) {
                        ab[0] = al;
                        ab[1] = be;
                        nflip_w = nf;
                    }
                }
                __syncthreads();
                alpha = ab[0];
                beta = ab[1];
                const int nf = nflip_w;
                // the window's flips reach every ks (the window's own included)
                if (nf > 0) {
#pragma unroll
                    for (int k = 0; k < Ept; ++k) {
                        const int64_t y = t + static_cast<int64_t>(k) * T;
                        if (y >= r) continue;
                        float acc = 0.f;
                        for (int f = 0; f < nf; ++f) acc += fold[f] * rows[flist[f] * r + y];
                        ks[y] -= 2.f * acc;
                    }
                }
                nflip += nf;
                pos = c0 + nwin;
            }
            total += static_cast<unsigned long long>(nflip);
            if (nflip == 0) break;
        }
        __syncthreads();
        const double gj = beta > 0 ? alpha / beta : 0.0;
        const float inv = 1.f / a.uc[j * a.n + j];
        for (int k = 0; k < Ept; ++k) {
            const int64_t y = t + static_cast<int64_t>(k) * T;
            if (y >= r) break;
            const float ev = (bv[y] - static_cast<float>(gj) * ks[y]) * inv;
            eb[jj * r + y] = ev;
            a.e[j * r + y] = ev;
            a.s[j * r + y] = sg[y];
        }
        if (t == 0) a.g[j] = static_cast<float>(gj);
        __syncthreads();
    }
    if (t == 0 && total) atomicAdd(a.flips, total);
}

// The window: 16 rows while they take at most ~96 KiB of shared memory, else 8.
int window_for(int64_t r) {
    return r <= 1536 ? 16 : 8;
}

template <class Kernel>
void raise_smem_limit(Kernel kernel) {
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaFuncAttributes fa{};
    CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
    // the device maximum, the same value from every thread (see prepare_batched)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    optin - static_cast<int>(fa.sharedSizeBytes)));
}

template <int Ept>
void dispatch_window(const GptqPlan& p, const Gpu* g, const GptqArgs* a) {
    if (p.win == 16) {
        if (g)
            k_gptq_rows<Ept, 16><<<1, p.threads, p.smem, g->stream()>>>(*a, p.nb);
        else
            raise_smem_limit(k_gptq_rows<Ept, 16>);
    } else {
        if (g)
            k_gptq_rows<Ept, 8><<<1, p.threads, p.smem, g->stream()>>>(*a, p.nb);
        else
            raise_smem_limit(k_gptq_rows<Ept, 8>);
    }
}

// g == nullptr: prepare (raise the shared-memory limit); else launch.
void dispatch(const GptqPlan& p, const Gpu* g, const GptqArgs* a) {
    switch (p.ept) {
        case 1:
            return dispatch_window<1>(p, g, a);
        case 2:
            return dispatch_window<2>(p, g, a);
        case 4:
            return dispatch_window<4>(p, g, a);
        case 8:
            return dispatch_window<8>(p, g, a);
        case 16:
            return dispatch_window<16>(p, g, a);
        default:
            return dispatch_window<32>(p, g, a);
    }
}

}  // namespace

GptqPlan plan_rows(const Gpu& g, int64_t r, int block) {
    GptqPlan l;
    l.threads = kThreads;
    const int64_t need = (r + l.threads - 1) / l.threads;
    while (l.ept < need) l.ept *= 2;
    if (l.ept > 32) return l;  // nb = 0: unsupported
    l.win = window_for(r);
    const int64_t fixed = (4 + l.win) * r * static_cast<int64_t>(sizeof(float));
    const int64_t avail = static_cast<int64_t>(g.smem_optin()) - fixed - 2048;
    const int64_t per_col = (r + 1) * static_cast<int64_t>(sizeof(float));
    l.nb = static_cast<int>(std::clamp<int64_t>(avail / per_col, 0, std::max(block, 1)));
    l.smem = static_cast<size_t>(fixed + l.nb * per_col);
    return l;
}

void prepare_rows(const GptqPlan& p) {
    dispatch(p, nullptr, nullptr);
}

void launch_rows(const Gpu& g, const GptqArgs& a, const GptqPlan& p) {
    dispatch(p, &g, &a);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::encode::cuda
