// Stage 4 on the device (SPEC §3.4): S = sign(X) and a non-negative rank-1
// fit of |X| by power iteration on the Gram of the magnitudes.
#include <algorithm>
#include <cmath>

#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

std::pair<VecD, VecD> rank1_pos(const Gpu& g, const DMat& mabs) {
    const cudaStream_t st = g.stream();
    const int64_t rows = mabs.rows, cols = mabs.cols;
    const DMat gram = mm(g, mabs, true, mabs, false);  // cols × cols
    DVec v = upload(VecD(cols, 1.0 / std::sqrt(static_cast<double>(cols))), st);
    DVec v2(cols, st);
    SumBatch sb(st);
    // The CPU stops at ‖Δv‖ < 1e-12, below float32 resolution: here at 1e-6,
    // checked every 10 iterations (at most 200, as on the CPU).
    for (int it = 0; it < 200; it += 10) {
        double diff = 0;
        for (int k = 0; k < 10; ++k) {
            gemv(g, false, cols, cols, gram.data(), v.get(), v2.get());
            sb.dot(v2.get(), v2.get(), cols);
            const double nv = std::max(std::sqrt(sb.read()[0]), 1e-300);
            scal(st, v2.get(), static_cast<float>(1.0 / nv), cols);
            if (k == 9) {
                axpby(st, v.get(), 1.f, v2.get(), -1.f, cols);  // v − v2
                sb.dot(v.get(), v.get(), cols);
                diff = std::sqrt(sb.read()[0]);
            }
            std::swap(v, v2);
        }
        if (diff < 1e-6) break;
    }
    DVec u(rows, st);
    gemv(g, false, rows, cols, mabs.data(), v.get(), u.get());
    const VecD uh = download(u, st), vh = download(v, st);
    double s = 0;
    for (double x : uh) s += x * x;
    s = std::sqrt(s);
    const double rs = std::sqrt(s);
    VecD left(rows), right(cols);
    for (int64_t i = 0; i < rows; ++i) left[i] = rs * uh[i] / std::max(s, 1e-300);
    for (int64_t k = 0; k < cols; ++k) right[k] = rs * vh[k];
    const double lmax = *std::max_element(left.begin(), left.end());
    const double rmax = *std::max_element(right.begin(), right.end());
    for (auto& x : left) x = std::max(x, 1e-12 * lmax);
    for (auto& x : right) x = std::max(x, 1e-12 * rmax);
    return {left, right};
}

Path svid(const Gpu& g, const DMat& u, const DMat& v) {
    const cudaStream_t st = g.stream();
    const int64_t m = u.rows, n = v.rows, r = u.cols;
    Path p;
    p.su = DMat(m, r, st);
    p.sv = DMat(n, r, st);
    VecD h, lu, gg, lv;
    {
        DMat ua(m, r, st);
        sign_abs(st, u.data(), p.su.data(), ua.data(), m * r);
        std::tie(h, lu) = rank1_pos(g, ua);
    }
    {
        DMat va(n, r, st);
        sign_abs(st, v.data(), p.sv.data(), va.data(), n * r);
        std::tie(gg, lv) = rank1_pos(g, va);
    }
    VecD l(r);
    for (int64_t k = 0; k < r; ++k) l[k] = lu[k] * lv[k];
    p.h = upload(h, st);
    p.l = upload(l, st);
    p.g = upload(gg, st);
    return p;
}

}  // namespace cortiq::encode::cuda
