#include "model/blr_linear.hpp"

#include <vector>

#include "blr/sign_kernels.hpp"
#include "core/error.hpp"

namespace cortiq::model {

BlrLinear::BlrLinear(blr::PackedWeight w) : w_(std::move(w)) {
    CORTIQ_ASSERT(w_.m > 0 && w_.n > 0 && (w_.sign || w_.r > 0));
}

void BlrLinear::apply(const float* x, int64_t rows, float* y) const {
    const int64_t m = w_.m, n = w_.n, r = w_.r;
    const bool batch = rows >= kBatchRows;
    thread_local std::vector<float> xg, t, u, hv, lv, gv;
    xg.resize(static_cast<size_t>(rows * n));
    for (int p = 0; p < w_.paths; ++p) {
        w_.scales(p, hv, lv, gv);
        const float *g = gv.data(), *h = hv.data(), *l = lv.data();
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < n; ++j) xg[i * n + j] = x[i * n + j] * g[j];
        if (w_.sign) {  // y = h ∘ (S xg)
            if (batch)
                blr::sign_dot_batch(w_.svt(0), xg.data(), rows, y);
            else
                for (int64_t i = 0; i < rows; ++i)
                    blr::sign_dot(w_.svt(0), xg.data() + i * n, y + i * m);
            for (int64_t i = 0; i < rows; ++i)
                for (int64_t o = 0; o < m; ++o) y[i * m + o] *= h[o];
            return;
        }
        t.resize(static_cast<size_t>(rows * r));
        u.assign(static_cast<size_t>(rows * m), 0.0f);
        if (batch) {
            blr::sign_dot_batch(w_.svt(p), xg.data(), rows, t.data());
            for (int64_t i = 0; i < rows; ++i)
                for (int64_t k = 0; k < r; ++k) t[i * r + k] *= l[k];
            blr::sign_axpy_batch(w_.sut(p), t.data(), rows, u.data());
        } else {
            for (int64_t i = 0; i < rows; ++i) {
                float* ti = t.data() + i * r;
                blr::sign_dot(w_.svt(p), xg.data() + i * n, ti);
                for (int64_t k = 0; k < r; ++k) ti[k] *= l[k];
                blr::sign_axpy(w_.sut(p), ti, u.data() + i * m);
            }
        }
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t o = 0; o < m; ++o)
                y[i * m + o] = (p == 0 ? 0.0f : y[i * m + o]) + h[o] * u[i * m + o];
    }
}

MatF BlrLinear::dense() const {
    if (!w_.sign) return w_.to_factors().dense().cast<float>();
    // Ŵ = diag(h) S diag(g), each entry one float64 product rounded once
    std::vector<float> h, l, g;
    w_.scales(0, h, l, g);
    MatF w(w_.m, w_.n);
    for (int64_t i = 0; i < w_.m; ++i)
        for (int64_t j = 0; j < w_.n; ++j)
            w(i, j) = static_cast<float>((w_.sign_at(i, j) ? -1.0 : 1.0) * double{h[i]} * g[j]);
    return w;
}

}  // namespace cortiq::model
