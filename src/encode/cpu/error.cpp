// Errors in a Gram metric X by the factor-sized expansion (SPEC §2):
//   tr(E X Eᵀ) = tr(W X Wᵀ) − 2 Σ_p ⟨hsl_p, W X gs_p⟩ + Σ_{p,q} ⟨hsl_pᵀ hsl_q, gs_pᵀ X gs_q⟩
#include <algorithm>
#include <cmath>

#include "encode/cpu/stages.hpp"
#include "linalg/blas.hpp"

namespace cortiq::encode::cpu {

double err(const blr::Model& md, const TensorContext& c, Metric x) {
    const MatD& xg = x == Metric::h ? c.ic.h : x == Metric::fit ? c.ic.h_fit : c.ic.h_sel;
    const MatD& wx = x == Metric::h ? c.wh : x == Metric::fit ? c.wh_fit : c.wh_sel;
    const double a = x == Metric::h ? c.a_h : x == Metric::fit ? c.a_fit : c.a_sel;
    const size_t np = md.paths.size();
    std::vector<MatD> hsl(np), gs(np), xgs(np);
    for (size_t p = 0; p < np; ++p) {
        hsl[p] = md.hsl(p);
        gs[p] = md.gs(p);
        xgs[p] = la::gemm(xg, false, gs[p], false);
    }
    double b = 0, cc = 0;
    for (size_t p = 0; p < np; ++p) b += la::frob_dot(hsl[p], la::gemm(wx, false, gs[p], false));
    for (size_t p = 0; p < np; ++p)
        for (size_t q = 0; q < np; ++q)
            cc += la::frob_dot(la::gemm(hsl[p], true, hsl[q], false),
                               la::gemm(gs[p], true, xgs[q], false));
    return std::max(a - 2.0 * b + cc, 0.0);
}

double rel_err(const blr::Model& md, const TensorContext& c, Metric x) {
    const double a = x == Metric::h ? c.a_h : x == Metric::fit ? c.a_fit : c.a_sel;
    return std::sqrt(err(md, c, x) / std::max(a, 1e-300));
}

double err_dense(const MatD& w, const MatD& w_hat, const MatD& x) {
    MatD e = w;
    for (int64_t k = 0; k < e.size(); ++k) e.data()[k] -= w_hat.data()[k];
    return la::frob_dot(e, la::gemm(e, false, x, false));
}

}  // namespace cortiq::encode::cpu
