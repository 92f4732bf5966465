// The batched column-search kernel of gptq_v (the first device version, kept
// as an alternative: Tuning::gptq_kernel = batched). The block evaluates a
// window of bits at once against the current state and takes the first
// candidate, as the sequential scan would; the K rows of the next few
// candidates are fetched together, and each later candidate is taken only if
// it is still a candidate and no bit between has become one: the sequential
// scan's result, one L2 round trip per batch and two barriers per flip.
#include <algorithm>

#include "encode/cuda/gptq_v_kernels.hpp"

namespace cortiq::encode::cuda {

namespace {

constexpr int kMaxThreads = 512;

// Candidates whose K rows are fetched per batch: Q·Ept registers (≤ 32).
__host__ __device__ constexpr int max_prefetch(int ept) {
    return ept >= 32 ? 1 : (32 / ept < 8 ? 32 / ept : 8);
}

template <int Ept, int Q>
__global__ void __launch_bounds__(kMaxThreads) k_gptq_block(GptqArgs a, int nb) {
    block_columns(a);
    static_assert(Q >= 1 && Q <= max_prefetch(Ept));
    extern __shared__ float sm[];
    const int64_t r = a.r;
    const int T = blockDim.x, t = threadIdx.x, lane = t & 31, warp = t >> 5, nw = T >> 5;
    float* ks = sm;
    float* bv = ks + r;
    float* sg = bv + r;
    float* kd = sg + r;
    float* eb = kd + r;         // nb × r errors of this block's columns
    float* ucol = eb + nb * r;  // Uc[j0 + q, j] of the current column
    __shared__ unsigned wmask[32];
    __shared__ int cand[8];
    __shared__ int ncand;
    __shared__ float c0v[4];  // the first candidate's sg, bv, ks, kd
    __shared__ double red[2][32];

    for (int k = 0; k < Ept; ++k) {
        const int64_t y = t + static_cast<int64_t>(k) * T;
        if (y < r) kd[y] = a.kd[y];
    }
    unsigned long long total = 0, npass = 0;
    for (int64_t j = a.j0; j < a.j1; ++j) {
        double alpha, beta;  // α = sᵀb, β = sᵀKs, known to every thread
        gptq_load_column(a, j, ucol, eb, bv, ks, sg, red, alpha, beta);
        for (int pass = 0; pass < a.passes; ++pass) {
            ++npass;
            int nflip = 0;
            int64_t pos = 0;
            while (pos < r) {
                __syncthreads();  // the last batch's updates are visible
                {
                    const int64_t x = pos + t;
                    const bool c =
                        x < r && gptq_gain(sg[x], bv[x], ks[x], kd[x], alpha, beta, a.tol);
                    const unsigned mk = __ballot_sync(0xffffffffu, c);
                    if (lane == 0) wmask[warp] = mk;
                }
                __syncthreads();
                if (warp == 0) {
                    // the first Q candidates in scan order
                    unsigned mw = lane < nw ? wmask[lane] : 0u;
                    const int cnt = __popc(mw);
                    int incl = cnt;
                    for (int o = 1; o < 32; o <<= 1) {
                        const int v = __shfl_up_sync(0xffffffffu, incl, o);
                        if (lane >= o) incl += v;
                    }
                    int at = incl - cnt;
                    while (mw && at < Q) {
                        const int64_t x = pos + lane * 32 + (__ffs(mw) - 1);
                        cand[at] = static_cast<int>(x);
                        if (at == 0) {
                            c0v[0] = sg[x];
                            c0v[1] = bv[x];
                            c0v[2] = ks[x];
                            c0v[3] = kd[x];
                        }
                        ++at;
                        mw &= mw - 1;
                    }
                    const int tot = __shfl_sync(0xffffffffu, incl, 31);
                    if (lane == 0) ncand = tot < Q ? tot : Q;
                }
                __syncthreads();
                const int nq = ncand;
                if (nq == 0) {
                    pos += T;
                    continue;
                }
                float kr[Q][Ept];
#pragma unroll
                for (int i = 0; i < Q; ++i) {
                    if (i < nq) {
                        const int64_t ci = cand[i];
#pragma unroll
                        for (int k = 0; k < Ept; ++k) {
                            const int64_t y = t + static_cast<int64_t>(k) * T;
                            kr[i][k] = y < r ? __ldg(a.k + ci * r + y) : 0.f;
                        }
                    }
                }
                // the first candidate is the next flip of the sequential scan
                {
                    const int c0 = cand[0];
                    const float old = c0v[0];
                    alpha = alpha - 2.0 * old * c0v[1];
                    beta = beta - 4.0 * old * c0v[2] + 4.0 * c0v[3];
                    if (t == 0) sg[c0] = -old;
#pragma unroll
                    for (int k = 0; k < Ept; ++k) {
                        const int64_t y = t + static_cast<int64_t>(k) * T;
                        if (y < r) ks[y] -= 2.f * old * kr[0][k];
                    }
                    ++nflip;
                }
                int64_t next = -1;
#pragma unroll
                for (int i = 1; i < Q; ++i) {
                    if (i < nq && next < 0) {
                        __syncthreads();  // the previous flip's updates are visible
                        const int64_t prev = cand[i - 1], ci = cand[i];
                        const int64_t x = pos + t;
                        const bool fresh =
                            x > prev && x < ci && x < r &&
                            gptq_gain(sg[x], bv[x], ks[x], kd[x], alpha, beta, a.tol);
                        const float sgc = sg[ci], bvc = bv[ci], ksc = ks[ci], kdc = kd[ci];
                        const bool still = gptq_gain(sgc, bvc, ksc, kdc, alpha, beta, a.tol);
                        const int anynew = __syncthreads_or(fresh);  // all reads done
                        if (anynew) {
                            next = prev + 1;
                        } else if (!still) {
                            next = ci + 1;
                        } else {
                            alpha = alpha - 2.0 * sgc * bvc;
                            beta = beta - 4.0 * sgc * ksc + 4.0 * kdc;
                            if (t == 0) sg[ci] = -sgc;
#pragma unroll
                            for (int k = 0; k < Ept; ++k) {
                                const int64_t y = t + static_cast<int64_t>(k) * T;
                                if (y < r) ks[y] -= 2.f * sgc * kr[i][k];
                            }
                            ++nflip;
                        }
                    }
                }
                pos = next >= 0 ? next : static_cast<int64_t>(cand[nq - 1]) + 1;
            }
            total += static_cast<unsigned long long>(nflip);
            if (nflip == 0) break;
        }
        __syncthreads();
        gptq_store_column(a, j, eb, bv, ks, sg, alpha, beta);
    }
    if (t == 0 && total) atomicAdd(a.flips, total);
    if (t == 0) atomicAdd(a.passes_run, npass);
}

}  // namespace

GptqPlan plan_batched(const Gpu& g, int64_t r, int block, int threads, int prefetch) {
    GptqPlan l;
    l.threads = threads > 0 ? std::min(threads, kMaxThreads) : (r <= 256 ? 256 : kMaxThreads);
    const int64_t need = (r + l.threads - 1) / l.threads;
    while (l.ept < need) l.ept *= 2;
    if (l.ept > 32) return l;  // nb = 0: unsupported
    l.prefetch = max_prefetch(l.ept);
    if (prefetch > 0)
        while (l.prefetch > prefetch) l.prefetch /= 2;
    fit_columns(l, g, r, block, 4 * r * static_cast<int64_t>(sizeof(float)), 1024);
    return l;
}

namespace {

template <int Ept, int Q>
void launch(const Gpu& g, const GptqArgs& a, const GptqPlan& p) {
    k_gptq_block<Ept, Q><<<p.grid, p.threads, p.smem, g.stream()>>>(a, p.nb);
    CUDA_LAUNCH_CHECK();
}

// f(the kernel's instantiation for the plan): every (Ept, Q ≤ max_prefetch(Ept))
template <int Ept, class F>
void with_q(const GptqPlan& p, F&& f) {
    constexpr int qm = max_prefetch(Ept);
    // every branch is instantiated: the ternaries keep Q within max_prefetch(Ept)
    if (p.prefetch >= 8 && qm >= 8) return f.template operator()<Ept, (qm >= 8 ? 8 : 1)>();
    if (p.prefetch >= 4 && qm >= 4) return f.template operator()<Ept, (qm >= 4 ? 4 : 1)>();
    if (p.prefetch >= 2 && qm >= 2) return f.template operator()<Ept, (qm >= 2 ? 2 : 1)>();
    return f.template operator()<Ept, 1>();
}

template <class F>
void with_kernel(const GptqPlan& p, F&& f) {
    switch (p.ept) {
        case 1:
            return with_q<1>(p, f);
        case 2:
            return with_q<2>(p, f);
        case 4:
            return with_q<4>(p, f);
        case 8:
            return with_q<8>(p, f);
        case 16:
            return with_q<16>(p, f);
        default:
            return with_q<32>(p, f);
    }
}

struct Prepare {
    template <int Ept, int Q>
    void operator()() const {
        raise_smem_limit(k_gptq_block<Ept, Q>);
    }
};

struct Launch {
    const Gpu& g;
    const GptqArgs& a;
    const GptqPlan& p;
    template <int Ept, int Q>
    void operator()() const {
        launch<Ept, Q>(g, a, p);
    }
};

}  // namespace

void prepare_batched(const GptqPlan& p) {
    with_kernel(p, Prepare{});  // plan_batched keeps every plan within this limit
}

void launch_batched(const Gpu& g, const GptqArgs& a, const GptqPlan& p) {
    with_kernel(p, Launch{g, a, p});
}

}  // namespace cortiq::encode::cuda
