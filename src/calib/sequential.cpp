#include "calib/sequential.hpp"

#include <fmt/format.h>

#include <optional>
#include <tuple>

#include "calib/rank_chain.hpp"
#include "core/error.hpp"
#include "dist/comm.hpp"
#include "model/gpu_model.hpp"
#include "model/llama.hpp"
#include "model/ops.hpp"

namespace cortiq::calib {

SequentialCalib::SequentialCalib(model::Model& m, const CalibSet& cs, model::Device device,
                                 const model::Model* original)
    : m_(m), original_(original) {
    share_ = {std::pair<int64_t, int64_t>{0, static_cast<int64_t>(cs.fit.size())},
              std::pair<int64_t, int64_t>{0, static_cast<int64_t>(cs.sel.size())}};
    CORTIQ_CHECK(!dist::distributed() || device == model::Device::cpu,
                 "calibration over several ranks runs on the CPU only");
    if (device == model::Device::gpu) {
        gpu_ = std::make_unique<GpuStates>(m, cs);
        if (original_) gpu_original_ = std::make_unique<GpuStates>(*original_, cs);
        return;
    }
    // Under mpirun each rank holds its contiguous share of each set's windows.
    for (size_t set = 0; set < 2; ++set) {
        const auto& windows = set == 0 ? cs.fit : cs.sel;
        const auto [lo, hi] =
            dist::share(static_cast<int64_t>(windows.size()), dist::rank(), dist::size());
        share_[set] = {lo, static_cast<int64_t>(windows.size())};
        for (int64_t w = lo; w < hi; ++w) {
            xs_[set].push_back(m.embed(windows[static_cast<size_t>(w)]));
            if (original_) xo_[set].push_back(original_->embed(windows[static_cast<size_t>(w)]));
        }
    }
}

namespace {

// A copy of one window's input (the distributed passes keep them until the
// running sum reaches this rank).
MatF copy_of(const float* x, int64_t rows, int64_t cols) {
    MatF m(rows, cols);
    std::copy(x, x + rows * cols, m.data());
    return m;
}

// The sum of `kept` onto the running sum of the ranks before, passed on; the
// mean over every rank's windows.
MatD chained_gram(std::optional<GramAccumulator>& acc, const std::vector<MatF>& kept,
                  const std::string& what) {
    chain::receive(acc);
    for (const MatF& x : kept) {
        if (!acc) acc.emplace(x.cols());
        acc->add(x.data(), x.rows(), x.cols());
    }
    chain::pass_on(acc);
    return chain::mean_everywhere(acc, what);
}

}  // namespace

SequentialCalib::~SequentialCalib() = default;

void SequentialCalib::check_live() const {
    CORTIQ_CHECK(!released_, "the calibration states were released for distillation");
}

void SequentialCalib::release_gpu() {
    check_live();
    if (!gpu_) return;
    released_ = true;
    load_seconds_ = layer_load_seconds();
    gpu_.reset();  // the compressed model's copy and its states
    gpu_original_.reset();
}

double SequentialCalib::layer_load_seconds() const {
    double s = load_seconds_;
    for (const auto* g : {gpu_.get(), gpu_original_.get()})
        if (g) s += g->load_seconds();
    return s;
}

std::pair<MatD, MatD> SequentialCalib::grams(int64_t layer, std::string_view input) {
    check_live();
    if (gpu_) return {gpu_->gram(0, layer, input), gpu_->gram(1, layer, input)};
    std::array<MatD, 2> h;
    for (size_t set = 0; set < 2; ++set) {
        std::optional<GramAccumulator> acc;  // sized by the first block that reaches the input
        std::vector<MatF> kept;              // several ranks: the inputs, for the chain
        const model::LinearInputHook hook = [&](int64_t, std::string_view in, const float* x,
                                                int64_t rows, int64_t cols) {
            if (in != input) return;
            if (dist::distributed()) {
                kept.push_back(copy_of(x, rows, cols));
                return;
            }
            if (!acc) acc.emplace(cols);
            acc->add(x, rows, cols);
        };
        model::BlockActivations act;
        for (const MatF& x : xs_[set]) {
            act.x = x;
            m_.block(layer, 0, nullptr, act, &hook, input);  // nothing past this input is needed
        }
        const std::string what = fmt::format("block {}, input '{}'", layer, input);
        if (dist::distributed()) {
            h[set] = chained_gram(acc, kept, what);
            continue;
        }
        CORTIQ_CHECK(acc, "block {} has no linear-layer input named '{}'", layer, input);
        h[set] = acc->mean();
    }
    return {std::move(h[0]), std::move(h[1])};
}

std::pair<MatD, MatD> SequentialCalib::cross_grams(int64_t layer, std::string_view input) {
    check_live();
    CORTIQ_ASSERT(original_, "cross_grams needs the original model");
    if (gpu_)
        return {gpu_->cross_gram(0, layer, input, *gpu_original_),
                gpu_->cross_gram(1, layer, input, *gpu_original_)};
    GramSet g = cpu_pass_with_original(layer, input, /*with_gram=*/false);
    return {std::move(g.cross_fit), std::move(g.cross_sel)};
}

SequentialCalib::GramSet SequentialCalib::grams_with_cross(int64_t layer, std::string_view input) {
    check_live();
    CORTIQ_ASSERT(original_, "grams_with_cross needs the original model");
    if (!gpu_) return cpu_pass_with_original(layer, input, /*with_gram=*/true);
    // one pass per set: the original's block and this one's, each once
    GramSet out;
    out.cross_fit = gpu_->cross_gram(0, layer, input, *gpu_original_, &out.h_fit);
    out.cross_sel = gpu_->cross_gram(1, layer, input, *gpu_original_, &out.h_sel);
    return out;
}

// Per window: the original's input x_o, then the compressed model's x_c, both
// up to `input`; Σ x_o x_cᵀ, and with with_gram Σ x_c x_cᵀ in the same pass
// (the sums, in the same order, of grams()).
SequentialCalib::GramSet SequentialCalib::cpu_pass_with_original(int64_t layer,
                                                                 std::string_view input,
                                                                 bool with_gram) {
    GramSet out;
    for (size_t set = 0; set < 2; ++set) {
        std::optional<GramAccumulator> acc;
        std::optional<CrossGramAccumulator> cross;
        std::vector<std::pair<MatF, MatF>> kept;  // several ranks: (x_o, x_c) per window
        MatF xo;                                  // the original model's input, one window
        model::BlockActivations act;
        for (size_t w = 0; w < xs_[set].size(); ++w) {
            const model::LinearInputHook keep = [&](int64_t, std::string_view in, const float* x,
                                                    int64_t rows, int64_t cols) {
                if (in != input) return;
                xo = MatF(rows, cols);
                std::copy(x, x + rows * cols, xo.data());
            };
            act.x = xo_[set][w];
            original_->block(layer, 0, nullptr, act, &keep, input);
            CORTIQ_CHECK(xo.rows() > 0, "block {} has no linear-layer input named '{}'", layer,
                         input);
            const model::LinearInputHook pair = [&](int64_t, std::string_view in, const float* x,
                                                    int64_t rows, int64_t cols) {
                if (in != input) return;
                CORTIQ_ASSERT(rows == xo.rows() && cols == xo.cols(), "input '{}' changed shape",
                              in);
                if (dist::distributed()) {
                    kept.emplace_back(xo, copy_of(x, rows, cols));
                    return;
                }
                if (!cross) cross.emplace(cols, cols);
                cross->add(xo.data(), x, rows);
                if (!with_gram) return;
                if (!acc) acc.emplace(cols);
                acc->add(x, rows, cols);
            };
            act.x = xs_[set][w];
            m_.block(layer, 0, nullptr, act, &pair, input);
        }
        if (dist::distributed()) {
            const std::string what = fmt::format("block {}, input '{}'", layer, input);
            chain::receive(cross);
            if (with_gram) chain::receive(acc);
            for (const auto& [a, b] : kept) {
                if (!cross) cross.emplace(a.cols(), b.cols());
                cross->add(a.data(), b.data(), a.rows());
                if (!with_gram) continue;
                if (!acc) acc.emplace(b.cols());
                acc->add(b.data(), b.rows(), b.cols());
            }
            chain::pass_on(cross);
            if (with_gram) chain::pass_on(acc);
            (set == 0 ? out.cross_fit : out.cross_sel) =
                chain::mean_everywhere(cross, what + " (cross Gram)");
            if (with_gram) (set == 0 ? out.h_fit : out.h_sel) = chain::mean_everywhere(acc, what);
            continue;
        }
        CORTIQ_CHECK(cross, "no windows in set {} for the cross Gram of '{}'", set, input);
        (set == 0 ? out.cross_fit : out.cross_sel) = cross->mean();
        if (with_gram) (set == 0 ? out.h_fit : out.h_sel) = acc->mean();
    }
    return out;
}

std::pair<MatD, MatD> SequentialCalib::head_grams() {
    check_live();
    if (gpu_) return {gpu_->gram(0, 0, "lm_head"), gpu_->gram(1, 0, "lm_head")};
    const auto& cfg = m_.config();
    const int64_t hidden = cfg.hidden_size;
    std::array<MatD, 2> h;
    MatF normed;
    for (size_t set = 0; set < 2; ++set) {
        std::optional<GramAccumulator> acc(hidden);
        std::vector<MatF> kept;                // several ranks: the inputs, for the chain
        if (dist::distributed()) acc.reset();  // the chain brings the sum so far
        for (const MatF& x : xs_[set]) {
            if (normed.rows() != x.rows()) normed = MatF(x.rows(), hidden);
            model::rmsnorm(x.data(), x.rows(), hidden, m_.final_norm().data(),
                           static_cast<float>(cfg.rms_norm_eps), normed.data());
            if (dist::distributed())
                kept.push_back(normed);
            else
                acc->add(normed.data(), normed.rows(), hidden);
        }
        h[set] = dist::distributed() ? chained_gram(acc, kept, "the head's input") : acc->mean();
    }
    return {std::move(h[0]), std::move(h[1])};
}

std::pair<int64_t, int64_t> SequentialCalib::window_share(int set) const {
    CORTIQ_CHECK(set == 0 || set == 1, "calibration set {} (0: fit, 1: held out)", set);
    return share_[static_cast<size_t>(set)];
}

std::pair<std::vector<MatF>, std::vector<MatF>> SequentialCalib::block_pairs(int set, int64_t layer,
                                                                             bool gather) {
    check_live();
    CORTIQ_ASSERT(original_, "block_pairs needs the original model");
    CORTIQ_CHECK(set == 0 || set == 1, "calibration set {} (0: fit, 1: held out)", set);
    std::vector<MatF> x = gpu_ ? gpu_->hidden(set) : xs_[static_cast<size_t>(set)];
    // The original's block on the original's states: on the device when the
    // states live there (at the 7B shape, 26 TFLOP a layer for 128 windows of
    // 512 tokens, which the host's cores took minutes for).
    if (gpu_) return {std::move(x), gpu_original_->block_outputs(set, layer)};
    std::vector<MatF> y = xo_[static_cast<size_t>(set)];
    model::BlockActivations act;
    for (auto& w : y) {  // the original's block on the original's states
        act.x = std::move(w);
        original_->block(layer, 0, nullptr, act);
        w = std::move(act.out);
    }
    if (dist::distributed() && gather) gather_on_root(x, y);
    return {std::move(x), std::move(y)};
}

SequentialCalib::DevicePairs SequentialCalib::block_pairs_on_device(int set, int64_t layer) {
    check_live();
    CORTIQ_ASSERT(gpu_ && gpu_original_, "block_pairs_on_device needs GPU states and the original");
    CORTIQ_CHECK(!dist::distributed(), "block tuning's windows on the device: one process only");
    return {gpu_->hidden_on_device(set), gpu_original_->block_outputs_on_device(set, layer)};
}

void SequentialCalib::free_block_pairs() {
    if (gpu_original_) gpu_original_->free_block_outputs();
}

// Several ranks: every rank's pairs, in window order, on rank 0 (which tunes);
// the other ranks keep none.
void SequentialCalib::gather_on_root(std::vector<MatF>& x, std::vector<MatF>& y) {
    if (dist::rank() != 0) {
        const int64_t n = static_cast<int64_t>(x.size());
        dist::send(&n, sizeof n, 0);
        for (size_t i = 0; i < x.size(); ++i) {
            dist::send(x[i], 0);
            dist::send(y[i], 0);
        }
        x.clear();
        y.clear();
        return;
    }
    for (int r = 1; r < dist::size(); ++r) {
        int64_t n = 0;
        dist::recv(&n, sizeof n, r);
        for (int64_t i = 0; i < n; ++i) {
            x.push_back(dist::recv_matf(r));
            y.push_back(dist::recv_matf(r));
        }
    }
}

void SequentialCalib::weight_changed(int64_t layer, std::string_view name) {
    if (released_) return;  // no states left to keep in step (distillation's installs)
    if (gpu_) gpu_->set_linear(layer, name, *m_.linear(layer, name).w);
}

void SequentialCalib::advance(int64_t layer) {
    check_live();
    if (gpu_) {
        gpu_->advance(0, layer);
        gpu_->advance(1, layer);
        if (gpu_original_) {
            gpu_original_->advance(0, layer);
            gpu_original_->advance(1, layer);
        }
        return;
    }
    model::BlockActivations act;
    for (auto& xs : xs_)
        for (auto& x : xs) {
            act.x = std::move(x);
            m_.block(layer, 0, nullptr, act);
            x = std::move(act.out);
        }
    for (auto& xs : xo_)
        for (auto& x : xs) {
            act.x = std::move(x);
            original_->block(layer, 0, nullptr, act);
            x = std::move(act.out);
        }
}

}  // namespace cortiq::calib
