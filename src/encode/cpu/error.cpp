// Errors in a Gram metric X by the factor-sized expansion (SPEC §2):
//   tr(E X Eᵀ) = tr(W X Wᵀ) − 2 Σ_p ⟨left_p, W X right_p⟩ + Σ_{p,q} ⟨left_pᵀ left_q, right_pᵀ X
//   right_q⟩
#include <algorithm>
#include <cmath>

#include "encode/cpu/stages.hpp"
#include "linalg/blas.hpp"

namespace cortiq::encode::cpu {

double err(const blr::Factors& factors, const TensorContext& c, Metric x) {
    const MatD& xg = x == Metric::h     ? c.input_ctx.h
                     : x == Metric::fit ? c.input_ctx.h_fit
                                        : c.input_ctx.h_sel;
    const MatD& wx = x == Metric::h ? c.wh : x == Metric::fit ? c.wh_fit : c.wh_sel;
    const double a = x == Metric::h ? c.a_h : x == Metric::fit ? c.a_fit : c.a_sel;
    const size_t np = factors.paths.size();
    std::vector<MatD> left(np), right(np), xgs(np);
    for (size_t p = 0; p < np; ++p) {
        left[p] = factors.left(p);
        right[p] = factors.right(p);
        xgs[p] = la::gemm(xg, false, right[p], false);
    }
    double b = 0, cc = 0;
    for (size_t p = 0; p < np; ++p)
        b += la::frob_dot(left[p], la::gemm(wx, false, right[p], false));
    for (size_t p = 0; p < np; ++p)
        for (size_t q = 0; q < np; ++q)
            cc += la::frob_dot(la::gemm(left[p], true, left[q], false),
                               la::gemm(right[p], true, xgs[q], false));
    return std::max(a - 2.0 * b + cc, 0.0);
}

double rel_err(const blr::Factors& factors, const TensorContext& c, Metric x) {
    const double a = x == Metric::h ? c.a_h : x == Metric::fit ? c.a_fit : c.a_sel;
    return std::sqrt(err(factors, c, x) / std::max(a, 1e-300));
}

double err_dense(const MatD& w, const MatD& w_hat, const MatD& x) {
    MatD e = w;
    for (int64_t k = 0; k < e.size(); ++k) e.data()[k] -= w_hat.data()[k];
    return la::frob_dot(e, la::gemm(e, false, x, false));
}

}  // namespace cortiq::encode::cpu
