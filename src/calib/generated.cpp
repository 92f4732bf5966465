#include "calib/generated.hpp"

#include <cstring>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "dist/comm.hpp"
#include "model/generate.hpp"

namespace cortiq::calib {

std::vector<std::vector<int32_t>> generated_windows(const model::Model& m, int64_t count,
                                                    int64_t len, int32_t start, double temperature,
                                                    uint64_t seed, const WindowsDone& done) {
    CORTIQ_CHECK(len >= 2, "generated calibration windows need at least 2 tokens, not {}", len);
    CORTIQ_CHECK(start >= 0 && start < m.config().vocab_size,
                 "generated calibration windows: start token {} is outside the vocabulary ({})",
                 start, m.config().vocab_size);
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(std::max<int64_t>(count, 0)));
    // Under mpirun each rank samples its share, then every rank gets all:
    // window i depends on its seed alone, so the windows are those of one
    // process.
    const int64_t n = static_cast<int64_t>(out.size());
    const auto [lo, hi] = dist::share(n, dist::rank(), dist::size());
    parallel_for(lo, hi, [&](int64_t i) {
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
        if (done) done(1);
    });
    for (int r = 0; dist::distributed() && r < dist::size(); ++r) {
        const auto [a, b] = dist::share(n, r, dist::size());
        std::vector<uint8_t> bytes(static_cast<size_t>((b - a) * len) * sizeof(int32_t));
        if (r == dist::rank())
            for (int64_t i = a; i < b; ++i)
                std::memcpy(bytes.data() + static_cast<size_t>((i - a) * len) * sizeof(int32_t),
                            out[static_cast<size_t>(i)].data(),
                            static_cast<size_t>(len) * sizeof(int32_t));
        dist::broadcast(bytes, r);
        if (r == dist::rank()) continue;
        if (done) done(b - a);
        for (int64_t i = a; i < b; ++i) {
            auto& w = out[static_cast<size_t>(i)];
            w.resize(static_cast<size_t>(len));
            std::memcpy(w.data(),
                        bytes.data() + static_cast<size_t>((i - a) * len) * sizeof(int32_t),
                        static_cast<size_t>(len) * sizeof(int32_t));
        }
    }
    return out;
}

int64_t add_generated_windows(CalibSet& cs, double per_window, const model::Model& m, int32_t start,
                              uint64_t seed, const WindowsDone& done) {
    const auto sampled = [&](uint64_t s) {
        return [&m, &done, start, s](int64_t count, int64_t len) {
            return generated_windows(m, count, len, start, 1.0, s, done);
        };
    };
    const int64_t fit = append_windows(cs.fit, per_window, "generated", sampled(seed));
    return fit +
           append_windows(cs.sel, per_window, "generated", sampled(seed + (uint64_t{1} << 32)));
}

}  // namespace cortiq::calib
