// --match original: the drift-corrected target and how much of it to keep
// (quantize.hpp).
#include <algorithm>

#include "linalg/blas.hpp"
#include "linalg/panel_gemm.hpp"
#include "quantize/quantize.hpp"

namespace cortiq::quant {

DriftFit drift_fit(const MatD& cross, const MatD& h_fit, double damping) {
    const int64_t n = h_fit.rows();
    CORTIQ_CHECK(h_fit.cols() == n && cross.rows() == n && cross.cols() == n,
                 "drift target: cross Gram {}x{}, Gram {}x{}", cross.rows(), cross.cols(),
                 h_fit.rows(), h_fit.cols());
    MatD a = h_fit, diff = cross;
    for (int64_t i = 0; i < diff.size(); ++i) diff.data()[i] -= h_fit.data()[i];
    for (int64_t i = 0; i < n; ++i) a(i, i) += damping;
    return {std::move(diff), la::spd_factor(a)};
}

MatD drift_step(const MatD& w, const DriftFit& fit) {
    CORTIQ_CHECK(w.cols() == fit.diff.rows(), "drift target: weight of {} inputs, Gram {}x{}",
                 w.cols(), fit.diff.rows(), fit.diff.cols());
    // D = W (C − H) A⁻¹, by fixed row panels: on the OpenMP threads and the same
    // bits with any number of them (calibrate_input runs BLAS on one thread)
    return la::panel_solve_cholesky_right(la::panel_dgemm(w, fit.diff), fit.factor);
}

MatD drift_step(const MatD& w, const MatD& cross, const MatD& h_fit, double damping) {
    return drift_step(w, drift_fit(cross, h_fit, damping));
}

MatD drift_target(const MatD& w, const MatD& cross, const MatD& h_fit, double damping) {
    MatD t = drift_step(w, cross, h_fit, damping);
    for (int64_t i = 0; i < t.size(); ++i) t.data()[i] += w.data()[i];
    return t;
}

double drift_shrinkage(const MatD& w, const MatD& d, const MatD& cross_sel, const MatD& h_sel) {
    MatD diff = cross_sel;
    for (int64_t i = 0; i < diff.size(); ++i) diff.data()[i] -= h_sel.data()[i];
    const double num = la::frob_dot(la::panel_dgemm(w, diff), d);
    const double den = la::frob_dot(la::panel_dgemm(d, h_sel), d);
    if (!(den > 0)) return 0.0;  // no correction (D = 0) or no held-out signal
    return std::clamp(num / den, 0.0, 1.0);
}

}  // namespace cortiq::quant
