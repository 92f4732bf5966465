// Qwen3.5 on the CPU: per-token speed of a whole decode step and of
// one Gated DeltaNet block, on any Qwen3.5 checkpoint (float or compressed):
//   bench_qwen35_cpu MODEL [--prompt 128] [--steps 32] [--prefill 512] [--threads 0]
// A decode step: one token through the cache after a prompt, logits included
// (what `generate` does per token). The block: layer 0 (a DeltaNet layer in
// the published pattern) on one token with its conv and recurrent states, and
// on a prefill of --prefill tokens (the chunkwise delta rule), per token.
// For a model of the 0.8B shape without downloading one:
// scripts/bench/make_qwen35_08b.py writes a random one (numpy only).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "model/llama.hpp"

using namespace cortiq;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Microseconds per token of layer 0 on `rows` random rows, the median of
// `reps` runs (the states carry on from run to run, as in decoding).
double block_us_per_token(const model::Model& m, int64_t rows, int reps) {
    const int64_t hidden = m.config().hidden_size;
    model::KvCache cache = m.make_cache(rows * (reps + 1));
    model::BlockActivations a;
    Rng rng(7);
    std::vector<double> t;
    for (int i = 0; i <= reps; ++i) {
        a.x = MatF(rows, hidden);
        for (int64_t j = 0; j < a.x.size(); ++j) a.x.data()[j] = static_cast<float>(rng.normal());
        const auto t0 = Clock::now();
        m.block(0, i * rows, &cache, a);
        if (i > 0) t.push_back(1e3 * ms_since(t0) / static_cast<double>(rows));  // i = 0: warm-up
    }
    std::nth_element(t.begin(), t.begin() + static_cast<long>(t.size() / 2), t.end());
    return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
    CORTIQ_CHECK(argc >= 2,
                 "usage: bench_qwen35_cpu MODEL [--prompt 128] [--steps 32] "
                 "[--prefill 512] [--threads 0]");
    const std::string dir = argv[1];
    int64_t prompt = 128, steps = 32, prefill = 512;
    int threads = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--prompt")
            prompt = std::stoll(v);
        else if (k == "--steps")
            steps = std::stoll(v);
        else if (k == "--prefill")
            prefill = std::stoll(v);
        else if (k == "--threads")
            threads = std::stoi(v);
        else
            CORTIQ_FAIL("unknown option {}", k);
    }
    set_num_threads(threads);
    auto t0 = Clock::now();
    const auto m = model::Model::load(dir);
    CORTIQ_CHECK(m.config().hybrid() && m.config().is_delta(0),
                 "{}: layer 0 is not a Gated DeltaNet layer (a Qwen3.5 model is needed)", dir);
    fmt::print(
        "{}: {:.2f} M params, {:.1f} MB of weights in memory, loaded in {:.1f} s; {} "
        "threads\n",
        dir, m.num_params() / 1e6, m.weight_bytes() / 1e6, ms_since(t0) / 1e3, num_threads());
    std::vector<int32_t> toks(static_cast<size_t>(prompt + steps));
    Rng rng(1);
    for (auto& t : toks)
        t = static_cast<int32_t>(rng.uniform() * static_cast<double>(m.config().vocab_size));
    model::KvCache cache = m.make_cache(prompt + steps);
    t0 = Clock::now();
    m.forward(std::span<const int32_t>(toks).subspan(0, static_cast<size_t>(prompt)), cache);
    const double prompt_ms = ms_since(t0);
    t0 = Clock::now();
    for (int64_t i = 0; i < steps; ++i)
        m.forward(std::span<const int32_t>(toks).subspan(static_cast<size_t>(prompt + i), 1),
                  cache);
    const double step_ms = ms_since(t0) / static_cast<double>(steps);
    fmt::print(
        "decode step: {:.2f} ms/token ({:.1f} tokens/s) after a {}-token prompt ({:.1f} "
        "ms, {:.2f} ms/token)\n",
        step_ms, 1e3 / step_ms, prompt, prompt_ms, prompt_ms / static_cast<double>(prompt));
    const double one = block_us_per_token(m, 1, 50);
    const double many = block_us_per_token(m, prefill, 3);
    fmt::print(
        "DeltaNet block (layer 0): {:.1f} us per decoded token, {:.2f} us per token in a "
        "{}-token prefill\n",
        one, many, prefill);
    return 0;
} catch (const std::exception& e) {
    fmt::print(stderr, "bench_qwen35_cpu: {}\n", e.what());
    return 1;
}
