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

// Where a generation's time went: the prompts (prefill, up to the first
// generated token of every sequence) and the decode steps after.
struct GenerateTiming {
    double prefill_seconds = 0, decode_seconds = 0;
    int64_t decode_steps = 0;
};

// Several sequences at once: each prompt is fed on its own (sequence s of
// the runtime's cache), then every step decodes one token for all of them in
// one pass (Runtime::decode_step). Sequence s samples with seed opt.seed + s,
// so sequence 0 is what generate() gives for its prompt alone. A sequence
// that produced a stop id is done (later tokens are not kept) while the
// others go on. on_token(s, id) as each token comes.
std::vector<std::vector<int32_t>> generate_batch(
    Runtime& rt, const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& opt,
    const std::function<void(int64_t, int32_t)>& on_token = {}, GenerateTiming* timing = nullptr);

}  // namespace cortiq::model
