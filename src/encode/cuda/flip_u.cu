// Stage 7, output side, on the device (SPEC §3.7; cpu/flip_u.cpp): exact
// single-bit flips of every row of S_U,p in greedy passes, one warp per row.
// The warp evaluates 32 consecutive bits at once and takes the first whose
// gain exceeds the tolerance, which is the order of the sequential scan.
#include <cmath>

#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

namespace {

// Row i: f(s) = h² sᵀQs − 2h sᵀb, flipping bit k changes it by
// Δ = 4h²(Q_kk − s_k q_k) + 4h s_k b_k with q = Q s (kept in `qs`, updated per
// flip) and b = ℓ ∘ thg_i. A flip is taken when −Δ > tol·h²·|sᵀq|.
__global__ void k_flip_u(float* su, float* qs, const float* thg, const float* q, const float* qdiag,
                         const float* h, const float* l, int64_t m, int64_t r, double tol,
                         int passes, unsigned long long* flips) {
    const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= m) return;
    float* s = su + row * r;
    float* qv = qs + row * r;
    const float* t = thg + row * r;
    const double hh = h[row];
    auto dot_sq = [&]() {
        double acc = 0;
        for (int64_t k = lane; k < r; k += 32) acc += static_cast<double>(s[k]) * qv[k];
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        return acc;
    };
    double sqs = dot_sq();
    unsigned long long total = 0;
    for (int pass = 0; pass < passes; ++pass) {
        int64_t nflip = 0;
        for (int64_t base = 0; base < r; base += 32) {
            int64_t from = base;  // bits below `from` in this chunk are done
            while (true) {
                const int64_t k = base + lane;
                bool cand = false;
                if (k < r && k >= from) {
                    const double sk = s[k];
                    const double bk = static_cast<double>(l[k]) * t[k];
                    const double delta =
                        4 * hh * hh * (static_cast<double>(qdiag[k]) - sk * qv[k]) +
                        4 * hh * sk * bk;
                    cand = -delta > tol * hh * hh * fabs(sqs) + 1e-300;
                }
                const unsigned mask = __ballot_sync(0xffffffffu, cand);
                if (!mask) break;
                const int64_t kf = base + __ffs(mask) - 1;
                const float old = s[kf];
                __syncwarp();
                if (lane == 0) s[kf] = -old;
                const float* qrow = q + kf * r;  // column kf of the symmetric Q
                for (int64_t k2 = lane; k2 < r; k2 += 32) qv[k2] -= 2.f * old * qrow[k2];
                __syncwarp();
                sqs = dot_sq();
                ++nflip;
                from = kf + 1;
            }
        }
        total += static_cast<unsigned long long>(nflip);
        if (nflip == 0) break;
    }
    if (lane == 0 && total) atomicAdd(flips, total);
}

}  // namespace

int64_t flip_u(DeviceFactors& factors, const TensorContext& c, size_t p, double tol, int passes) {
    StageTimer timer(c, "flip_u");
    const cudaStream_t st = c.stream();
    const int64_t m = factors.m, r = factors.r;
    Path& path = factors.paths[p];
    const DMat right = factors.right(st, p);
    const DMat& h_right = factors.h_right(c, p);
    const DMat k = mm(c.gpu, right, true, h_right, false, c.big(factors.n));  // K = rightᵀ H right
    DMat qm(r, r, st);
    DVec qdiag(r, st);
    row_error_matrix(st, k.data(), path.l.get(), qm.data(), qdiag.get(), r);
    // T H right = W H right − Σ_{q≠p} left_q (right_qᵀ H right)
    DMat thg = factors.wh_right(c, p).clone(st);
    for (size_t q = 0; q < factors.paths.size(); ++q) {
        if (q == p) continue;
        const DMat kq = mm(c.gpu, factors.right(st, q), true, h_right, false, c.big(factors.n));
        mm_into(c.gpu, -1.f, factors.left(st, q), false, kq, false, 1.f, thg, c.big(r));
    }
    DMat qs = mm(c.gpu, path.su, false, qm, false, c.big(r), kExactA);  // rows: Q s_i
    DeviceBuffer<unsigned long long> flips(1, st);
    CUDA_CHECK(cudaMemsetAsync(flips.get(), 0, sizeof(unsigned long long), st));
    constexpr int kThreads = 256;
    const int64_t blocks = (m * 32 + kThreads - 1) / kThreads;
    k_flip_u<<<static_cast<unsigned>(blocks), kThreads, 0, st>>>(
        path.su.data(), qs.data(), thg.data(), qm.data(), qdiag.get(), path.h.get(), path.l.get(),
        m, r, flip_tol_f32(tol), passes, flips.get());
    CUDA_LAUNCH_CHECK();
    unsigned long long total = 0;
    CUDA_CHECK(cudaMemcpyAsync(&total, flips.get(), sizeof total, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    if (c.prof) c.prof->add("flip_u.flips", 0, static_cast<long long>(total));
    return static_cast<int64_t>(total);
}

}  // namespace cortiq::encode::cuda
