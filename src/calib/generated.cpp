#include "calib/generated.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "model/generate.hpp"

namespace cortiq::calib {

std::vector<std::vector<int32_t>> generated_windows(const model::Model& m, int64_t count,
                                                    int64_t len, int32_t start, double temperature,
                                                    uint64_t seed) {
    CORTIQ_CHECK(len >= 2, "generated calibration windows need at least 2 tokens, not {}", len);
    CORTIQ_CHECK(start >= 0 && start < m.config().vocab_size,
                 "generated calibration windows: start token {} is outside the vocabulary ({})",
                 start, m.config().vocab_size);
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(std::max<int64_t>(count, 0)));
    parallel_for(0, static_cast<int64_t>(out.size()), [&](int64_t i) {
        model::GenerateOptions opt;
        opt.max_tokens = len - 1;
        opt.temperature = temperature;
        opt.seed = seed + static_cast<uint64_t>(i);  // no stop tokens: every window is full
        const std::vector<int32_t> prompt = {start};
        auto& w = out[static_cast<size_t>(i)];
        w = prompt;
        const auto ids = model::generate(m, prompt, opt);
        w.insert(w.end(), ids.begin(), ids.end());
        CORTIQ_ASSERT(static_cast<int64_t>(w.size()) == len);
    });
    return out;
}

int64_t add_generated_windows(CalibSet& cs, double per_window, const model::Model& m, int32_t start,
                              uint64_t seed) {
    CORTIQ_CHECK(per_window >= 0 && std::isfinite(per_window),
                 "generated windows per window must be finite and non-negative, got {}",
                 per_window);
    int64_t added = 0;
    uint64_t s = seed;
    for (auto* set : {&cs.fit, &cs.sel}) {
        if (!set->empty()) {
            const auto n =
                static_cast<int64_t>(std::llround(per_window * static_cast<double>(set->size())));
            auto w = generated_windows(m, n, static_cast<int64_t>((*set)[0].size()), start, 1.0, s);
            set->insert(set->end(), std::make_move_iterator(w.begin()),
                        std::make_move_iterator(w.end()));
            added += n;
        }
        s = seed + (uint64_t{1} << 32);
    }
    return added;
}

}  // namespace cortiq::calib
