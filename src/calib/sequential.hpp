// Sequential calibration (SPEC §2, GPTQ's true-sequential mode): the hidden
// states of the calibration windows, moved block by block through the model
// as its linear layers are replaced by their compressed versions, and the
// float64 Grams of each linear layer's input read from them — on the device
// that runs the forward pass (CPU: model::Model::block with a hook; GPU:
// calib::GpuStates, the states never leaving the device).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "calib/calib.hpp"
#include "calib/gpu_states.hpp"
#include "core/matrix.hpp"
#include "model/gpu_model.hpp"  // no CUDA types
#include "model/runtime.hpp"

namespace cortiq::model {
class Model;
}  // namespace cortiq::model

namespace cortiq::calib {

class SequentialCalib {
  public:
    // `m` must outlive this object; its linear weights are read as they are
    // when grams() runs (call weight_changed after replacing one). With
    // `original` (the uncompressed model, which must outlive this object too),
    // the windows also run through it, for cross_grams().
    SequentialCalib(model::Model& m, const CalibSet& cs, model::Device device,
                    const model::Model* original = nullptr);
    ~SequentialCalib();
    SequentialCalib(const SequentialCalib&) = delete;
    SequentialCalib& operator=(const SequentialCalib&) = delete;

    // H_fit and H_sel: (1/T) Σ x xᵀ of `input` (a model::LinearInputHook
    // input name) of block `layer` over the fit and held-out windows.
    std::pair<MatD, MatD> grams(int64_t layer, std::string_view input);
    // C = (1/T) Σ x_o x_cᵀ over the fit and the held-out windows, x_o the
    // input as the original model computes it, x_c as the compressed one does
    // (needs `original`).
    std::pair<MatD, MatD> cross_grams(int64_t layer, std::string_view input);
    // Both at once: on the CPU in one pass, so that the compressed model's
    // forward up to the input runs once, not twice (the same sums in the same
    // order: the matrices of grams() and cross_grams() bit for bit).
    struct GramSet {
        MatD h_fit, h_sel, cross_fit, cross_sel;
    };
    GramSet grams_with_cross(int64_t layer, std::string_view input);
    // The same for the LM head's input (the final RMSNorm of the hidden states).
    std::pair<MatD, MatD> head_grams();
    // Block tuning's data for block `layer` over the fit (set 0) or held-out
    // (set 1) windows: x, the hidden states entering it as the compressed
    // model computes them; y, the original model's outputs of the block (its
    // own states through its block; needs `original`). Under mpirun: every
    // rank's windows on rank 0, none on the others; or, with gather false,
    // each rank's own (window_share).
    std::pair<std::vector<MatF>, std::vector<MatF>> block_pairs(int set, int64_t layer,
                                                                bool gather = true);
    // block_pairs without leaving the device (one process, GPU states): the
    // set's windows as GpuStates::DeviceSet views, x the compressed model's
    // states and y the original's block outputs, valid until free_block_pairs
    // or the next advance. on_device() says whether the states are there.
    struct DevicePairs {
        GpuStates::DeviceSet x, y;
    };
    bool on_device() const { return gpu_ != nullptr && !released_; }
    DevicePairs block_pairs_on_device(int set, int64_t layer);
    void free_block_pairs();
    // This rank's windows of a set: the first one's index and the set's
    // count over every rank (under mpirun each rank holds a contiguous share).
    std::pair<int64_t, int64_t> window_share(int set) const;
    // After m.linear(layer, name).w was replaced (the GPU copy follows).
    void weight_changed(int64_t layer, std::string_view name);
    // The hidden states through block `layer`, with its weights as they are now.
    void advance(int64_t layer);
    // On the GPU, once every Gram is taken: every device copy and state freed
    // (distillation needs the memory); nothing on the CPU. Later on the GPU,
    // weight_changed does nothing, and the other calls but window_share throw.
    void release_gpu();
    // GPU: seconds spent putting decoder layers of both models on the device
    // so far (GpuStates::load_seconds); 0 on the CPU.
    double layer_load_seconds() const;

  private:
    void check_live() const;
    GramSet cpu_pass_with_original(int64_t layer, std::string_view input, bool with_gram);
    void gather_on_root(std::vector<MatF>& x, std::vector<MatF>& y);

    model::Model& m_;
    const model::Model* original_;
    std::array<std::vector<MatF>, 2> xs_;  // CPU: hidden states of fit, held-out windows
    std::array<std::vector<MatF>, 2> xo_;  // CPU: the original model's
    std::array<std::pair<int64_t, int64_t>, 2> share_{};  // window_share of each set
    std::unique_ptr<GpuStates> gpu_;           // GPU: the model and the states on the device
    std::unique_ptr<GpuStates> gpu_original_;  // GPU: the original model and its states
    bool released_ = false;                    // release_gpu() was called on the GPU
    double load_seconds_ = 0;                  // layer_load_seconds() at release_gpu()
};

}  // namespace cortiq::calib
