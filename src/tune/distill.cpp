#include "tune/distill.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "tune/adam.hpp"
#include "tune/epochs.hpp"
#include "tune/ranks.hpp"

namespace cortiq::tune {

void log_softmax_rows(MatF& l) {
    // rows on the threads (each row's sum in its own order: the same bits with
    // any thread count); a 512-token window of a 32,000-word vocabulary is
    // 16 M exponentials, about 0.1 s on one core, for each teacher window
    parallel_for(
        0, l.rows(),
        [&](int64_t i) {
            float* r = l.data() + i * l.cols();
            const float mx = *std::max_element(r, r + l.cols());
            double s = 0;
            for (int64_t j = 0; j < l.cols(); ++j) s += std::exp(static_cast<double>(r[j] - mx));
            const float lse = mx + static_cast<float>(std::log(s));
            for (int64_t j = 0; j < l.cols(); ++j) r[j] -= lse;
        },
        16);
}

namespace {

struct Pass {
    std::vector<BlockActsT<float>> acts;
    std::vector<float> x, normed, rstd, logits, dlogits, dx, dprev;
};

// Forward of windows [first, first + count) of `order`; returns Σ KL and
// leaves dlogits (× scale) in pass for the backward.
double forward(const Student& s, const RopeT<float>& rope, const TeacherFn& teacher,
               const std::vector<std::vector<int32_t>>& w, const std::vector<size_t>& order,
               size_t first, size_t count, float scale, Pass& ps) {
    const int64_t L = static_cast<int64_t>(w[order[first]].size()), H = s.d.hidden;
    const int64_t V = s.embed->rows(), N = L * static_cast<int64_t>(count);
    ps.x.resize(static_cast<size_t>(N * H));
    MatF tlogp(N, V);
    for (size_t i = 0; i < count; ++i) {
        const auto& toks = w[order[first + i]];
        CORTIQ_ASSERT(static_cast<int64_t>(toks.size()) == L, "windows of different lengths");
        embedding_forward(s.embed->data(), H, toks.data(), L, ps.x.data() + i * L * H);
        const MatF t = teacher(toks);
        std::copy(t.data(), t.data() + L * V, tlogp.data() + i * L * V);
    }
    log_softmax_rows(tlogp);
    ps.acts.resize(s.blocks.size());
    const float* in = ps.x.data();
    for (size_t l = 0; l < s.blocks.size(); ++l) {
        block_forward(s.blocks[l], s.d, rope, in, static_cast<int64_t>(count), L, ps.acts[l]);
        in = ps.acts[l].out.data();
    }
    ps.normed.resize(static_cast<size_t>(N * H));
    ps.rstd.resize(static_cast<size_t>(N));
    rmsnorm_forward(in, N, H, s.final_norm.data(), static_cast<float>(s.d.eps), ps.normed.data(),
                    ps.rstd.data());
    ps.logits.resize(static_cast<size_t>(N * V));
    linear_forward(ps.normed.data(), N, H, s.head->data(), V, static_cast<const float*>(nullptr),
                   ps.logits.data());
    ps.dlogits.resize(ps.logits.size());
    return kl_forward_backward(ps.logits.data(), tlogp.data(), N, V, scale, ps.dlogits.data()) /
           scale;
}

void backward(Student& s, const RopeT<float>& rope, Pass& ps, std::vector<BlockGradsT<float>>& g) {
    const int64_t H = s.d.hidden, V = s.embed->rows();
    const int64_t N = static_cast<int64_t>(ps.rstd.size());
    std::vector<float> dnormed(static_cast<size_t>(N * H));
    linear_backward(ps.dlogits.data(), ps.normed.data(), N, H, s.head->data(), V, dnormed.data(),
                    static_cast<float*>(nullptr), static_cast<float*>(nullptr));
    ps.dx.resize(static_cast<size_t>(N * H));
    ps.dprev.resize(static_cast<size_t>(N * H));
    rmsnorm_backward(dnormed.data(), ps.acts.back().out.data(), s.final_norm.data(), ps.rstd.data(),
                     N, H, ps.dx.data(), static_cast<float*>(nullptr));
    for (size_t l = s.blocks.size(); l-- > 0;) {
        block_backward(s.blocks[l], s.d, rope, ps.acts[l], ps.dx.data(),
                       l > 0 ? ps.dprev.data() : static_cast<float*>(nullptr), g[l]);
        if (l > 0) ps.dx.swap(ps.dprev);
    }
}

}  // namespace

DistillResult distill(Student& s, const TeacherFn& teacher,
                      const std::vector<std::vector<int32_t>>& fit,
                      const std::vector<std::vector<int32_t>>& sel, const TuneOptions& o) {
    const auto t0 = std::chrono::steady_clock::now();
    CORTIQ_CHECK(!fit.empty() && !s.blocks.empty(), "distillation needs windows and blocks");
    CORTIQ_CHECK(!s.full_block, "distillation on the CPU needs every block with its signs");
    const int64_t L = static_cast<int64_t>(fit[0].size());
    const RopeT<float> rope = rope_for<float>(s.inv_freq, L);
    // the windows this process computes: all, or with ranks its share of each set
    const TuneRanks* ranks = o.ranks;
    const size_t fit_lo = ranks ? static_cast<size_t>(ranks->fit_first) : 0;
    const size_t fit_hi = ranks ? fit_lo + static_cast<size_t>(ranks->fit_count) : fit.size();
    const size_t sel_lo = ranks ? static_cast<size_t>(ranks->sel_first) : 0;
    const size_t sel_hi = ranks ? sel_lo + static_cast<size_t>(ranks->sel_count) : sel.size();
    CORTIQ_CHECK(fit_hi <= fit.size() && sel_hi <= sel.size(),
                 "distillation: windows {}..{} of {} to compute here", fit_lo, fit_hi, fit.size());
    Pass ps;
    // the forward of window w alone (its KL; dlogits × scale left in ps)
    auto window_forward = [&](const std::vector<std::vector<int32_t>>& set, size_t w, float scale) {
        const std::vector<size_t> one{w};
        const ScopedStage stage(o.profile, "kd_forward");  // the teacher's forward included
        return forward(s, rope, teacher, set, one, 0, 1, scale, ps);
    };
    // the mean KL, window by window in window order (each process's windows
    // first, at the same time as the others; then the sums in turn)
    auto mean_kl = [&](const std::vector<std::vector<int32_t>>& w, size_t lo, size_t hi) {
        std::vector<double> kls;
        for (size_t i = lo; i < hi; ++i) kls.push_back(window_forward(w, i, 1.0f));
        std::vector<double> total{0.0};
        fold_values<double>(ranks, total, [&](std::vector<double>& v) {
            for (double k : kls) v[0] += k;
        });
        return total[0] / static_cast<double>(w.size() * L);
    };
    DistillResult r;
    r.kl_fit_before = r.kl_fit_after = mean_kl(fit, fit_lo, fit_hi);
    r.kl_sel_before = r.kl_sel_after = sel.empty() ? r.kl_fit_before : mean_kl(sel, sel_lo, sel_hi);

    std::vector<BlockGradsT<float>> g;
    for (const auto& b : s.blocks) g.push_back(zero_grads(b, o.lr_signs > 0));
    Adam adam(o.beta1, o.beta2);
    for (size_t l = 0; l < s.blocks.size(); ++l) add_block(adam, s.blocks[l], g[l], s.d, o);
    if (adam.empty()) return r;
    const std::vector<BlockParamsT<float>> start = s.blocks;
    std::vector<BlockParamsT<float>> best = s.blocks;
    std::vector<BlockGradsT<float>*> gp;
    for (auto& gl : g) gp.push_back(&gl);
    std::vector<std::vector<BlockGradsT<float>>> held;
    // One step: each window's gradient on its own, summed in window order
    // (ranks.hpp; in place: the Adam slots point at g's vectors), then Adam,
    // the same on every process.
    const auto step = [&](const std::vector<size_t>& order, size_t i, size_t c, double rate) {
        const float scale = 1.0f / static_cast<float>(c * static_cast<size_t>(L));
        sum_window_grads(ranks, step_windows(order, i, c, fit_lo, fit_hi), gp, held,
                         [&](size_t w, std::vector<BlockGradsT<float>>& out) {
                             window_forward(fit, w, scale);
                             const ScopedStage stage(o.profile, "kd_backward");
                             for (auto& gl : out) clear(gl);
                             backward(s, rope, ps, out);
                         });
        const ScopedStage stage(o.profile, "kd_adam");
        adam.step(rate);
    };
    r.best_epoch = run_epochs(
        o.schedule(fit.size(), kDistillSeed), r.kl_sel_after, r.epochs_run, step,
        [&] { return sel.empty() ? mean_kl(fit, fit_lo, fit_hi) : mean_kl(sel, sel_lo, sel_hi); },
        [&] { best = s.blocks; }, o.on_progress);
    s.blocks = std::move(best);
    r.kl_fit_after = mean_kl(fit, fit_lo, fit_hi);
    for (size_t l = 0; l < s.blocks.size(); ++l) r.flips += sign_changes(start[l], s.blocks[l]);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

}  // namespace cortiq::tune
