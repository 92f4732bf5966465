// Stage 7, output side (SPEC §3.7): exact single-bit flips of every row of
// S_U,p. With t_i the row's target (W minus the other paths), the row's error
// in the H metric is, up to a constant,
//   f(s) = h² sᵀ Q s − 2 h sᵀ b,   Q = diag(ℓ) (rightᵀ H right) diag(ℓ),
//   b = ℓ ∘ (rightᵀ H t_iᵀ),
// and flipping bit k changes it by Δ = 4h² (Q_kk − s_k (Qs)_k) + 4h s_k b_k.
#include <cmath>

#include "core/parallel.hpp"
#include "encode/cpu/stages.hpp"
#include "linalg/blas.hpp"

namespace cortiq::encode::cpu {

int64_t flip_u(blr::Factors& factors, const TensorContext& c, size_t p, double tol, int passes) {
    ScopedStage st(c.prof, "flip_u");
    const int64_t m = factors.m, r = factors.r;
    blr::Path& path = factors.paths[p];
    const MatD right = factors.right(p);
    const MatD h_right = la::gemm(c.input_ctx.h, false, right, false);
    MatD qm = la::gemm(right, true, h_right, false);  // K
    for (int64_t k = 0; k < r; ++k)
        for (int64_t k2 = 0; k2 < r; ++k2) qm(k, k2) *= path.l[k] * path.l[k2];
    // T H right = W H right − Σ_{q≠p} left_q (right_qᵀ H right)
    MatD thg = la::gemm(c.wh, false, right, false);
    for (size_t q = 0; q < factors.paths.size(); ++q) {
        if (q == p) continue;
        la::gemm_into(-1.0, factors.left(q), false,
                      la::gemm(factors.right(q), true, h_right, false), false, 1.0, thg);
    }
    const MatD qs0 = la::gemm(path.su, false, qm, false);  // rows: Q s_i
    std::vector<int64_t> flips(m, 0);
    parallel_for(
        0, m,
        [&](int64_t i) {
            const double h = path.h[i];
            double* s = path.su.row(i);
            VecD q(qs0.row(i), qs0.row(i) + r);
            double sqs = la::dot(s, q.data(), r);
            for (int pass = 0; pass < passes; ++pass) {
                int64_t nflip = 0;
                for (int64_t k = 0; k < r; ++k) {
                    const double bk = path.l[k] * thg(i, k);
                    const double delta = 4 * h * h * (qm(k, k) - s[k] * q[k]) + 4 * h * s[k] * bk;
                    if (-delta > tol * h * h * std::abs(sqs) + 1e-300) {
                        const double old = s[k];
                        s[k] = -old;
                        for (int64_t k2 = 0; k2 < r; ++k2) q[k2] -= 2 * old * qm(k2, k);
                        sqs = la::dot(s, q.data(), r);
                        ++nflip;
                    }
                }
                flips[i] += nflip;
                if (nflip == 0) break;
            }
        },
        16);
    int64_t total = 0;
    for (auto f : flips) total += f;
    if (c.prof) c.prof->add("flip_u.flips", 0, total);
    return total;
}

}  // namespace cortiq::encode::cpu
