// Whether this build can use a GPU: one answer for every layer (the encoder,
// the runtime, the calibration). Defined in core/cuda/gpu.cpp with CUDA, in
// core/gpu.cpp without.
#pragma once

#include <string>

namespace cortiq {

// True when this build has CUDA and a GPU is visible.
bool gpu_available();
// Why not, in one line ("this cortiq was built without CUDA", "no CUDA device
// visible ..."); empty when one is.
std::string gpu_unavailable_reason();

}  // namespace cortiq
