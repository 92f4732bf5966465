// Stage 2: whitened latents (SPEC §3.2). The best rank-r approximation of T in
// the H metric is U_r U_rᵀ T, U_r the top-r left singular vectors of T L
// (H = L Lᵀ); balanced factors U_p = U_r √σ, V_p = Tᵀ U_r / √σ.
#include <algorithm>
#include <cmath>

#include "encode/cpu/stages.hpp"
#include "linalg/blas.hpp"

namespace cortiq::encode::cpu {

std::pair<MatD, MatD> latents(const MatD& t, const MatD* th, const InputContext& input_ctx,
                              int64_t r, bool whiten) {
    const int64_t m = t.rows(), n = t.cols();
    CORTIQ_ASSERT(r >= 1 && r <= std::min(m, n), "latents: rank {} for {}x{}", r, m, n);
    VecD sig;
    MatD ur;
    if (m <= n) {
        // G = T H Tᵀ (m × m): its eigenvectors are the left singular vectors of T L.
        MatD g = whiten ? (th ? la::gemm(*th, false, t, true)
                              : la::gemm(la::gemm(t, false, input_ctx.h, false), false, t, true))
                        : la::syrk(t, false);
        auto [lam, vecs] = la::sym_eig_top(g, r);
        sig.resize(r);
        for (int64_t k = 0; k < r; ++k) sig[k] = std::sqrt(std::max(lam[k], 0.0));
        ur = std::move(vecs);
    } else {
        // (T L)ᵀ (T L) (n × n): right singular vectors V_r; U_r = T L V_r / σ.
        MatD tl = whiten ? la::gemm(t, false, input_ctx.l(), false) : t;
        auto [lam, vr] = la::sym_eig_top(la::syrk(tl, true), r);
        sig.resize(r);
        for (int64_t k = 0; k < r; ++k) sig[k] = std::sqrt(std::max(lam[k], 0.0));
        ur = la::gemm(tl, false, vr, false);
        const double floor = std::max(sig[0], 1e-300) * 1e-15;
        for (int64_t i = 0; i < m; ++i)
            for (int64_t k = 0; k < r; ++k) ur(i, k) /= std::max(sig[k], floor);
    }
    const double floor = std::max(sig[0], 1e-300) * 1e-15;
    MatD up = ur;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t k = 0; k < r; ++k) up(i, k) *= std::sqrt(sig[k]);
    MatD vp = la::gemm(t, true, ur, false);
    for (int64_t j = 0; j < n; ++j)
        for (int64_t k = 0; k < r; ++k) vp(j, k) /= std::sqrt(std::max(sig[k], floor));
    return {std::move(up), std::move(vp)};
}

std::pair<MatD, MatD> residual(const TensorContext& c, const blr::Factors& f, bool with_h) {
    MatD res = c.w, res_h;
    const MatD left = f.left(0), right = f.right(0);
    la::gemm_into(-1.0, left, false, right, true, 1.0, res);
    if (with_h) {
        res_h = c.wh;
        la::gemm_into(-1.0, left, false, la::gemm(c.input_ctx.h, false, right, false), true, 1.0,
                      res_h);
    }
    return {std::move(res), std::move(res_h)};
}

}  // namespace cortiq::encode::cpu
