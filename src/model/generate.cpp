#include "model/generate.hpp"

#include <algorithm>
#include <cmath>

namespace cortiq::model {

int32_t pick_token(std::span<const float> logits, double temperature, Rng& rng) {
    CORTIQ_ASSERT(!logits.empty());
    const auto best = std::max_element(logits.begin(), logits.end());  // first maximum
    if (temperature <= 0) return static_cast<int32_t>(best - logits.begin());
    const double mx = *best;
    std::vector<double> p(logits.size());
    double sum = 0;
    for (size_t i = 0; i < logits.size(); ++i)
        sum += p[i] = std::exp((logits[i] - mx) / temperature);
    double u = rng.uniform() * sum;
    for (size_t i = 0; i < p.size(); ++i) {
        u -= p[i];
        if (u < 0) return static_cast<int32_t>(i);
    }
    return static_cast<int32_t>(best - logits.begin());  // rounding at the very end
}

std::vector<int32_t> generate(Runtime& rt, std::span<const int32_t> prompt,
                              const GenerateOptions& opt,
                              const std::function<void(int32_t)>& on_token) {
    CORTIQ_CHECK(!prompt.empty(), "generate: empty prompt (no BOS token to start from)");
    CORTIQ_CHECK(opt.max_tokens >= 0, "generate: max_tokens must be non-negative");
    std::vector<int32_t> out;
    if (opt.max_tokens == 0) return out;
    rt.reset_cache(static_cast<int64_t>(prompt.size()) + opt.max_tokens);
    Rng rng(opt.seed);
    MatF logits = rt.forward_cached(prompt, /*last_only=*/true);
    for (int64_t t = 0; t < opt.max_tokens; ++t) {
        const int32_t id = pick_token(logits.span(), opt.temperature, rng);
        out.push_back(id);
        if (on_token) on_token(id);
        if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), id) != opt.stop_ids.end()) break;
        if (t + 1 == opt.max_tokens) break;
        logits = rt.forward_cached(std::span<const int32_t>(&id, 1), /*last_only=*/true);
    }
    return out;
}

std::vector<int32_t> generate(const Model& m, std::span<const int32_t> prompt,
                              const GenerateOptions& opt,
                              const std::function<void(int32_t)>& on_token) {
    const auto rt = make_runtime(m, Device::cpu);
    return generate(*rt, prompt, opt, on_token);
}

}  // namespace cortiq::model
