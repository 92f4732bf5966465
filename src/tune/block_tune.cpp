#include "tune/block_tune.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "blr/layout.hpp"
#include "core/error.hpp"
#include "tune/adam.hpp"
#include "tune/epochs.hpp"
#include "tune/ranks.hpp"

namespace cortiq::tune {

BlrWeightsT<float> to_weights(const blr::PackedWeight& p, bool with_signs) {
    CORTIQ_CHECK(!p.sign, "a sign payload has no BLR factors to tune");
    const int64_t m = p.m, n = p.n, r = p.r;
    BlrWeightsT<float> w{m, n, r, {}};
    for (int path = 0; path < p.paths; ++path) {
        BlrPathT<float> q;
        p.scales(path, q.h, q.l, q.g);
        if (!with_signs) {
            w.paths.push_back(std::move(q));
            continue;
        }
        q.su.resize(static_cast<size_t>(m * r));
        q.sv.resize(static_cast<size_t>(n * r));
        p.signs_into(path, q.su.data(), q.sv.data());
        w.paths.push_back(std::move(q));
    }
    return w;
}

blr::Factors to_factors(const BlrWeightsT<float>& w) {
    blr::Factors f{w.m, w.n, w.r, {}};
    for (const auto& q : w.paths) {
        blr::Path p{VecD(w.m), VecD(w.r), VecD(w.n), MatD(w.m, w.r), MatD(w.n, w.r)};
        for (int64_t i = 0; i < w.m; ++i) p.h[i] = q.h[i];
        for (int64_t i = 0; i < w.r; ++i) p.l[i] = q.l[i];
        for (int64_t i = 0; i < w.n; ++i) p.g[i] = q.g[i];
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < w.m * w.r; ++i) p.su.data()[i] = q.su[i] < 0 ? -1.0 : 1.0;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < w.n * w.r; ++i) p.sv.data()[i] = q.sv[i] < 0 ? -1.0 : 1.0;
        f.paths.push_back(std::move(p));
    }
    return f;
}

std::vector<uint8_t> pack_weights(const BlrWeightsT<float>& w) {
    blr::Factors f{w.m, w.n, w.r, {}};
    for (const auto& q : w.paths) {
        CORTIQ_CHECK(static_cast<int64_t>(q.h.size()) == w.m &&
                         static_cast<int64_t>(q.l.size()) == w.r &&
                         static_cast<int64_t>(q.g.size()) == w.n &&
                         static_cast<int64_t>(q.su.size()) == w.m * w.r &&
                         static_cast<int64_t>(q.sv.size()) == w.n * w.r,
                     "packing a {} × {} layer of rank {} from {}, {}, {} scales and {}, {} signs",
                     w.m, w.n, w.r, q.h.size(), q.l.size(), q.g.size(), q.su.size(), q.sv.size());
        f.paths.push_back({VecD(w.m), VecD(w.r), VecD(w.n), MatD(), MatD()});
        blr::Path& p = f.paths.back();
        for (int64_t i = 0; i < w.m; ++i) p.h[i] = q.h[i];
        for (int64_t i = 0; i < w.r; ++i) p.l[i] = q.l[i];
        for (int64_t i = 0; i < w.n; ++i) p.g[i] = q.g[i];
    }
    std::vector<uint8_t> out = blr::pack_scales(f);
    const auto m = static_cast<uint64_t>(w.m), n = static_cast<uint64_t>(w.n),
               r = static_cast<uint64_t>(w.r), np = w.paths.size();
    uint8_t* stream = out.data() + blr::off_signs(m, n, r, np);
    for (uint64_t p = 0; p < np; ++p)
        blr::write_signs(w.paths[p].su.data(), w.paths[p].sv.data(), m, n, r, p, stream);
    return out;
}

namespace {

struct Evaluator {
    const BlockDims& d;
    const RopeT<float>& rope;
    const TuneRanks* ranks;

