// The column search of gptq_v by rounds of simultaneous flips
// (Options::gptq_multi = Q > 0; the CPU's column_search_multi in
// cpu/gptq_v.cpp). A round scores every single flip of the column against the
// same state, all bits at once (one per thread and element): flipping bit a
// gives α' = α − 2 s_a b_a and β' = β − 4 s_a (Ks)_a + 4 K_aa, and improves
// when α'²/β' > φ(1 + tol), φ = α²/β. The Q best improving flips (largest
// α'²/β', then the lower bit) are taken when all of them together still
// improve — β over the set exact, β_F = β − 4 Σ_F s_a (Ks)_a + 4 Σ_{a,a'∈F}
// s_a s_a' K_aa' — else the best half, down to the best flip alone, which
// always improves. The rounds end where no single flip helps, where the
// sequential scan also stops.
//
// Why: the sequential scan makes ~470 dependent decisions per column at
// 4096×11008 (12 passes of 1475 bits), each one waiting for the last flip's
// update of Ks; a round makes up to Q of them with one block-wide step.
//
// The block: each warp picks its own best Q by repeated warp arg-max
// (redux.sync on the two halves of the double, then the lowest bit), warp 0
// merges the warps' lists the same way and checks the set, and every thread
// applies the flips to its elements of Ks in the set's order.
//
// Where it stands (H200, bench_encode_gpu --sizes 4096x11008 --gptq-multi 0,8):
// 36.9 s per tensor against 32.1 s with the exact scan; 4.18 M rounds of 5.8
// flips, about 16 µs each; 70 % of the stall cycles at block barriers
// (Nsight Compute). A version with the merge by ranks in every thread (each
// listed candidate counting those before it) and all halvings summed in one
// pass was slower still (41.2 s, commit 81698b6).
#include <algorithm>

#include "encode/cuda/gptq_v_kernels.hpp"

namespace cortiq::encode::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kMerge = kWarps * kMaxGptqMulti / 32;  // entries per lane of the merge

// The CPU's test (Column::improves): φ' > φ(1 + tol) + 1e-300.
__device__ inline bool multi_improves(double phi2, double phi, double tol) {
    return phi2 > phi * (1 + tol) + 1e-300;
}

// α'²/β' of flipping one bit when that improves on φ, else 0 (never a
// candidate: an improving φ' is above 1e-300).
__device__ inline double flip_score(float sa, float ba, float ksa, float kaa, double alpha,
                                    double beta, double phi, double tol) {
    const double alpha2 = alpha - 2.0 * sa * ba;
    const double beta2 = beta - 4.0 * sa * ksa + 4.0 * kaa;
    if (!(beta2 > 0)) return 0.0;
    const double phi2 = alpha2 * alpha2 / beta2;
    return multi_improves(phi2, phi, tol) ? phi2 : 0.0;
}

// One arg-max over the warp: the largest score (scores are ≥ 0, so their bit
// patterns order as their values), then the lowest bit among equal scores.
// `score`/`bit` are the lane's best; returns false when every score is 0.
__device__ inline bool warp_best(double score, unsigned bit, double* best, unsigned* best_bit) {
    const auto bits = static_cast<unsigned long long>(__double_as_longlong(score));
    const auto hi = static_cast<unsigned>(bits >> 32), lo = static_cast<unsigned>(bits);
    const unsigned mhi = __reduce_max_sync(0xffffffffu, hi);
    const unsigned mlo = __reduce_max_sync(0xffffffffu, hi == mhi ? lo : 0u);
    if (mhi == 0 && mlo == 0) return false;
    const bool top = hi == mhi && lo == mlo;
    *best_bit = __reduce_min_sync(0xffffffffu, top ? bit : 0xffffffffu);
    *best = __longlong_as_double(
        static_cast<long long>((static_cast<unsigned long long>(mhi) << 32) | mlo));
    return true;
}

// The warp's best q ≤ Q of `n` scores per lane (score[k] of bit[k], 0: none),
// in order, into out_score/out_bit (lane 0 writes); returns their count.
template <int N>
__device__ inline int warp_top(const double (&score)[N], const unsigned (&bit)[N], int n, int q_max,
                               double* out_score, int* out_bit) {
    const int lane = threadIdx.x & 31;
    unsigned taken = 0;
    int count = 0;
    for (; count < q_max; ++count) {
        double mine = 0;
        int mk = -1;
        unsigned mine_bit = 0xffffffffu;
#pragma unroll
        for (int k = 0; k < N; ++k)
            if (k < n && !(taken >> k & 1u) && score[k] > mine) {  // ties: the lower k
                mine = score[k];
                mk = k;
                mine_bit = bit[k];
            }
        double best;
        unsigned best_bit;
        if (!warp_best(mine, mine_bit, &best, &best_bit)) break;
        if (mk >= 0 && mine_bit == best_bit) taken |= 1u << mk;
        if (lane == 0) {
            out_score[count] = best;
            out_bit[count] = static_cast<int>(best_bit);
        }
    }
    if (lane == 0)
        for (int c = count; c < q_max; ++c) out_score[c] = 0.0;  // the list's end
    return count;
}

