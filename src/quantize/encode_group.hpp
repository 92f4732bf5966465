// Encoding the tensors that read one input (q/k/v; gate/up) against its
// Grams, on the CPU (one shared float64 context) or the GPU.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/matrix.hpp"
#include "encode/bench.hpp"
#include "encode/options.hpp"

namespace cortiq::quant {

struct GroupJob {
    std::string name;
    MatD w;
    double bpw;
};

// Results in job order; on_done(i, enc) as each finishes. With `profile`,
// each result's `stages` holds its seconds per encoder stage.
std::vector<encode::Encoded> encode_group(
    const std::vector<GroupJob>& jobs, const MatD& h_fit, const MatD& h_sel,
    const encode::Options& base, encode::Device device, int gpu_jobs, const std::vector<int>& gpus,
    bool profile, const std::string& what,
    const std::function<void(size_t, const encode::Encoded&)>& on_done);

}  // namespace cortiq::quant
