// Adam on the device over what a block's tuning moves (tune/adam.hpp's
// add_block on the host): the BLR log-scales, the sign latents when
// lr_signs > 0, the norm weights when lr_norms > 0. Block tuning holds one
// block's slots, distillation every block's; the update is adam_step
// (tune/cuda/block_tune.hpp) on each slot.
#pragma once

#include <vector>

#include "tune/block_tune.hpp"
#include "tune/cuda/block.hpp"
#include "tune/cuda/block_tune.hpp"

namespace cortiq::tune::cuda {

class AdamSlots {
  public:
    // p and g must outlive the slots and keep their buffers.
    void add_block(DBlockParams& p, const DBlockGrads& g, const BlockDims& d, const TuneOptions& o,
                   cudaStream_t st);
    bool empty() const { return slots_.empty(); }
    // One Adam step on every slot (bias corrections of step t + 1), each
    // slot's rate times lr_factor (a schedule's, tune/epochs.hpp).
    void step(const Gpu& g, double beta1, double beta2, double lr_factor = 1.0);

  private:
    struct Slot {
        DVec* p;
        const DVec* g;
        AdamKind kind;
        double lr;
        DVec m, v, z;
    };
    void add(DVec& p, const DVec& g, AdamKind k, double lr, cudaStream_t st,
             double latent_init = 0);
    std::vector<Slot> slots_;
    int64_t t_ = 0;
};

}  // namespace cortiq::tune::cuda
