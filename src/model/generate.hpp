// Autoregressive generation through the KV cache: greedy at temperature 0,
// else sampling from softmax(logits / T) with a seeded generator.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/rng.hpp"
#include "model/llama.hpp"
#include "model/runtime.hpp"

namespace cortiq::model {

struct GenerateOptions {
    int64_t max_tokens = 128;
    double temperature = 0.0;  // 0: greedy
    uint64_t seed = 0;
    std::vector<int32_t> stop_ids;  // generation ends after producing one of these
};

// argmax (first index on ties) at temperature ≤ 0, else a draw from
// softmax(logits / temperature).
int32_t pick_token(std::span<const float> logits, double temperature, Rng& rng);

// Feeds the prompt (non-empty), then produces up to max_tokens tokens,
// calling on_token(id) as each one comes. Returns the generated ids. On any
// runtime (model::make_runtime: CPU or GPU, through its KV cache), or on the
// CPU for a Model.
std::vector<int32_t> generate(Runtime& rt, std::span<const int32_t> prompt,
                              const GenerateOptions& opt,
                              const std::function<void(int32_t)>& on_token = {});
std::vector<int32_t> generate(const Model& m, std::span<const int32_t> prompt,
                              const GenerateOptions& opt,
                              const std::function<void(int32_t)>& on_token = {});

}  // namespace cortiq::model
