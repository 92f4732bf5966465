// A Model copied to the GPU and run there in float32: the CUDA twin of
// model/llama.hpp. Weights are uploaded once: compressed linear layers as
// their bits (the packed kernels of model/cuda/blr_linear.hpp), float ones
// dense through plain FP32 cuBLAS (no TF32); or, as the baseline the packed
// runtime is measured against, every weight dense fp16 (GpuOptions::weights).
// The rest are small kernels (src/model/cuda/, one per file). Logits of a
// scoring batch stay on the device: only the per-row NLL comes back.
//
// Generation keeps a KV cache of one or more sequences, float32 or fp16. A
// decode step (one token per sequence) reads its positions from device
// memory, so it is captured once as a CUDA graph and replayed for every token
// (again only when its size class, the attention grid, changes: every 128
// positions up to 1024), the kernels of the step launched one by one when
// graphs are off — the same kernels with the same grids, so the same bits.
//
// This header carries no CUDA types (pimpl), so CPU-only code and builds
// include it freely; without CUDA the constructor throws.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/matrix.hpp"
#include "model/linear.hpp"
#include "model/runtime.hpp"

namespace cortiq::cuda {
class Gpu;  // core/cuda/device.hpp
}

namespace cortiq::model {

struct GpuOptions {
    // f32 by default: the exact twin of the CPU (automatic: f16, generation's default)
    KvFormat kv = KvFormat::f32;
    WeightFormat weights = WeightFormat::native;
    // f32 by default, as the KV cache (automatic: f16); the f16 weights hold
    // the head in fp16 whatever this says
    HeadFormat head = HeadFormat::f32;
    bool graphs = true;
    // No decoder layer uploaded with the model: each goes to the device with
    // load_layer (the calibration's, one layer at a time).
    bool layers_on_demand = false;
};

class GpuModel final : public Runtime {
  public:
    // Uploads m's weights to the current CUDA device; m is not kept.
    explicit GpuModel(const Model& m, const GpuOptions& o = {});
    ~GpuModel() override;
    GpuModel(GpuModel&&) noexcept;
    GpuModel& operator=(GpuModel&&) noexcept;

    const io::ModelConfig& config() const override;
    Device device() const override { return Device::gpu; }

    MatF forward(std::span<const int32_t> tokens) override;
    // forward() leaving the logits (tokens × vocab) on the device: valid until
    // the next call on this model, written when it returns (its stream waited).
    const float* forward_on_device(std::span<const int32_t> tokens);
    // forward_on_device in two steps, the same bits: the head's input (the
    // final RMSNorm of the last block's output, tokens × hidden), then the
    // head's logits of such rows (rows × vocab; `normed` on this device,
    // complete). Each result valid until the next call on this model. A
    // caller that keeps the head's inputs recomputes logits without the blocks.
    const float* final_hidden_on_device(std::span<const int32_t> tokens);
    const float* head_on_device(const float* normed, int64_t rows);
    double windows_nll(std::span<const int32_t> tokens, int64_t windows) override;
    int64_t batch_windows(int64_t len) const override;

    void reset_cache(int64_t capacity, int64_t sequences = 1) override;
    MatF forward_cached(std::span<const int32_t> tokens, bool last_only, int64_t seq = 0) override;
    MatF decode_step(std::span<const int32_t> tokens) override;
    int64_t cache_length(int64_t seq = 0) const override;
    int64_t cache_sequences() const override;
    // Decode steps run as a replayed graph so far, and graphs captured.
    int64_t graph_replays() const;
    int64_t graph_captures() const;

    int64_t device_bytes() const override;  // weights + workspace + KV cache now held
    int64_t weight_bytes() const override;  // the weights' device memory

    // ── hooks for the calibration on the device (calib/gpu_states.hpp) ──────
    // Pointers are to float32 row-major rows on this model's device; a
    // workspace pointer stays valid until the next call.
    // A linear layer's input as run_block meets it (a LinearInputHook name).
    using DeviceInputHook =
        std::function<void(std::string_view input, const float* x, int64_t rows, int64_t cols)>;
    cortiq::cuda::Gpu& gpu();    // the stream and handles the model runs on
    int64_t batch_rows() const;  // token rows per batch that keep the GEMMs large
    // The embeddings of `tokens` (checked) into out (tokens.size() × hidden).
    void embed_into(std::span<const int32_t> tokens, float* out);
    float* work_rows(int64_t rows);  // a workspace of rows × hidden
    // Block `layer` on `batch` sequences of T rows at x, in place. With
    // `stop_after` (an input name): returns right after `hook` saw that
    // input (x then holds a partial sum).
    void run_block(int64_t layer, int64_t batch, int64_t T, float* x,
                   const DeviceInputHook* hook = nullptr, std::string_view stop_after = {});
    // The final RMSNorm of `rows` rows at x, in a workspace.
    const float* final_norm_rows(const float* x, int64_t rows);
    // Replaces a linear layer's weight ("self_attn.q_proj", ...; same shape,
    // bias kept) by w's dense form, e.g. once it is compressed.
    void set_linear(int64_t layer, std::string_view name, const LinearWeights& w);
    // Layers on demand (GpuOptions::layers_on_demand; any model may use them):
    // load_layer uploads layer `layer` of m (of this model's shape) with every
    // linear dense in float32, a compressed one formed on the device as
    // set_linear does, and frees every other layer first, so one layer is on
    // the device at a time. release_layers frees them all, keeping the
    // embedding, the final norm and the head. Running a layer that is not
    // loaded throws.
    void load_layer(int64_t layer, const Model& m);
    bool layer_loaded(int64_t layer) const;
    void release_layers();

    struct Impl;  // model/cuda/gpu_model_impl.hpp (CUDA code only)

  private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace cortiq::model
