// One entry point per encoder backend; the CUDA one exists when the library
// is built with CORTIQ_CUDA and a GPU is visible.
#pragma once

#include "core/gpu.hpp"
#include "core/matrix.hpp"
#include "core/profile.hpp"
#include "encode/options.hpp"

namespace cortiq::encode {

// core/gpu.hpp, under the names the encoder's callers use.
using cortiq::gpu_available;
using cortiq::gpu_unavailable_reason;

Encoded encode_gpu(const MatD& w, const MatD& h_fit, const MatD& h_sel, const Options& o,
                   Profile* prof);

}  // namespace cortiq::encode
