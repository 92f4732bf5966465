#include "calib/sequential.hpp"

#include <optional>

#include "core/error.hpp"
#include "model/gpu_model.hpp"
#include "model/llama.hpp"
#include "model/ops.hpp"

namespace cortiq::calib {

SequentialCalib::SequentialCalib(model::Model& m, const CalibSet& cs, model::Device device)
    : m_(m) {
    if (device == model::Device::gpu) {
        gpu_ = std::make_unique<model::GpuModel>(m);
        gpu_->calib_load(0, cs.fit);
        gpu_->calib_load(1, cs.sel);
        return;
    }
    for (const auto& w : cs.fit) xs_[0].push_back(m.embed(w));
    for (const auto& w : cs.sel) xs_[1].push_back(m.embed(w));
}

SequentialCalib::~SequentialCalib() = default;

std::pair<MatD, MatD> SequentialCalib::grams(int64_t layer, std::string_view input) {
    if (gpu_) return {gpu_->calib_gram(0, layer, input), gpu_->calib_gram(1, layer, input)};
    std::array<MatD, 2> h;
    for (size_t set = 0; set < 2; ++set) {
        std::optional<GramAccumulator> acc;  // sized by the first block that reaches the input
        const model::LinearInputHook hook = [&](int64_t, std::string_view in, const float* x,
                                                int64_t rows, int64_t cols) {
            if (in != input) return;
            if (!acc) acc.emplace(cols);
            acc->add(x, rows, cols);
        };
        model::BlockActivations act;
        for (const MatF& x : xs_[set]) {
            act.x = x;
            m_.block(layer, 0, nullptr, act, &hook, input);  // nothing past this input is needed
        }
        CORTIQ_CHECK(acc, "block {} has no linear-layer input named '{}'", layer, input);
        h[set] = acc->mean();
    }
    return {std::move(h[0]), std::move(h[1])};
}

std::pair<MatD, MatD> SequentialCalib::head_grams() {
    if (gpu_) return {gpu_->calib_gram(0, 0, "lm_head"), gpu_->calib_gram(1, 0, "lm_head")};
    const auto& cfg = m_.config();
    const int64_t hidden = cfg.hidden_size;
    std::array<MatD, 2> h;
    MatF normed;
    for (size_t set = 0; set < 2; ++set) {
        GramAccumulator acc(hidden);
        for (const MatF& x : xs_[set]) {
            if (normed.rows() != x.rows()) normed = MatF(x.rows(), hidden);
            model::rmsnorm(x.data(), x.rows(), hidden, m_.final_norm().data(),
                           static_cast<float>(cfg.rms_norm_eps), normed.data());
            acc.add(normed.data(), normed.rows(), hidden);
        }
        h[set] = acc.mean();
    }
    return {std::move(h[0]), std::move(h[1])};
}

void SequentialCalib::weight_changed(int64_t layer, std::string_view name) {
    if (gpu_) gpu_->set_linear(layer, name, *m_.linear(layer, name).w);
}

void SequentialCalib::advance(int64_t layer) {
    if (gpu_) {
        gpu_->calib_advance(0, layer);
        gpu_->calib_advance(1, layer);
        return;
    }
    model::BlockActivations act;
    for (auto& xs : xs_)
        for (auto& x : xs) {
            act.x = std::move(x);
            m_.block(layer, 0, nullptr, act);
            x = std::move(act.out);
        }
}

}  // namespace cortiq::calib
