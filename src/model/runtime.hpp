// What `ppl` and `generate` need from a model, on either device: score
// windows of tokens and run a KV cache. The CPU runtime wraps a Model; the
// GPU one (model/gpu_model.hpp) is a copy of a Model on the device. Callers
// pick one with make_runtime and never see which.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/gpu.hpp"
#include "core/matrix.hpp"
#include "io/config.hpp"

namespace cortiq::model {

class Model;

enum class Device { cpu, gpu };

// "cpu" or "gpu"; anything else throws.
Device parse_device(std::string_view s);

// The KV cache's number format: float32 everywhere, or fp16 on the GPU (its
// default for generation, as in llama.cpp and vLLM: half the bytes a decode
// step reads at long contexts). automatic: fp16 on the GPU, float32 on the CPU.
enum class KvFormat { automatic, f32, f16 };
KvFormat parse_kv_format(std::string_view s);  // "auto", "f32" or "f16"

// The weights' format on the device: native (compressed layers run from
// their bits, float ones in float32) or f16 (every weight dense fp16, a
// compressed one dequantised at load: the dense fp16 runtime that the packed
// one is measured against). f16 is GPU-only.
enum class WeightFormat { native, f16 };

// The output head's format on the GPU when it is a float tensor: float32 (the
// twin of the CPU, what scoring uses) or fp16 (half the bytes a decode step
// reads for it: 0.5 GB a token at a 128,256-word vocabulary; products in
// float32). A tied head gets an fp16 copy of the table (the lookups keep the
// float32 one).
// automatic: fp16 on the GPU, float32 on the CPU (generation's default).
enum class HeadFormat { automatic, f32, f16 };
HeadFormat parse_head_format(std::string_view s);  // "auto", "f32" or "f16"

struct RuntimeOptions {
    Device device = Device::cpu;
    KvFormat kv = KvFormat::automatic;
    WeightFormat weights = WeightFormat::native;
    HeadFormat head = HeadFormat::f32;
    // The GPU decode step (one token per sequence) as one captured CUDA graph,
    // replayed for every token; false: its kernels launched one by one (the
    // same kernels, the same results).
    bool graphs = true;
};

// True when this build has CUDA and a GPU is visible; else why not, in one
// line (core/gpu.hpp).
using cortiq::gpu_available;
using cortiq::gpu_unavailable_reason;

class Runtime {
  public:
    virtual ~Runtime() = default;
    virtual const io::ModelConfig& config() const = 0;
    virtual Device device() const = 0;

    // Tokens at positions 0..T−1 → logits (T × vocab, on the host).
    virtual MatF forward(std::span<const int32_t> tokens) = 0;

    // `tokens` holds `windows` windows of equal length back to back, each run
    // on its own from position 0. Returns the sum over windows and rows
    // i < len − 1 of −log softmax(logits_i)[t_{i+1}] (nats).
    virtual double windows_nll(std::span<const int32_t> tokens, int64_t windows) = 0;
    // How many windows of `len` tokens one windows_nll call should take: 1 on
    // the CPU; on the GPU a batch large enough to keep the device busy.
    virtual int64_t batch_windows(int64_t len) const = 0;

    // Generation: reset_cache empties the KV cache and sizes it for
    // `sequences` sequences of `capacity` positions each; forward_cached
    // appends tokens to sequence `seq` at positions cache_length(seq).. and
    // returns their logits (every row, or the last); decode_step appends one
    // token to each sequence (tokens[s] to sequence s) and returns their
    // logits (sequences × vocab), all sequences in one pass.
    virtual void reset_cache(int64_t capacity, int64_t sequences = 1) = 0;
    virtual MatF forward_cached(std::span<const int32_t> tokens, bool last_only,
                                int64_t seq = 0) = 0;
    virtual MatF decode_step(std::span<const int32_t> tokens) = 0;
    virtual int64_t cache_length(int64_t seq = 0) const = 0;
    virtual int64_t cache_sequences() const = 0;

    // Bytes of the model's weights this runtime holds (host memory on the CPU,
    // device memory on the GPU); device_bytes: everything it holds on the
    // device now (weights, workspace, KV cache), 0 on the CPU.
    virtual int64_t weight_bytes() const = 0;
    virtual int64_t device_bytes() const { return 0; }
};

// The CPU runtime keeps a reference to `m`, which must outlive it; the GPU
// runtime copies the weights to the device (and throws with
// gpu_unavailable_reason() when there is none). Options the CPU runtime
// cannot honour (an fp16 cache or fp16 weights) are refused with one error.
std::unique_ptr<Runtime> make_runtime(const Model& m, Device d);
std::unique_ptr<Runtime> make_runtime(const Model& m, const RuntimeOptions& o);

}  // namespace cortiq::model