    // Σ‖block(x) − y‖² over the windows and Σ‖y − x‖², window by window in
    // window order (every process's, with ranks: each runs its windows'
    // blocks first, at the same time as the others, then adds in turn)
    std::pair<double, double> sums(const BlockParamsT<float>& p, const WindowPairs& w) const {
        std::vector<double> s{0.0, 0.0};
        BlockActsT<float> a;
        auto add = [&](size_t k, const std::vector<float>& out, std::vector<double>& v) {
            const float *x = w.x[k].data(), *y = w.y[k].data();
            for (int64_t i = 0; i < w.y[k].size(); ++i) {
                const double e = out[static_cast<size_t>(i)] - y[i], r = y[i] - x[i];
                v[0] += e * e;
                v[1] += r * r;
            }
        };
        if (!ranks) {  // one window's output at a time
            for (size_t k = 0; k < w.x.size(); ++k) {
                block_forward(p, d, rope, w.x[k].data(), 1, w.x[k].rows(), a);
                add(k, a.out, s);
            }
            return {s[0], s[1]};
        }
        std::vector<std::vector<float>> outs(w.x.size());
        for (size_t k = 0; k < w.x.size(); ++k) {
            block_forward(p, d, rope, w.x[k].data(), 1, w.x[k].rows(), a);
            outs[k] = std::move(a.out);
        }
        fold_values<double>(ranks, s, [&](std::vector<double>& v) {
            for (size_t k = 0; k < w.x.size(); ++k) add(k, outs[k], v);
        });
        return {s[0], s[1]};
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

namespace {

// The windows' length with ranks: this process may hold none of them.
int64_t shared_window_length(const WindowPairs& fit, const WindowPairs& sel, const TuneRanks& r) {
    CORTIQ_CHECK(r.fit_total > 0 && fit.x.size() == fit.y.size() && sel.x.size() == sel.y.size(),
                 "block tuning needs paired fit windows ({} inputs, {} targets)", fit.x.size(),
                 fit.y.size());
    CORTIQ_CHECK(r.rows > 0, "block tuning over several processes: windows of {} rows", r.rows);
    for (const auto* set : {&fit.x, &fit.y, &sel.x, &sel.y})
        for (const MatF& m : *set)
            CORTIQ_CHECK(m.rows() == r.rows, "block tuning: a window of {} rows, not {}", m.rows(),
                         r.rows);
    return r.rows;
}

}  // namespace

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
    const TuneRanks* ranks = o.ranks;
    const int64_t L = ranks ? shared_window_length(fit, sel, *ranks) : window_length(fit, sel);
    const size_t fit_first = ranks ? static_cast<size_t>(ranks->fit_first) : 0;
    const size_t fit_total = ranks ? static_cast<size_t>(ranks->fit_total) : fit.x.size();
    const bool has_sel = ranks ? ranks->sel_total > 0 : !sel.x.empty();
    const RopeT<float> rope = rope_for<float>(inv_freq, L);
    const Evaluator ev{d, rope, ranks};
    BlockTuneResult res;
    const auto [err0, ref_fit] = ev.sums(p, fit);
    res.fit_before = ref_fit > 0 ? err0 / ref_fit : err0;
    res.sel_before = has_sel ? ev.relative(p, sel) : res.fit_before;
    res.fit_after = res.fit_before;
    res.sel_after = res.sel_before;
    const BlockParamsT<float> start = p;
    BlockParamsT<float> best = p;

    BlockGradsT<float> g = zero_grads(p, o.lr_signs > 0);
    Adam adam(o.beta1, o.beta2);
    add_block(adam, p, g, d, o);
    if (adam.empty()) return res;

    std::vector<float> dout;
    BlockActsT<float> a;
    const float scale = static_cast<float>(2.0 / std::max(ref_fit, 1e-30));
    // out[0] = the gradient of fit window w (held here), computed on its own
    const auto window_grads = [&](size_t w, std::vector<BlockGradsT<float>>& out) {
        const MatF &x = fit.x[w - fit_first], &y = fit.y[w - fit_first];
        {
            const ScopedStage stage(o.profile, "forward");
            block_forward(p, d, rope, x.data(), 1, L, a);
            dout.resize(static_cast<size_t>(y.size()));
            for (size_t i = 0; i < dout.size(); ++i) dout[i] = scale * (a.out[i] - y.data()[i]);
        }
        const ScopedStage stage(o.profile, "backward");
        clear(out[0]);
        block_backward(p, d, rope, a, dout.data(), static_cast<float*>(nullptr), out[0]);
    };
    std::vector<std::vector<BlockGradsT<float>>> held;
    // One step: the windows' gradients summed in window order (ranks.hpp;
    // in place: the Adam slots point at g's vectors), then Adam, the same on
    // every process.
    const auto step = [&](const std::vector<size_t>& order, size_t s, size_t c, double rate) {
        sum_window_grads(ranks, step_windows(order, s, c, fit_first, fit_first + fit.x.size()),
                         {&g}, held, window_grads);
        const ScopedStage stage(o.profile, "adam");
        adam.step(rate);
    };
    res.best_epoch = run_epochs(
        o.schedule(fit_total, kBlockTuneSeed), res.sel_after, res.epochs_run, step,
        [&] {
            const ScopedStage stage(o.profile, "evaluate");
            return has_sel ? ev.relative(p, sel) : ev.relative(p, fit);
        },
        [&] { best = p; }, o.on_progress);
    p = std::move(best);
    res.fit_after = ev.relative(p, fit);
    res.flips = sign_changes(start, p);
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
}

}  // namespace cortiq::tune
