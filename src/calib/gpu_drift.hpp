// The drift correction of quantize --match original (quantize/drift.cpp:
// drift_target, then drift_shrinkage) in float64 on the current GPU, for every
// weight that reads one input, the fit system factored once for all of them.
// At the 7B shape these are about 10 TFLOP of float64 products per decoder
// layer, which take the host's cores tens of seconds. No CUDA types here
// (calib/cuda/drift.cu); without CUDA it throws.
#pragma once

#include <vector>

#include "core/matrix.hpp"

namespace cortiq::calib {

// W += alpha · d is the corrected target of a weight W (m × n):
//   d = W (C_fit − H_fit) (H_fit + cI)⁻¹   (drift_step, the solve with
//   linalg's ridge: 1e-10 of the mean |diagonal|, ×10 per failure),
//   alpha = clamp(⟨W (C_sel − H_sel), d⟩ / ⟨d H_sel, d⟩, 0, 1), 0 when the
//   denominator is not positive (drift_shrinkage).
struct DriftStep {
    MatD d;
    double alpha = 0;
};

// weights: the weights of one input (each n wide); the Grams n × n, row-major.
std::vector<DriftStep> drift_steps_gpu(const std::vector<const MatD*>& weights,
                                       const MatD& cross_fit, const MatD& h_fit, double damping,
                                       const MatD& cross_sel, const MatD& h_sel);

}  // namespace cortiq::calib
