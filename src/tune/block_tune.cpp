#include "tune/block_tune.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "tune/adam.hpp"
#include "tune/epochs.hpp"

namespace cortiq::tune {

BlrWeightsT<float> to_weights(const blr::Factors& f) {
    BlrWeightsT<float> w{f.m, f.n, f.r, {}};
    auto cast = [](const double* p, int64_t n) {
        std::vector<float> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(p[i]);
        return v;
    };
    for (const auto& q : f.paths)
        w.paths.push_back({cast(q.h.data(), f.m), cast(q.l.data(), f.r), cast(q.g.data(), f.n),
                           cast(q.su.data(), f.m * f.r), cast(q.sv.data(), f.n * f.r)});
    return w;
}

blr::Factors to_factors(const BlrWeightsT<float>& w) {
    blr::Factors f{w.m, w.n, w.r, {}};
    for (const auto& q : w.paths) {
        blr::Path p{VecD(w.m), VecD(w.r), VecD(w.n), MatD(w.m, w.r), MatD(w.n, w.r)};
        for (int64_t i = 0; i < w.m; ++i) p.h[i] = q.h[i];
        for (int64_t i = 0; i < w.r; ++i) p.l[i] = q.l[i];
        for (int64_t i = 0; i < w.n; ++i) p.g[i] = q.g[i];
        for (int64_t i = 0; i < w.m * w.r; ++i) p.su.data()[i] = q.su[i] < 0 ? -1.0 : 1.0;
        for (int64_t i = 0; i < w.n * w.r; ++i) p.sv.data()[i] = q.sv[i] < 0 ? -1.0 : 1.0;
        f.paths.push_back(std::move(p));
    }
    return f;
}

namespace {

// The windows [first, first + count) of `order`, rows concatenated.
void gather(const std::vector<MatF>& w, const std::vector<size_t>& order, size_t first,
            size_t count, std::vector<float>& out) {
    const int64_t each = w[order[first]].size();
    out.resize(static_cast<size_t>(each) * count);
    for (size_t i = 0; i < count; ++i) {
        const MatF& m = w[order[first + i]];
        CORTIQ_ASSERT(m.size() == each, "calibration windows of different sizes");
        std::copy(m.data(), m.data() + each, out.data() + i * each);
    }
}

struct Evaluator {
    const BlockDims& d;
    const RopeT<float>& rope;
    int64_t batch;

    // Σ‖block(x) − y‖² over the windows and Σ‖y − x‖²
    std::pair<double, double> sums(const BlockParamsT<float>& p, const WindowPairs& w) const {
        std::vector<size_t> order(w.x.size());
        std::iota(order.begin(), order.end(), size_t{0});
        std::vector<float> x, y;
        BlockActsT<float> a;
        double err = 0, ref = 0;
        for (size_t s = 0; s < order.size(); s += static_cast<size_t>(batch)) {
            const size_t c = std::min(order.size() - s, static_cast<size_t>(batch));
            gather(w.x, order, s, c, x);
            gather(w.y, order, s, c, y);
            block_forward(p, d, rope, x.data(), static_cast<int64_t>(c), w.x[0].rows(), a);
            for (size_t i = 0; i < y.size(); ++i) {
                const double e = a.out[i] - y[i], r = y[i] - x[i];
                err += e * e;
                ref += r * r;
            }
        }
        return {err, ref};
    }
    double relative(const BlockParamsT<float>& p, const WindowPairs& w) const {
        const auto [err, ref] = sums(p, w);
        return ref > 0 ? err / ref : err;
    }
};

}  // namespace

int64_t window_length(const WindowPairs& fit, const WindowPairs& sel) {
    CORTIQ_CHECK(!fit.x.empty() && fit.x.size() == fit.y.size() && sel.x.size() == sel.y.size(),
                 "block tuning needs paired fit windows ({} inputs, {} targets)", fit.x.size(),
                 fit.y.size());
    return fit.x[0].rows();
}

int64_t sign_changes(const BlockParamsT<float>& a, const BlockParamsT<float>& b) {
    int64_t n = 0;
    const auto la = a.linears(), lb = b.linears();
    for (size_t i = 0; i < la.size(); ++i) {
        if (!la[i]->blr) continue;
        for (size_t p = 0; p < la[i]->blr->paths.size(); ++p) {
            const auto &qa = la[i]->blr->paths[p], &qb = lb[i]->blr->paths[p];
            for (size_t k = 0; k < qa.su.size(); ++k) n += qa.su[k] != qb.su[k];
            for (size_t k = 0; k < qa.sv.size(); ++k) n += qa.sv[k] != qb.sv[k];
        }
    }
    return n;
}

BlockTuneResult tune_block(BlockParamsT<float>& p, const BlockDims& d,
                           const std::vector<float>& inv_freq, const WindowPairs& fit,
                           const WindowPairs& sel, const TuneOptions& o) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t L = window_length(fit, sel);
    const RopeT<float> rope = rope_for<float>(inv_freq, L);
    const Evaluator ev{d, rope, std::max<int64_t>(1, o.batch_windows)};
    BlockTuneResult res;
    const auto [err0, ref_fit] = ev.sums(p, fit);
    res.fit_before = ref_fit > 0 ? err0 / ref_fit : err0;
    res.sel_before = sel.x.empty() ? res.fit_before : ev.relative(p, sel);
    res.fit_after = res.fit_before;
    res.sel_after = res.sel_before;
    const BlockParamsT<float> start = p;
    BlockParamsT<float> best = p;

    BlockGradsT<float> g = zero_grads(p);
    Adam adam(o.beta1, o.beta2);
    add_block(adam, p, g, d, o);
    if (adam.empty()) return res;

    std::vector<float> x, y, dout;
    BlockActsT<float> a;
    const size_t batch = static_cast<size_t>(std::max<int64_t>(1, o.batch_windows));
    const float scale = static_cast<float>(2.0 / std::max(ref_fit, 1e-30));
    const auto step = [&](const std::vector<size_t>& order, size_t s, size_t c) {
        gather(fit.x, order, s, c, x);
        gather(fit.y, order, s, c, y);
        block_forward(p, d, rope, x.data(), static_cast<int64_t>(c), L, a);
        dout.resize(y.size());
        for (size_t i = 0; i < y.size(); ++i) dout[i] = scale * (a.out[i] - y[i]);
        clear(g);  // in place: the Adam slots point at g's vectors
        block_backward(p, d, rope, a, dout.data(), static_cast<float*>(nullptr), g);
        adam.step();
    };
    res.best_epoch = run_epochs(
        fit.x.size(), batch, o.epochs, o.patience, 0x5eed, res.sel_after, res.epochs_run, step,
        [&] { return sel.x.empty() ? ev.relative(p, fit) : ev.relative(p, sel); },
        [&] { best = p; }, o.on_progress);
    p = std::move(best);
    res.fit_after = ev.relative(p, fit);
    res.flips = sign_changes(start, p);
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
}

}  // namespace cortiq::tune
