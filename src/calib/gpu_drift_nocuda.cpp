// Without the CUDA backend the drift correction runs on the host only.
#ifndef CORTIQ_HAVE_CUDA
#include "calib/gpu_drift.hpp"
#include "core/error.hpp"
#include "core/gpu.hpp"

namespace cortiq::calib {

std::vector<DriftStep> drift_steps_gpu(const std::vector<const MatD*>&, const MatD&, const MatD&,
                                       double, const MatD&, const MatD&) {
    CORTIQ_FAIL("drift on the GPU: {}", gpu_unavailable_reason());
}

}  // namespace cortiq::calib
#endif
