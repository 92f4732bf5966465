// Input checks shared by the CPU and CUDA encoders: a calibration Gram must be
// square, finite, symmetric, with a non-negative diagonal.
#pragma once

#include <string>

#include "core/matrix.hpp"

namespace cortiq::encode {

// Throws cortiq::Error naming `what` and `which` ("fit", "held-out").
void check_gram(const MatD& g, const std::string& what, const char* which);

}  // namespace cortiq::encode
