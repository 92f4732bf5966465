#include "model/generate.hpp"

#include <algorithm>
#include <chrono>
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
    const std::vector<std::vector<int32_t>> prompts{{prompt.begin(), prompt.end()}};
    auto out = generate_batch(rt, prompts, opt, [&](int64_t, int32_t id) {
        if (on_token) on_token(id);
    });
    return std::move(out[0]);
}

std::vector<std::vector<int32_t>> generate_batch(
    Runtime& rt, const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& opt,
    const std::function<void(int64_t, int32_t)>& on_token, GenerateTiming* timing) {
    using clock = std::chrono::steady_clock;
    const int64_t B = static_cast<int64_t>(prompts.size());
    CORTIQ_CHECK(B > 0, "generate: no prompts");
    CORTIQ_CHECK(opt.max_tokens >= 0, "generate: max_tokens must be non-negative");
    size_t longest = 0;
    for (size_t s = 0; s < prompts.size(); ++s) {
        CORTIQ_CHECK(!prompts[s].empty(),
                     "generate: prompt {} is empty (no BOS token to start from)", s);
        longest = std::max(longest, prompts[s].size());
    }
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
    if (opt.max_tokens == 0) return out;
    const auto t0 = clock::now();
    rt.reset_cache(static_cast<int64_t>(longest) + opt.max_tokens, B);
    std::vector<Rng> rngs;
    std::vector<int32_t> next(static_cast<size_t>(B));
    std::vector<bool> done(static_cast<size_t>(B), false);
    int64_t live = B;
    // Picks and keeps sequence s's next token from its logits; a sequence
    // that is done keeps feeding its last token, its logits unread.
    auto take = [&](int64_t s, std::span<const float> logits) {
        const size_t i = static_cast<size_t>(s);
        if (done[i]) return;
        next[i] = pick_token(logits, opt.temperature, rngs[i]);
        out[i].push_back(next[i]);
        if (on_token) on_token(s, next[i]);
        const bool stop =
            std::find(opt.stop_ids.begin(), opt.stop_ids.end(), next[i]) != opt.stop_ids.end();
        if (stop || static_cast<int64_t>(out[i].size()) == opt.max_tokens) {
            done[i] = true;
            --live;
        }
    };
    for (int64_t s = 0; s < B; ++s) {
        rngs.emplace_back(opt.seed + static_cast<uint64_t>(s));
        const MatF logits = rt.forward_cached(prompts[static_cast<size_t>(s)], true, s);
        take(s, logits.span());
    }
    const auto t1 = clock::now();
    int64_t steps = 0;
    while (live > 0) {
        const MatF logits = rt.decode_step(next);
        ++steps;
        for (int64_t s = 0; s < B; ++s)
            take(s, std::span<const float>(logits.data() + s * logits.cols(),
                                           static_cast<size_t>(logits.cols())));
    }
    if (timing) {
        timing->prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
        timing->decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
        timing->decode_steps = steps;
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