constexpr int kRows = 4;  // K rows a thread holds in registers per step of the update

// K[sel[i], y] for the thread's elements y = t + k·T, i < q ≤ kRows, all
// loads issued before any is used.
template <int Ept>
__device__ inline void load_rows(const GptqArgs& a, const int* sel, int q,
                                 float (&kr)[kRows][Ept]) {
    const int t = threadIdx.x, T = blockDim.x;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
        const float* row = a.k + static_cast<int64_t>(i < q ? sel[i] : 0) * a.ldk;
#pragma unroll
        for (int k = 0; k < Ept; ++k) {
            const int64_t y = t + static_cast<int64_t>(k) * T;
            kr[i][k] = i < q && y < a.r ? __ldg(row + y) : 0.f;
        }
    }
}

// Warp 0: the largest of the prefixes qn, qn/2, …, 1 of the ranked candidates
// whose flips together improve φ (α and β over the set exact, in float64),
// into *nsel, their signs before the flip into sel_s and α, β after into ab.
__device__ inline void check_set(const GptqArgs& a, int qn, const int* sel, const float* sg,
                                 const float* bv, const float* ks, double alpha, double beta,
                                 double phi, float* sel_s, int* nsel, double* ab) {
    const int lane = threadIdx.x & 31;
    const int ai = lane < qn ? sel[lane] : 0;
    const float si = lane < qn ? sg[ai] : 0.f;
    const float bi = lane < qn ? bv[ai] : 0.f;
    const float ki = lane < qn ? ks[ai] : 0.f;
    const float* krow = a.k + static_cast<int64_t>(ai) * a.ldk;  // K[a_i, ·]
    int q = qn;
    double alpha_f = alpha, beta_f = beta;
    for (; q >= 1; q /= 2) {
        double da = 0, db = 0, dk = 0;
        if (lane < q) {
            da = static_cast<double>(si) * bi;
            db = static_cast<double>(si) * ki;
        }
#pragma unroll
        for (int i2 = 0; i2 < kMaxGptqMulti; ++i2) {
            const float s2 = __shfl_sync(0xffffffffu, si, i2);
            if (lane < q && i2 < q) dk += static_cast<double>(si) * s2 * krow[sel[i2]];
        }
        for (int o = 16; o > 0; o >>= 1) {
            da += __shfl_xor_sync(0xffffffffu, da, o);
            db += __shfl_xor_sync(0xffffffffu, db, o);
            dk += __shfl_xor_sync(0xffffffffu, dk, o);
        }
        alpha_f = alpha - 2.0 * da;
        beta_f = beta - 4.0 * db + 4.0 * dk;
        // the best flip alone was scored so: it always improves
        if (q == 1 || (beta_f > 0 && multi_improves(alpha_f * alpha_f / beta_f, phi, a.tol))) break;
    }
    if (lane < q) sel_s[lane] = si;
    if (lane == 0) {
        *nsel = q;
        ab[0] = alpha_f;
        ab[1] = beta_f;
    }
}

