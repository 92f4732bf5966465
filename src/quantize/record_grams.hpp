// `cortiq bench --from-model M --tensor T --calib TEXT`: a decoder linear layer
// with the Grams of its input recorded from the float model over a text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "encode/bench.hpp"

namespace cortiq::quant {

encode::BenchInput bench_input_recorded(const std::string& model_dir, const std::string& tensor,
                                        const std::vector<std::string>& calib_paths,
                                        int64_t samples, int64_t seqlen);

}  // namespace cortiq::quant
