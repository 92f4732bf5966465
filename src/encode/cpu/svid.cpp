// Stage 4: SVID (SPEC §3.4): S = sign(X), |X| ≈ left · rightᵀ by a
// non-negative rank-1 fit (power iteration on the Gram of the magnitudes).
#include <algorithm>
#include <cmath>

#include "encode/cpu/stages.hpp"
#include "linalg/blas.hpp"

namespace cortiq::encode::cpu {

std::pair<VecD, VecD> rank1_pos(const MatD& mabs) {
    const int64_t rows = mabs.rows(), cols = mabs.cols();
    const MatD g = la::syrk(mabs, true);  // cols × cols
    VecD v(cols, 1.0 / std::sqrt(static_cast<double>(cols)));
    for (int it = 0; it < 200; ++it) {
        VecD v2 = la::gemv(g, false, v);
        double nv = std::sqrt(la::dot(v2.data(), v2.data(), cols));
        nv = std::max(nv, 1e-300);
        double diff = 0;
        for (int64_t k = 0; k < cols; ++k) {
            v2[k] /= nv;
            diff += (v2[k] - v[k]) * (v2[k] - v[k]);
        }
        v = std::move(v2);
        if (std::sqrt(diff) < 1e-12) break;
    }
    VecD u = la::gemv(mabs, false, v);
    const double s = std::sqrt(la::dot(u.data(), u.data(), rows));
    const double rs = std::sqrt(s);
    VecD left(rows), right(cols);
    for (int64_t i = 0; i < rows; ++i) left[i] = rs * u[i] / std::max(s, 1e-300);
    for (int64_t k = 0; k < cols; ++k) right[k] = rs * v[k];
    const double lmax = *std::max_element(left.begin(), left.end());
    const double rmax = *std::max_element(right.begin(), right.end());
    for (auto& x : left) x = std::max(x, 1e-12 * lmax);
    for (auto& x : right) x = std::max(x, 1e-12 * rmax);
    return {left, right};
}

blr::Path svid(const MatD& u, const MatD& v) {
    const int64_t m = u.rows(), n = v.rows(), r = u.cols();
    blr::Path p;
    p.su = MatD(m, r);
    p.sv = MatD(n, r);
    MatD ua(m, r), va(n, r);
    for (int64_t k = 0; k < u.size(); ++k) {
        p.su.data()[k] = u.data()[k] >= 0 ? 1.0 : -1.0;
        ua.data()[k] = std::abs(u.data()[k]);
    }
    for (int64_t k = 0; k < v.size(); ++k) {
        p.sv.data()[k] = v.data()[k] >= 0 ? 1.0 : -1.0;
        va.data()[k] = std::abs(v.data()[k]);
    }
    auto [h, lu] = rank1_pos(ua);
    auto [g, lv] = rank1_pos(va);
    p.h = std::move(h);
    p.g = std::move(g);
    p.l.resize(r);
    for (int64_t k = 0; k < r; ++k) p.l[k] = lu[k] * lv[k];
    return p;
}

}  // namespace cortiq::encode::cpu
