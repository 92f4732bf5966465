// Stage 3: the weighted ITQ gauge (SPEC §3.3). Alternates B = w² ∘ sign(X R)
// (the best signs for R) and R = polar(Xᵀ B) (the best rotation for B): each
// half-step maximises Σ_i w²_i ⟨b_i, x_i R⟩, so the objective Σ_i w²_i ‖x_i R‖₁
// never decreases.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "encode/cpu/stages.hpp"
#include "linalg/blas.hpp"

namespace cortiq::encode::cpu {

std::pair<VecD, VecD> itq_weights(const MatD& up, const MatD& vp, const InputContext& input_ctx) {
    VecD wu(up.rows()), wv(vp.rows());
    for (int64_t i = 0; i < up.rows(); ++i)
        wu[i] = std::sqrt(la::dot(up.row(i), up.row(i), up.cols()));
    for (int64_t j = 0; j < vp.rows(); ++j)
        wv[j] = std::sqrt(la::dot(vp.row(j), vp.row(j), vp.cols())) * input_ctx.sqd[j];
    return {wu, wv};
}

ItqResult itq(const MatD& up, const MatD& vp, const VecD& wu, const VecD& wv, int iters,
              bool eig_polar) {
    const int64_t m = up.rows(), n = vp.rows(), r = up.cols(), nn = m + n;
    MatD x(nn, r);
    VecD w2(nn);
    double mean = 0;
    for (int64_t i = 0; i < nn; ++i) {
        const double* src = i < m ? up.row(i) : vp.row(i - m);
        const double nr = std::sqrt(la::dot(src, src, r));
        for (int64_t k = 0; k < r; ++k) x(i, k) = nr > 0 ? src[k] / nr : 0.0;
        const double w = i < m ? wu[i] : wv[i - m];
        w2[i] = w * w;
        mean += w2[i];
    }
    mean /= static_cast<double>(nn);
    for (auto& v : w2) v /= std::max(mean, 1e-300);

    ItqResult res;
    res.rot = MatD::identity(r);
    MatD xr(nn, r);
    auto objective = [&] {
        double f = 0;
        for (int64_t i = 0; i < nn; ++i) {
            double s = 0;
            for (int64_t k = 0; k < r; ++k) s += std::abs(xr(i, k));
            f += w2[i] * s;
        }
        return f;
    };
    // CORTIQ_ITQ_TRACE=1 (a diagnostic, as on CUDA): per iteration the
    // weighted share of signs that changed (0: a fixed point, after which
    // every iteration repeats the last).
    static const bool trace = std::getenv("CORTIQ_ITQ_TRACE") != nullptr;
    MatD prev;
    for (int it = 0; it < iters; ++it) {
        la::gemm_into(1.0, x, false, res.rot, false, 0.0, xr);
        res.objective.push_back(objective());
        for (int64_t i = 0; i < nn; ++i)
            for (int64_t k = 0; k < r; ++k) xr(i, k) = xr(i, k) >= 0 ? w2[i] : -w2[i];
        if (trace) {
            double changed = 0, total = 0;
            for (int64_t i = 0; i < nn; ++i)
                for (int64_t k = 0; k < r; ++k) {
                    total += w2[i] * w2[i];
                    if (it > 0 && (prev(i, k) >= 0) != (xr(i, k) >= 0)) changed += w2[i] * w2[i];
                }
            std::fprintf(stderr, "itq %lldx%lld it %d: changed %.3e\n", static_cast<long long>(nn),
                         static_cast<long long>(r), it, it > 0 ? changed / total : 1.0);
            prev = xr;
        }
        MatD mm = la::gemm(x, true, xr, false);  // Xᵀ B
        res.rot = eig_polar ? la::polar_eig(mm) : la::polar_newton_schulz(mm);
    }
    la::gemm_into(1.0, x, false, res.rot, false, 0.0, xr);
    res.objective.push_back(objective());
    res.u = la::gemm(up, false, res.rot, false);
    res.v = la::gemm(vp, false, res.rot, false);
    return res;
}

}  // namespace cortiq::encode::cpu
