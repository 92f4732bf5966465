// Without the CUDA backend there is no GPU block tuning: one clear error.
#ifndef CORTIQ_HAVE_CUDA
#include "core/error.hpp"
#include "core/gpu.hpp"
#include "tune/block_tune.hpp"

namespace cortiq::tune {

BlockTuneResult tune_block_gpu(BlockParamsT<float>&, const BlockDims&, const std::vector<float>&,
                               const WindowPairs&, const WindowPairs&, const TuneOptions&) {
    CORTIQ_FAIL("--device gpu: block tuning: {}", gpu_unavailable_reason());
}

}  // namespace cortiq::tune
#endif
