// Encode many tensors at once (SPEC §3, "Many tensors are encoded at once").
//
// On the GPU several tensors are in flight on each device (one host worker
// thread each, with its own stream and handles; the column search of one
// tensor occupies a small part of a GPU), largest first, from one queue over
// all visible GPUs; results come back in job order, and `on_done` runs as
// each finishes. A tensor is started only when its estimated device memory
// fits next to the ones in flight; one too large for the device is an error,
// or is encoded on the CPU with `cpu_fallback`. On the CPU the jobs run one
// after the other with the float64 reference encoder.
//
// Tensors that read one input (q/k/v; gate/up) name the same ManyInput: its
// context (Cholesky factors of the damped Gram, ...) is built once per device
// and freed after its last tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/matrix.hpp"
#include "core/profile.hpp"
#include "encode/options.hpp"

namespace cortiq::encode {

struct ManyInput {
    const MatD* h_fit = nullptr;  // n × n
    const MatD* h_sel = nullptr;  // n × n
    std::string name;             // for messages ("layers.0.self_attn input")
};

struct ManyJob {
    std::string name;         // for messages and the callback
    const MatD* w = nullptr;  // m × n
    size_t input = 0;         // index into the inputs
    Options options;          // per tensor (its bpw, paths, method); rho must agree per input
};

struct ManyResult {
    Encoded enc;      // enc.stages: the context and encoder stages when ManyOptions::profile
    int device = -1;  // the GPU that encoded it (a CUDA device id); -1: the CPU
    // When it ran, in seconds since encode_many began (the GPU path): what a
    // benchmark needs for each GPU's idle time.
    double start_s = 0, end_s = 0;
};

struct ManyOptions {
    Device device = Device::gpu;
    int in_flight = 0;          // tensors in flight per GPU (0: 4)
    int max_gpus = 0;           // GPUs to use (0: all visible); ignored when gpus is set
    std::vector<int> gpus;      // the CUDA devices to use (quantize --gpus 0,2); empty: max_gpus
    bool profile = false;       // per-tensor stage profile (synchronises the device per stage)
    bool cpu_fallback = false;  // a tensor that cannot fit in device memory runs on the CPU
    // Called once per job as it finishes (from a worker thread, one call at a time).
    std::function<void(size_t job, const ManyResult&)> on_done;
};

// Throws the first failure (in job order) after every started job has ended.
std::vector<ManyResult> encode_many(const std::vector<ManyInput>& inputs,
                                    const std::vector<ManyJob>& jobs, const ManyOptions& opt = {});

}  // namespace cortiq::encode
