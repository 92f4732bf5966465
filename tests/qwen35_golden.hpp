// The reference logits of a Qwen3.5 test model (tests/golden/tiny-qwen35*,
// or a folder the 0.8B device check writes): golden.json (token sequences, the
// rows kept of each, the vocabulary) and golden.logits.f32 (float32 logits of
// those rows, from transformers).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "core/matrix.hpp"

namespace cortiq::test {

struct Golden35 {
    std::vector<std::vector<int32_t>> seqs;
    std::vector<std::vector<int64_t>> rows;
    std::vector<float> logits;  // the kept rows of every sequence, in order
    int64_t vocab = 0;
};

inline Golden35 load_golden35(const std::filesystem::path& dir) {
    Golden35 g;
    std::ifstream in(dir / "golden.json");
    const auto j = nlohmann::json::parse(in);
    g.seqs = j.at("seqs").get<std::vector<std::vector<int32_t>>>();
    g.rows = j.at("rows").get<std::vector<std::vector<int64_t>>>();
    g.vocab = j.at("vocab").get<int64_t>();
    int64_t n = 0;
    for (const auto& r : g.rows) n += static_cast<int64_t>(r.size());
    g.logits.resize(static_cast<size_t>(n * g.vocab));
    std::ifstream f(dir / "golden.logits.f32", std::ios::binary);
    f.read(reinterpret_cast<char*>(g.logits.data()),
           static_cast<std::streamsize>(g.logits.size() * sizeof(float)));
    EXPECT_TRUE(f) << "golden.logits.f32 is short";
    return g;
}

// Max |a − ref| over the kept rows of every sequence, and max |ref| (the
// logit scale); forward(seq) gives the logits of one sequence.
template <class Forward>
std::pair<double, double> golden_diff(const Golden35& g, Forward&& forward) {
    double worst = 0, scale = 0;
    const float* ref = g.logits.data();
    for (size_t s = 0; s < g.seqs.size(); ++s) {
        const MatF out = forward(g.seqs[s]);
        EXPECT_EQ(out.cols(), g.vocab);
        for (int64_t r : g.rows[s]) {
            for (int64_t j = 0; j < g.vocab; ++j) {
                worst = std::max(worst, std::fabs(static_cast<double>(out(r, j)) - ref[j]));
                scale = std::max(scale, std::fabs(static_cast<double>(ref[j])));
            }
            ref += g.vocab;
        }
    }
    return {worst, scale};
}

}  // namespace cortiq::test
