// Adam (Kingma & Ba) over the parameters block tuning and distillation move:
//   log-scales: a scale s is moved as log|s| (s ← s · exp(−step)), which keeps
//     its sign and makes the step relative to its size;
//   sign latents: z ← z − step on the gradient of the ±1 sign as a real
//     number (straight-through estimator), the sign set to sign(z);
//   plain values (RMSNorm weights).
#pragma once

#include <cstdint>
#include <vector>

#include "tune/block.hpp"

namespace cortiq::tune {

struct TuneOptions;

enum class Kind { log_scale, latent, plain };

class Adam {
  public:
    Adam(double beta1, double beta2) : b1_(beta1), b2_(beta2) {}
    // p and g must outlive the optimiser and keep their storage (the slots
    // hold pointers to them). latent_init: |z| at the start (Kind::latent).
    void add(std::vector<float>& p, const std::vector<float>& g, Kind k, double lr,
             double latent_init = 0);
    bool empty() const { return slots_.empty(); }
    // One step on every slot, each slot's rate times lr_factor (a schedule's,
    // epochs.hpp); returns the signs flipped.
    int64_t step(double lr_factor = 1.0);

  private:
    struct Slot {
        std::vector<float>* p;
        const std::vector<float>* g;
        Kind kind;
        double lr;
        std::vector<float> m, v, z;  // moments; z: the latents (Kind::latent)
    };
    std::vector<Slot> slots_;
    double b1_, b2_;
    int64_t t_ = 0;
};

// Every tunable value of a block as TuneOptions says (scales; signs when
// lr_signs > 0; norms when lr_norms > 0), with g (zero_grads(p)) as gradients.
void add_block(Adam& a, BlockParamsT<float>& p, BlockGradsT<float>& g, const BlockDims& d,
               const TuneOptions& o);

// Zeroes g in place (the optimiser's slots point at its vectors).
void clear(BlockGradsT<float>& g);
// Every gradient vector of g in a fixed order (the order clear, add_grads and
// a flat copy across processes use).
std::vector<std::vector<float>*> grad_vectors(BlockGradsT<float>& g);
// g += h, value by value (g and h of the same block).
void add_grads(BlockGradsT<float>& g, BlockGradsT<float>& h);

}  // namespace cortiq::tune
