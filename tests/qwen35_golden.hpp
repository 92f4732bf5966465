// The reference logits of a Qwen3.5 test model (tests/golden/tiny-qwen35*,
// or a folder the 0.8B device check writes): golden.json (token sequences, the
// rows kept of each, the vocabulary) and golden.logits.f32 (float32 logits of
// those rows, from transformers).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

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

}  // namespace cortiq::test
