// Calibration windows sampled from the original model itself. A
// calibration text covers one domain; the model was trained on many. Its own
// samples at temperature 1 cover what it learned — on tiny-llama-6m, trained
// on TinyStories, Austen, the KJV, the Brown corpus and the Jargon File, they
// read like all five — so the Grams, the drift correction, block tuning,
// distillation and the held-out choice of each see every domain the model
// knows, not only the calibration text's. No text beyond the model is needed
// (the data-free calibration of LLM-QAT), and none of the held-out texts is
// seen.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "calib/calib.hpp"
#include "model/llama.hpp"

namespace cortiq::calib {

// `count` windows of `len` tokens: `start`, then len − 1 tokens sampled from
// softmax(logits / temperature) of `m` through its KV cache, window i from a
// generator of seed `seed + i`, on the CPU, windows in parallel (under
// mpirun each rank samples a share and all ranks get every window). The same
// windows whatever the thread or rank count (the CPU forward does not depend
// on them).
// `done(k)` (optional, from any thread) hears of every k windows sampled (or,
// under mpirun, received), for a progress line.
using WindowsDone = std::function<void(int64_t)>;
std::vector<std::vector<int32_t>> generated_windows(const model::Model& m, int64_t count,
                                                    int64_t len, int32_t start, double temperature,
                                                    uint64_t seed, const WindowsDone& done = {});

// round(per_window · |fit|) such windows join the fit set and round(per_window
// · |sel|) the held-out set (seeds `seed` and `seed` + 2^32), with the length
// of the set's windows. Returns the windows added.
int64_t add_generated_windows(CalibSet& cs, double per_window, const model::Model& m, int32_t start,
                              uint64_t seed, const WindowsDone& done = {});

}  // namespace cortiq::calib
