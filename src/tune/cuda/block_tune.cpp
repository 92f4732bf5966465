// tune_block on the GPU: tune/block_tune.cpp step for step (the same loss,
// batches, shuffling with the same seed, Adam updates and choice of the epoch
// kept), with the block's forward and backward, the loss and Adam on the
// device. The windows are uploaded once; the epoch kept stays on the device
// (signs packed, cuda::snapshot_into) and reaches the host once, at the end.
#include "tune/block_tune.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>
#include <utility>

#include "core/error.hpp"
#include "tune/cuda/adam_slots.hpp"
#include "tune/cuda/block.hpp"
#include "tune/cuda/block_tune.hpp"
#include "tune/epochs.hpp"

namespace cortiq::tune {

namespace {

using cuda::DBlockActs;
using cuda::DBlockGrads;
using cuda::DBlockParams;
using cuda::DRope;
using cuda::DVec;
using cuda::Gpu;

// A set of windows on the device, each L × hidden, one after the other: the
// caller's memory (DeviceWindowPairs) or `owned`, host windows uploaded here.
struct DWindows {
    std::vector<const float*> x, y;
    int64_t each = 0;  // values per window
    DVec owned_x, owned_y;
};

DWindows view(const DeviceWindowPairs& w) {
    CORTIQ_CHECK(w.count == 0 || (w.x && w.y && w.rows > 0 && w.cols > 0),
                 "block tuning: {} device windows of {} × {} without their memory", w.count, w.rows,
                 w.cols);
    DWindows d;
    d.each = w.rows * w.cols;
    for (int64_t i = 0; i < w.count; ++i) {
        d.x.push_back(w.x + i * d.each);
        d.y.push_back(w.y + i * d.each);
    }
    return d;
}

// The host windows uploaded one after the other, seen as view() sees the
// caller's.
DWindows upload(const WindowPairs& w, cudaStream_t st) {
    const int64_t count = static_cast<int64_t>(w.x.size());
    const int64_t rows = count ? w.x[0].rows() : 0, cols = count ? w.x[0].cols() : 0;
    DVec x(count * rows * cols, st), y(count * rows * cols, st);
    for (int64_t i = 0; i < count; ++i)
        for (auto [dst, src] : {std::pair{x.get(), &w.x[static_cast<size_t>(i)]},
                                std::pair{y.get(), &w.y[static_cast<size_t>(i)]}}) {
            CORTIQ_ASSERT(src->rows() == rows && src->cols() == cols,
                          "calibration windows of different sizes");
            CUDA_CHECK(cudaMemcpyAsync(dst + i * rows * cols, src->data(),
                                       sizeof(float) * src->size(), cudaMemcpyHostToDevice, st));
        }
    DWindows d = view({x.get(), y.get(), count, rows, cols});
    d.owned_x = std::move(x);
    d.owned_y = std::move(y);
    return d;
}

// The windows [first, first + count) of `order`, rows concatenated, into out.
void gather(const Gpu& g, const std::vector<const float*>& w, const std::vector<size_t>& order,
            size_t first, size_t count, int64_t each, DVec& out) {
    cuda::ensure(out, each * static_cast<int64_t>(count), g.stream());
    for (size_t i = 0; i < count; ++i)
        CUDA_CHECK(cudaMemcpyAsync(out.get() + i * each, w[order[first + i]], sizeof(float) * each,
                                   cudaMemcpyDeviceToDevice, g.stream()));
}

class Evaluator {
  public:
    Evaluator(const Gpu& g, const BlockDims& d, const DRope& rope, int64_t batch, int64_t L)
        : g(g), d(d), rope(rope), batch(batch), L(L), sums(2, g.stream()) {}

    // Σ‖block(x) − y‖² over the windows and Σ‖y − x‖²
    std::pair<double, double> run(const DBlockParams& p, const DWindows& w) {
        std::vector<size_t> order(w.x.size());
        std::iota(order.begin(), order.end(), size_t{0});
        CUDA_CHECK(cudaMemsetAsync(sums.get(), 0, 2 * sizeof(double), g.stream()));
        for (size_t s = 0; s < order.size(); s += static_cast<size_t>(batch)) {
            const size_t c = std::min(order.size() - s, static_cast<size_t>(batch));
            gather(g, w.x, order, s, c, w.each, x);
            gather(g, w.y, order, s, c, w.each, y);
            cuda::block_forward(g, p, d, rope, x.get(), static_cast<int64_t>(c), L, a);
            cuda::block_loss(g, a.out.get(), y.get(), x.get(), w.each * static_cast<int64_t>(c),
                             sums.get(), 0.0f, nullptr);
        }
        double h[2] = {0, 0};
        CUDA_CHECK(cudaMemcpyAsync(h, sums.get(), sizeof h, cudaMemcpyDeviceToHost, g.stream()));
        g.sync();
        return {h[0], h[1]};
    }
    double relative(const DBlockParams& p, const DWindows& w) {
        const auto [err, ref] = run(p, w);
        return ref > 0 ? err / ref : err;
    }

