// The GPU side of sequential calibration (calib/sequential.hpp): a model on
// the device with the hidden states of the fit and held-out windows, which
// never leave it; Grams of a linear layer's input in float64. One decoder
// layer is on the device at a time, read from the host model when a call
// first needs it, so the device memory does not grow with the depth. No CUDA types
// here (calib/cuda/gpu_states.cpp); without CUDA the constructor throws.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "calib/calib.hpp"
#include "core/matrix.hpp"
#include "model/linear.hpp"

namespace cortiq::model {
class Model;
class GpuModel;
}  // namespace cortiq::model

namespace cortiq::calib {

class GpuStates {
  public:
    // Uploads m to the current device (its decoder layers as they are needed)
    // and embeds the windows of cs (set 0: fit, set 1: held out, when it has
    // any). m must outlive this object: its layers are read from it.
    GpuStates(const model::Model& m, const CalibSet& cs);
    ~GpuStates();
    GpuStates(const GpuStates&) = delete;
    GpuStates& operator=(const GpuStates&) = delete;

    // (1/T) Σ x xᵀ over the set's rows x of `input` of block `layer` (a
    // LinearInputHook input name) with the weights as they are now; input
    // "lm_head": the final RMSNorm of the hidden states (layer ignored).
    MatD gram(int set, int64_t layer, std::string_view input);
    // (1/T) Σ x_o x_cᵀ over the set's rows: x_o the input as `original` (the
    // same windows, on the same GPU) computes it, x_c as this model does.
    // With `gram`, also gram(set, layer, input) from the same pass (the same
    // sums in the same order: the same bits), one block run fewer per batch.
    MatD cross_gram(int set, int64_t layer, std::string_view input, GpuStates& original,
                    MatD* gram = nullptr);
    // The set's hidden states through block `layer`.
    void advance(int set, int64_t layer);
    // The set's hidden states, copied to the host: one T × hidden matrix per
    // window (block tuning reads them on the host).
    std::vector<MatF> hidden(int set);
    // The outputs of block `layer` on the set's hidden states, computed on
    // the device and copied to the host like hidden(); the states stay as
    // they are (block tuning's targets, when this is the original model).
    std::vector<MatF> block_outputs(int set, int64_t layer);
    // A set's windows on the device, `windows` of rows × cols floats each,
    // one after the other (complete: the model's stream is synchronised).
    struct DeviceSet {
        const float* data = nullptr;
        int64_t windows = 0, rows = 0, cols = 0;
    };
    // The hidden states themselves, valid until the next advance().
    DeviceSet hidden_on_device(int set);
    // block_outputs kept on the device, in a buffer of this object that the
    // next call for the set overwrites and free_block_outputs releases.
    DeviceSet block_outputs_on_device(int set, int64_t layer);
    void free_block_outputs();
    // Replaces a linear layer's weight (same shape, bias kept) by w's dense form.
    void set_linear(int64_t layer, std::string_view name, const model::LinearWeights& w);
    // The head's input of one window of the set (T × hidden: the final RMSNorm
    // of its states), on the device in a workspace valid until the next call.
    const float* final_hidden(int set, int64_t window);
    // The head's logits (rows × vocab) of rows of such inputs, on the device
    // in a workspace valid until the next call.
    const float* head_logits(const float* normed, int64_t rows);
    // Seconds spent putting decoder layers on the device (read from the host
    // model, formed, uploaded), over this object's life.
    double load_seconds() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace cortiq::calib