template <int Ept>
__global__ void __launch_bounds__(kThreads) k_gptq_multi(GptqArgs a, int nb) {
    block_columns(a);
    extern __shared__ float sm[];
    const int64_t r = a.r;
    const int T = blockDim.x, t = threadIdx.x, lane = t & 31, warp = t >> 5, nw = T >> 5;
    const int qm = a.multi;
    float* ks = sm;
    float* bv = ks + r;
    float* sg = bv + r;
    float* kd = sg + r;
    float* eb = kd + r;                               // nb × r errors of this block's columns
    float* ucol = eb + nb * r;                        // Uc[j0 + q, j] of the current column
    __shared__ double wscore[kWarps][kMaxGptqMulti];  // each warp's best, 0 past its end
    __shared__ int wbit[kWarps][kMaxGptqMulti];
    double* wscore_flat = &wscore[0][0];  // warp w's list at w·Q (the lists are packed)
    int* wbit_flat = &wbit[0][0];
    __shared__ int ncand;
    __shared__ int sel[kMaxGptqMulti];      // the flips of this round, in order
    __shared__ float sel_s[kMaxGptqMulti];  // their signs before the flip
    __shared__ double top_score[kMaxGptqMulti];
    __shared__ int nsel;
    __shared__ double ab[2];
    __shared__ double red[2][32];

    for (int k = 0; k < Ept; ++k) {
        const int64_t y = t + static_cast<int64_t>(k) * T;
        if (y < r) kd[y] = a.kd[y];
    }
    unsigned long long total = 0, nround = 0;
    const int64_t max_rounds = a.passes * r / qm > 1 ? a.passes * r / qm : 1;  // the CPU's cap
    for (int64_t j = a.j0; j < a.j1; ++j) {
        double alpha, beta;  // α = sᵀb, β = sᵀKs, known to every thread
        gptq_load_column(a, j, ucol, eb, bv, ks, sg, red, alpha, beta);
        for (int64_t round = 0; round < max_rounds; ++round) {
            ++nround;
            const double phi = beta > 0 ? alpha * alpha / beta : 0.0;
            double score[Ept];
            unsigned bit[Ept];
#pragma unroll
            for (int k = 0; k < Ept; ++k) {
                const int64_t y = t + static_cast<int64_t>(k) * T;
                bit[k] = static_cast<unsigned>(y);
                score[k] =
                    y < r ? flip_score(sg[y], bv[y], ks[y], kd[y], alpha, beta, phi, a.tol) : 0.0;
            }
            warp_top(score, bit, Ept, qm, wscore_flat + warp * qm, wbit_flat + warp * qm);
            __syncthreads();
            if (warp == 0) {
                // the block's best Q among the warps' lists (zero-filled past their ends)
                double ms[kMerge];
                unsigned mb[kMerge];
#pragma unroll
                for (int i = 0; i < kMerge; ++i) {
                    const int e = lane + 32 * i;
                    const bool ok = e < nw * qm && wscore_flat[e] > 0;
                    ms[i] = ok ? wscore_flat[e] : 0.0;
                    mb[i] = ok ? static_cast<unsigned>(wbit_flat[e]) : 0xffffffffu;
                }
                const int qn = warp_top(ms, mb, kMerge, qm, top_score, sel);
                if (lane == 0) ncand = qn;
            }
            __syncthreads();
            const int qn = ncand;
            if (qn == 0) break;
            // the K rows of the first candidates, fetched while warp 0 checks the set
            float kr[kRows][Ept];
            load_rows(a, sel, qn < kRows ? qn : kRows, kr);
            if (warp == 0) check_set(a, qn, sel, sg, bv, ks, alpha, beta, phi, sel_s, &nsel, ab);
            __syncthreads();
            const int q = nsel;
            alpha = ab[0];
            beta = ab[1];
            // Ks −= 2 s_a K[a, ·] for each flip in order (the CPU's Column::flip)
            for (int i0 = 0; i0 < q; i0 += kRows) {
                if (i0 > 0) load_rows(a, sel + i0, q - i0 < kRows ? q - i0 : kRows, kr);
#pragma unroll
                for (int i = 0; i < kRows; ++i) {
                    if (i0 + i >= q) break;
                    const float old2 = 2.f * sel_s[i0 + i];
#pragma unroll
                    for (int k = 0; k < Ept; ++k) {
                        const int64_t y = t + static_cast<int64_t>(k) * T;
                        if (y < r) ks[y] -= old2 * kr[i][k];
                    }
                }
            }
            if (t < q) sg[sel[t]] = -sel_s[t];
            total += static_cast<unsigned long long>(q);
            __syncthreads();
        }
        __syncthreads();
        gptq_store_column(a, j, eb, bv, ks, sg, alpha, beta);
    }
    if (t == 0 && total) atomicAdd(a.flips, total);
    if (t == 0) atomicAdd(a.passes_run, nround);
}

template <class F>
void with_kernel(const GptqPlan& p, F&& f) {
    switch (p.ept) {
        case 1:
            return f(k_gptq_multi<1>);
        case 2:
            return f(k_gptq_multi<2>);
        case 4:
            return f(k_gptq_multi<4>);
        case 8:
            return f(k_gptq_multi<8>);
        case 16:
            return f(k_gptq_multi<16>);
        default:
            return f(k_gptq_multi<32>);
    }
}

}  // namespace

GptqPlan plan_multi(const Gpu& g, int64_t r, int block) {
    GptqPlan l;
    l.threads = kThreads;
    const int64_t need = (r + l.threads - 1) / l.threads;
    while (l.ept < need) l.ept *= 2;
    if (l.ept > 32) return l;  // nb = 0: unsupported
    // the kernel's static shared memory (the warps' lists, 7 KiB) is reserved
    fit_columns(l, g, r, block, 4 * r * static_cast<int64_t>(sizeof(float)), 8192);
    return l;
}

void prepare_multi(const GptqPlan& p) {
    with_kernel(p, [](auto kernel) { raise_smem_limit(kernel); });
}

void launch_multi(const Gpu& g, const GptqArgs& a, const GptqPlan& p) {
    with_kernel(p, [&](auto kernel) {
        kernel<<<p.grid, p.threads, p.smem, g.stream()>>>(a, p.nb);
        CUDA_LAUNCH_CHECK();
    });
}

}  // namespace cortiq::encode::cuda