  private:
    const Gpu& g;
    const BlockDims& d;
    const DRope& rope;
    int64_t batch, L;
    DVec x, y;
    DBlockActs a;
    cortiq::cuda::DeviceBuffer<double> sums;
};

}  // namespace

namespace {

// tune_block_gpu on windows already on the device: `upload` times copying
// the block's values (and, from the host overload, the windows) there.
BlockTuneResult tune_on_device(BlockParamsT<float>& p, const BlockDims& d,
                               const std::vector<float>& inv_freq, const Gpu& g,
                               const DWindows& dfit, const DWindows& dsel, int64_t L,
                               const TuneOptions& o, std::chrono::steady_clock::time_point t0,
                               std::optional<cortiq::cuda::StageTimer>& upload_stage) {
    const cudaStream_t st = g.stream();
    using Stage = cortiq::cuda::StageTimer;  // each stage timed alone when profiling
    const DRope rope = cuda::upload(rope_for<float>(inv_freq, L), st);
    DBlockParams dp = cuda::upload(p, st);
    upload_stage.reset();
    Evaluator ev(g, d, rope, std::max<int64_t>(1, o.batch_windows), L);
    BlockTuneResult res;
    std::optional<Stage> eval_stage(std::in_place, g, o.profile, "evaluate", true);
    const auto [err0, ref_fit] = ev.run(dp, dfit);
    res.fit_before = ref_fit > 0 ? err0 / ref_fit : err0;
    res.sel_before = dsel.x.empty() ? res.fit_before : ev.relative(dp, dsel);
    eval_stage.reset();
    res.fit_after = res.fit_before;
    res.sel_after = res.sel_before;

    DBlockGrads gr = cuda::zero_grads(dp, st, o.lr_signs > 0);
    cuda::AdamSlots slots;
    slots.add_block(dp, gr, d, o, st);
    if (slots.empty()) return res;
    // The start and the epoch kept stay on the device, signs packed; the
    // host's p changes once, at the end, when an epoch was kept.
    DBlockParams start, best;
    cuda::snapshot_into(g, dp, start);
    cuda::snapshot_into(g, dp, best);

    DVec x, y, dout;
    DBlockActs a;
    const float scale = static_cast<float>(2.0 / std::max(ref_fit, 1e-30));
    const auto step = [&](const std::vector<size_t>& order, size_t s, size_t c, double rate) {
        {
            const Stage stage(g, o.profile, "forward", true);
            gather(g, dfit.x, order, s, c, dfit.each, x);
            gather(g, dfit.y, order, s, c, dfit.each, y);
            cuda::block_forward(g, dp, d, rope, x.get(), static_cast<int64_t>(c), L, a);
            cuda::ensure(dout, y.size(), st);
            cuda::block_loss(g, a.out.get(), y.get(), x.get(), y.size(), nullptr, scale,
                             dout.get());
        }
        {
            const Stage stage(g, o.profile, "backward", true);
            cuda::clear(gr, st);
            cuda::block_backward(g, dp, d, rope, a, dout.get(), nullptr, gr);
        }
        const Stage stage(g, o.profile, "adam", true);
        slots.step(g, o.beta1, o.beta2, rate);
    };
    // the CPU's seed: the same batches in the same order
    res.best_epoch = run_epochs(
        o.schedule(dfit.x.size(), kBlockTuneSeed), res.sel_after, res.epochs_run, step,
        [&] {
            const Stage stage(g, o.profile, "evaluate", true);
            return dsel.x.empty() ? ev.relative(dp, dfit) : ev.relative(dp, dsel);
        },
        [&] {
            const Stage stage(g, o.profile, "keep", true);
            cuda::snapshot_into(g, dp, best);
        },
        o.on_progress);
    slots = cuda::AdamSlots();  // the moments go before the kept epoch comes back
    gr = DBlockGrads();
    cuda::restore_from(g, best, dp);
    {
        const Stage stage(g, o.profile, "evaluate", true);
        res.fit_after = ev.relative(dp, dfit);
    }
    if (res.best_epoch > 0) {
        const Stage stage(g, o.profile, "download", true);
        cuda::download_into(dp, p, st);
        res.flips = cuda::sign_changes(g, start, best);
    }
    g.sync();
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
}

}  // namespace

BlockTuneResult tune_block_gpu(BlockParamsT<float>& p, const BlockDims& d,
                               const std::vector<float>& inv_freq, const WindowPairs& fit,
                               const WindowPairs& sel, const TuneOptions& o) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t L = window_length(fit, sel);
    const Gpu g;
    std::optional<cortiq::cuda::StageTimer> upload_stage(std::in_place, g, o.profile, "upload",
                                                         true);
    const DWindows dfit = upload(fit, g.stream()), dsel = upload(sel, g.stream());
    return tune_on_device(p, d, inv_freq, g, dfit, dsel, L, o, t0, upload_stage);
}

BlockTuneResult tune_block_gpu(BlockParamsT<float>& p, const BlockDims& d,
                               const std::vector<float>& inv_freq, const DeviceWindowPairs& fit,
                               const DeviceWindowPairs& sel, const TuneOptions& o) {
    CORTIQ_CHECK(
        fit.count > 0 && (sel.count == 0 || (sel.rows == fit.rows && sel.cols == fit.cols)),
        "block tuning needs fit windows of one shape ({} of {} × {}; held out {} of {} × {})",
        fit.count, fit.rows, fit.cols, sel.count, sel.rows, sel.cols);
    CORTIQ_CHECK(fit.cols == d.hidden, "block tuning: windows {} wide for a block of width {}",
                 fit.cols, d.hidden);
    const auto t0 = std::chrono::steady_clock::now();
    const Gpu g;
    std::optional<cortiq::cuda::StageTimer> upload_stage(std::in_place, g, o.profile, "upload",
                                                         true);
    return tune_on_device(p, d, inv_freq, g, view(fit), view(sel), fit.rows, o, t0, upload_stage);
}

}  // namespace cortiq::tune
