// Stage 1: the per-input context (SPEC §3.1).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "encode/cpu/stages.hpp"
#include "encode/gram_check.hpp"
#include "linalg/blas.hpp"

namespace cortiq::encode::cpu {

InputContext::InputContext(const MatD& hf, const MatD& hs, double rho, const std::string& what) {
    check_gram(hf, what, "fit");
    check_gram(hs, what, "held-out");
    CORTIQ_CHECK(hf.rows() == hs.rows(), "{}: fit Gram is {}-wide, held-out Gram {}-wide", what,
                 hf.rows(), hs.rows());
    CORTIQ_CHECK(rho >= 0 && std::isfinite(rho), "{}: damping rho must be >= 0", what);
    n = hf.rows();
    h_fit = hf;
    h_sel = hs;
    const double mean_diag = la::trace(hf) / static_cast<double>(n);
    CORTIQ_CHECK(mean_diag > 0, "{}: fit Gram has a zero diagonal (no activations?)", what);
    c_fit = rho * mean_diag;
    h = hf;
    for (int64_t i = 0; i < n; ++i) h(i, i) += c_fit;
    sqd.resize(n);
    for (int64_t i = 0; i < n; ++i) sqd[i] = std::sqrt(h(i, i));
    perm.resize(n);
    std::iota(perm.begin(), perm.end(), 0);
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return h(a, a) > h(b, b); });

    // Uc: upper Cholesky factor of Hp⁻¹ (Hp = P H Pᵀ). On the equilibrated
    // A = D⁻¹ Hp D⁻¹: with J the reversal, chol(J A J) = L' gives A = Ū Ūᵀ,
    // Ū = J L' J upper, so A⁻¹ = (Ū⁻¹)ᵀ Ū⁻¹ and Uc = Ū⁻¹ D⁻¹.
    MatD a(n, n);  // J A J: row i of it is row n-1-i of A
    for (int64_t i = 0; i < n; ++i) {
        const int64_t pi = perm[n - 1 - i];
        for (int64_t j = 0; j < n; ++j) {
            const int64_t pj = perm[n - 1 - j];
            a(i, j) = h(pi, pj) / (sqd[pi] * sqd[pj]);
        }
    }
    uc_ridge = la::cholesky_ridge(a, /*upper=*/false, (what + ": damped fit Gram").c_str());
    la::tri_inv(a, /*upper=*/false);  // L'⁻¹, lower
    uc = MatD(n, n);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i; j < n; ++j) uc(i, j) = a(n - 1 - i, n - 1 - j) / sqd[perm[j]];
}

const MatD& InputContext::l() const {
    std::call_once(l_once_, [this] {
        // L = D L̃ with L̃ the factor of the equilibrated D⁻¹ H D⁻¹.
        MatD a(n, n);
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) a(i, j) = h(i, j) / (sqd[i] * sqd[j]);
        la::cholesky_ridge(a, false, "damped fit Gram (L)");
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j <= i; ++j) a(i, j) *= sqd[i];
        l_ = std::move(a);
    });
    return l_;
}

TensorContext::TensorContext(const MatD& w_, const InputContext& ic_) : w(w_), input_ctx(ic_) {
    CORTIQ_CHECK(w.cols() == input_ctx.n, "weight is {}x{} but its input Gram is {}-wide", w.rows(),
                 w.cols(), input_ctx.n);
    for (double v : w.vec()) CORTIQ_CHECK(std::isfinite(v), "weight has non-finite values");
    wh = la::gemm(w, false, input_ctx.h, false);
    wh_sel = la::gemm(w, false, input_ctx.h_sel, false);
    wh_fit = wh;
    for (int64_t k = 0; k < w.size(); ++k) wh_fit.data()[k] -= input_ctx.c_fit * w.data()[k];
    a_h = la::frob_dot(w, wh);
    a_fit = la::frob_dot(w, wh_fit);
    a_sel = la::frob_dot(w, wh_sel);
}

}  // namespace cortiq::encode::cpu
