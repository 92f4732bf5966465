#include "model/blr_linear.hpp"

#include <vector>

#include "blr/sign_kernels.hpp"
#include "core/error.hpp"

namespace cortiq::model {

BlrLinear::BlrLinear(blr::PackedWeight w)
    : BlrLinear(std::make_shared<const blr::PackedWeight>(std::move(w))) {}

BlrLinear::BlrLinear(std::shared_ptr<const blr::PackedWeight> w) : w_(std::move(w)) {
    CORTIQ_ASSERT(w_ && w_->m > 0 && w_->n > 0 && (w_->sign || w_->r > 0));
}

void BlrLinear::apply(const float* x, int64_t rows, float* y) const {
    const blr::PackedWeight& pw = *w_;
    const int64_t m = pw.m, n = pw.n, r = pw.r;
    const bool batch = rows >= kBatchRows;
    thread_local std::vector<float> xg, t, u, hv, lv, gv;
    xg.resize(static_cast<size_t>(rows * n));
    for (int p = 0; p < pw.paths; ++p) {
        pw.scales(p, hv, lv, gv);
        const float *g = gv.data(), *h = hv.data(), *l = lv.data();
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < n; ++j) xg[i * n + j] = x[i * n + j] * g[j];
        if (pw.sign) {  // y = h ∘ (S xg)
            if (batch)
                blr::sign_dot_batch(pw.svt(0), xg.data(), rows, y);
            else
                for (int64_t i = 0; i < rows; ++i)
                    blr::sign_dot(pw.svt(0), xg.data() + i * n, y + i * m);
            for (int64_t i = 0; i < rows; ++i)
                for (int64_t o = 0; o < m; ++o) y[i * m + o] *= h[o];
            return;
        }
        t.resize(static_cast<size_t>(rows * r));
        u.assign(static_cast<size_t>(rows * m), 0.0f);
        if (batch) {
            blr::sign_dot_batch(pw.svt(p), xg.data(), rows, t.data());
            for (int64_t i = 0; i < rows; ++i)
                for (int64_t k = 0; k < r; ++k) t[i * r + k] *= l[k];
            blr::sign_axpy_batch(pw.sut(p), t.data(), rows, u.data());
        } else {
            for (int64_t i = 0; i < rows; ++i) {
                float* ti = t.data() + i * r;
                blr::sign_dot(pw.svt(p), xg.data() + i * n, ti);
                for (int64_t k = 0; k < r; ++k) ti[k] *= l[k];
                blr::sign_axpy(pw.sut(p), ti, u.data() + i * m);
            }
        }
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t o = 0; o < m; ++o)
                y[i * m + o] = (p == 0 ? 0.0f : y[i * m + o]) + h[o] * u[i * m + o];
    }
}

MatF BlrLinear::dense() const {
    const blr::PackedWeight& pw = *w_;
    if (!pw.sign) return pw.to_factors().dense().cast<float>();
    // Ŵ = diag(h) S diag(g), each entry one float64 product rounded once
    std::vector<float> h, l, g;
    pw.scales(0, h, l, g);
    MatF w(pw.m, pw.n);
    for (int64_t i = 0; i < pw.m; ++i)
        for (int64_t j = 0; j < pw.n; ++j)
            w(i, j) = static_cast<float>((pw.sign_at(i, j) ? -1.0 : 1.0) * double{h[i]} * g[j]);
    return w;
}

}  // namespace cortiq::model
