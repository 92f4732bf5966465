// Synthetic layers for benchmarks with the recipe of encode/synthetic.hpp, the
// random draws and products on the GPU (float32): seconds instead of minutes
// for 11008-wide Grams. Deterministic for a seed (same device and library),
// not bit-identical to the CPU generator.
#pragma once

#include <cstdint>
#include <utility>

#include "core/matrix.hpp"
#include "encode/cuda/ops.hpp"
#include "encode/synthetic.hpp"

namespace cortiq::encode::cuda {

// W (m × n): a decaying spectrum d_k = (1+k)^-0.6 plus 2 % noise.
MatD synthetic_weight(Gpu& gpu, int64_t m, int64_t n, uint64_t seed);
// H_fit, H_sel (n × n) from activations with log-normal channel scales, three
// heavy channels and 16 shared factors; tokens_fit = 0: 2·n tokens (and a
// quarter of that, at least 256, for H_sel).
std::pair<MatD, MatD> synthetic_grams(Gpu& gpu, int64_t n, uint64_t seed, int64_t tokens_fit = 0);
SyntheticLayer synthetic_layer(Gpu& gpu, int64_t m, int64_t n, uint64_t seed,
                               int64_t tokens_fit = 0);

}  // namespace cortiq::encode::cuda
