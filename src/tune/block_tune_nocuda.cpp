// Without the CUDA backend there is no GPU block tuning or distillation: one
// clear error.
#ifndef CORTIQ_HAVE_CUDA
#include "core/error.hpp"
#include "core/gpu.hpp"
#include "tune/block_tune.hpp"
#include "tune/distill.hpp"

namespace cortiq::tune {

BlockTuneResult tune_block_gpu(BlockParamsT<float>&, const BlockDims&, const std::vector<float>&,
                               const WindowPairs&, const WindowPairs&, const TuneOptions&) {
    CORTIQ_FAIL("--device gpu: block tuning: {}", gpu_unavailable_reason());
}

BlockTuneResult tune_block_gpu(BlockParamsT<float>&, const BlockDims&, const std::vector<float>&,
                               const DeviceWindowPairs&, const DeviceWindowPairs&,
                               const TuneOptions&) {
    CORTIQ_FAIL("--device gpu: block tuning: {}", gpu_unavailable_reason());
}

DistillResult distill_gpu(Student&, const TeacherFn&, const std::vector<std::vector<int32_t>>&,
                          const std::vector<std::vector<int32_t>>&, const TuneOptions&,
                          const DeviceTeacher&) {
    CORTIQ_FAIL("--device gpu: distillation: {}", gpu_unavailable_reason());
}

}  // namespace cortiq::tune
#endif
