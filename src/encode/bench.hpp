// `cortiq bench`: encode one tensor with NVG and the baselines at one budget
// and report held-out / fit errors, true bpw, seconds and the stage profile.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/matrix.hpp"
#include "encode/options.hpp"

namespace cortiq::encode {

struct BenchInput {
    MatD w, h_fit, h_sel;
    std::string source;  // "synthetic 512x1536 seed 1" or the file
};

BenchInput bench_input_synthetic(int64_t m, int64_t n, uint64_t seed);
// A safetensors file with tensors W [m, n], H_fit [n, n], H_sel [n, n].
BenchInput bench_input_file(const std::string& path);
void save_bench_input(const BenchInput& in, const std::string& path);
// A checkpoint tensor with Grams from random activations (log-normal channel
// scales, a few heavy channels, shared factors; seeded).
BenchInput bench_input_from_checkpoint(const std::string& model, const std::string& tensor,
                                       uint64_t seed);

struct BenchRow {
    std::string method;
    Encoded enc;
    Profile prof;
};

struct BenchReport {
    std::string source, device;
    int64_t m = 0, n = 0;
    double bpw = 0;
    std::vector<BenchRow> rows;
    std::string table() const;
    nlohmann::json to_json() const;
};

BenchReport run_bench(const BenchInput& in, const Options& base, const std::vector<Method>& methods,
                      Device device);

}  // namespace cortiq::encode
