// A Model copied to the GPU and run there in float32: the CUDA twin of
// model/llama.hpp. Weights are uploaded once, dense (a compressed linear
// layer is dequantised on load, as on the CPU); GEMMs are plain FP32 cuBLAS
// (no TF32), the rest small kernels (src/model/cuda/, one per file). Logits
// of a scoring batch stay on the device: only the per-row NLL comes back.
//
// This header carries no CUDA types (pimpl), so CPU-only code and builds
// include it freely; without CUDA the constructor throws.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/matrix.hpp"
#include "model/linear.hpp"
#include "model/runtime.hpp"

namespace cortiq::model {

class GpuModel final : public Runtime {
  public:
    // Uploads m's weights to the current CUDA device; m is not kept.
    explicit GpuModel(const Model& m);
    ~GpuModel() override;
    GpuModel(GpuModel&&) noexcept;
    GpuModel& operator=(GpuModel&&) noexcept;

    const io::ModelConfig& config() const override;
    Device device() const override { return Device::gpu; }

    MatF forward(std::span<const int32_t> tokens) override;
    double windows_nll(std::span<const int32_t> tokens, int64_t windows) override;
    int64_t batch_windows(int64_t len) const override;

    void reset_cache(int64_t capacity) override;
    MatF forward_cached(std::span<const int32_t> tokens, bool last_only) override;
    int64_t cache_length() const override;

    int64_t device_bytes() const override;  // weights + workspace + KV cache now held
    int64_t weight_bytes() const override;  // the weights' device memory

    // ── sequential calibration (quantize --device gpu; model/cuda/calib.cpp) ──
    // Set 0 and set 1 (fit and held-out windows, each of one length) become
    // hidden states on the device, the token embeddings to begin with.
    void calib_load(int set, const std::vector<std::vector<int32_t>>& windows);
    // (1/T) Σ x xᵀ in float64 over the set's rows x of `input` of block
    // `layer` (a LinearInputHook input name) with the weights as they are now;
    // input "lm_head": the final RMSNorm of the hidden states (layer ignored).
    MatD calib_gram(int set, int64_t layer, std::string_view input);
    // (1/T) Σ x_o x_cᵀ in float64 over the set's rows: x_o the input as
    // `original` (another GpuModel on this GPU, the same windows loaded as the
    // same set) computes it, x_c as this model does; not for "lm_head".
    MatD calib_cross_gram(int set, int64_t layer, std::string_view input, GpuModel& original);
    // The set's hidden states through block `layer`.
    void calib_advance(int set, int64_t layer);
    // Replaces a linear layer's weight ("self_attn.q_proj", ...; same shape,
    // bias kept) by w's dense form, e.g. once it is compressed.
    void set_linear(int64_t layer, std::string_view name, const LinearWeights& w);

    struct Impl;  // model/cuda/gpu_model_impl.hpp (CUDA code only)

  private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace cortiq::model
