// A seeded synthetic layer for benchmarks and tests: a weight with a decaying
// singular spectrum, and fit / held-out Grams from different random
// activations that share correlated directions and a few heavy channels.
#pragma once

#include <cstdint>

#include "core/matrix.hpp"

namespace cortiq::encode {

struct SyntheticLayer {
    MatD w;      // m × n
    MatD h_fit;  // n × n
    MatD h_sel;  // n × n
};

// tokens_fit = 0: 2·n tokens for the fit Gram (and a quarter of that, at
// least 256, for the held-out Gram).
SyntheticLayer synthetic_layer(int64_t m, int64_t n, uint64_t seed, int64_t tokens_fit = 0);

}  // namespace cortiq::encode
