#include "linalg/polar_scaling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "linalg/blas.hpp"

namespace cortiq::la {

namespace {

// The number of eigenvalues below x: the negative pivots of T − xI (Sturm).
int count_below(const std::vector<double>& diag, const std::vector<double>& off, double x) {
    int count = 0;
    double q = 1;
    for (size_t i = 0; i < diag.size(); ++i) {
        q = diag[i] - x - (i > 0 ? off[i - 1] * off[i - 1] / q : 0.0);
        if (q == 0) q = -std::numeric_limits<double>::min();  // x is a pivot: count it once
        if (q < 0) ++count;
    }
    return count;
}

// The j-th smallest eigenvalue by bisection inside the Gershgorin interval.
double kth_eigenvalue(const std::vector<double>& diag, const std::vector<double>& off, int j,
                      double lo, double hi) {
    for (int it = 0; it < 200 && hi - lo > 1e-15 * std::max(std::abs(lo), std::abs(hi)); ++it) {
        const double mid = 0.5 * (lo + hi);
        (count_below(diag, off, mid) > j ? hi : lo) = mid;
    }
    return 0.5 * (lo + hi);
}

}  // namespace

std::pair<double, double> tridiag_extremes(const std::vector<double>& diag,
                                           const std::vector<double>& off) {
    const size_t k = diag.size();
    CORTIQ_ASSERT(k >= 1 && off.size() + 1 == k, "tridiagonal of {} diagonal and {} off entries",
                  diag.size(), off.size());
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < k; ++i) {  // Gershgorin discs
        const double rad =
            (i > 0 ? std::abs(off[i - 1]) : 0.0) + (i + 1 < k ? std::abs(off[i]) : 0.0);
        lo = std::min(lo, diag[i] - rad);
        hi = std::max(hi, diag[i] + rad);
    }
    const double pad = 1e-12 * std::max(std::abs(lo), std::abs(hi)) + 1e-300;
    lo -= pad;
    hi += pad;
    return {kth_eigenvalue(diag, off, 0, lo, hi),
            kth_eigenvalue(diag, off, static_cast<int>(k) - 1, lo, hi)};
}

std::pair<double, double> lanczos_extremes(int64_t n, int steps,
                                           const std::function<void(const VecD&, VecD&)>& apply) {
    if (n == 0 || steps <= 0) return {0.0, 0.0};
    VecD v(n), v_prev(n, 0.0), w(n);
    for (int64_t i = 0; i < n; ++i) v[i] = 1.0 + 0.5 * std::sin(0.7 * static_cast<double>(i));
    const double nv = std::sqrt(dot(v.data(), v.data(), n));
    for (auto& x : v) x /= nv;
    std::vector<double> diag, off;
    double beta = 0;
    for (int j = 0; j < steps && j < n; ++j) {
        apply(v, w);
        for (int64_t i = 0; i < n; ++i) w[i] -= beta * v_prev[i];
        const double alpha = dot(w.data(), v.data(), n);
        for (int64_t i = 0; i < n; ++i) w[i] -= alpha * v[i];
        if (!std::isfinite(alpha)) break;
        diag.push_back(alpha);
        beta = std::sqrt(dot(w.data(), w.data(), n));
        // an invariant subspace: the Ritz values so far are eigenvalues
        if (!(beta > 1e-12 * std::abs(diag.front()) + 1e-300) || j + 1 == steps) break;
        off.push_back(beta);
        v_prev.swap(v);
        for (int64_t i = 0; i < n; ++i) v[i] = w[i] / beta;
    }
    if (diag.empty()) return {0.0, 0.0};
    off.resize(diag.size() - 1);
    return tridiag_extremes(diag, off);
}

NsScaledStep ns_scaled_step(double l, double u) {
    l = std::clamp(l, 0.0, 1.0);
    // near convergence the margin would hold σ below 1: from l = 0.5 on,
    // α ≤ 1.46 leaves any σ up to 1.18 positive anyway
    if (u <= 0) u = l < 0.5 ? kNsUpperMargin : 1.0;
    CORTIQ_ASSERT(u >= 1.0, "upper bound {} below 1", u);
    // Chen–Chow on [l/u, 1], applied to X/u: the ends l and u both map to l'.
    const double lt = l / u;
    NsScaledStep s;
    const double a0 = std::sqrt(3.0 / (1.0 + lt + lt * lt));
    s.alpha = a0 / u;
    const double al = a0 * lt;
    s.next_l = std::min(1.0, 0.5 * al * (3.0 - al * al));
    return s;
}

NsScaledStep ns_step(int it, double l) {
    if (!(l > 0)) return {};  // α = 1, l' = 0: plain
    if (it == 0) return {1.0, std::min(1.0, 0.5 * l * (3.0 - l * l))};
    return ns_scaled_step(l);
}

NsStart ns_start(double frob, double theta_min, double theta_max) {
    NsStart s;
    s.scale = frob;
    if (theta_max > 0 && std::isfinite(theta_max))
        s.scale = std::min(frob, 1.1 * std::sqrt(theta_max));
    if (theta_min > 0 && std::isfinite(theta_min) && s.scale > 0)
        s.l = std::clamp(0.5 * std::sqrt(theta_min) / s.scale, 0.0, 1.0);
    return s;
}

MatD polar_scaled_newton_schulz(const MatD& m, double tol, int max_iter, int* iters,
                                int lanczos_steps) {
    const int64_t r = m.rows();
    CORTIQ_ASSERT(m.cols() == r, "polar of a {}x{} matrix", m.rows(), m.cols());
    const double nf = std::sqrt(frob2(m));
    if (!(nf > 0)) return MatD::identity(r);
    const auto [th_min, th_max] = lanczos_extremes(r, lanczos_steps, [&](const VecD& v, VecD& out) {
        out = gemv(m, true, gemv(m, false, v));  // MᵀM v
    });
    const NsStart start = ns_start(nf, th_min, th_max);
    MatD x = m;
    for (auto& v : x.vec()) v /= start.scale;
    double l = start.l;
    MatD a(r, r), y(r, r);
    int it = 0;
    for (;; ++it) {
        gemm_into(1.0, x, true, x, false, 0.0, a);  // XᵀX
        if (identity_deviation(a) <= tol || it >= max_iter) break;
        // X ← αX(3I − α²XᵀX)/2 = 1.5α X − 0.5α³ X XᵀX (α = 1 on the first step)
        const NsScaledStep s = ns_step(it, l);
        l = s.next_l;
        gemm_into(1.0, x, false, a, false, 0.0, y);
        const double c1 = 1.5 * s.alpha, c3 = 0.5 * s.alpha * s.alpha * s.alpha;
        for (int64_t k = 0; k < x.size(); ++k) x.data()[k] = c1 * x.data()[k] - c3 * y.data()[k];
    }
    if (iters) *iters = it;
    return x;
}

}  // namespace cortiq::la
