// One entry point per encoder backend; the CUDA one exists when the library
// is built with CORTIQ_CUDA and a GPU is visible.
#pragma once

#include "core/matrix.hpp"
#include "core/profile.hpp"
#include "encode/options.hpp"

namespace cortiq::encode {

// True when this build has the CUDA encoder and a GPU is visible.
bool gpu_available();
// Why not, in one line ("built without CUDA", "no CUDA device visible: ...").
std::string gpu_unavailable_reason();

Encoded encode_gpu(const MatD& w, const MatD& h_fit, const MatD& h_sel, const Options& o,
                   Profile* prof);

}  // namespace cortiq::encode
