// The device pieces of tune_block_gpu (tune/block_tune.hpp declares it): the
// Adam step of tune/block_tune.cpp as a kernel, and the block loss.
#pragma once

#include "tune/cuda/grad_ops.hpp"

namespace cortiq::tune::cuda {

// What Adam moves (block_tune.cpp's Kind): log|p| of a scale (a
// multiplicative step p ← p · exp(−u) with the gradient g · p), the latent z
// of a sign (z ← z − u, p ← sign(z) when z ≠ 0: the straight-through
// estimator), or p itself.
enum class AdamKind { log_scale, latent, plain };

// One step over n values with moments m, v; step = lr / (1 − β1ᵗ),
// isc2 = 1 / (1 − β2ᵗ); z: the latents (AdamKind::latent only).
void adam_step(const Gpu& g, AdamKind kind, float* p, const float* grad, float* m, float* v,
               float* z, int64_t n, float step, float isc2, float b1, float b2);

// sums[0] += Σ (out − y)², sums[1] += Σ (y − x)² (float64, on the device; may
// be null); dout = scale · (out − y) when dout is not null.
void block_loss(const Gpu& g, const float* out, const float* y, const float* x, int64_t n,
                double* sums, float scale, float* dout);

}  // namespace cortiq::tune::cuda
