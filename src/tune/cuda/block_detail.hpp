// What the stages of tune/cuda/block.cpp and tune/cuda/delta_block.cpp share:
// a linear layer's forward and backward on the device, and the Gated
// DeltaNet mixer (the twins of tune/block_detail.hpp).
#pragma once

#include <optional>

#include "tune/cuda/block.hpp"

namespace cortiq::tune::cuda {

void lin_forward(const Gpu& g, const DLinear& l, const float* x, int64_t rows, DVec& y,
                 DBlrCache& cache, DBlrScratch& s);
// dx (rows × n) = ∂/∂x of the layer given dy, added into dx when `add`; the
// BLR gradients into gr.
void lin_backward(const Gpu& g, const DLinear& l, const float* x, int64_t rows,
                  const DBlrCache& cache, const float* dy, DVec& dx, bool add,
                  std::optional<DBlrGrad>& gr, DBlrScratch& s);

// a.n1 → a.h (out_proj's output), keeping what the backward reads in a.
void delta_mixer_forward(const Gpu& g, const DBlockParams& p, const BlockDims& d, DBlockActs& a);
// Given a.dh: a.dn1 overwritten, the BLR gradients into gr.
void delta_mixer_backward(const Gpu& g, const DBlockParams& p, const BlockDims& d, DBlockActs& a,
                          DBlockGrads& gr);

}  // namespace cortiq::tune::cuda
